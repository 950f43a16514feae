// Admission: whether a call joins the queue or is answered at once. A pure function over a plain copy of the
// queue, taken under the batcher's mutex; tested with plain values (tests/engine/test_batch_policy.py).
//
// - closed: UNAVAILABLE. No texts, or nothing queued: admitted (what one call may send is bounded by
//   max_texts_per_request and the message size, not by the queue).
// - max_queue_items bounds the queued texts (memory).
// - a call with a deadline: admitted when the queued and running texts plus its own, over the rate the queue drains
//   at (Throughput), should finish within kDeadlineShare of the time it has left; refused at once
//   (RESOURCE_EXHAUSTED) otherwise.
// - a call without one: refused when the work ahead is over max_queue_wait_s (0: no bound).
// Every RESOURCE_EXHAUSTED carries the work ahead's drain time as its retry hint.
#pragma once

#include <optional>
#include <string>

#include "status.h"

namespace ortserve {

// A call with a deadline is admitted when its expected completion is within this share of the time it has left: the
// rest absorbs the estimate's error (batch sizes and CPU vary) and the reply's way back. Admitting up to the deadline
// itself let calls at the edge finish just late, their engine time wasted.
constexpr double kDeadlineShare = 0.75;

// The queue as admission sees it.
struct QueueSnapshot {
  bool closed = false;
  int queued_texts = 0;    // admitted, not yet in a batch
  int running_texts = 0;   // in batches handed to a thread, not finished
  double texts_per_s = 0;  // Throughput's rate; 0 before any run ended (no basis to refuse anyone)
};

struct AdmissionLimits {
  int max_queue_items = 4096;
  double max_queue_wait_s = 0.25;  // 0: no bound
};

struct Refusal {
  Code code = Code::kResourceExhausted;
  std::string message;
  double retry_after_s = 0;  // RESOURCE_EXHAUSTED: the work ahead's drain time
};

// nullopt: admit a call of `texts` texts. `left_s`: its time to its deadline (none: no deadline).
std::optional<Refusal> Admission(const QueueSnapshot& queue, int texts, std::optional<double> left_s,
                                 const AdmissionLimits& limits);

}  // namespace ortserve
