// One version's batcher state (Batcher::State, batcher.h): the queue, the load, the throughput, and the books kept
// around the pure decisions (admission.h, lane_choice.h, batch_policy.h), all guarded by its mutex. Included by
// batcher.cc alone.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "admission.h"
#include "batcher.h"
#include "lane_choice.h"

namespace ortserve {

// Seconds from `now` to `deadline`; none without one.
inline std::optional<double> LeftS(std::optional<Clock::time_point> deadline, Clock::time_point now) {
  if (!deadline) return std::nullopt;
  return std::chrono::duration<double>(*deadline - now).count();
}

struct Batcher::State {
  // Set by the constructor, read-only after.
  std::string model_name, version_name;
  TextModel model;
  BatcherSettings settings;
  AdmissionLimits limits;
  LaneConfig lane_config;
  std::shared_ptr<Lanes> lanes;
  std::shared_ptr<EventSink> events;

  // Guards every member below and each admitted Call's progress (finished, remaining, result); never held while an
  // engine runs or a done callback is called. Taken before Lanes' mutex, never after.
  mutable std::mutex mutex;
  std::condition_variable idle;  // Idle() became true: Close() may return
  std::vector<Item> pending;
  int queued_texts = 0;        // the texts in `pending`
  int queued_bulk = 0;         // those of bulk calls
  int64_t queued_bulk_tokens = 0;  // their tokens
  int queued_shadow = 0;       // of the bulk texts, those of shadow copies
  int bulk_running = 0;        // runs of bulk texts in flight (shadow copies' included)
  std::optional<Clock::time_point> interactive_at;  // when the last interactive call was admitted
  int64_t queued_tokens = 0;   // their tokens
  int64_t running_tokens = 0;  // padded tokens of the runs in flight
  int in_flight = 0;           // runs handed to a lane, a wide thread or the caller, not finished
  int submitting = 0;          // Submit()s tokenizing (they read the tokenizer, which Close() lets go)
  int delivering = 0;          // finished runs whose answers are being sent
  bool wide_running = false;
  bool closed = false;
  std::vector<int> lane_load;  // this version's batches per lane: running + queued behind
  int on_lanes = 0;            // their sum
  std::vector<int> all_loads;  // PickLane's scratch: every version's batches per lane
  Throughput throughput;         // padded tokens per busy second
  Clock::time_point drained_at;  // when the last run finished, or the engine went busy after being idle

  bool Idle() const { return in_flight == 0 && submitting == 0 && delivering == 0; }

  // `budget`: the call's time budget; `bulk`: its class.
  std::optional<ortserve::Refusal> Check(int texts, int64_t tokens, const TimeBudget& budget, bool bulk,
                                         Clock::time_point now) const {
    QueueSnapshot queue{closed, queued_texts, queued_tokens, running_tokens, throughput.per_s()};
    queue.queued_bulk_texts = queued_bulk;
    queue.queued_bulk_tokens = queued_bulk_tokens;
    return Admission(queue, CallWork{texts, tokens, budget.server_default, bulk}, LeftS(budget.deadline, now),
                     limits);
  }

  // A shadow copy of `texts` texts is refused: shadow texts are queued and it would take them past
  // kShadowQueueRuns runs (Batcher::SubmitShadow).
  bool ShadowFull(int texts) const {
    return queued_shadow > 0 &&
           queued_shadow + texts > Batcher::kShadowQueueRuns * settings.policy.max_batch_size;
  }

  // A call's class: the caller's priority, else bulk from bulk_min_texts texts (batch_policy.h ChooseNext).
  bool IsBulk(int texts, std::optional<bool> bulk) const {
    return bulk.value_or(settings.bulk_min_texts > 0 && texts >= settings.bulk_min_texts);
  }

  std::optional<Session> Next(bool queued) const {
    // Only interactive texts queue a batch behind a running one: a bulk batch waits for a free lane, so that an
    // interactive call arriving meanwhile is the next one a lane takes.
    const size_t interactive = pending.size() - static_cast<size_t>(queued_bulk);
    if (queued && interactive == 0 && BulkYields()) return std::nullopt;
    return NextRun(EngineLoad{in_flight, wide_running, on_lanes, interactive}, queued, lane_config);
  }

  // The next run would be of bulk texts and one lane is kept for the interactive class: an interactive call came
  // within interactive_lane_s and bulk runs already hold every lane but one (BatcherSettings).
  bool BulkYields() const {
    const int concurrency = settings.engine_concurrency;
    if (concurrency < 2 || settings.interactive_lane_s <= 0 || !interactive_at) return false;
    if (bulk_running < concurrency - 1) return false;
    return std::chrono::duration<double>(Clock::now() - *interactive_at).count() < settings.interactive_lane_s;
  }

