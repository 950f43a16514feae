// A call and the batches its texts travel in: plain types the batcher moves between its queue, its lanes and the
// done callback. Nothing here locks: a Call's progress (finished, remaining, result) is guarded by the mutex of the
// batcher that admitted it (Batcher::State::mutex), and its answer is delivered with no lock held (Deliver).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "clock.h"
#include "status.h"

namespace ortserve {

// The messages of the answers a call gets without a run of its texts (admission.h's refusals use the first two).
constexpr char kShuttingDown[] = "model version is shutting down; retry";
constexpr char kExpiredQueued[] = "deadline exceeded while queued; the request never reached the engine";
constexpr char kExpiredBefore[] = "deadline exceeded before the request reached the engine";
// A call without a deadline has the server's default budget (default_timeout_ms): its messages say so.
constexpr char kBudgetSpentBefore[] =
    "the server's default time budget for a call without a deadline (default_timeout_ms) ran out before the request "
    "reached the engine; send a longer deadline";
constexpr char kBudgetSpentQueued[] =
    "the server's default time budget for a call without a deadline (default_timeout_ms) ran out while queued; the "
    "request never reached the engine: send a longer deadline";
constexpr char kCancelled[] = "call cancelled by the client";
constexpr char kShadowFull[] = "shadow copy dropped: the version's shadow queue is full";

// A call's time budget: the deadline it sent, else the server's default from its arrival (Batcher's BudgetOf).
struct TimeBudget {
  std::optional<Clock::time_point> deadline;  // none: no time bound
  bool server_default = false;                // `deadline` is the server's default_timeout_s, not the caller's
};

// One call's answer: its status, or the model's output for each text in call order.
struct InferResult {
  Code code = Code::kOk;
  std::string message;        // for the caller; "" on OK
  double retry_after_s = 0;   // RESOURCE_EXHAUSTED: the queued work's drain time
  std::vector<float> logits;  // rows x columns, row-major, in the call's text order
  int rows = 0;
  int columns = 0;            // values per row (TextModel::columns)
  double tokenize_s = 0, queue_s = 0, engine_s = 0;
  int batch_size = 0;
  int64_t tokens = 0;  // the tokens the model read for the call (special tokens in, an empty row's pad out)
};

// Runs exactly once per admitted or refused call, on whichever thread answers it, with no lock held.
using InferDone = std::function<void(InferResult&&)>;

// One Submit: its deadline, its answer as it fills in, and who to tell.
struct Call {
  InferDone done;
  std::optional<Clock::time_point> deadline;  // the caller's, else its arrival + the server's default budget
  bool default_budget = false;                // `deadline` is the server's default, not the caller's
  bool bulk = false;                          // queued whatever the load, batched after interactive texts
  bool shadow = false;                        // a shadow copy (Batcher::SubmitShadow): bulk, batched after it
  // Guarded by the batcher's mutex.
  bool finished = false;  // done() was called or is about to be: nothing more may touch `result`
  int remaining = 0;      // texts not answered yet
  InferResult result;

  bool Expired(Clock::time_point now) const { return deadline && now >= *deadline; }
  const char* ExpiredQueued() const { return default_budget ? kBudgetSpentQueued : kExpiredQueued; }
};

// What the front ends hold to cancel a call (Batcher::Cancel).
using CallHandle = std::shared_ptr<Call>;

// One queued text: row `row` of `call`.
struct Item {
  CallHandle call;
  int row = 0;
  std::vector<int64_t> ids;
  double enqueued_at = 0;  // Seconds() of Clock
  int second = 0;          // a pair: where its second text begins in ids (engine_run.h Row); 0: one text
};

// Texts chosen to run together on one lane (or a wide thread).
struct Batch {
  std::vector<Item> items;
  bool narrow = false;
  int slot = -1;    // lane index, -1 on the wide threads
  int tokens = 0;   // the padded tokens it will run (its share of the work admission counts as running)
  bool shadow = false;  // shadow copies' texts: an idle task on its lane (Lanes::Post)
  bool bulk = false;    // bulk texts (shadow copies' too): counted in Batcher::State::bulk_running
};

struct Answer {
  CallHandle call;
  InferResult result;
};
using Answers = std::vector<Answer>;

// Runs the done callbacks; the caller holds no lock.
inline void Deliver(Answers& answers) {
  for (Answer& answer : answers) answer.call->done(std::move(answer.result));
  answers.clear();
}

}  // namespace ortserve
