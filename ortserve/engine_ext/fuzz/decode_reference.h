// The decode fuzzer's independent references (decode_fuzzer.cc): UTF-8 and V2 raw BYTES read the long way, so that
// the decoder's fast paths are checked against code that shares nothing with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace decode_reference {

// Strict UTF-8 the long way: the lead byte gives the length, the continuation bytes the code point, and then
// overlongs, surrogates and values past U+10FFFF are refused.
inline bool ReferenceUtf8(std::string_view s) {
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t len;
    char32_t cp;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead >> 5) == 0x6) {
      len = 2, cp = lead & 0x1F;
    } else if ((lead >> 4) == 0xE) {
      len = 3, cp = lead & 0x0F;
    } else if ((lead >> 3) == 0x1E) {
      len = 4, cp = lead & 0x07;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 0x2) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// V2 raw BYTES: 4-byte little-endian length, then that many bytes; false on a truncated prefix or an overrun.
inline bool ReferenceSplit(std::string_view buffer, std::vector<std::string_view>& out) {
  uint64_t at = 0;
  while (at < buffer.size()) {
    if (at + 4 > buffer.size()) return false;
    uint64_t size = 0;
    for (int b = 3; b >= 0; --b) size = (size << 8) | static_cast<unsigned char>(buffer[at + b]);
    at += 4;
    if (at + size > buffer.size()) return false;
    out.push_back(buffer.substr(at, size));
    at += size;
  }
  return true;
}

}  // namespace decode_reference
