// The batcher (see native_batcher.h). One mutex per version guards the pending texts, admitted count, lane load
// and throughput; engine runs and done callbacks happen with no lock held.
#include "native_batcher.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <exception>
#include <numeric>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>

#ifdef __linux__
#include <pthread.h>
#endif

#include "errors.h"

namespace ortserve {

namespace {

constexpr char kShuttingDown[] = "model version is shutting down; retry";
constexpr char kExpiredQueued[] = "deadline exceeded while queued; the request never reached the engine";
constexpr char kExpiredBefore[] = "deadline exceeded before the request reached the engine";
constexpr char kCancelled[] = "call cancelled by the client";
// A call with a deadline is admitted when its expected completion is within this share of the time it has left: the
// rest absorbs the estimate's error (batch sizes and CPU vary) and the reply's way back. Admitting up to the deadline
// itself let calls at the edge finish just late, their engine time wasted.
constexpr double kDeadlineShare = 0.75;

double Seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }
double NowS() { return Seconds(Clock::now()); }

std::string Format(const char* format, double a, double b) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, format, a, b);
  return buffer;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

// A ladder's extra rows attend to their first token, so that no row is all padding; their output is dropped.
std::vector<float> RunEngine(const TextModel& model, bool narrow,
                             const std::vector<const std::vector<int64_t>*>& rows) {
  const size_t n = rows.size();
  size_t longest = 0;
  for (const auto* ids : rows) longest = std::max(longest, ids->size());
  const auto [bucket_rows, bucket_width] =
      BucketShape(static_cast<int>(n), static_cast<int>(longest), model.buckets);
  const size_t padded_rows = static_cast<size_t>(bucket_rows), width = static_cast<size_t>(bucket_width);
  std::vector<int64_t> input_ids(padded_rows * width, model.pad_id);
  std::vector<int64_t> mask(padded_rows * width, 0);
  for (size_t r = 0; r < padded_rows; ++r) {
    const auto row = static_cast<std::ptrdiff_t>(r * width);
    if (r < n) {
      std::copy(rows[r]->begin(), rows[r]->end(), input_ids.begin() + row);
      std::fill_n(mask.begin() + row, rows[r]->size(), int64_t{1});
    } else {
      mask[static_cast<size_t>(row)] = 1;
    }
  }
  const std::vector<int64_t> shape{static_cast<int64_t>(padded_rows), static_cast<int64_t>(width)};
  const size_t nbytes = padded_rows * width * sizeof(int64_t);
  std::vector<InputView> feeds{{"input_ids", "int64", shape, input_ids.data(), nbytes},
                               {"attention_mask", "int64", shape, mask.data(), nbytes}};
  std::vector<int64_t> token_types;
  if (model.token_types) {
    token_types.assign(padded_rows * width, 0);
    feeds.push_back({"token_type_ids", "int64", shape, token_types.data(), nbytes});
  }
  const Engine& engine = narrow && model.narrow != nullptr ? *model.narrow : *model.wide;
  std::vector<OutputTensor> outputs = engine.Run(feeds);
  for (OutputTensor& output : outputs) {
    if (output.name != model.output) continue;
    const std::vector<int64_t> expected{static_cast<int64_t>(padded_rows), model.columns};
    if (output.shape != expected) {
      throw EngineError("model returned '" + model.output + "' of shape " + ShapeText(output.shape) + ", expected " +
                        ShapeText(expected) + " (one row per text)");
    }
    if (output.dtype != "float32") {
      throw EngineError("model returned '" + model.output + "' of dtype " + output.dtype + ", expected float32");
    }
    const auto* data = reinterpret_cast<const float*>(output.data.get());
    return std::vector<float>(data, data + n * static_cast<size_t>(model.columns));  // the ladder's rows dropped
  }
  throw EngineError("model has no '" + model.output + "' output");
}

