#include "events.h"

#include <algorithm>
#include <utility>

namespace ortserve {

EventSink::EventSink(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void EventSink::Push(Event event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_ && queue_.size() < capacity_) {
      queue_.push_back(std::move(event));
      pushed_.fetch_add(1, std::memory_order_release);
      // Notify under the lock: Close() and a destroying owner can't race the wake-up.
      ready_.notify_one();
      return;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<Event> EventSink::Drain(size_t max, double timeout_s) {
  std::vector<Event> out;
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] { return closed_ || !queue_.empty(); };
  if (timeout_s > 0) {
    ready_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready);
  }
  if (closed_) return out;
  const size_t n = std::min(max, queue_.size());
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return out;
}

bool EventSink::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

void EventSink::Close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  dropped_.fetch_add(queue_.size(), std::memory_order_relaxed);  // never drained: lost like a full queue's
  queue_.clear();
  ready_.notify_all();
}

}  // namespace ortserve
