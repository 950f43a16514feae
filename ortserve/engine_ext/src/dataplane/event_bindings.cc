// Python bindings of the event records and their queue (events.h): what the data plane reports to the Python
// thread that writes the logs and metrics.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <variant>
#include <vector>

#include "dataplane_bindings.h"
#include "events.h"
#include "py_handles.h"
#include "py_wire.h"
#include "shadow_copy.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

namespace {

nb::object EventObject(Event&& event) {
  if (auto* r = std::get_if<RequestEvent>(&event)) return nb::cast(std::move(*r));
  if (auto* s = std::get_if<ShadowEvent>(&event)) return nb::cast(std::move(*s));
  if (auto* t = std::get_if<ShadowTokenize>(&event)) return nb::cast(std::move(*t));
  return nb::cast(std::move(std::get<BatchEvent>(event)));
}

nb::list EntityTuples(const std::vector<ShadowEntity>& entities) {
  nb::list out;
  for (const ShadowEntity& e : entities) out.append(nb::make_tuple(e.row, e.start, e.end, e.label));
  return out;
}

// float32 values as bytes (numpy.frombuffer reads them without a copy per value).
nb::bytes FloatBytes(const std::vector<float>& values) {
  return nb::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
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

  nb::class_<ShadowEvent>(m, "ShadowEvent",
                          "One shadow copy: the live answer and the shadow version's to the same texts "
                          "(shadow_copy.h).")
      .def_ro("request_id", &ShadowEvent::request_id)
      .def_ro("model", &ShadowEvent::model)
      .def_ro("stable", &ShadowEvent::stable, "the version that answered the caller")
      .def_ro("candidate", &ShadowEvent::candidate, "the shadow version")
      .def_ro("stable_status", &ShadowEvent::stable_status, "gRPC status code name")
      .def_ro("candidate_status", &ShadowEvent::candidate_status, "gRPC status code name")
      .def_ro("candidate_error", &ShadowEvent::candidate_error)
      .def_ro("rows", &ShadowEvent::rows)
      .def_ro("stable_columns", &ShadowEvent::stable_columns)
      .def_ro("candidate_columns", &ShadowEvent::candidate_columns)
      .def_prop_ro("stable_values", [](const ShadowEvent& e) { return FloatBytes(e.stable_values); },
                   "float32 rows x stable_columns, row-major (empty unless OK)")
      .def_prop_ro("candidate_values", [](const ShadowEvent& e) { return FloatBytes(e.candidate_values); },
                   "float32 rows x candidate_columns, row-major (empty unless OK)")
      .def_ro("stable_engine_s", &ShadowEvent::stable_engine_s)
      .def_ro("candidate_engine_s", &ShadowEvent::candidate_engine_s)
      .def_ro("candidate_queue_s", &ShadowEvent::candidate_queue_s)
      .def_ro("texts", &ShadowEvent::texts, "the call's texts when the route keeps them, else empty")
      .def_ro("per_token", &ShadowEvent::per_token, "token classifiers: the entities are compared, not the values")
      .def_prop_ro("stable_entities", [](const ShadowEvent& e) { return EntityTuples(e.stable_entities); },
                   "[(row, start, end, label)]: the live answer's entities (simple aggregation)")
      .def_prop_ro("candidate_entities", [](const ShadowEvent& e) { return EntityTuples(e.candidate_entities); },
                   "[(row, start, end, label)]: the shadow version's entities (simple aggregation)");

  nb::class_<ShadowTokenize>(m, "ShadowTokenize",
                             "A shadow copy to a version on HF tokenizers: tokenize its texts with that version's "
                             "tokenizer and submit_ids, or fail it (dropped unread, it gives its lease back).")
      .def_ro("model", &ShadowTokenize::model)
      .def_ro("candidate", &ShadowTokenize::candidate, "the shadow version, whose tokenizer reads the texts")
      .def_ro("texts", &ShadowTokenize::texts, "what the shadow version reads (after its prompt)")
      .def_ro("pairs", &ShadowTokenize::pairs, "each text's second text, or empty")
      .def(
          "submit_ids",
          [](ShadowTokenize& self, nb::handle ids, std::vector<int> seconds, nb::handle tokens) {
            std::vector<std::vector<int64_t>> rows = IdRows(ids);
            TokenRows spans = tokens.is_none() ? TokenRows{} : TokenRowsOf(tokens);
            nb::gil_scoped_release release;
            return self.copy->SubmitIds(std::move(rows), std::move(seconds), std::move(spans));
          },
          "ids"_a, "seconds"_a = std::vector<int>{}, "tokens"_a.none() = nb::none(),
          "The copy's rows (one int64 array a text; `seconds`: where each pair's second text begins; `tokens`: a token "
          "classifier's [(spans, chars_read)]) into the shadow version's batcher, the lowest class. False when it was "
          "submitted or failed already.")
      .def(
          "fail",
          [](ShadowTokenize& self, std::string message, bool dropped) {
            nb::gil_scoped_release release;
            return self.copy->Fail(dropped ? Code::kResourceExhausted : Code::kInternal, std::move(message));
          },
          "message"_a, "dropped"_a = false,
          "Ends the copy untried: dropped (no room to tokenize it) or failed (its texts could not be tokenized).");

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
          "Up to max records (RequestEvent, BatchEvent, ShadowEvent or ShadowTokenize), waiting up to timeout_s for the first. Empty on timeout "
          "or once closed.")
      .def("close", [](PyEventSink& self) { self.sink->Close(); }, "Wakes drain() for good; later records drop.")
      .def_prop_ro("dropped", [](const PyEventSink& self) { return self.sink->dropped(); })
      .def_prop_ro("pushed", [](const PyEventSink& self) { return self.sink->pushed(); },
                   "Records accepted so far (not dropped).")
      .def_prop_ro("closed", [](const PyEventSink& self) { return self.sink->closed(); });
}
