#include "completions.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ortserve {

namespace {

int OpenEventFd() {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  return fd;
}

}  // namespace

Completions::Completions() : fd_(OpenEventFd()) {}

Completions::~Completions() { close(fd_); }

InferDone Completions::Callback(std::shared_ptr<Completions> self, uint64_t token) {
  return [self = std::move(self), token](InferResult&& result) {
    self->Push(Completion{token, std::move(result), std::nullopt});
  };
}

void Completions::Push(Completion&& done) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    was_empty = queue_.empty();
    queue_.push_back(std::move(done));
  }
  if (was_empty) {  // a non-empty queue has a wake-up pending already
    const uint64_t one = 1;
    while (write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
}

std::vector<Completion> Completions::Drain() {
  uint64_t count;
  while (read(fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  std::vector<Completion> out;
  std::lock_guard<std::mutex> lock(mutex_);
  out.swap(queue_);
  return out;
}

}  // namespace ortserve
