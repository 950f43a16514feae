// When a device run runs out of memory, send batches to the CPU session for a cool-down, then try the device
// again: a circuit breaker, so one oversized batch neither fails callers nor moves a version to CPU for good.
// Plain data and an explicit clock, so the decision is tested with plain values; the engine guards it.
#pragma once

#include <algorithm>

namespace ortserve {

class OomBreaker {
 public:
  explicit OomBreaker(double cooldown_s) : cooldown_s_(cooldown_s) {}

  // Whether a batch starting at `now` goes to the device (false while cooling down).
  bool UseDevice(double now) const { return now >= open_until_; }
  // A device run failed for memory at `now`: batches go to CPU until now + cooldown.
  void OnOutOfMemory(double now) { open_until_ = std::max(open_until_, now + cooldown_s_); }
  // Seconds of cool-down left at `now` (0 when batches go to the device).
  double RemainingS(double now) const { return std::max(0.0, open_until_ - now); }

 private:
  double cooldown_s_;
  double open_until_ = 0.0;
};

}  // namespace ortserve
