// BLAKE2b per RFC 7693 (the unkeyed, sequential variant only: that is all Bucket needs), the bucket, the split,
// and the route table holder.
#include "route.h"

#include <cstring>
#include <stdexcept>
#include <utility>

namespace ortserve {
namespace {

constexpr size_t kBlockBytes = 128;

constexpr uint64_t kIv[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                             0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                             0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

// RFC 7693 section 2.7; rounds 10 and 11 reuse rows 0 and 1.
constexpr uint8_t kSigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

inline uint64_t Rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

// Little-endian regardless of the host, as the RFC defines the words.
inline uint64_t Load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void G(uint64_t v[16], int a, int b, int c, int d, uint64_t x, uint64_t y) {
  v[a] = v[a] + v[b] + x;
  v[d] = Rotr(v[d] ^ v[a], 32);
  v[c] = v[c] + v[d];
  v[b] = Rotr(v[b] ^ v[c], 24);
  v[a] = v[a] + v[b] + y;
  v[d] = Rotr(v[d] ^ v[a], 16);
  v[c] = v[c] + v[d];
  v[b] = Rotr(v[b] ^ v[c], 63);
}

// F: compresses one 128-byte block; `bytes` is the total consumed so far including this block (the low
// word of the RFC's 128-bit counter: inputs past 2^64 bytes are not a concern here).
void Compress(uint64_t h[8], const uint8_t block[kBlockBytes], uint64_t bytes, bool last) {
  uint64_t m[16];
  for (int i = 0; i < 16; ++i) m[i] = Load64(block + 8 * i);
  uint64_t v[16];
  for (int i = 0; i < 8; ++i) {
    v[i] = h[i];
    v[i + 8] = kIv[i];
  }
  v[12] ^= bytes;
  if (last) v[14] = ~v[14];
  for (const uint8_t* s : kSigma) {
    G(v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
    G(v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
    G(v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
    G(v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
    G(v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
    G(v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
    G(v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
    G(v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
  for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[i + 8];
}

}  // namespace

std::vector<uint8_t> Blake2b(std::string_view data, size_t out_len) {
  if (out_len < 1 || out_len > 64) {
    throw std::invalid_argument("blake2b digest size must be 1..64 bytes, got " + std::to_string(out_len));
  }
  uint64_t h[8];
  std::memcpy(h, kIv, sizeof h);
  h[0] ^= 0x01010000ULL ^ out_len;  // parameter block: depth 1, fanout 1, no key, digest length
  const auto* in = reinterpret_cast<const uint8_t*>(data.data());
  size_t left = data.size();
  uint64_t bytes = 0;
  // Every full block but the last one; the last (even if full, or empty input) is compressed as final.
  while (left > kBlockBytes) {
    bytes += kBlockBytes;
    Compress(h, in, bytes, false);
    in += kBlockBytes;
    left -= kBlockBytes;
  }
  uint8_t block[kBlockBytes] = {};
  if (left > 0) std::memcpy(block, in, left);
  bytes += left;
  Compress(h, block, bytes, true);
  std::vector<uint8_t> digest(out_len);
  for (size_t i = 0; i < out_len; ++i) digest[i] = static_cast<uint8_t>(h[i / 8] >> (8 * (i % 8)));
  return digest;
}

int Bucket(std::string_view model, std::string_view routing_key) {
  std::string message;
  message.reserve(model.size() + 1 + routing_key.size());
  message.append(model).push_back('\0');
  message.append(routing_key);
  const std::vector<uint8_t> digest = Blake2b(message, 8);
  uint64_t value = 0;
  for (uint8_t byte : digest) value = (value << 8) | byte;  // big-endian, as int.from_bytes(..., "big")
  return static_cast<int>(value % kBuckets);
}

Split Split::Of(const std::vector<std::pair<std::string, int>>& weighted) {
  long long total = 0;
  for (const auto& [version, weight] : weighted) total += weight > 0 ? weight : 0;
  Split split;
  if (total <= 0) return split;
  long long acc = 0;
  for (const auto& [version, weight] : weighted) {
    if (weight <= 0) continue;
    acc += weight;
    split.order.push_back(version);
    split.upper.push_back(static_cast<int>(acc * kBuckets / total));
  }
  return split;
}

const std::string* Split::Pick(int bucket) const {
  const size_t n = order.size() < upper.size() ? order.size() : upper.size();  // equal when built by Split.of
  for (size_t i = 0; i < n; ++i) {
    if (bucket < upper[i]) return &order[i];
  }
  return nullptr;
}

const VersionOutput& ModelRoute::OutputOf(const std::string& version) const {
  static const VersionOutput kLogits;
  const auto found = outputs.find(version);
  return found != outputs.end() && found->second ? *found->second : kLogits;
}

std::shared_ptr<const RouteTable> RouteHolder::Load() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_;
}

void RouteHolder::Store(std::shared_ptr<const RouteTable> table) {
  if (!table) throw std::invalid_argument("RouteHolder::Store needs a table; store an empty RouteTable to clear it");
  std::shared_ptr<const RouteTable> old;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    old = std::exchange(table_, std::move(table));
  }
  // `old` is released here, outside the lock: dropping the last table may drop the last reference to a
  // retired version, and readers must not wait for that.
}

}  // namespace ortserve