namespace {

// One engine run as a batch path sees it: the logits or the engine's error, how long it took, and the padded and
// real token counts its BatchEvent reports.
struct Run {
  std::vector<float> logits;
  bool failed = false;
  Code code = Code::kOk;  // the failure's status: RESOURCE_EXHAUSTED when it ran out of memory, else INTERNAL
  std::string error;
  double started = 0, engine_s = 0;
  int padded_tokens = 0, real_tokens = 0;
  struct Part {
    int texts, padded_tokens, real_tokens;
    double engine_s;
  };
  std::vector<Part> parts;  // RunSplit: one per engine run, for the batch events
};

Run RunRows(const TextModel& model, bool narrow, const std::vector<const std::vector<int64_t>*>& rows) {
  Run run;
  size_t width = 0, real = 0;
  for (const auto* ids : rows) {
    width = std::max(width, ids->size());
    real += ids->size();
  }
  const auto [bucket_rows, bucket_width] =
      BucketShape(static_cast<int>(rows.size()), static_cast<int>(width), model.buckets);
  run.padded_tokens = bucket_rows * bucket_width;
  run.real_tokens = static_cast<int>(real);
  run.started = NowS();
  try {
    run.logits = RunEngine(model, narrow, rows);
  } catch (const OutOfMemoryError& e) {
    run.failed = true;
    run.code = Code::kResourceExhausted;
    run.error = e.what();
  } catch (const std::exception& e) {
    run.failed = true;
    run.code = Code::kInternal;
    run.error = e.what();
  }
  run.engine_s = NowS() - run.started;
  return run;
}

// A lone call's rows in the runs SplitRows allows, one after the other, as one Run: the logits in call order, the
// engine time summed, each run's counts in `parts`; the first failure fails the whole call.
Run RunSplit(const TextModel& model, bool narrow, const std::vector<const std::vector<int64_t>*>& rows,
             const BatchPolicy& policy) {
  std::vector<int> lengths;
  for (const auto* ids : rows) lengths.push_back(static_cast<int>(ids->size()));
  Run total;
  total.started = NowS();
  for (const auto& [begin, end] : SplitRows(lengths, policy)) {
    const std::vector<const std::vector<int64_t>*> part(rows.begin() + static_cast<std::ptrdiff_t>(begin),
                                                        rows.begin() + static_cast<std::ptrdiff_t>(end));
    Run run = RunRows(model, narrow, part);
    total.parts.push_back({static_cast<int>(part.size()), run.padded_tokens, run.real_tokens, run.engine_s});
    total.engine_s += run.engine_s;
    if (run.failed) {
      total.failed = true;
      total.code = run.code;
      total.error = std::move(run.error);
      return total;
    }
    if (total.logits.empty()) {
      total.logits = std::move(run.logits);
    } else {
      total.logits.insert(total.logits.end(), run.logits.begin(), run.logits.end());
    }
  }
  return total;
}

}  // namespace

// ---- Lanes ---------------------------------------------------------------------------------------------

namespace {

// What `top -H`, perf and the bench's per-thread CPU split show for the thread (Linux keeps 15 characters). Named
// by its creator, so the name is there once the constructor returns.
void NameThread(std::thread& thread, const std::string& name) {
#ifdef __linux__
  pthread_setname_np(thread.native_handle(), name.substr(0, 15).c_str());
#else
  (void)thread;
  (void)name;
#endif
}

}  // namespace

struct Lanes::Impl {
  struct Queue {
    std::deque<std::function<void()>> tasks;
    std::condition_variable ready;
  };
  // Guards every queue, load, stopping, paused and caller_running; one for all: a post is once per batch, far
  // rarer than the work.
  std::mutex mutex;
  std::vector<Queue> lanes;  // one thread each
  Queue wide;                // shared by the wide threads
  std::vector<int> load;     // per lane: tasks queued or running, over every version
  std::vector<std::thread> threads;
  bool stopping = false;
  bool paused = false;
  bool caller_running = false;  // a lone run on a submitting thread (Submit's may_run_here) holds the slot

