// Admission (see admission.h).
#include "admission.h"

#include <algorithm>
#include <cstdio>

#include "call.h"

namespace ortserve {

namespace {

std::string Format(const char* format, double a, double b) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, format, a, b);
  return buffer;
}

double DrainS(int64_t tokens, double tokens_per_s) {
  return tokens_per_s > 0 ? static_cast<double>(tokens) / tokens_per_s : 0.0;
}

}  // namespace

int64_t CallTokens(const std::vector<int>& lengths, const BatchPolicy& policy, const ShapeBuckets& buckets) {
  int64_t tokens = 0;
  for (const auto& [begin, end] : SplitRows(lengths, policy)) {
    const int longest = *std::max_element(lengths.begin() + static_cast<std::ptrdiff_t>(begin),
                                          lengths.begin() + static_cast<std::ptrdiff_t>(end));
    const auto [rows, width] = BucketShape(static_cast<int>(end - begin), longest, buckets);
    tokens += static_cast<int64_t>(rows) * width;
  }
  return tokens;
}

std::optional<Refusal> Admission(const QueueSnapshot& queue, const CallWork& call, std::optional<double> left_s,
                                 const AdmissionLimits& limits) {
  if (queue.closed) return Refusal{Code::kUnavailable, kShuttingDown, 0};
  if (call.texts == 0) return std::nullopt;
  if (left_s && *left_s <= 0) {
    return Refusal{Code::kDeadlineExceeded, call.default_budget ? kBudgetSpentBefore : kExpiredBefore, 0};
  }
  // What runs before this call: a bulk call waits for everything queued; an interactive one jumps the bulk texts.
  const int ahead_texts = call.bulk ? queue.queued_texts : queue.queued_texts - queue.queued_bulk_texts;
  const int64_t ahead_tokens = call.bulk ? queue.queued_tokens : queue.queued_tokens - queue.queued_bulk_tokens;
  const double ahead_s = DrainS(ahead_tokens + queue.running_tokens, queue.tokens_per_s);
  Refusal refusal;
  refusal.retry_after_s = ahead_s;
  const std::string queued = "server busy: " + std::to_string(ahead_texts) +
                             (call.bulk || queue.queued_bulk_texts == 0 ? "" : " interactive") +
                             " texts queued for this model version";
  if (ahead_texts > 0 && ahead_texts + call.texts > limits.max_queue_items) {
    refusal.message = queued + " (limit " + std::to_string(limits.max_queue_items) + "); retry with backoff";
    return refusal;
  }
  if (!left_s) return std::nullopt;
  const double done_s = ahead_s + DrainS(call.tokens, queue.tokens_per_s);
  if (done_s <= kDeadlineShare * *left_s) return std::nullopt;
  refusal.message = queued + ", " +
                    Format("about %.0f ms of work including this call's, which has %.0f ms left", done_s * 1000,
                           *left_s * 1000) +
                    (call.default_budget ? std::string(" of the server's default time budget (it sent no deadline); "
                                                       "retry with backoff, or send a longer deadline")
                                         : std::string("; retry with backoff or a longer deadline"));
  return refusal;
}

}  // namespace ortserve
