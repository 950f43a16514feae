// A served version: one version as the route tables hold it, its batcher plus the in-flight count that is its
// lease (invariant 3: the manager closes the engines only once Drain() saw no call in flight). Requests keep a
// version alive by holding a lease, never a lock.
//
//   if (!version->Acquire()) -> the version is draining: pass the call on
//   version->batcher().Submit(...); ... when answered: version->Release();
//
// `mutex_` guards `draining_` and orders Release's wake-up with Drain's wait; `in_flight_` is read without it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "batcher.h"

namespace ortserve {

class ServedVersion {
 public:
  explicit ServedVersion(std::shared_ptr<Batcher> batcher) : batcher_(std::move(batcher)) {}
  // False once Drain() started: the caller must not use the version.
  bool Acquire();
  void Release();
  // Stops new leases and waits up to timeout_s for the in-flight count to reach 0; true when it did.
  bool Drain(double timeout_s);
  int in_flight() const { return in_flight_.load(); }
  Batcher& batcher() const { return *batcher_; }

 private:
  std::shared_ptr<Batcher> batcher_;
  std::mutex mutex_;
  std::condition_variable released_;
  std::atomic<int> in_flight_{0};
  bool draining_ = false;
};

}  // namespace ortserve
