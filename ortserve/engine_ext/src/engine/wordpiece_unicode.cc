#include "wordpiece_unicode.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <tuple>
#include <utility>

namespace ortserve::wordpiece_internal {
namespace {

struct Range {
  char32_t lo, hi;
};
struct CombiningClass {
  char32_t lo, hi;
  uint8_t value;
};
struct Mapping {
  char32_t code_point;
  uint32_t offset;  // into the table's pool
  uint8_t length;
};

#include "wordpiece_tables.inc"

constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

template <size_t N>
const Mapping* FindMapping(const Mapping (&table)[N], char32_t c) {
  const Mapping* it = std::lower_bound(std::begin(table), std::end(table), c,
                                       [](const Mapping& m, char32_t value) { return m.code_point < value; });
  return it != std::end(table) && it->code_point == c ? it : nullptr;
}

uint8_t CombiningClassOf(char32_t c, const FlagTable& flags) {
  if (!(flags(c) & kHasCombiningClass)) return 0;
  const CombiningClass* it =
      std::upper_bound(std::begin(kCombiningClass), std::end(kCombiningClass), c,
                       [](char32_t value, const CombiningClass& r) { return value < r.lo; });
  return std::prev(it)->value;  // the flag guarantees c lies in the range before it
}

}  // namespace

FlagTable::FlagTable() {
  std::vector<uint16_t> flat(kMaxCodePoint + 1, 0);
  auto mark = [&flat](const auto& ranges, uint16_t flag) {
    for (const Range& r : ranges) {
      for (char32_t c = r.lo; c <= r.hi; ++c) flat[c] |= flag;
    }
  };
  mark(kDrop, kIsDrop);
  mark(kCleanSpace, kIsCleanSpace);
  mark(kChinese, kIsChinese);
  mark(kNonspacingMark, kIsNonspacingMark);
  mark(kSplitSpace, kIsSplitSpace);
  mark(kPunctuation, kIsPunctuation);
  for (const Mapping& m : kDecomposition) flat[m.code_point] |= kHasDecomposition;
  for (char32_t c = kHangulFirst; c <= kHangulLast; ++c) flat[c] |= kHasDecomposition;
  for (const Mapping& m : kLowercase) flat[m.code_point] |= kHasLowercase;
  for (const CombiningClass& r : kCombiningClass) {
    for (char32_t c = r.lo; c <= r.hi; ++c) flat[c] |= kHasCombiningClass;
  }
  std::map<std::vector<uint16_t>, uint16_t> seen;
  index_.resize((kMaxCodePoint + 1) >> 8);
  for (size_t block = 0; block < index_.size(); ++block) {
    std::vector<uint16_t> values(flat.begin() + (block << 8), flat.begin() + ((block + 1) << 8));
    auto [it, inserted] = seen.emplace(std::move(values), static_cast<uint16_t>(seen.size()));
    if (inserted) blocks_.insert(blocks_.end(), it->first.begin(), it->first.end());
    index_[block] = it->second;
  }
}

const FlagTable& Flags() {
  static const FlagTable table;
  return table;
}

const char* TablesVersion() { return kTablesTokenizersVersion; }

LowerCase LowercaseOf(char32_t c) {
  const Mapping* m = FindMapping(kLowercase, c);
  return {kLowercasePool + m->offset, m->length};
}

bool AppendDecomposed(char32_t c, const FlagTable& flags, std::vector<char32_t>& out) {
  if (c >= kHangulFirst && c <= kHangulLast) {
    const char32_t index = c - kHangulFirst;
    out.push_back(0x1100 + index / 588);
    out.push_back(0x1161 + (index % 588) / 28);
    if (index % 28 != 0) out.push_back(0x11A7 + index % 28);
    return false;
  }
  const Mapping* m = FindMapping(kDecomposition, c);
  bool marks = false;
  for (uint32_t k = 0; k < m->length; ++k) {
    const char32_t d = kDecompositionPool[m->offset + k];
    out.push_back(d);
    marks = marks || (flags(d) & kHasCombiningClass);
  }
  return marks;
}

void CanonicalReorder(std::vector<char32_t>& chars, const FlagTable& flags) {
  auto by_class = [&flags](char32_t a, char32_t b) { return CombiningClassOf(a, flags) < CombiningClassOf(b, flags); };
  for (size_t i = 0; i < chars.size();) {
    size_t j = i;
    while (j < chars.size() && CombiningClassOf(chars[j], flags) != 0) ++j;
    if (j - i > 1) std::stable_sort(chars.begin() + i, chars.begin() + j, by_class);
    i = j == i ? i + 1 : j;
  }
}

void CanonicalReorder(std::vector<char32_t>& chars, std::vector<uint8_t>& inserted, const FlagTable& flags) {
  std::vector<std::pair<char32_t, uint8_t>> run;
  auto by_class = [&flags](const auto& a, const auto& b) {
    return CombiningClassOf(a.first, flags) < CombiningClassOf(b.first, flags);
  };
  for (size_t i = 0; i < chars.size();) {
    size_t j = i;
    while (j < chars.size() && CombiningClassOf(chars[j], flags) != 0) ++j;
    if (j - i > 1) {
      run.clear();
      for (size_t k = i; k < j; ++k) run.emplace_back(chars[k], inserted[k]);
      std::stable_sort(run.begin(), run.end(), by_class);
      for (size_t k = i; k < j; ++k) std::tie(chars[k], inserted[k]) = run[k - i];
    }
    i = j == i ? i + 1 : j;
  }
}

}  // namespace ortserve::wordpiece_internal
