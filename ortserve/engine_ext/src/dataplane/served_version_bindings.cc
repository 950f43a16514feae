// Python binding of a served version (served_version.h): ServedVersion, the calls submitted through it (SubmittedCall
// for the event loop's, Ticket for a blocking caller's), its lease and close. Every wait releases the GIL;
// the C++ side never takes it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "batcher.h"
#include "dataplane_bindings.h"
#include "py_handles.h"
#include "py_text.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

namespace {

// A call submitted for the event loop: only its cancellation is left to Python.
struct PyCall {
  std::shared_ptr<ServedVersion> version;
  CallHandle call;
};

// One submitted call: the done callback stores the result here; Python waits for it.
struct TicketState {
  std::mutex mutex;  // guards result (set once by the done callback, read by Python's wait)
  std::condition_variable done_cv;
  std::optional<InferResult> result;

  InferDone Callback(const std::shared_ptr<TicketState>& self) {
    return [self](InferResult&& result) {
      std::lock_guard<std::mutex> lock(self->mutex);
      self->result = std::move(result);
      self->done_cv.notify_all();
    };
  }

  // True when done; waits (GIL released by the caller) up to timeout_s, forever when nullopt.
  bool Wait(std::optional<double> timeout_s) {
    std::unique_lock<std::mutex> lock(mutex);
    auto ready = [&] { return result.has_value(); };
    if (!timeout_s) {
      done_cv.wait(lock, ready);
      return true;
    }
    return done_cv.wait_for(lock, std::chrono::duration<double>(std::max(*timeout_s, 0.0)), ready);
  }
};

struct PyTicket {
  std::shared_ptr<ServedVersion> version;
  CallHandle call;
  std::shared_ptr<TicketState> state;
};

// The second texts of pairs (None: texts alone) as views held by `keep`.
std::vector<std::string_view> PairViews(nb::handle pairs, std::vector<nb::object>& keep) {
  if (pairs.is_none()) return {};
  return ortserve::TextViews(pairs, keep);
}

std::shared_ptr<TicketState> Submit(PyServedVersion& self, nb::handle texts, std::optional<double> timeout_s,
                                    CallHandle* call, bool run_here, nb::handle pairs,
                                    std::optional<bool> bulk = std::nullopt, bool shadow = false) {
  std::vector<nb::object> keep;
  const std::vector<std::string_view> views = ortserve::TextViews(texts, keep);
  const std::vector<std::string_view> second = PairViews(pairs, keep);
  auto state = std::make_shared<TicketState>();
  nb::gil_scoped_release release;
  Batcher& batcher = self.version->batcher();
  *call = shadow ? batcher.SubmitShadow(views, second, DeadlineIn(timeout_s), nullptr, state->Callback(state))
                 : batcher.Submit(views, DeadlineIn(timeout_s), state->Callback(state), run_here, second, bulk);
  return state;
}

}  // namespace