  // The slot for one lone run on the caller's thread; false while paused or stopping (the run must wait, or
  // never start, as a posted one would) or while another caller's run holds it.
  bool ClaimCallerRun() {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping || paused || caller_running) return false;
    caller_running = true;
    return true;
  }

  void ReleaseCallerRun() {
    std::lock_guard<std::mutex> lock(mutex);
    caller_running = false;
  }

  // lane -1: the wide threads. False once Stop() began (the task will never run).
  bool Post(int lane, std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) return false;
    Queue& queue = lane < 0 ? wide : lanes[static_cast<size_t>(lane)];
    queue.tasks.push_back(std::move(task));
    if (lane >= 0) ++load[static_cast<size_t>(lane)];
    queue.ready.notify_one();
    return true;
  }

  int Load(int lane) {
    std::lock_guard<std::mutex> lock(mutex);
    return load[static_cast<size_t>(lane)];
  }

  void Loop(Queue& queue, int lane) {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      queue.ready.wait(lock, [&] { return (!queue.tasks.empty() && !paused) || (stopping && queue.tasks.empty()); });
      if (queue.tasks.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(queue.tasks.front());
      queue.tasks.pop_front();
      lock.unlock();
      task();  // tasks catch their own exceptions
      task = nullptr;
      lock.lock();
      if (lane >= 0) --load[static_cast<size_t>(lane)];
    }
  }

  void WakeAll() {
    for (Queue& queue : lanes) queue.ready.notify_all();
    wide.ready.notify_all();
  }
};

Lanes::Lanes(int lanes, int wide_threads) : impl_(std::make_shared<Impl>()) {
  if (lanes < 0) throw OptionError("lanes must be >= 0");
  if (wide_threads < 1) throw OptionError("wide_threads must be >= 1");
  impl_->lanes = std::vector<Impl::Queue>(static_cast<size_t>(lanes));
  impl_->load.assign(static_cast<size_t>(lanes), 0);
  for (int i = 0; i < lanes; ++i) {
    impl_->threads.emplace_back([impl = impl_, i] { impl->Loop(impl->lanes[static_cast<size_t>(i)], i); });
    NameThread(impl_->threads.back(), "ortserve-lane" + std::to_string(i));
  }
  for (int i = 0; i < wide_threads; ++i) {
    impl_->threads.emplace_back([impl = impl_] { impl->Loop(impl->wide, -1); });
    NameThread(impl_->threads.back(), "ortserve-wide" + std::to_string(i));
  }
}

Lanes::~Lanes() { Stop(); }

void Lanes::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
    impl_->paused = false;
    impl_->WakeAll();
    threads.swap(impl_->threads);
  }
  for (std::thread& thread : threads) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();  // Stop() from one of our own tasks: it ends once that task returns
    } else {
      thread.join();
    }
  }
}

int Lanes::lanes() const { return static_cast<int>(impl_->lanes.size()); }

void Lanes::Pause() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (!impl_->stopping) impl_->paused = true;
}

void Lanes::Resume() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->paused = false;
  impl_->WakeAll();
}

// ---- NativeBatcher -------------------------------------------------------------------------------------

struct NativeBatcher::Call {
  InferDone done;
  std::optional<Clock::time_point> deadline;
  // Guarded by State::mutex.
  bool finished = false;  // done() was called or is about to be: nothing more may touch `result`
  int remaining = 0;      // texts not answered yet
  InferResult result;

  bool Expired(Clock::time_point now) const { return deadline && now >= *deadline; }
};

namespace {

struct Item {
  NativeBatcher::CallHandle call;
  int row = 0;
  std::vector<int64_t> ids;
  double enqueued_at = 0;
};

struct Batch {
  std::vector<Item> items;
  bool narrow = false;
  int slot = -1;  // lane index, -1 on the wide threads
};

struct Answer {
  NativeBatcher::CallHandle call;
  InferResult result;
};
using Answers = std::vector<Answer>;

// Runs the done callbacks with no lock held.
void Deliver(Answers& answers) {
  for (Answer& answer : answers) answer.call->done(std::move(answer.result));
  answers.clear();
}

}  // namespace

struct NativeBatcher::State {
  std::string model_name, version_name;
  TextModel model;
  BatcherSettings settings;
  std::shared_ptr<Lanes> lanes;
  std::shared_ptr<EventSink> events;
  bool has_narrow = false;
  int lane_count = 0;  // lanes this version uses (the first engine_concurrency); 0: wide threads do everything
  size_t queue_behind_at = 0;

