// The per-code-point Unicode pieces of WordPiece (wordpiece.h): flags probed from HF tokenizers
// (wordpiece_tables.inc), NFD with canonical reordering, lowercase mappings, UTF-8 reading and writing. The hot
// lookups are inline here; the tables and the rarer paths live in wordpiece_unicode.cc. Internal to wordpiece.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ortserve::wordpiece_internal {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kReplacement = 0xFFFD;

enum : uint16_t {
  kIsDrop = 1 << 0,
  kIsCleanSpace = 1 << 1,
  kIsChinese = 1 << 2,
  kIsNonspacingMark = 1 << 3,
  kIsSplitSpace = 1 << 4,
  kIsPunctuation = 1 << 5,
  kHasDecomposition = 1 << 6,
  kHasLowercase = 1 << 7,
  kHasCombiningClass = 1 << 8,
};

// Every table's flags per code point, as a two-stage lookup (256-code-point blocks, identical blocks
// shared): a small fraction of a flat 2 MiB table, and one branch-free lookup per character.
class FlagTable {
 public:
  FlagTable();
  uint16_t operator()(char32_t c) const { return blocks_[(static_cast<size_t>(index_[c >> 8]) << 8) | (c & 0xFF)]; }

 private:
  std::vector<uint16_t> index_;
  std::vector<uint16_t> blocks_;
};

const FlagTable& Flags();  // built once, on first use, thread-safely
const char* TablesVersion();

// The lowercase of c (a code point flagged kHasLowercase): `length` code points from `data`.
struct LowerCase {
  const char32_t* data;
  uint32_t length;
};
LowerCase LowercaseOf(char32_t c);

// NFD of a code point flagged kHasDecomposition, appended; true if it appended a combining mark.
bool AppendDecomposed(char32_t c, const FlagTable& flags, std::vector<char32_t>& out);

// NFD of one code point, appended; true if it appended a combining mark (so reordering may be needed).
inline bool AppendDecomposition(char32_t c, uint16_t flag, const FlagTable& flags, std::vector<char32_t>& out) {
  if (!(flag & kHasDecomposition)) {
    out.push_back(c);
    return flag & kHasCombiningClass;
  }
  return AppendDecomposed(c, flags, out);
}

// NFD's canonical ordering: each run of combining marks stably sorted by combining class.
void CanonicalReorder(std::vector<char32_t>& chars, const FlagTable& flags);
// The same, moving inserted[k] (1 where NFD added chars[k] after its code point's first) with chars[k], as HF's
// alignment-tracking NFD moves each character's change with it.
void CanonicalReorder(std::vector<char32_t>& chars, std::vector<uint8_t>& inserted, const FlagTable& flags);

// The code point at s[i], advancing i; a malformed, overlong, surrogate or truncated sequence reads as
// U+FFFD and consumes one byte, so the input is never read past its end.
inline char32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  size_t length;
  char32_t c, min;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    ++i;
    return kReplacement;
  }
  if (s.size() - i < length) {
    ++i;
    return kReplacement;
  }
  for (size_t k = 1; k < length; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kReplacement;
    }
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) {
    ++i;
    return kReplacement;
  }
  i += length;
  return c;
}

// Code points in s as NextCodePoint reads them.
inline size_t CountCodePoints(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++count) NextCodePoint(s, i);
  return count;
}

inline void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace ortserve::wordpiece_internal
