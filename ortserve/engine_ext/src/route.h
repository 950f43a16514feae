// Version choice for the native data path: the same bucket as service/router.py (blake2b, 8-byte digest,
// of "model NUL routing_key", big-endian, mod 10000) and a route table that Python replaces as one
// immutable snapshot on every swap (invariant 2: a call loads the pointer once and sees old or new).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ortserve {

class NativeVersion;  // native_batcher.h

constexpr int kBuckets = 10000;

// BLAKE2b (RFC 7693), unkeyed, with an `out_len`-byte digest (1..64).
std::vector<uint8_t> Blake2b(std::string_view data, size_t out_len);
int Bucket(std::string_view model, std::string_view routing_key);

// service/router.Split, computed in Python (Split.of) and handed over as is.
struct Split {
  std::vector<std::string> order;  // oldest first
  std::vector<int> upper;          // exclusive upper bucket of each
  const std::string* Pick(int bucket) const;  // nullptr when no version owns it
};

struct ModelRoute {
  std::map<std::string, std::shared_ptr<NativeVersion>> versions;  // READY versions, by name
  Split split;
};

struct RouteTable {
  std::unordered_map<std::string, ModelRoute> models;
};

// One writer (Python, on swaps), many readers (every call): readers copy the shared_ptr under a short lock.
class RouteHolder {
 public:
  std::shared_ptr<const RouteTable> Load() const;
  void Store(std::shared_ptr<const RouteTable> table);

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const RouteTable> table_ = std::make_shared<RouteTable>();
};

}  // namespace ortserve