  // Guards every member below and each Call's progress (finished, remaining, result); never held while an
  // engine runs or a done callback is called. Taken before Lanes::Impl::mutex, never after.
  std::mutex mutex;
  std::condition_variable idle;  // Idle() became true: Close() may return
  std::vector<Item> pending;
  int admitted = 0;       // texts admitted, not yet in a batch (tokenizing + pending)
  int running_texts = 0;  // texts in batches handed to the engine
  int in_flight = 0;      // batches handed to a lane or wide thread, not finished
  int submitting = 0;     // Submit()s between admission and queueing (they read the tokenizer)
  int delivering = 0;     // finished batches whose answers are being sent
  bool wide_running = false;
  bool closed = false;
  std::vector<int> lane_load;  // this version's batches per lane: running + queued
  Throughput throughput;
  Clock::time_point drained_at;  // when the last run finished, or the engine went busy after being idle

  bool Idle() const { return in_flight == 0 && submitting == 0 && delivering == 0; }

  // The session of the next run (true: narrow), or nullopt while the engine has no room for it. A call that finds
  // the engine idle and nothing queued runs alone on the wide (multi-threaded) session, which sets unloaded
  // latency; anything that had to queue runs on the narrow one, up to engine_concurrency runs side by side. Under
  // load that keeps every core on its own batch: runs of a multi-threaded session wait at every operator for
  // whichever of their threads was preempted, and leave the other core idle.
  std::optional<bool> Lane(bool queued) const {
    if (wide_running) return std::nullopt;
    const int concurrency = settings.engine_concurrency;
    if (in_flight >= concurrency) {
      // Queue one batch behind a running lane batch once the pending texts fill the sort window: the batch
      // chosen now is the one chosen when that lane frees. Never beside a lone run (not on a lane).
      const bool behind = queued && lane_count > 0 && in_flight < 2 * concurrency &&
                          std::accumulate(lane_load.begin(), lane_load.end(), 0) == in_flight &&
                          pending.size() >= queue_behind_at;
      if (!behind) return std::nullopt;
    }
    if (!has_narrow) return false;
    return in_flight != 0 || queued;
  }

  void Start(bool narrow, int texts) {
    if (in_flight == 0) drained_at = Clock::now();
    ++in_flight;
    running_texts += texts;
    wide_running = !narrow && has_narrow;  // a wide run holds every intra-op thread: nothing beside it
  }

  void Stop(int texts) {
    --in_flight;
    running_texts -= texts;
    wide_running = false;
  }

  void Drained(int texts) {
    const Clock::time_point now = Clock::now();
    throughput.Observe(texts, std::chrono::duration<double>(now - drained_at).count());
    drained_at = now;
  }

  // Answers `call` with an error (once) and drops its texts still pending.
  void Fail(const CallHandle& call, Code code, std::string message, Answers& answers) {
    if (call->finished) return;
    call->finished = true;
    const size_t before = pending.size();
    pending.erase(std::remove_if(pending.begin(), pending.end(), [&](const Item& item) { return item.call == call; }),
                  pending.end());
    admitted -= static_cast<int>(before - pending.size());
    InferResult result;
    result.code = code;
    result.message = std::move(message);
    result.tokenize_s = call->result.tokenize_s;
    answers.push_back({call, std::move(result)});
  }

  void Expire(Clock::time_point now, Answers& answers) {
    std::vector<CallHandle> expired;
    for (const Item& item : pending) {
      if (item.call->Expired(now) && std::find(expired.begin(), expired.end(), item.call) == expired.end()) {
        expired.push_back(item.call);
      }
    }
    for (const CallHandle& call : expired) Fail(call, Code::kDeadlineExceeded, kExpiredQueued, answers);
  }

  void Event(int texts, int padded, int real, double engine_s, bool narrow) {
    events->Push(BatchEvent{model_name, version_name, texts, padded, real, engine_s, narrow ? "narrow" : "wide"});
  }

  int PickSlot() const {
    int best = 0, best_global = lanes->impl()->Load(0);
    for (int slot = 1; slot < lane_count; ++slot) {
      const int global = lanes->impl()->Load(slot);
      const auto i = static_cast<size_t>(slot);
      if (lane_load[i] < lane_load[static_cast<size_t>(best)] ||
          (lane_load[i] == lane_load[static_cast<size_t>(best)] && global < best_global)) {
        best = slot;
        best_global = global;
      }
    }
    return best;
  }

