// A served version's lease (see served_version.h).
#include "served_version.h"

#include <algorithm>
#include <chrono>

namespace ortserve {

bool ServedVersion::Acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (draining_) return false;
  in_flight_.fetch_add(1);
  return true;
}

void ServedVersion::Release() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_flight_.fetch_sub(1) == 1) released_.notify_all();
}

bool ServedVersion::Drain(double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  draining_ = true;
  return released_.wait_for(lock, std::chrono::duration<double>(std::max(timeout_s, 0.0)),
                            [&] { return in_flight_.load() == 0; });
}

}  // namespace ortserve
