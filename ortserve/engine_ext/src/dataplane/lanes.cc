// The lane threads (see lanes.h).
#include "lanes.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#ifdef __linux__
#include <pthread.h>
#endif

#include "errors.h"

namespace ortserve {

namespace {

// What `top -H`, perf and the bench's per-thread CPU split show for the thread (Linux keeps 15 characters). Named
// by its creator, so the name is there once the constructor returns.
void NameThread(std::thread& thread, const std::string& name) {
#ifdef __linux__
  pthread_setname_np(thread.native_handle(), name.substr(0, 15).c_str());
#else
  (void)thread;
  (void)name;
#endif
}

}  // namespace

struct Lanes::Impl {
  struct Queue {
    std::deque<std::function<void()>> tasks;
    std::deque<std::function<void()>> idle;  // taken only while `tasks` is empty (Post's `idle`)
    std::condition_variable ready;
    bool empty() const { return tasks.empty() && idle.empty(); }
  };
  mutable std::mutex mutex;  // guards everything below but `threads`' contents (see lanes.h)
  std::vector<Queue> lanes;  // one thread each
  Queue wide;                // shared by the wide threads
  std::vector<int> load;     // per lane: tasks queued or running, over every version
  int busy = 0;              // tasks that are not idle ones, queued or running on any lane or wide thread
  int idle_queued = 0;       // idle tasks queued on any lane or wide thread, not started
  std::vector<std::thread> threads;
  bool stopping = false;
  bool paused = false;
  bool caller_running = false;  // a lone run on a submitting thread holds the slot

  // An idle task starts only while the engine has nothing else: no other task queued or running anywhere and no
  // caller's run (stopping: whatever is left runs).
  bool IdleMayStart() const { return stopping || (busy == 0 && !caller_running); }
  bool HasWork(const Queue& queue) const {
    return !queue.tasks.empty() || (!queue.idle.empty() && IdleMayStart());
  }

  void Loop(Queue& queue, int lane) {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      queue.ready.wait(lock, [&] { return (HasWork(queue) && !paused) || (stopping && queue.empty()); });
      if (queue.empty()) return;  // stopping, nothing left
      const bool idle = queue.tasks.empty();
      std::deque<std::function<void()>>& from = idle ? queue.idle : queue.tasks;
      std::function<void()> task = std::move(from.front());
      from.pop_front();
      if (idle) --idle_queued;
      lock.unlock();
      task();  // tasks catch their own exceptions
      task = nullptr;
      lock.lock();
      if (lane >= 0) --load[static_cast<size_t>(lane)];
      if (!idle && --busy == 0 && idle_queued > 0) WakeAll();  // idle tasks may start now
    }
  }

  void WakeAll() {
    for (Queue& queue : lanes) queue.ready.notify_all();
    wide.ready.notify_all();
  }
};

Lanes::Lanes(int lanes, int wide_threads) : impl_(std::make_shared<Impl>()) {
  if (lanes < 0) throw OptionError("lanes must be >= 0");
  if (wide_threads < 1) throw OptionError("wide_threads must be >= 1");
  impl_->lanes = std::vector<Impl::Queue>(static_cast<size_t>(lanes));
  impl_->load.assign(static_cast<size_t>(lanes), 0);
  for (int i = 0; i < lanes; ++i) {
    impl_->threads.emplace_back([impl = impl_, i] { impl->Loop(impl->lanes[static_cast<size_t>(i)], i); });
    NameThread(impl_->threads.back(), "ortserve-lane" + std::to_string(i));
  }
  for (int i = 0; i < wide_threads; ++i) {
    impl_->threads.emplace_back([impl = impl_] { impl->Loop(impl->wide, -1); });
    NameThread(impl_->threads.back(), "ortserve-wide" + std::to_string(i));
  }
}

Lanes::~Lanes() { Stop(); }

void Lanes::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
    impl_->paused = false;
    impl_->WakeAll();
    threads.swap(impl_->threads);
  }
  for (std::thread& thread : threads) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();  // Stop() from one of our own tasks: it ends once that task returns
    } else {
      thread.join();
    }
  }
}

int Lanes::lanes() const { return static_cast<int>(impl_->lanes.size()); }

void Lanes::Pause() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (!impl_->stopping) impl_->paused = true;
}

void Lanes::Resume() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->paused = false;
  impl_->WakeAll();
}

bool Lanes::Post(int lane, std::function<void()> task, bool idle) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->stopping) return false;
  Impl::Queue& queue = lane < 0 ? impl_->wide : impl_->lanes[static_cast<size_t>(lane)];
  (idle ? queue.idle : queue.tasks).push_back(std::move(task));
  (idle ? impl_->idle_queued : impl_->busy) += 1;
  if (lane >= 0) ++impl_->load[static_cast<size_t>(lane)];
  queue.ready.notify_one();
  return true;
}

void Lanes::Loads(int n, std::vector<int>& out) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  out.assign(impl_->load.begin(), impl_->load.begin() + n);
}

bool Lanes::ClaimCallerRun() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->stopping || impl_->paused || impl_->caller_running) return false;
  impl_->caller_running = true;
  return true;
}

void Lanes::ReleaseCallerRun() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->caller_running = false;
  if (impl_->busy == 0 && impl_->idle_queued > 0) impl_->WakeAll();  // idle tasks may start now
}

}  // namespace ortserve