  void Start(Session session, int64_t tokens) {
    if (in_flight == 0) drained_at = Clock::now();
    ++in_flight;
    running_tokens += tokens;
    wide_running = session == Session::kWide && lane_config.has_narrow;  // it holds every intra-op thread
  }

  void Stop(int64_t tokens) {
    --in_flight;
    running_tokens -= tokens;
    wide_running = false;
  }

  void Drained(int64_t tokens) {
    const Clock::time_point now = Clock::now();
    throughput.Observe(tokens, std::chrono::duration<double>(now - drained_at).count());
    drained_at = now;
  }

  // Answers `call` with an error (once) and drops its texts still pending.
  void Fail(const CallHandle& call, Code code, std::string message, Answers& answers) {
    if (call->finished) return;
    call->finished = true;
    const auto dropped = std::stable_partition(pending.begin(), pending.end(),
                                               [&](const Item& item) { return item.call != call; });
    for (auto item = dropped; item != pending.end(); ++item) {
      --queued_texts;
      if (call->bulk) {
        --queued_bulk;
        queued_bulk_tokens -= static_cast<int64_t>(item->ids.size());
      }
      if (call->shadow) --queued_shadow;
      queued_tokens -= static_cast<int64_t>(item->ids.size());
    }
    pending.erase(dropped, pending.end());
    InferResult result;
    result.code = code;
    result.message = std::move(message);
    result.tokenize_s = call->result.tokenize_s;
    answers.push_back({call, std::move(result)});
  }

  void FailAll(const std::vector<Item>& items, Code code, const char* message, Answers& answers) {
    std::vector<CallHandle> calls;  // first: Fail erases from `pending`, which `items` may be
    for (const Item& item : items) calls.push_back(item.call);
    for (const CallHandle& call : calls) Fail(call, code, message, answers);
  }

  void Expire(Clock::time_point now, Answers& answers) {
    std::vector<CallHandle> expired;
    for (const Item& item : pending) {
      if (item.call->Expired(now) && std::find(expired.begin(), expired.end(), item.call) == expired.end()) {
        expired.push_back(item.call);
      }
    }
    for (const CallHandle& call : expired) Fail(call, Code::kDeadlineExceeded, call->ExpiredQueued(), answers);
  }

  void Event(int texts, int padded, int real, double engine_s, bool narrow) {
    events->Push(BatchEvent{model_name, version_name, texts, padded, real, engine_s, narrow ? "narrow" : "wide"});
  }

  // The next batch out of `pending`: ChooseNext's texts (interactive before bulk), taken out in their order.
  std::shared_ptr<Batch> Take(Clock::time_point now, Session session) {
    std::vector<PendingText> keys;
    keys.reserve(pending.size());
    for (const Item& item : pending) {
      keys.push_back({static_cast<int>(item.ids.size()), item.enqueued_at, item.call->bulk, item.call->shadow});
    }
    const std::vector<size_t> chosen = ChooseNext(keys, Seconds(now), settings.policy);
    auto batch = std::make_shared<Batch>();
    batch->narrow = session == Session::kNarrow;
    std::vector<bool> picked(pending.size(), false);
    int longest = 0;
    for (size_t i : chosen) {
      picked[i] = true;
      if (keys[i].bulk) {
        --queued_bulk;
        queued_bulk_tokens -= keys[i].length;
      }
      if (keys[i].shadow) {
        --queued_shadow;
        batch->shadow = true;  // ChooseNext serves one class at a time
      }
      batch->bulk = keys[i].bulk;
      longest = std::max(longest, keys[i].length);
      queued_tokens -= keys[i].length;
      batch->items.push_back(std::move(pending[i]));
    }
    size_t kept = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (picked[i]) continue;
      if (kept != i) pending[kept] = std::move(pending[i]);  // never self-move: it would empty the ids
      ++kept;
    }
    pending.resize(kept);
    queued_texts -= static_cast<int>(batch->items.size());
    const auto [rows, width] = BucketShape(static_cast<int>(batch->items.size()), longest, model.buckets);
    batch->tokens = rows * width;
    return batch;
  }

  // Batches for every lane with room.
  void Dispatch(const std::shared_ptr<Batcher>& self, Answers& answers) {
    std::optional<Session> session;
    while (!pending.empty() && (session = Next(true))) {
      const Clock::time_point now = Clock::now();
      Expire(now, answers);
      if (pending.empty()) return;
      std::shared_ptr<Batch> batch = Take(now, *session);
      Start(*session, batch->tokens);
      if (batch->bulk) ++bulk_running;
      if (lane_config.lanes > 0) {
        lanes->Loads(lane_config.lanes, all_loads);
        batch->slot = PickLane(lane_load, all_loads);
        ++lane_load[static_cast<size_t>(batch->slot)];
        ++on_lanes;
      }
      if (!lanes->Post(batch->slot, [this, self, batch] { RunBatch(self, *batch); }, /*idle=*/batch->shadow)) {
        Stop(batch->tokens);  // the lanes stopped: the server is going down
        if (batch->bulk) --bulk_running;
        if (batch->slot >= 0) {
          --lane_load[static_cast<size_t>(batch->slot)];
          --on_lanes;
        }
        FailAll(batch->items, Code::kUnavailable, kShuttingDown, answers);
        FailAll(pending, Code::kUnavailable, kShuttingDown, answers);
        return;
      }
    }
  }