  // Batches for every lane with room. Under `mutex`.
  void Dispatch(const std::shared_ptr<NativeBatcher>& self, Answers& answers) {
    std::optional<bool> lane;
    while (!pending.empty() && (lane = Lane(true))) {
      const Clock::time_point now_tp = Clock::now();
      Expire(now_tp, answers);
      if (pending.empty()) return;
      std::vector<PendingText> keys;
      keys.reserve(pending.size());
      for (const Item& item : pending) keys.push_back({static_cast<int>(item.ids.size()), item.enqueued_at});
      const std::vector<size_t> chosen = ChooseBatch(keys, Seconds(now_tp), settings.policy);
      auto batch = std::make_shared<Batch>();
      batch->narrow = *lane;
      std::vector<bool> picked(pending.size(), false);
      for (size_t i : chosen) {
        picked[i] = true;
        batch->items.push_back(std::move(pending[i]));
      }
      size_t kept = 0;
      for (size_t i = 0; i < pending.size(); ++i) {
        if (picked[i]) continue;
        if (kept != i) pending[kept] = std::move(pending[i]);  // never self-move: it would empty the ids
        ++kept;
      }
      pending.resize(kept);
      const int texts = static_cast<int>(batch->items.size());
      admitted -= texts;
      Start(batch->narrow, texts);
      if (lane_count > 0) {
        batch->slot = PickSlot();
        ++lane_load[static_cast<size_t>(batch->slot)];
      }
      if (!lanes->impl()->Post(batch->slot, [this, self, batch] { RunBatch(self, *batch); })) {
        Stop(texts);  // the lanes stopped: the server is going down
        if (batch->slot >= 0) --lane_load[static_cast<size_t>(batch->slot)];
        for (const Item& item : batch->items) Fail(item.call, Code::kUnavailable, kShuttingDown, answers);
        for (const Item& item : pending) Fail(item.call, Code::kUnavailable, kShuttingDown, answers);
        return;
      }
    }
  }

  // After a run: dispatch the next batch first, then send the answers (the engine never waits for them).
  void DispatchAndDeliver(const std::shared_ptr<NativeBatcher>& self, std::unique_lock<std::mutex>& lock,
                          Answers& answers) {
    if (!closed) Dispatch(self, answers);
    ++delivering;
    lock.unlock();
    Deliver(answers);
    lock.lock();
    --delivering;
    if (Idle()) idle.notify_all();
  }

