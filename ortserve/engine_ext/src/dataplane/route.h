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

// What a version's replies carry (service/codec.ServedOutput): its output's name ("LOGITS" for a classifier,
// "EMBEDDING" for an embedding model) and a classifier's labels, for the classification extension. A version
// without labels sends classification requests to the Python server (which answers them or names the error).
struct VersionOutput {
  std::string name = "LOGITS";
  std::vector<std::string> labels;
};

struct ModelRoute {
  std::map<std::string, std::shared_ptr<NativeVersion>> versions;  // READY versions, by name
  // By version; a version not listed answers LOGITS without labels (a route table set without outputs).
  std::map<std::string, std::shared_ptr<const VersionOutput>> outputs;
  Split split;
  const VersionOutput& OutputOf(const std::string& version) const;
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
