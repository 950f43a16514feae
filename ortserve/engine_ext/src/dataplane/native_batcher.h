// The batcher: the process's one queue, batch policy, admission, lanes and deadlines. Every ModelInfer reaches
// it, whichever front end received it: the native front end submits texts (tokenized here by the C++ WordPiece),
// the Python front end texts or token ids (a version on the HF tokenizer). One NativeBatcher per loaded version;
// lane threads shared by every version (Lanes).
//
//   auto call = batcher->Submit(texts, deadline, done);   // tokenizes here, admits or refuses, queues
//   auto call = batcher->SubmitIds(ids, deadline, done);  // already tokenized
//   batcher->Cancel(call);                                // the client went away: its texts leave the queue
//   batcher->Close();                                     // queued calls get UNAVAILABLE; waits running batches
//
// A call that finds the engine idle and nothing queued runs alone on the wide (multi-threaded) session at once,
// split into the runs SplitRows allows; anything that had to queue runs on the narrow (one-thread) session, up to
// engine_concurrency batches side by side, chosen by ChooseBatch; a lane that finishes a batch picks its next one
// itself before answering the finished one. Admission (Admission()): an empty queue always admits; otherwise a call
// with a deadline is admitted when the work ahead of it plus its own would finish before its deadline, a call
// without one when that work is under max_queue_wait_s; max_queue_items bounds the queued texts either way.
// Deadlines and cancellation: such texts never reach the engine. docs/architecture.md states the contract.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batch_policy.h"
#include "engine.h"
#include "events.h"
#include "status.h"
#include "wordpiece.h"

namespace ortserve {

using Clock = std::chrono::steady_clock;

// What one version's batches run on. Borrowed: the owner (Python's NativeTextModel object) keeps them alive
// until Close() returned.
struct TextModel {
  const Engine* wide = nullptr;
  const Engine* narrow = nullptr;      // nullptr: one session does everything
  const WordPiece* tokenizer = nullptr;  // nullptr: the version takes token ids only (SubmitIds)
  std::string output = "logits";        // the graph output every call gets, float32 [rows, columns]
  int columns = 0;                      // its width: the labels of a classifier, the dimension of an embedding
  int64_t pad_id = 0;
  bool token_types = false;  // the graph takes token_type_ids (zeros)
  ShapeBuckets buckets;      // pad each batch up to this ladder (GPU); empty: to its longest text only
};

// One batch through the engine, the one padding rule of every run: each row padded with pad_id to the longest
// (then up to the shape ladder), mask 1/0, token_type_ids zeros when the graph takes them. Returns the model's
// output for the rows, float32 [rows, columns] row-major. Throws what the engine throws (EngineError, ...).
std::vector<float> RunEngine(const TextModel& model, bool narrow,
                             const std::vector<const std::vector<int64_t>*>& rows);

// Defaults: service/config.Settings' (held equal by tests/service/test_settings_defaults.py).
struct BatcherSettings {
  BatchPolicy policy;
  int max_queue_items = 4096;
  double max_queue_wait_s = 0.25;  // 0: no bound on expected wait
  int engine_concurrency = 2;
};

struct InferResult {
  Code code = Code::kOk;
  std::string message;        // for the caller; "" on OK
  double retry_after_s = 0;   // RESOURCE_EXHAUSTED: the queued work's drain time
  std::vector<float> logits;  // rows x labels, row-major, in the call's text order
  int rows = 0;
  int labels = 0;             // columns per row (TextModel::columns)
  double tokenize_s = 0, queue_s = 0, engine_s = 0;
  int batch_size = 0;
};

using InferDone = std::function<void(InferResult&&)>;

// Threads that run batches, shared by every version: `lanes` one-at-a-time lane threads for queued batches and
// `wide_threads` threads for a lone call's run on the wide session.
class Lanes {
 public:
  Lanes(int lanes, int wide_threads);
  ~Lanes();  // Stop()
  void Stop();  // runs what is queued, then joins
  int lanes() const;
  // While paused, no thread starts a new task (running ones finish). Lets tests hold the engine "busy"
  // deterministically, without relying on how long a run takes. Stop() resumes.
  void Pause();
  void Resume();
  // Implementation-defined members follow (task queues per lane, threads).
  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  // Shared with the threads: the last owner may drop a Lanes from one of its own tasks (a batcher's last
  // reference); that thread then outlives ~Lanes and must still find its queue.
  std::shared_ptr<Impl> impl_;
};

class NativeBatcher : public std::enable_shared_from_this<NativeBatcher> {
 public:
  struct Call;  // one Submit: its texts' rows, deadline, done, progress
  using CallHandle = std::shared_ptr<Call>;

