// The native batcher: service/batcher.py's policy in C++, for the native front end. One NativeBatcher per
// loaded version; lane threads shared by every version (Lanes), like the Python server's lane pools.
//
//   auto call = batcher->Submit(texts, deadline, done);   // tokenizes here, admits or refuses, queues
//   batcher->Cancel(call);                                // the client went away: its texts leave the queue
//   batcher->Close();                                     // queued calls get UNAVAILABLE; waits running batches
//
// Same behaviour as the Python Batcher (the tests run both): a call that finds the engine idle and nothing
// queued runs alone on the wide (multi-threaded) session at once; anything that had to queue runs on the
// narrow (one-thread) session, up to engine_concurrency batches side by side, chosen by ChooseBatch; a lane
// that finishes a batch picks its next one itself before answering the finished one. Admission: past
// max_queue_items texts or max_queue_wait_s of expected work, RESOURCE_EXHAUSTED at once with the Python
// message; an empty queue always admits. Deadlines and cancellation: such texts never reach the engine.
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
#include "wordpiece.h"

namespace ortserve {

using Clock = std::chrono::steady_clock;

// gRPC status codes the batcher answers with (numbers as in grpc::StatusCode).
enum class Code : int { kOk = 0, kCancelled = 1, kDeadlineExceeded = 4, kResourceExhausted = 8, kInternal = 13,
                        kUnavailable = 14 };
const char* CodeName(Code code);  // "OK", "CANCELLED", ...

// What one version's batches run on. Borrowed: the owner (Python's NativeVersion object) keeps them alive
// until Close() returned.
struct TextModel {
  const Engine* wide = nullptr;
  const Engine* narrow = nullptr;  // nullptr: one session does everything
  const WordPiece* tokenizer = nullptr;
  int labels = 0;
  int64_t pad_id = 0;
  bool token_types = false;  // the graph takes token_type_ids (zeros)
  ShapeBuckets buckets;      // pad each batch up to this ladder (GPU); empty: to its longest text only
};

// Defaults: service/config.Settings' (held equal by tests/service/test_settings_defaults.py).
struct BatcherSettings {
  BatchPolicy policy;
  int max_queue_items = 128;
  double max_queue_wait_s = 0.25;  // 0: no bound on expected wait
  int engine_concurrency = 2;
};

struct InferResult {
  Code code = Code::kOk;
  std::string message;        // for the caller; "" on OK
  double retry_after_s = 0;   // RESOURCE_EXHAUSTED: the queued work's drain time
  std::vector<float> logits;  // rows x labels, row-major, in the call's text order
  int rows = 0;
  int labels = 0;
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
