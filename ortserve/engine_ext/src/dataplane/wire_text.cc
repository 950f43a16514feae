// Text as the wire rules' messages print it: Python's strict UTF-8 and repr(), quoted names and lists (wire_text.h).
#include "wire_text.h"

#include <string>

namespace ortserve {

std::string Quote(std::string_view text) { return "'" + std::string(text) + "'"; }

// ['a', 'b'] as Python prints a list of str.
std::string List(const std::vector<std::string_view>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += PyRepr(items[i]);
  }
  return out + "]";
}

// [1, 2] as Python prints a list of int.
std::string List(const std::vector<int64_t>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(items[i]);
  }
  return out + "]";
}

WireError Invalid(std::string message) { return WireError{Code::kInvalidArgument, std::move(message)}; }

bool IsValidUtf8(std::string_view bytes, const char** reason, size_t* at) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  auto fail = [&](size_t where, const char* why) {
    if (reason) *reason = why;
    if (at) *at = where;
    return false;
  };
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte (they exclude overlongs, surrogates)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return fail(i, "invalid start byte");
    }
    // As CPython: a continuation byte that is there and wrong, else a sequence cut short by the end.
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n) return fail(i, "unexpected end of data");
      const unsigned char b = s[i + k];
      const bool ok = k == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
      if (!ok) return fail(i, "invalid continuation byte");
    }
    i += len;
  }
  return true;
}

std::string PyRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xF];
    } else if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      const auto cont = static_cast<unsigned char>(text[i + 1]);  // a C1 control, U+0080..U+009F
      out += "\\x";
      out += hex[cont >> 4];
      out += hex[cont & 0xF];
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace ortserve
