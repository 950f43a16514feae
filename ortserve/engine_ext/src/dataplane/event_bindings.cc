// Python bindings of the event records and their queue (events.h): what the data plane reports to the Python
// thread that writes the logs and metrics.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <variant>
#include <vector>

#include "dataplane_bindings.h"
#include "events.h"
#include "py_handles.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

namespace {

nb::object EventObject(Event&& event) {
  if (auto* r = std::get_if<RequestEvent>(&event)) return nb::cast(std::move(*r));
  return nb::cast(std::move(std::get<BatchEvent>(event)));
}

}  // namespace

void BindEvents(nb::module_& m) {
  nb::class_<RequestEvent>(m, "RequestEvent", "One ModelInfer the native front end answered (its log line).")
      .def_ro("request_id", &RequestEvent::request_id)
      .def_ro("model", &RequestEvent::model)
      .def_ro("version", &RequestEvent::version, "\"\" when none was chosen")
      .def_ro("route", &RequestEvent::route, "\"pin\", \"bucket N\" or \"\"")
      .def_ro("texts", &RequestEvent::texts)
      .def_ro("batch_size", &RequestEvent::batch_size)
      .def_ro("queue_s", &RequestEvent::queue_s)
      .def_ro("tokenize_s", &RequestEvent::tokenize_s)
      .def_ro("engine_s", &RequestEvent::engine_s)
      .def_ro("total_s", &RequestEvent::total_s)
      .def_ro("status", &RequestEvent::status, "gRPC status code name")
      .def_ro("error", &RequestEvent::error, "the message sent to the caller, \"\" on OK")
      .def_ro("ended_unix", &RequestEvent::ended_unix, "when the reply went out (seconds since the epoch)")
      .def_ro("trace_id", &RequestEvent::trace_id, "the caller's trace (32 hex digits), \"\" when none")
      .def_ro("parent_span_id", &RequestEvent::parent_span_id, "the caller's span (16 hex digits), \"\" when none")
      .def_ro("sampled", &RequestEvent::sampled, "the caller's sampling decision: 1, 0, or -1 when none")
      .def_ro("tracestate", &RequestEvent::tracestate);
  nb::class_<BatchEvent>(m, "BatchEvent", "One engine run of the batcher.")
      .def_ro("model", &BatchEvent::model)
      .def_ro("version", &BatchEvent::version)
      .def_ro("texts", &BatchEvent::texts)
      .def_ro("padded_tokens", &BatchEvent::padded_tokens)
      .def_ro("real_tokens", &BatchEvent::real_tokens)
      .def_ro("engine_s", &BatchEvent::engine_s)
      .def_ro("lane", &BatchEvent::lane, "\"wide\" (the multi-threaded session) or \"narrow\"");

  nb::class_<PyEventSink>(m, "EventSink", "Bounded queue of request and batch records from the native path.")
      .def(
          "__init__",
          [](PyEventSink* self, size_t capacity) { new (self) PyEventSink{std::make_shared<EventSink>(capacity)}; },
          "capacity"_a = 65536)
      .def(
          "drain",
          [](PyEventSink& self, size_t max, double timeout_s) {
            std::vector<Event> events;
            {
              nb::gil_scoped_release release;
              events = self.sink->Drain(max, timeout_s);
            }
            nb::list out;
            for (Event& event : events) out.append(EventObject(std::move(event)));
            return out;
          },
          "max"_a = 512, "timeout_s"_a = 0.2,
          "Up to max records (RequestEvent or BatchEvent), waiting up to timeout_s for the first. Empty on timeout "
          "or once closed.")
      .def("close", [](PyEventSink& self) { self.sink->Close(); }, "Wakes drain() for good; later records drop.")
      .def_prop_ro("dropped", [](const PyEventSink& self) { return self.sink->dropped(); })
      .def_prop_ro("pushed", [](const PyEventSink& self) { return self.sink->pushed(); },
                   "Records accepted so far (not dropped).")
      .def_prop_ro("closed", [](const PyEventSink& self) { return self.sink->closed(); });
}