  // One queued batch, on a lane (or wide) thread: run it, answer the calls it completed, dispatch the next.
  void RunBatch(const std::shared_ptr<NativeBatcher>& self, Batch& batch) {
    Answers answers;
    std::vector<const Item*> kept;
    {
      // A batch queued behind another waited for it: texts whose call ended or whose deadline passed
      // meanwhile never reach the engine.
      std::lock_guard<std::mutex> lock(mutex);
      const Clock::time_point now = Clock::now();
      for (const Item& item : batch.items) {
        if (item.call->Expired(now)) Fail(item.call, Code::kDeadlineExceeded, kExpiredQueued, answers);
      }
      for (const Item& item : batch.items) {
        if (!item.call->finished) kept.push_back(&item);
      }
    }
    Run run;
    if (!kept.empty()) {
      std::vector<const std::vector<int64_t>*> rows;
      for (const Item* item : kept) rows.push_back(&item->ids);
      run = RunRows(model, batch.narrow, rows);
    }
    const double started = run.started;
    const double engine_s = run.engine_s;
    std::unique_lock<std::mutex> lock(mutex);
    Stop(static_cast<int>(batch.items.size()));
    if (batch.slot >= 0) --lane_load[static_cast<size_t>(batch.slot)];
    if (run.failed) {
      for (const Item* item : kept) Fail(item->call, run.code, "inference failed: " + run.error, answers);
    } else if (!kept.empty()) {
      const int texts = static_cast<int>(kept.size());
      Drained(texts);
      Event(texts, run.padded_tokens, run.real_tokens, engine_s, batch.narrow);
      const auto columns = static_cast<size_t>(model.columns);
      std::unordered_set<const Call*> seen;
      for (size_t row = 0; row < kept.size(); ++row) {
        const Item& item = *kept[row];
        Call& call = *item.call;
        if (call.finished) continue;
        // Queued until the engine started it: a batch queued behind a lane's running one waits there too.
        call.result.queue_s = std::max(call.result.queue_s, started - item.enqueued_at);
        std::copy_n(run.logits.begin() + static_cast<std::ptrdiff_t>(row * columns), columns,
                    call.result.logits.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(item.row) * columns));
        if (seen.insert(&call).second) {  // a call split over batches pays each batch once
          call.result.engine_s += engine_s;
          call.result.batch_size = std::max(call.result.batch_size, texts);
        }
        if (--call.remaining == 0) {
          call.finished = true;
          answers.push_back({item.call, std::move(call.result)});
        }
      }
    }
    DispatchAndDeliver(self, lock, answers);
  }

  // A lone call on a wide thread: nothing queued, so nothing to batch with. `on_caller`: on the submitting thread
  // instead (Submit's may_run_here), whose slot goes back before the answer, so that the caller's next call,
  // which may come as soon as it has the answer, can take it again.
  void RunAlone(const std::shared_ptr<NativeBatcher>& self, const CallHandle& call,
                const std::vector<std::vector<int64_t>>& ids, bool narrow, bool on_caller = false) {
    std::vector<const std::vector<int64_t>*> rows;
    for (const auto& row : ids) rows.push_back(&row);
    const int texts = static_cast<int>(ids.size());
    Run run = RunSplit(model, narrow, rows, settings.policy);
    if (on_caller) lanes->impl()->ReleaseCallerRun();
    Answers answers;
    std::unique_lock<std::mutex> lock(mutex);
    Stop(texts);
    if (run.failed) {
      Fail(call, run.code, "inference failed: " + run.error, answers);
    } else {
      Drained(texts);
      for (const Run::Part& part : run.parts) {
        Event(part.texts, part.padded_tokens, part.real_tokens, part.engine_s, narrow);
      }
      if (!call->finished) {
        call->finished = true;
        InferResult& result = call->result;
        result.logits = std::move(run.logits);
        result.engine_s = run.engine_s;
        result.batch_size = 0;  // the largest run's
        for (const Run::Part& part : run.parts) result.batch_size = std::max(result.batch_size, part.texts);
        answers.push_back({call, std::move(result)});
      }
    }
    DispatchAndDeliver(self, lock, answers);
  }

  // A refusal (UNAVAILABLE once closed; RESOURCE_EXHAUSTED, with the queued work's drain time as the retry hint), or
  // nullopt to admit n texts. No texts and an empty queue always admit: the per-request maximum, not the queue,
  // bounds what one call may send.
  // max_queue_items bounds the texts held in memory; within it, a call with a deadline is admitted when the
  // work ahead of it plus its own should finish before the deadline, one without when the work ahead is under
  // max_queue_wait_s. The expected work is the queued and running texts over the rate the queue drains at.
  std::optional<InferResult> Admission(int n, std::optional<Clock::time_point> deadline, Clock::time_point now) const {
    if (closed) {
      InferResult refusal;
      refusal.code = Code::kUnavailable;
      refusal.message = kShuttingDown;
      return refusal;
    }
    if (n == 0 || admitted == 0) return std::nullopt;
    const double ahead_s = throughput.WaitS(admitted + running_texts);
    InferResult refusal;
    refusal.code = Code::kResourceExhausted;
    refusal.retry_after_s = ahead_s;
    const std::string queued = "server busy: " + std::to_string(admitted) + " texts queued for this model version";
    if (admitted + n > settings.max_queue_items) {
      refusal.message = queued + " (limit " + std::to_string(settings.max_queue_items) + "); retry with backoff";
      return refusal;
    }
    if (deadline) {
      const double left_s = std::chrono::duration<double>(*deadline - now).count();
      const double done_s = ahead_s + throughput.WaitS(n);
      if (done_s <= kDeadlineShare * left_s) return std::nullopt;
      refusal.message = queued + ", " +
                        Format("about %.0f ms of work including this call's, which has %.0f ms left", done_s * 1000,
                               std::max(left_s, 0.0) * 1000) +
                        "; retry with backoff or a longer deadline";
      return refusal;
    }
    if (settings.max_queue_wait_s != 0 && ahead_s > settings.max_queue_wait_s) {
      refusal.message = queued + ", " +
                        Format("about %.0f ms of work (limit %.0f ms)", ahead_s * 1000,
                               settings.max_queue_wait_s * 1000) +
                        "; retry with backoff";
      return refusal;
    }
    return std::nullopt;
  }
};

