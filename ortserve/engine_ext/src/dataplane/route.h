// Version choice, for both front ends: the canary bucket (BLAKE2b, 8-byte digest, of "model NUL routing_key",
// big-endian, mod 10000: identical across processes and restarts), the split of the buckets between versions, and
// the native front end's route table, which Python replaces as one immutable snapshot on every swap (invariant 2: a
// call loads the pointer once and sees old or new).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ortserve {

class ServedVersion;  // served_version.h

constexpr int kBuckets = 10000;

// BLAKE2b (RFC 7693), unkeyed, with an `out_len`-byte digest (1..64).
std::vector<uint8_t> Blake2b(std::string_view data, size_t out_len);
int Bucket(std::string_view model, std::string_view routing_key);

// Weights laid out over the buckets: versions own contiguous ranges, stacked oldest first, so the newest (the
// canary) owns the top: ramping it from 5% to 20% moves keys only from the version below it to the canary, and
// ramping down moves them back (invariant 6).
struct Split {
  std::vector<std::string> order;  // versions with weight, oldest first
  std::vector<int> upper;          // exclusive upper bucket of each
  // `weighted` is (version, percent) oldest first; zero weights own no bucket; all zero: an empty split.
  static Split Of(const std::vector<std::pair<std::string, int>>& weighted);
  const std::string* Pick(int bucket) const;  // nullptr when no version owns it
};

// What a loaded version takes and answers, as the wire rules read it: one per version, built by Python from its kind's
// spec (bundle/kinds.py) and manifest, so no rule here names a kind. `kind` is for messages only. Its output's name
// ("LOGITS", "EMBEDDING", "SCORE", "ENTITIES") and the others a call may ask for; a classifier's labels, for the
// classification extension, with whether they are independent (multi_label: probabilities are a sigmoid per label).
// A version without labels sends classification requests to the Python server.
struct VersionOutput {
  std::string kind = "classifier";
  std::string name = "LOGITS";
  std::vector<std::string> labels;
  bool multi_label = false;
  bool pairs = false;  // takes TEXT and TEXT_PAIR (a cross-encoder), else TEXT alone
  // A one-output cross-encoder (name "SCORE", its LOGITS requestable too): the activation its score goes through,
  // "sigmoid" or "identity"; "" for every other version.
  std::string score;
  std::map<std::string, std::string> prompts;  // name -> text: the prompts a call may name (prompt_name)
  // An embedding model's widths a call may ask for (dimensions), its own first, then those it was trained to be
  // truncated to (the manifest's matryoshka_dims); empty for every other version.
  std::vector<int64_t> widths;
  // An embedding model's calibrated ranges per width (the manifest's embedding_ranges): 2 x width floats, each
  // dimension's start then each one's end, what int8 and uint8 read (embedding_types.h); empty when none recorded.
  std::map<int64_t, std::vector<float>> ranges;
  std::vector<std::string> also;  // the outputs a call may ask for besides `name`
  // Its values hold a row per token (a token classifier): replies are built from its token rows (EncodeOutputs).
  bool per_token = false;
  // Its values are a sparse embedding's weights, a row of the vocabulary per text (a SPLADE model): replies carry
  // the kept entries (sparse_entries.h), not the row.
  bool sparse = false;
};

struct ModelRoute {
  std::map<std::string, std::shared_ptr<ServedVersion>> versions;  // READY versions, by name
  // By version; a version not listed answers LOGITS without labels (a route table set without outputs).
  std::map<std::string, std::shared_ptr<const VersionOutput>> outputs;
  Split split;
  // A version without weight that gets a copy of the calls whose bucket is below `shadow_buckets` (a percent of
  // kBuckets, sticky by routing key as the split is); "" when none (call_path.h ShadowOf).
  std::string shadow;
  int shadow_buckets = 0;
  bool shadow_texts = false;  // the copies' events carry the texts (the disagreement sample shows them)
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