void BindServedVersion(nb::module_& m) {
  nb::class_<PyCall>(m, "SubmittedCall", "A call submitted with a completion token.")
      .def(
          "cancel",
          [](PyCall& self) {
            nb::gil_scoped_release release;
            self.version->batcher().Cancel(self.call);
          },
          "The caller went away: its queued texts leave the queue; answers CANCELLED unless done already.");

  nb::class_<PyTicket>(m, "Ticket", "One submitted call of a ServedVersion.")
      .def("cancel",
           [](PyTicket& self) {
             nb::gil_scoped_release release;
             self.version->batcher().Cancel(self.call);
           },
           "The client went away: its queued texts leave the queue; answers CANCELLED unless done already.")
      .def(
          "wait",
          [](PyTicket& self, std::optional<double> timeout_s) {
            bool done;
            {
              nb::gil_scoped_release release;
              done = self.state->Wait(timeout_s);
            }
            if (!done) {
              PyErr_SetString(PyExc_TimeoutError, "the call is not done yet");
              throw nb::python_error();
            }
            std::lock_guard<std::mutex> lock(self.state->mutex);
            InferResult copy = *self.state->result;  // wait() may be called again
            return ResultTuple(copy);
          },
          "timeout_s"_a = nb::none(), "The call's (code, message, logits | None, timings); TimeoutError if not done.")
      .def_prop_ro("done", [](PyTicket& self) {
        std::lock_guard<std::mutex> lock(self.state->mutex);
        return self.state->result.has_value();
      });

  nb::class_<PyServedVersion>(m, "ServedVersion", "One loaded version on the batcher.")
      .def(
          "__init__",
          [](PyServedVersion* self, std::string model, std::string version, const PyTextModel& text_model,
             const BatcherSettings& settings, PyLanes& lanes, PyEventSink& events) {
            auto batcher = std::make_shared<Batcher>(model, version, text_model.model, settings, lanes.lanes,
                                                           events.sink);
            new (self) PyServedVersion{std::make_shared<ServedVersion>(std::move(batcher))};
          },
          "model"_a, "version"_a, nb::kw_only(), "text_model"_a, "settings"_a, "lanes"_a, "events"_a,
          // Argument 1 is self: the text model (and through it the sessions) outlives this object.
          nb::keep_alive<1, 4>())
      .def(
          "submit_async",
          [](PyServedVersion& self, nb::handle texts, std::optional<double> timeout_s, PyCompletions& completions,
             uint64_t token, nb::handle pairs, std::optional<bool> bulk) {
            std::vector<nb::object> keep;
            const std::vector<std::string_view> views = ortserve::TextViews(texts, keep);
            const std::vector<std::string_view> second = PairViews(pairs, keep);
            PyCall call{self.version, nullptr};
            nb::gil_scoped_release release;
            call.call = self.version->batcher().Submit(views, DeadlineIn(timeout_s),
                                                       Completions::Callback(completions.completions, token),
                                                       /*may_run_here=*/false, second, bulk);
            return call;
          },
          "texts"_a, "timeout_s"_a.none(), "completions"_a, "token"_a, "pairs"_a = nb::none(),
          "bulk"_a.none() = nb::none(),
          "Tokenize (GIL released) and queue; the answer arrives in `completions` under `token`. `pairs`: one "
          "second text per text (a cross-encoder's), or None; `bulk`: the call's priority, None: by its size.")
      .def(
          "submit_ids_async",
          [](PyServedVersion& self, nb::handle ids, std::optional<double> timeout_s, PyCompletions& completions,
             uint64_t token, double tokenize_s, std::vector<int> seconds, std::optional<bool> bulk) {
            std::vector<std::vector<int64_t>> rows = IdRows(ids);
            PyCall call{self.version, nullptr};
            nb::gil_scoped_release release;
            call.call = self.version->batcher().SubmitIds(std::move(rows), DeadlineIn(timeout_s),
                                                          Completions::Callback(completions.completions, token),
                                                          tokenize_s, std::move(seconds), bulk);
            return call;
          },
          "ids"_a, "timeout_s"_a.none(), "completions"_a, "token"_a, "tokenize_s"_a = 0.0,
          "seconds"_a = std::vector<int>{}, "bulk"_a.none() = nb::none(),
          "Queue texts tokenized by the caller (one int64 array per text; `seconds`: per pair where its second text "
          "begins, or empty); the answer arrives in `completions`.")
      .def(
          "infer",
          [](PyServedVersion& self, nb::handle texts, std::optional<double> timeout_s, nb::handle pairs) {
            CallHandle call;
            std::shared_ptr<TicketState> state = Submit(self, texts, timeout_s, &call, /*run_here=*/false, pairs);
            {
              nb::gil_scoped_release release;
              state->Wait(std::nullopt);
            }
            return ResultTuple(*state->result);
          },
          "texts"_a, "timeout_s"_a = nb::none(), "pairs"_a = nb::none(),
          "Blocking: (code name, message, output float32 [n, columns] | None, {tokenize_s, queue_s, engine_s, "
          "batch_size, retry_after_s, tokens}).")
      .def(
          "submit",
          [](PyServedVersion& self, nb::handle texts, std::optional<double> timeout_s, bool run_here,
             nb::handle pairs, std::optional<bool> bulk, bool shadow) {
            PyTicket ticket{self.version, nullptr, nullptr};
            ticket.state = Submit(self, texts, timeout_s, &ticket.call, run_here, pairs, bulk, shadow);
            return ticket;
          },
          "texts"_a, "timeout_s"_a = nb::none(), "run_here"_a = false, "pairs"_a = nb::none(),
          "bulk"_a.none() = nb::none(), "shadow"_a = false,
          "Queue the call and return its Ticket at once; run_here: a lone call on the wide session runs on "
          "this thread first (GIL released), as the gRPC front end's calls do; shadow: a shadow copy "
          "(Batcher::SubmitShadow: the lowest class, dropped when the shadow queue is full).")
      .def(
          "refusal",
          [](const PyServedVersion& self, int texts, std::optional<double> timeout_s,
             std::optional<bool> bulk) -> nb::object {
            std::optional<InferResult> refusal = self.version->batcher().Refusal(texts, DeadlineIn(timeout_s), bulk);
            if (!refusal) return nb::none();
            return nb::make_tuple(CodeName(refusal->code), refusal->message, refusal->retry_after_s);
          },
          "texts"_a, "timeout_s"_a.none(), "bulk"_a.none() = nb::none(),
          "(code name, message, retry_after_s) that submitting `texts` texts of one token each would be answered at "
          "once as the queue stands, or None when they would be admitted: a check before tokenizing them elsewhere "
          "(submitting checks again, with their tokens).")
      .def_prop_ro("queue_depth", [](const PyServedVersion& self) { return self.version->batcher().queue_depth(); })
      .def_prop_ro("in_flight", [](const PyServedVersion& self) { return self.version->in_flight(); })
      .def_prop_ro("tokens_per_s", [](const PyServedVersion& self) { return self.version->batcher().tokens_per_s(); },
                   "The rate admission counts with: padded tokens the engine ran per busy second, recent runs "
                   "weighted most (0 before any run ended).")
      .def_prop_ro("model", [](const PyServedVersion& self) { return self.version->batcher().model(); })
      .def_prop_ro("version", [](const PyServedVersion& self) { return self.version->batcher().version(); })
      .def("acquire", [](PyServedVersion& self) { return self.version->Acquire(); },
           "Take a lease; False once drain() started.")
      .def("release", [](PyServedVersion& self) { self.version->Release(); })
      .def("drain", [](PyServedVersion& self, double timeout_s) { return self.version->Drain(timeout_s); },
           "timeout_s"_a, nb::call_guard<nb::gil_scoped_release>(),
           "Stop new leases; wait up to timeout_s for the in-flight ones; True when none is left.")
      .def("close", [](PyServedVersion& self) { self.version->batcher().Close(); },
           nb::call_guard<nb::gil_scoped_release>(),
           "Refuse new calls, answer queued ones UNAVAILABLE, wait for running batches. Idempotent.");
}