NativeBatcher::NativeBatcher(std::string model, std::string version, TextModel model_ref, BatcherSettings settings,
                             std::shared_ptr<Lanes> lanes, std::shared_ptr<EventSink> events)
    : model_(std::move(model)), version_(std::move(version)), state_(std::make_unique<State>()) {
  settings.policy.Validate();
  if (settings.engine_concurrency < 1) throw OptionError("engine_concurrency must be >= 1");
  if (settings.max_queue_items < 1) throw OptionError("max_queue_items must be >= 1");
  if (settings.max_queue_wait_s < 0) throw OptionError("max_queue_wait_s must be >= 0");
  if (model_ref.wide == nullptr) throw OptionError("a native batcher needs a wide engine");
  if (model_ref.columns < 1) throw OptionError("columns must be >= 1");
  if (model_ref.output.empty()) throw OptionError("a native batcher needs the name of the model's output");
  if (!lanes || !events) throw OptionError("a native batcher needs lanes and an event sink");
  State& s = *state_;
  s.model_name = model_;
  s.version_name = version_;
  s.model = model_ref;
  s.settings = settings;
  s.lanes = std::move(lanes);
  s.events = std::move(events);
  // Lanes only pay when runs go side by side; with one at a time the wide session does everything.
  s.has_narrow = model_ref.narrow != nullptr && settings.engine_concurrency > 1;
  s.lane_count = s.lanes->lanes() >= settings.engine_concurrency ? settings.engine_concurrency : 0;
  s.lane_load.assign(static_cast<size_t>(s.lane_count), 0);
  s.queue_behind_at = static_cast<size_t>(settings.policy.sort_window ? settings.policy.sort_window
                                                                      : settings.policy.max_batch_size);
}

NativeBatcher::~NativeBatcher() { Close(); }

NativeBatcher::CallHandle NativeBatcher::Submit(const std::vector<std::string_view>& texts,
                                                std::optional<Clock::time_point> deadline, InferDone done,
                                                bool may_run_here) {
  if (state_->model.tokenizer == nullptr && !texts.empty()) {
    InferResult refusal;
    refusal.code = Code::kInternal;
    refusal.message = "model version " + version_ + " has no native tokenizer: its texts must come as token ids";
    done(std::move(refusal));
    return nullptr;
  }
  std::optional<Admitted> admitted = Admit(static_cast<int>(texts.size()), deadline, std::move(done));
  if (!admitted) return nullptr;
  CallHandle call = admitted->call;
  const Clock::time_point started = Clock::now();
  std::vector<std::vector<int64_t>> ids(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) state_->model.tokenizer->Encode(texts[i], ids[i]);
  const double tokenize_s = std::chrono::duration<double>(Clock::now() - started).count();
  Enqueue(std::move(*admitted), std::move(ids), tokenize_s, may_run_here);
  return call;
}

NativeBatcher::CallHandle NativeBatcher::SubmitIds(std::vector<std::vector<int64_t>> ids,
                                                   std::optional<Clock::time_point> deadline, InferDone done,
                                                   double tokenize_s) {
  for (auto& row : ids) {
    if (row.empty()) row.push_back(state_->model.pad_id);  // the engine needs one token per row
  }
  std::optional<Admitted> admitted = Admit(static_cast<int>(ids.size()), deadline, std::move(done));
  if (!admitted) return nullptr;
  CallHandle call = admitted->call;
  Enqueue(std::move(*admitted), std::move(ids), tokenize_s, /*may_run_here=*/false);
  return call;
}

std::optional<NativeBatcher::Admitted> NativeBatcher::Admit(int n, std::optional<Clock::time_point> deadline,
                                                            InferDone done) {
  State& s = *state_;
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->deadline = deadline;
  std::optional<bool> lone;
  std::optional<InferResult> refusal;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    refusal = s.Admission(n, deadline, Clock::now());
    if (!refusal && n == 0) {
      refusal = InferResult{};  // nothing to run: an empty OK answer
      refusal->labels = s.model.columns;
    }
    if (!refusal) {
      if (s.admitted == 0) lone = s.Lane(false);
      if (lone) {
        s.Start(*lone, n);
      } else {
        s.admitted += n;
      }
      ++s.submitting;
    }
  }
  if (refusal) {
    call->finished = true;
    call->done(std::move(*refusal));  // on the caller's thread, no lock held
    return std::nullopt;
  }
  return Admitted{std::move(call), lone};
}

