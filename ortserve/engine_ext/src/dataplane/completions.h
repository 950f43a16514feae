// Completions: how answers reach an asyncio event loop without a C++ thread ever taking the GIL. A done callback
// (any thread) queues the call's result under its token and, when the queue was empty, writes an eventfd; the
// loop watches the fd (loop.add_reader) and drains every queued result at once.
//
//   auto completions = std::make_shared<Completions>();
//   batcher->Submit(texts, deadline, Completions::Callback(completions, token));
//   ... fd readable ... for (Completion& done : completions->Drain()) resolve(done.token, done.result);
//
// A call started by the call path (call_path_bindings.cc) queues its reply's tensors instead of the values.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <mutex>
#include <utility>
#include <vector>

#include "call.h"
#include "infer_wire.h"

namespace ortserve {

struct Completion {
  uint64_t token = 0;
  InferResult result;
  std::optional<std::vector<ReplyTensor>> reply;  // set when the call was answered as a reply (OK or not)
};

class Completions {
 public:
  Completions();   // throws std::system_error when no eventfd can be had
  ~Completions();  // closes the fd
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  int fd() const { return fd_; }
  // A done callback that queues its result under `token`; it keeps the queue alive.
  static InferDone Callback(std::shared_ptr<Completions> self, uint64_t token);
  // Every result queued so far, oldest first; clears the fd's readiness first, so a result queued meanwhile
  // makes it readable again.
  std::vector<Completion> Drain();
  // Queues one answer (any thread).
  void Push(Completion&& done);

 private:
  const int fd_;
  std::mutex mutex_;  // guards queue_
  std::vector<Completion> queue_;
};

}  // namespace ortserve
