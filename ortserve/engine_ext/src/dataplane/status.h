// The gRPC status codes the data plane answers with (numbers as in grpc::StatusCode), and their names as gRPC and
// the request log spell them.
#pragma once

namespace ortserve {

enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kInternal = 13,
  kUnavailable = 14,
};

constexpr const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kCancelled: return "CANCELLED";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case Code::kInternal: return "INTERNAL";
    case Code::kUnavailable: return "UNAVAILABLE";
  }
  return "UNKNOWN";
}

}  // namespace ortserve