void NativeBatcher::Enqueue(Admitted admitted, std::vector<std::vector<int64_t>> ids, double tokenize_s,
                            bool may_run_here) {
  State& s = *state_;
  const CallHandle& call = admitted.call;
  const std::optional<bool> lone = admitted.lone;
  const int n = static_cast<int>(ids.size());
  const Clock::time_point tokenized = Clock::now();
  const double now = Seconds(tokenized);

  Answers answers;
  std::unique_lock<std::mutex> lock(s.mutex);
  --s.submitting;
  call->result.tokenize_s = tokenize_s;
  call->result.rows = n;
  call->result.labels = s.model.columns;
  call->result.logits.assign(static_cast<size_t>(n) * static_cast<size_t>(s.model.columns), 0.0f);
  call->remaining = n;
  auto refuse = [&](Code code, const char* message) {
    if (lone) {
      s.Stop(n);
    } else {
      s.admitted -= n;
    }
    s.Fail(call, code, message, answers);
    if (lone && !s.closed) s.Dispatch(shared_from_this(), answers);  // calls may have queued behind this one
  };
  if (s.closed) {
    refuse(Code::kUnavailable, kShuttingDown);
  } else if (call->finished) {
    refuse(Code::kCancelled, kCancelled);  // cancelled while its texts were tokenized: nothing left to answer
  } else if (call->Expired(tokenized)) {
    refuse(Code::kDeadlineExceeded, kExpiredBefore);
  } else if (lone) {
    auto self = shared_from_this();
    const bool narrow = *lone;
    if (may_run_here && !narrow && s.lanes->impl()->ClaimCallerRun()) {
      // Saves waking a sleeping wide thread on an idle vCPU for every lone call (0.18 ms at c=1, tiny model).
      lock.unlock();
      s.RunAlone(self, call, ids, narrow, /*on_caller=*/true);
      return;
    }
    auto shared_ids = std::make_shared<std::vector<std::vector<int64_t>>>(std::move(ids));
    State* state = &s;
    if (!s.lanes->impl()->Post(-1, [state, self, call, shared_ids, narrow] {
          state->RunAlone(self, call, *shared_ids, narrow);
        })) {
      refuse(Code::kUnavailable, kShuttingDown);
    }
  } else {
    for (int row = 0; row < n; ++row) {
      s.pending.push_back(Item{call, row, std::move(ids[static_cast<size_t>(row)]), now});
    }
    s.Dispatch(shared_from_this(), answers);
  }
  if (s.Idle()) s.idle.notify_all();
  lock.unlock();
  Deliver(answers);
}

std::optional<InferResult> NativeBatcher::Refusal(int n, std::optional<Clock::time_point> deadline) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->Admission(n, deadline, Clock::now());
}

void NativeBatcher::Cancel(const CallHandle& call) {
  if (!call) return;
  State& s = *state_;
  Answers answers;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.Fail(call, Code::kCancelled, kCancelled, answers);
  }
  Deliver(answers);
}

void NativeBatcher::Close() {
  State& s = *state_;
  Answers answers;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.closed) {
    s.closed = true;
    std::vector<CallHandle> queued;
    for (const Item& item : s.pending) queued.push_back(item.call);
    for (const CallHandle& call : queued) s.Fail(call, Code::kUnavailable, kShuttingDown, answers);
    s.admitted -= static_cast<int>(s.pending.size());  // none left: Fail dropped every call's texts
    s.pending.clear();
  }
  lock.unlock();
  Deliver(answers);
  lock.lock();
  s.idle.wait(lock, [&] { return s.Idle(); });
}

int NativeBatcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->admitted;
}

// ---- NativeVersion -------------------------------------------------------------------------------------

bool NativeVersion::Acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (draining_) return false;
  in_flight_.fetch_add(1);
  return true;
}

void NativeVersion::Release() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_flight_.fetch_sub(1) == 1) released_.notify_all();
}

bool NativeVersion::Drain(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  draining_ = true;
  return released_.wait_for(lock, std::chrono::duration<double>(std::max(timeout_s, 0.0)),
                            [&] { return in_flight_.load() == 0; });
}

}  // namespace ortserve
