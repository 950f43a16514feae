// Engine::GraphRunner: with cuda_graphs, the one thread every run goes through, and the device buffers it replays
// captured graphs on (engine.h declares it; engine_load.cc starts it, engine_runs.cc calls it, Close stops it).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine.h"
#include "errors.h"
#include "ort.h"

namespace ortserve {

// Every run with cuda_graphs goes through this one thread: ORT keeps captured graphs per calling thread, so graphs
// captured at warm-up are replayed only if later runs come from the same thread. Device buffers per input shape
// (graphs replay at fixed addresses) live here too, touched by that thread alone.
struct Engine::GraphRunner {
  struct Slot {
    int id = 0;
    std::vector<Ort::Value> inputs;   // device tensors the inputs are copied into
    std::vector<Ort::Value> outputs;  // device tensors the graph writes; empty until the first (plain) run
  };
  static constexpr size_t kMaxGraphs = 64;  // input shapes beyond this run without a graph

  explicit GraphRunner(const Engine& owner) : engine(owner) {
    thread = std::thread([this] { Loop(); });
  }
  ~GraphRunner() { Stop(); }

  template <typename F>
  auto Call(F&& work) -> decltype(work()) {
    // Shared: the task must outlive its own run on the runner thread, whenever the caller wakes.
    auto task = std::make_shared<std::packaged_task<decltype(work())()>>(std::forward<F>(work));
    auto result = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) throw EngineClosedError(engine.ClosedMessage());
      tasks.emplace_back([task] { (*task)(); });
    }
    wake.notify_one();
    return result.get();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) return;
      stopping = true;
    }
    wake.notify_one();
    if (thread.joinable()) thread.join();
  }

  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [this] { return stopping || !tasks.empty(); });
        if (tasks.empty()) break;
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
    slots.clear();  // device tensors go back to the session's arena before the session does
    device.reset();
  }

  Outputs Run(const std::vector<const InputView*>& ordered);

  const Engine& engine;
  std::unique_ptr<Ort::Allocator> device;  // the session's CUDA arena, created on the thread's first run
  std::map<std::vector<int64_t>, Slot> slots;
  int next_id = 1;  // 0 is ORT's default annotation, -1 "no graph"
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> tasks;
  bool stopping = false;
};

}  // namespace ortserve