  // Throws OptionError for bad settings (BatchPolicy::Validate's messages, engine_concurrency >= 1, ...).
  NativeBatcher(std::string model, std::string version, TextModel model_ref, BatcherSettings settings,
                std::shared_ptr<Lanes> lanes, std::shared_ptr<EventSink> events);
  ~NativeBatcher();

  // Tokenizes `texts` on the calling thread, then admits and queues them. `done` runs exactly once: on this
  // thread for a refusal, else on a lane/wide thread (or in Cancel/Close). Returns the handle for Cancel.
  // `may_run_here`: a lone call on the wide session may run on the calling thread, before Submit returns (done
  // included), saving the wake of a sleeping wide thread; at most one such run per Lanes at a time, none while
  // they are paused or stopping. For callers whose thread may block for one run (the gRPC front end).
  CallHandle Submit(const std::vector<std::string_view>& texts, std::optional<Clock::time_point> deadline,
                    InferDone done, bool may_run_here = false);
  // Submit for texts tokenized by the caller (`tokenize_s`: what that took, reported in the result).
  CallHandle SubmitIds(std::vector<std::vector<int64_t>> ids, std::optional<Clock::time_point> deadline,
                       InferDone done, double tokenize_s = 0);
  // What Submit would answer at once for `n` texts with `deadline` as the queue stands (RESOURCE_EXHAUSTED,
  // UNAVAILABLE), or nullopt when it would admit them: lets a caller that tokenizes elsewhere skip that work for a
  // call that would be refused. Submit checks again (the queue moves meanwhile).
  std::optional<InferResult> Refusal(int n, std::optional<Clock::time_point> deadline) const;
  // The call ended on the client's side: its queued texts leave the queue; done(CANCELLED) unless done already.
  void Cancel(const CallHandle& call);
  // Refuses new calls (UNAVAILABLE), answers queued ones UNAVAILABLE, waits for running batches (and for their
  // answers to have been delivered). Idempotent. Never call it from a done callback (it would wait for itself).
  void Close();

  int queue_depth() const;  // texts admitted, not yet in a running batch
  const std::string& model() const { return model_; }
  const std::string& version() const { return version_; }

  struct State;  // implementation-defined (pending items, lane load, throughput), guarded by one mutex

 private:
  // Submit's two halves: admission (nullopt: refused, done already called) and, once tokenized, queueing.
  struct Admitted {
    CallHandle call;
    std::optional<bool> lone;  // set: runs alone at once (true: on the narrow session)
  };
  std::optional<Admitted> Admit(int n, std::optional<Clock::time_point> deadline, InferDone done);
  void Enqueue(Admitted admitted, std::vector<std::vector<int64_t>> ids, double tokenize_s, bool may_run_here);

  const std::string model_;
  const std::string version_;
  std::unique_ptr<State> state_;
};

// One version as the route table holds it: the batcher plus the in-flight count that is its lease (invariant 3:
// the manager closes the engines only once Drain() saw no call in flight).
class NativeVersion {
 public:
  explicit NativeVersion(std::shared_ptr<NativeBatcher> batcher) : batcher_(std::move(batcher)) {}
  // False once Drain() started: the caller must not use the version.
  bool Acquire();
  void Release();
  // Stops new leases and waits up to timeout_s for the in-flight count to reach 0; true when it did.
  bool Drain(double timeout_s);
  int in_flight() const { return in_flight_.load(); }
  NativeBatcher& batcher() const { return *batcher_; }

 private:
  std::shared_ptr<NativeBatcher> batcher_;
  std::mutex mutex_;
  std::condition_variable released_;
  std::atomic<int> in_flight_{0};
  bool draining_ = false;
};

}  // namespace ortserve
