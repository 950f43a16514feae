// Lanes: the threads that run batches, shared by every version of the process. `lanes` lane threads take one task
// at a time each, in the order posted to them (a batch queued behind a running one waits on its lane); `wide_threads`
// threads share one queue for lone calls' runs on the wide session. A task is any callable; it catches its own
// exceptions.
//
//   lanes->Post(slot, [..] { run the batch; });   // slot -1: a wide thread
//   if (lanes->ClaimCallerRun()) { run here; lanes->ReleaseCallerRun(); }
//
// One mutex guards every queue, the per-lane load, the count of busy (not idle) tasks, `stopping`, `paused` and the
// caller-run slot: a post is once per batch, far rarer than the work. The batcher takes its own mutex before this one, never after.
#pragma once

#include <functional>
#include <memory>
#include <vector>

namespace ortserve {

class Lanes {
 public:
  Lanes(int lanes, int wide_threads);  // throws OptionError (lanes >= 0, wide_threads >= 1)
  ~Lanes();                            // Stop()
  void Stop();                         // runs what is queued, then joins
  int lanes() const;

  // While paused, no thread starts a new task (running ones finish). Lets tests hold the engine "busy"
  // deterministically, without relying on how long a run takes. Stop() resumes.
  void Pause();
  void Resume();

  // Queues `task` on lane `lane` (-1: the wide threads). False once Stop() began: the task will never run.
  // `idle`: the lowest class (a shadow copy's batch): it starts only while no other task is queued or running on
  // any lane or wide thread and no caller's run holds the engine, so it delays the others by at most the idle
  // tasks already running.
  bool Post(int lane, std::function<void()> task, bool idle = false);
  // Tasks queued or running on each of the first `n` lanes, over every version, read under one lock.
  void Loads(int n, std::vector<int>& out) const;
  // The slot for one lone run on the caller's thread (Batcher::Submit's may_run_here); false while paused or
  // stopping (the run must wait, or never start, as a posted one would) or while another caller's run holds it.
  bool ClaimCallerRun();
  void ReleaseCallerRun();

 private:
  struct Impl;
  // Shared with the threads: the last owner may drop a Lanes from one of its own tasks (a batcher's last
  // reference); that thread then outlives ~Lanes and must still find its queue.
  std::shared_ptr<Impl> impl_;
};

}  // namespace ortserve
