// Python bindings for the batcher: its settings and text model, NativeVersion (with its tickets and the event
// loop's completions), NativeLanes, EventSink, and the batch policy's pure functions. Every wait releases the GIL;
// the C++ side never takes it.
#include "native_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "batch_policy.h"
#include "completions.h"
#include "errors.h"
#include "py_text.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

namespace {

// Python owns these through shared_ptrs the batchers share, so no C++ thread ever drops a Python reference.
struct PyEventSink {
  std::shared_ptr<EventSink> sink;
};

struct PyLanes {
  std::shared_ptr<Lanes> lanes;
};

// The engines and tokenizer a version's batches run on, borrowed from their Python objects (nb::keep_alive).
struct PyTextModel {
  TextModel model;
};

struct PyNativeVersion {
  std::shared_ptr<NativeVersion> version;
  // The text model is borrowed from a Python object (kept alive by nb::keep_alive, released after this
  // destructor): close first, so that no run or tokenize can outlive it. Close never needs the GIL.
  ~PyNativeVersion() {
    if (version) version->batcher().Close();
  }
};

struct PyCompletions {
  std::shared_ptr<Completions> completions;
};

// A call submitted for the event loop: only its cancellation is left to Python.
struct PyCall {
  std::shared_ptr<NativeVersion> version;
  NativeBatcher::CallHandle call;
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
  std::shared_ptr<NativeVersion> version;
  NativeBatcher::CallHandle call;
  std::shared_ptr<TicketState> state;
};

std::optional<Clock::time_point> DeadlineIn(std::optional<double> timeout_s) {
  if (!timeout_s) return std::nullopt;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout_s));
}

std::shared_ptr<TicketState> Submit(PyNativeVersion& self, nb::handle texts, std::optional<double> timeout_s,
                                    NativeBatcher::CallHandle* call, bool run_here) {
  std::vector<nb::object> keep;
  const std::vector<std::string_view> views = ortserve::TextViews(texts, keep);
  auto state = std::make_shared<TicketState>();
  nb::gil_scoped_release release;
  *call = self.version->batcher().Submit(views, DeadlineIn(timeout_s), state->Callback(state), run_here);
  return state;
}

// (code name, message, logits float32 [rows, labels] or None, timings)
nb::tuple ResultTuple(InferResult& result) {
  nb::object logits = nb::none();
  if (result.code == Code::kOk) {
    auto* owned = new std::vector<float>(std::move(result.logits));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
    const size_t shape[2] = {static_cast<size_t>(result.rows), static_cast<size_t>(result.labels)};
    logits = nb::ndarray<nb::numpy, float, nb::ndim<2>>(owned->data(), 2, shape, owner).cast();
  }
  nb::dict timings;
  timings["tokenize_s"] = result.tokenize_s;
  timings["queue_s"] = result.queue_s;
  timings["engine_s"] = result.engine_s;
  timings["batch_size"] = result.batch_size;
  timings["retry_after_s"] = result.retry_after_s;
  return nb::make_tuple(CodeName(result.code), result.message, logits, timings);
}

nb::object EventObject(Event&& event) {
  if (auto* r = std::get_if<RequestEvent>(&event)) return nb::cast(std::move(*r));
  return nb::cast(std::move(std::get<BatchEvent>(event)));
}

std::vector<std::vector<int64_t>> IdRows(nb::handle rows) {
  std::vector<std::vector<int64_t>> ids;
  for (nb::handle row : rows) {
    auto array = nb::cast<nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu>>(row);
    const int64_t* data = array.data();
    const size_t n = array.shape(0);
    const int64_t stride = array.stride(0);
    std::vector<int64_t>& out = ids.emplace_back(n);
    for (size_t i = 0; i < n; ++i) out[i] = data[static_cast<int64_t>(i) * stride];
  }
  return ids;
}

BatchPolicy MakePolicy(int max_batch_size, double max_queue_delay_s, double max_padding_ratio,
                       int batch_overhead_tokens, int max_batch_tokens, int sort_window) {
  BatchPolicy policy;
  policy.max_batch_size = max_batch_size;
  policy.max_queue_delay_s = max_queue_delay_s;
  policy.max_padding_ratio = max_padding_ratio;
  policy.batch_overhead_tokens = batch_overhead_tokens;
  policy.max_batch_tokens = max_batch_tokens;
  policy.sort_window = sort_window;
  return policy;
}

}  // namespace

