// Admission: whether a call joins the queue or is answered at once. A pure function over a plain copy of the
// queue, taken under the batcher's mutex; tested with plain values (tests/dataplane/test_batch_policy.py).
//
// Work is counted in padded tokens, as the engine will run it: a call's texts after truncation to max_seq_len (the
// tokenizer's), in the runs SplitRows cuts them into, each padded to its longest row and up to the shape ladder
// (CallTokens); the queued texts by their tokens; the running batches by the padded tokens they run. Throughput
// turns work into seconds at the rate the engine drained padded tokens over its recent busy time. Counting texts
// instead let a call of 128 max_seq_len texts look like 128 short ones (issue 29: admitted, then past its deadline).
//
// - closed: UNAVAILABLE. No texts: admitted (an empty answer).
// - a deadline already passed: DEADLINE_EXCEEDED, before any work.
// - max_queue_items bounds the queued texts (memory), unless nothing is queued: what one call may send is bounded by
//   max_texts_per_request and the message size, not by the queue.
// - every call has a time budget: the deadline it sent (a gRPC deadline, the V2 `timeout` parameter, the HTTP
//   x-request-timeout-ms header), else the server's default_timeout_s from its arrival (CallWork::default_budget;
//   sized for batch clients, 600 s). One rule for both: admitted when the queued and running work plus its own should
//   finish within kDeadlineShare of the time it has left, refused at once (RESOURCE_EXHAUSTED) otherwise, an idle
//   engine included. With default_timeout_s 0 a call without a deadline has no time bound, only the memory bound.
// - an interactive call runs before every queued bulk text (batch_policy.h ChooseNext): the work ahead of it and the
//   memory bound count the interactive queue and the running batches alone; a bulk call counts everything.
// Every RESOURCE_EXHAUSTED carries the work ahead's drain time as its retry hint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batch_policy.h"
#include "status.h"

namespace ortserve {

// A call with a deadline is admitted when its expected completion is within this share of the time it has left: the
// rest absorbs the estimate's error (batch sizes and CPU vary) and the reply's way back. Admitting up to the deadline
// itself let calls at the edge finish just late, their engine time wasted.
constexpr double kDeadlineShare = 0.75;

// The queue as admission sees it.
struct QueueSnapshot {
  bool closed = false;
  int queued_texts = 0;        // admitted, not yet in a batch
  int64_t queued_tokens = 0;   // their tokens
  int64_t running_tokens = 0;  // padded tokens of the batches handed to a thread, not finished
  double tokens_per_s = 0;     // Throughput's rate; 0 before any run ended (no basis to refuse anyone)
  int queued_bulk_texts = 0;       // of queued_texts, those of bulk calls
  int64_t queued_bulk_tokens = 0;  // their tokens (in queued_tokens)
};

struct AdmissionLimits {
  int max_queue_items = 4096;
};

// A call's work.
struct CallWork {
  int texts = 0;
  int64_t tokens = 0;  // CallTokens of its rows; a lower bound (one a text) before they are tokenized
  bool default_budget = false;  // its time left is the server's default budget: it sent no deadline
  bool bulk = false;            // batched after every interactive text
};

struct Refusal {
  Code code = Code::kResourceExhausted;
  std::string message;
  double retry_after_s = 0;  // RESOURCE_EXHAUSTED: the work ahead's drain time
};

// The padded tokens of rows of these token counts, in the runs SplitRows cuts them into, each run padded to its
// longest row and up to the ladder (BucketShape): what the engine will run for them alone.
int64_t CallTokens(const std::vector<int>& lengths, const BatchPolicy& policy, const ShapeBuckets& buckets);

// nullopt: admit. `left_s`: the call's time left of its budget (none: no time bound).
std::optional<Refusal> Admission(const QueueSnapshot& queue, const CallWork& call, std::optional<double> left_s,
                                 const AdmissionLimits& limits);

}  // namespace ortserve