  // After a run: dispatch the next batch first, then send the answers (the engine never waits for them).
  void DispatchAndDeliver(const std::shared_ptr<Batcher>& self, std::unique_lock<std::mutex>& lock,
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
  void RunBatch(const std::shared_ptr<Batcher>& self, Batch& batch) {
    Answers answers;
    std::vector<const Item*> kept;
    {
      // A batch queued behind another waited for it: texts whose call ended or whose deadline passed
      // meanwhile never reach the engine.
      std::lock_guard<std::mutex> lock(mutex);
      const Clock::time_point now = Clock::now();
      for (const Item& item : batch.items) {
        if (item.call->Expired(now)) Fail(item.call, Code::kDeadlineExceeded, item.call->ExpiredQueued(), answers);
      }
      for (const Item& item : batch.items) {
        if (!item.call->finished) kept.push_back(&item);
      }
    }
    Run run;
    if (!kept.empty()) {
      Rows rows;
      rows.reserve(kept.size());
      for (const Item* item : kept) rows.push_back({&item->ids, item->second});
      run = RunRows(model, batch.narrow, rows);
    }
    std::unique_lock<std::mutex> lock(mutex);
    Stop(batch.tokens);
    if (batch.bulk) --bulk_running;
    if (batch.slot >= 0) {
      --lane_load[static_cast<size_t>(batch.slot)];
      --on_lanes;
    }
    if (run.failed) {
      for (const Item* item : kept) Fail(item->call, run.code, "inference failed: " + run.error, answers);
    } else if (!kept.empty()) {
      const int texts = static_cast<int>(kept.size());
      Drained(run.padded_tokens);
      Event(texts, run.padded_tokens, run.real_tokens, run.engine_s, batch.narrow);
      const auto columns = static_cast<size_t>(model.columns);
      std::unordered_set<const Call*> seen;
      for (size_t row = 0; row < kept.size(); ++row) {
        const Item& item = *kept[row];
        Call& call = *item.call;
        if (call.finished) continue;
        // Queued until the engine started it: a batch queued behind a lane's running one waits there too.
        call.result.queue_s = std::max(call.result.queue_s, run.started - item.enqueued_at);
        std::copy_n(run.outputs.begin() + static_cast<std::ptrdiff_t>(row * columns), columns,
                    call.result.logits.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(item.row) * columns));
        if (seen.insert(&call).second) {  // a call split over batches pays each batch once
          call.result.engine_s += run.engine_s;
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

  // A lone call: nothing queued, so nothing to batch with. On a wide thread, or with `on_caller` on the submitting
  // thread (Submit's may_run_here), whose slot goes back before the answer, so that the caller's next call, which
  // may come as soon as it has the answer, can take it again. `tokens`: what Start counted for it.
  void RunAlone(const std::shared_ptr<Batcher>& self, const CallHandle& call,
                const std::vector<std::vector<int64_t>>& ids, const std::vector<int>& seconds, bool narrow,
                int64_t tokens, bool on_caller) {
    Rows rows;
    rows.reserve(ids.size());
    for (size_t r = 0; r < ids.size(); ++r) rows.push_back({&ids[r], seconds.empty() ? 0 : seconds[r]});
    Run run = RunSplit(model, narrow, rows, settings.policy);
    if (on_caller) lanes->ReleaseCallerRun();
    Answers answers;
    std::unique_lock<std::mutex> lock(mutex);
    Stop(tokens);
    if (run.failed) {
      Fail(call, run.code, "inference failed: " + run.error, answers);
    } else {
      Drained(run.padded_tokens);
      for (const Run::Part& part : run.parts) {
        Event(part.texts, part.padded_tokens, part.real_tokens, part.engine_s, narrow);
      }
      if (!call->finished) {
        call->finished = true;
        InferResult& result = call->result;
        result.logits = std::move(run.outputs);
        result.engine_s = run.engine_s;
        result.batch_size = 0;  // the largest run's
        for (const Run::Part& part : run.parts) result.batch_size = std::max(result.batch_size, part.texts);
        answers.push_back({call, std::move(result)});
      }
    }
    DispatchAndDeliver(self, lock, answers);
  }
};

}  // namespace ortserve