std::shared_ptr<NativeVersion> NativeVersionPtr(nb::handle object) {
  return nb::cast<PyNativeVersion&>(object).version;
}

std::shared_ptr<EventSink> EventSinkPtr(nb::handle object) { return nb::cast<PyEventSink&>(object).sink; }

void BindNative(nb::module_& m) {
  static const BatchPolicy kPolicyDefaults;
  m.def(
      "native_defaults",
      [] {
        const BatcherSettings batcher;
        nb::dict defaults;
        defaults["max_batch_size"] = batcher.policy.max_batch_size;
        defaults["max_queue_delay_ms"] = batcher.policy.max_queue_delay_s * 1000;
        defaults["max_padding_ratio"] = batcher.policy.max_padding_ratio;
        defaults["batch_overhead_tokens"] = batcher.policy.batch_overhead_tokens;
        defaults["max_batch_tokens"] = batcher.policy.max_batch_tokens;
        defaults["sort_window"] = batcher.policy.sort_window;
        defaults["max_queue_items"] = batcher.max_queue_items;
        defaults["max_queue_wait_ms"] = batcher.max_queue_wait_s * 1000;
        defaults["engine_concurrency"] = batcher.engine_concurrency;
        return defaults;
      },
      "The C++ structs' own defaults, under service/config.Settings' names and units (a test holds them equal).");
  nb::class_<BatchPolicy>(m, "NativeBatchPolicy", "service/batch_policy.BatchPolicy in C++ (for the tests).")
      .def(
          "__init__",
          [](BatchPolicy* self, int max_batch_size, double max_queue_delay_s, double max_padding_ratio,
             int batch_overhead_tokens, int max_batch_tokens, int sort_window) {
            BatchPolicy policy = MakePolicy(max_batch_size, max_queue_delay_s, max_padding_ratio,
                                            batch_overhead_tokens, max_batch_tokens, sort_window);
            policy.Validate();
            new (self) BatchPolicy(policy);
          },
          nb::kw_only(), "max_batch_size"_a = kPolicyDefaults.max_batch_size,
          "max_queue_delay_s"_a = kPolicyDefaults.max_queue_delay_s,
          "max_padding_ratio"_a = kPolicyDefaults.max_padding_ratio,
          "batch_overhead_tokens"_a = kPolicyDefaults.batch_overhead_tokens,
          "max_batch_tokens"_a = kPolicyDefaults.max_batch_tokens, "sort_window"_a = kPolicyDefaults.sort_window)
      .def_ro("max_batch_size", &BatchPolicy::max_batch_size)
      .def_ro("max_queue_delay_s", &BatchPolicy::max_queue_delay_s)
      .def_ro("max_padding_ratio", &BatchPolicy::max_padding_ratio)
      .def_ro("batch_overhead_tokens", &BatchPolicy::batch_overhead_tokens)
      .def_ro("max_batch_tokens", &BatchPolicy::max_batch_tokens)
      .def_ro("sort_window", &BatchPolicy::sort_window);

  m.def(
      "native_choose_batch",
      [](const std::vector<std::pair<int, double>>& pending, double now, const BatchPolicy& policy) {
        std::vector<PendingText> texts;
        texts.reserve(pending.size());
        for (const auto& [length, enqueued_at] : pending) texts.push_back({length, enqueued_at});
        return ChooseBatch(texts, now, policy);
      },
      "pending"_a, "now"_a, "policy"_a,
      "ChooseBatch over (length, enqueued_at) pairs: the indices batch_policy.choose_batch returns.");

  m.def(
      "split_rows",
      [](const std::vector<int>& lengths, const BatchPolicy& policy) { return SplitRows(lengths, policy); },
      "lengths"_a, "policy"_a,
      "A lone call's rows (token counts, in order) as [begin, end) runs within max_batch_size rows and "
      "max_batch_tokens padded tokens: the one rule of both batchers' idle paths.");
  m.def(
      "bucket_shape",
      [](int rows, int tokens, std::vector<int> bucket_rows, std::vector<int> bucket_tokens) {
        return BucketShape(rows, tokens, ShapeBuckets{std::move(bucket_rows), std::move(bucket_tokens)});
      },
      "rows"_a, "tokens"_a, "bucket_rows"_a, "bucket_tokens"_a,
      "(rows, tokens) padded up to the shape ladder's smallest rungs that hold them; a value past the top rung "
      "stays as it is. The one padding rule of both batchers.");

  nb::class_<Throughput>(m, "NativeThroughput",
                         "The rate the queue drains at, which admission turns queued texts into a wait with "
                         "(batch_policy.h; for the tests).")
      .def(nb::init<>())
      .def("observe", &Throughput::Observe, "texts"_a, "busy_s"_a)
      .def("wait_s", &Throughput::WaitS, "texts_ahead"_a)
      .def_prop_ro("texts_per_s", &Throughput::texts_per_s);

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

  nb::class_<PyLanes>(m, "NativeLanes", "Lane threads shared by every native version, plus wide-run threads.")
      .def(
          "__init__",
          [](PyLanes* self, int lanes, int wide_threads) { new (self) PyLanes{std::make_shared<Lanes>(lanes, wide_threads)}; },
          "lanes"_a, "wide_threads"_a)
      .def_prop_ro("lanes", [](const PyLanes& self) { return self.lanes->lanes(); })
      .def("stop", [](PyLanes& self) { self.lanes->Stop(); }, nb::call_guard<nb::gil_scoped_release>(),
           "Runs what is queued, then joins the threads.")
      .def("pause", [](PyLanes& self) { self.lanes->Pause(); },
           "No thread starts a new task until resume() (tests: hold the engine busy deterministically).")
      .def("resume", [](PyLanes& self) { self.lanes->Resume(); });

  nb::class_<BatcherSettings>(m, "NativeBatcherSettings",
                              "Every batching setting, built from service/config.Settings (batcher_settings()).")
      .def(
          "__init__",
          [](BatcherSettings* self, int max_batch_size, double max_queue_delay_s, double max_padding_ratio,
             int batch_overhead_tokens, int max_batch_tokens, int sort_window, int max_queue_items,
             double max_queue_wait_s, int engine_concurrency) {
            BatcherSettings settings;
            settings.policy = MakePolicy(max_batch_size, max_queue_delay_s, max_padding_ratio, batch_overhead_tokens,
                                         max_batch_tokens, sort_window);
            settings.max_queue_items = max_queue_items;
            settings.max_queue_wait_s = max_queue_wait_s;
            settings.engine_concurrency = engine_concurrency;
            new (self) BatcherSettings(settings);
          },
          nb::kw_only(), "max_batch_size"_a, "max_queue_delay_s"_a, "max_padding_ratio"_a, "batch_overhead_tokens"_a,
          "max_batch_tokens"_a, "sort_window"_a, "max_queue_items"_a, "max_queue_wait_s"_a, "engine_concurrency"_a)
      .def_prop_ro("policy", [](const BatcherSettings& self) { return self.policy; })
      .def_ro("max_queue_items", &BatcherSettings::max_queue_items)
      .def_ro("max_queue_wait_s", &BatcherSettings::max_queue_wait_s)
      .def_ro("engine_concurrency", &BatcherSettings::engine_concurrency);

  nb::class_<PyTextModel>(m, "NativeTextModel", "What one version's batches run on: sessions, tokenizer, output.")
      .def(
          "__init__",
          [](PyTextModel* self, const Engine& wide, const Engine* narrow, const WordPiece* tokenizer,
             std::string output, int columns, int64_t pad_id, bool token_types, std::vector<int> bucket_rows,
             std::vector<int> bucket_tokens) {
            new (self) PyTextModel{TextModel{&wide, narrow, tokenizer, std::move(output), columns, pad_id,
                                             token_types,
                                             ShapeBuckets{std::move(bucket_rows), std::move(bucket_tokens)}}};
          },
          nb::kw_only(), "wide"_a, "narrow"_a.none(), "tokenizer"_a.none(), "output"_a, "columns"_a, "pad_id"_a,
          "token_types"_a, "bucket_rows"_a = std::vector<int>{}, "bucket_tokens"_a = std::vector<int>{},
          // Argument 1 is self: the sessions and the tokenizer live at least as long as this object.
          nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(), nb::keep_alive<1, 4>())
      .def(
          "run",
          [](const PyTextModel& self, nb::handle ids, bool narrow) {
            const std::vector<std::vector<int64_t>> rows = IdRows(ids);
            if (rows.empty()) throw nb::value_error("run needs at least one row of token ids");
            std::vector<const std::vector<int64_t>*> views;
            for (const auto& row : rows) {
              if (row.empty()) throw nb::value_error("every row needs at least one token id");
              views.push_back(&row);
            }
            auto* out = new std::vector<float>();
            nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
            {
              nb::gil_scoped_release release;
              *out = RunEngine(self.model, narrow, views);
            }
            const size_t shape[2] = {rows.size(), static_cast<size_t>(self.model.columns)};
            return nb::ndarray<nb::numpy, float, nb::ndim<2>>(out->data(), 2, shape, owner);
          },
          "ids"_a, "narrow"_a = false,
          "One batch through the engine, padded as the batcher pads every run (GIL released): the output float32 "
          "[rows, columns] for token-id rows (int64 arrays). For warm-up and tests.")
      .def_prop_ro("output", [](const PyTextModel& self) { return self.model.output; })
      .def_prop_ro("columns", [](const PyTextModel& self) { return self.model.columns; })
      .def_prop_ro("tokenizes", [](const PyTextModel& self) { return self.model.tokenizer != nullptr; },
                   "Whether the batcher tokenizes texts itself (the C++ WordPiece) or takes token ids.");

  nb::class_<PyCompletions>(m, "NativeCompletions",
                            "Answers for an event loop: watch `fd` with loop.add_reader, then drain().")
      .def("__init__", [](PyCompletions* self) { new (self) PyCompletions{std::make_shared<Completions>()}; })
      .def_prop_ro("fd", [](const PyCompletions& self) { return self.completions->fd(); })
      .def(
          "drain",
          [](PyCompletions& self) {
            auto done = self.completions->Drain();
            nb::list out;
            for (auto& [token, result] : done) out.append(nb::make_tuple(token, ResultTuple(result)));
            return out;
          },
          "Every answer queued so far: [(token, (code name, message, output float32 [n, columns] | None, "
          "timings))], oldest first.");

  nb::class_<PyCall>(m, "NativeCall", "A call submitted with a completion token.")
      .def(
          "cancel",
          [](PyCall& self) {
            nb::gil_scoped_release release;
            self.version->batcher().Cancel(self.call);
          },
          "The caller went away: its queued texts leave the queue; answers CANCELLED unless done already.");

  nb::class_<PyTicket>(m, "NativeTicket", "One submitted call of a NativeVersion.")
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

  nb::class_<PyNativeVersion>(m, "NativeVersion", "One loaded version on the batcher.")
      .def(
          "__init__",
          [](PyNativeVersion* self, std::string model, std::string version, const PyTextModel& text_model,
             const BatcherSettings& settings, PyLanes& lanes, PyEventSink& events) {
            auto batcher = std::make_shared<NativeBatcher>(model, version, text_model.model, settings, lanes.lanes,
                                                           events.sink);
            new (self) PyNativeVersion{std::make_shared<NativeVersion>(std::move(batcher))};
          },
          "model"_a, "version"_a, nb::kw_only(), "text_model"_a, "settings"_a, "lanes"_a, "events"_a,
          // Argument 1 is self: the text model (and through it the sessions) outlives this object.
          nb::keep_alive<1, 4>())
      .def(
          "submit_async",
          [](PyNativeVersion& self, nb::handle texts, std::optional<double> timeout_s, PyCompletions& completions,
             uint64_t token) {
            std::vector<nb::object> keep;
            const std::vector<std::string_view> views = ortserve::TextViews(texts, keep);
            PyCall call{self.version, nullptr};
            nb::gil_scoped_release release;
            call.call = self.version->batcher().Submit(views, DeadlineIn(timeout_s),
                                                       Completions::Callback(completions.completions, token));
            return call;
          },
          "texts"_a, "timeout_s"_a.none(), "completions"_a, "token"_a,
          "Tokenize (GIL released) and queue; the answer arrives in `completions` under `token`.")
      .def(
          "submit_ids_async",
          [](PyNativeVersion& self, nb::handle ids, std::optional<double> timeout_s, PyCompletions& completions,
             uint64_t token, double tokenize_s) {
            std::vector<std::vector<int64_t>> rows = IdRows(ids);
            PyCall call{self.version, nullptr};
            nb::gil_scoped_release release;
            call.call = self.version->batcher().SubmitIds(std::move(rows), DeadlineIn(timeout_s),
                                                          Completions::Callback(completions.completions, token),
                                                          tokenize_s);
            return call;
          },
          "ids"_a, "timeout_s"_a.none(), "completions"_a, "token"_a, "tokenize_s"_a = 0.0,
          "Queue texts tokenized by the caller (one int64 array per text); the answer arrives in `completions`.")
      .def(
          "infer",
          [](PyNativeVersion& self, nb::handle texts, std::optional<double> timeout_s) {
            NativeBatcher::CallHandle call;
            std::shared_ptr<TicketState> state = Submit(self, texts, timeout_s, &call, /*run_here=*/false);
            {
              nb::gil_scoped_release release;
              state->Wait(std::nullopt);
            }
            return ResultTuple(*state->result);
          },
          "texts"_a, "timeout_s"_a = nb::none(),
          "Blocking: (code name, message, logits float32 [n, labels] | None, {tokenize_s, queue_s, engine_s, "
          "batch_size, retry_after_s}).")
      .def(
          "submit",
          [](PyNativeVersion& self, nb::handle texts, std::optional<double> timeout_s, bool run_here) {
            PyTicket ticket{self.version, nullptr, nullptr};
            ticket.state = Submit(self, texts, timeout_s, &ticket.call, run_here);
            return ticket;
          },
          "texts"_a, "timeout_s"_a = nb::none(), "run_here"_a = false,
          "Queue the call and return its NativeTicket at once; run_here: a lone call on the wide session runs on "
          "this thread first (GIL released), as the gRPC front end's calls do.")
      .def(
          "refusal",
          [](const PyNativeVersion& self, int texts, std::optional<double> timeout_s) -> nb::object {
            std::optional<InferResult> refusal = self.version->batcher().Refusal(texts, DeadlineIn(timeout_s));
            if (!refusal) return nb::none();
            return nb::make_tuple(CodeName(refusal->code), refusal->message, refusal->retry_after_s);
          },
          "texts"_a, "timeout_s"_a.none(),
          "(code name, message, retry_after_s) that submitting `texts` texts would be answered at once as the queue "
          "stands, or None when they would be admitted: a check before tokenizing them elsewhere.")
      .def_prop_ro("queue_depth", [](const PyNativeVersion& self) { return self.version->batcher().queue_depth(); })
      .def_prop_ro("in_flight", [](const PyNativeVersion& self) { return self.version->in_flight(); })
      .def_prop_ro("model", [](const PyNativeVersion& self) { return self.version->batcher().model(); })
      .def_prop_ro("version", [](const PyNativeVersion& self) { return self.version->batcher().version(); })
      .def("acquire", [](PyNativeVersion& self) { return self.version->Acquire(); },
           "Take a lease; False once drain() started.")
      .def("release", [](PyNativeVersion& self) { self.version->Release(); })
      .def("drain", [](PyNativeVersion& self, double timeout_s) { return self.version->Drain(timeout_s); },
           "timeout_s"_a, nb::call_guard<nb::gil_scoped_release>(),
           "Stop new leases; wait up to timeout_s for the in-flight ones; True when none is left.")
      .def("close", [](PyNativeVersion& self) { self.version->batcher().Close(); },
           nb::call_guard<nb::gil_scoped_release>(),
           "Refuse new calls, answer queued ones UNAVAILABLE, wait for running batches. Idempotent.");
}
