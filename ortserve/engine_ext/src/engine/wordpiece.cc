#include "wordpiece.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <stdexcept>
#include <utility>

namespace ortserve {
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

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kReplacement = 0xFFFD;
constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

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
  FlagTable() {
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
  uint16_t operator()(char32_t c) const { return blocks_[(static_cast<size_t>(index_[c >> 8]) << 8) | (c & 0xFF)]; }

 private:
  std::vector<uint16_t> index_;
  std::vector<uint16_t> blocks_;
};

const FlagTable& Flags() {
  static const FlagTable table;  // built once, on first use, thread-safely
  return table;
}

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

// NFD of one code point, appended; true if it appended a combining mark (so reordering may be needed).
bool AppendDecomposition(char32_t c, uint16_t flag, const FlagTable& flags, std::vector<char32_t>& out) {
  if (!(flag & kHasDecomposition)) {
    out.push_back(c);
    return flag & kHasCombiningClass;
  }
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

// NFD's canonical ordering: each run of combining marks stably sorted by combining class.
void CanonicalReorder(std::vector<char32_t>& chars, const FlagTable& flags) {
  auto by_class = [&flags](char32_t a, char32_t b) { return CombiningClassOf(a, flags) < CombiningClassOf(b, flags); };
  for (size_t i = 0; i < chars.size();) {
    size_t j = i;
    while (j < chars.size() && CombiningClassOf(chars[j], flags) != 0) ++j;
    if (j - i > 1) std::stable_sort(chars.begin() + i, chars.begin() + j, by_class);
    i = j == i ? i + 1 : j;
  }
}

// The code point at s[i], advancing i; a malformed, overlong, surrogate or truncated sequence reads as
// U+FFFD and consumes one byte, so the input is never read past its end.
char32_t NextCodePoint(std::string_view s, size_t& i) {
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

void AppendUtf8(std::string& out, char32_t c) {
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

// Start of the UTF-8 character that ends at word[end] (word is valid UTF-8), not before begin.
size_t PreviousBoundary(std::string_view word, size_t begin, size_t end) {
  do {
    --end;
  } while (end > begin && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
  return end;
}

}  // namespace

const char* WordPieceTablesVersion() { return kTablesTokenizersVersion; }

// Per-thread buffers, so Encode allocates only while they grow.
struct WordPiece::Scratch {
  std::vector<char32_t> chars;  // the normalized segment
  std::string word;             // the word being collected, UTF-8
  size_t word_chars = 0;
  std::string key;  // continuing_subword_prefix + the rest of word, for continuation lookups
};

WordPiece::WordPiece(WordPieceConfig config) : config_(std::move(config)) {
  if (config_.max_len < 2) throw std::invalid_argument("max_len must be >= 2 ([CLS] and [SEP])");
  if (config_.unk_id < 0 || static_cast<size_t>(config_.unk_id) >= config_.vocab.size()) {
    throw std::invalid_argument("unk_id " + std::to_string(config_.unk_id) + " is not in the vocabulary");
  }
  if (config_.cls_id < 0 || config_.sep_id < 0) throw std::invalid_argument("cls_id and sep_id must be >= 0");
  vocab_ids_.reserve(config_.vocab.size());
  for (size_t id = 0; id < config_.vocab.size(); ++id) {
    const std::string& token = config_.vocab[id];
    if (!vocab_ids_.emplace(token, static_cast<int64_t>(id)).second) {
      throw std::invalid_argument("token '" + token + "' occurs twice in the vocabulary");
    }
    max_token_bytes_ = std::max(max_token_bytes_, token.size());
  }
  vocab_size_ = config_.vocab.size();
  for (const auto& [content, id] : config_.added_tokens) {
    if (content.empty()) throw std::invalid_argument("added tokens must not be empty");
    if (id < 0) throw std::invalid_argument("added token '" + content + "' has a negative id");
    if (!added_ids_.emplace(content, id).second) {
      throw std::invalid_argument("added token '" + content + "' occurs twice");
    }
    added_first_byte_[static_cast<unsigned char>(content[0])] = true;
    if (vocab_ids_.find(content) == vocab_ids_.end()) ++vocab_size_;
  }
  Flags();  // build the shared table now rather than inside the first Encode
}

std::optional<int64_t> WordPiece::TokenToId(std::string_view token) const {
  if (auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (auto it = vocab_ids_.find(token); it != vocab_ids_.end()) return it->second;
  return std::nullopt;
}

std::vector<int64_t> WordPiece::Encode(std::string_view utf8) const {
  std::vector<int64_t> ids;
  Encode(utf8, ids);
  return ids;
}

void WordPiece::Encode(std::string_view text, std::vector<int64_t>& ids) const {
  ids.clear();
  ids.push_back(config_.cls_id);
  AppendTokens(text, ids, config_.max_len - 1);  // [CLS] + max_len - 2 tokens
  ids.push_back(config_.sep_id);
}

void WordPiece::AppendTokens(std::string_view text, std::vector<int64_t>& ids, size_t limit) const {
  thread_local Scratch scratch;
  // HF matches non-normalized added tokens on the raw text and normalizes only the pieces between them.
  size_t segment_start = 0;
  for (size_t pos = 0; pos < text.size() && ids.size() < limit;) {
    const int match = added_first_byte_[static_cast<unsigned char>(text[pos])] ? MatchAddedToken(text, pos) : -1;
    if (match < 0) {
      ++pos;
      continue;
    }
    EncodeSegment(text.substr(segment_start, pos - segment_start), ids, limit, scratch);
    ids.push_back(config_.added_tokens[match].second);
    pos += config_.added_tokens[match].first.size();
    segment_start = pos;
  }
  EncodeSegment(text.substr(segment_start), ids, limit, scratch);
  if (ids.size() > limit) ids.resize(limit);  // HF truncates the whole encoding; stopping early is equal
}

PairLengths LongestFirst(size_t first, size_t second, size_t budget) {
  if (first + second <= budget) return {first, second};
  // HF tokenizers' TruncationStrategy::LongestFirst (utils/truncation.rs), with n1 the shorter of the two.
  const bool swap = first > second;
  size_t n1 = swap ? second : first, n2 = swap ? first : second;
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swap) std::swap(n1, n2);
  return {std::min(first, n1), std::min(second, n2)};
}

int WordPiece::EncodePair(std::string_view first, std::string_view second, std::vector<int64_t>& ids) const {
  thread_local std::vector<int64_t> a, b;
  const size_t budget = config_.max_len > 3 ? config_.max_len - 3 : 0;  // [CLS] a [SEP] b [SEP]
  // Each text's tokens up to one past the budget: enough to decide the truncation, unless both reach it (then which
  // is longer decides who keeps the odd token, and only their full lengths tell).
  a.clear();
  b.clear();
  AppendTokens(first, a, budget + 1);
  AppendTokens(second, b, budget + 1);
  if (a.size() > budget && b.size() > budget) {
    a.clear();
    b.clear();
    AppendTokens(first, a, SIZE_MAX);
    AppendTokens(second, b, SIZE_MAX);
  }
  const PairLengths keep = LongestFirst(a.size(), b.size(), budget);
  ids.clear();
  ids.reserve(keep.first + keep.second + 3);
  ids.push_back(config_.cls_id);
  ids.insert(ids.end(), a.begin(), a.begin() + static_cast<std::ptrdiff_t>(keep.first));
  ids.push_back(config_.sep_id);
  const int starts = static_cast<int>(ids.size());
  ids.insert(ids.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(keep.second));
  ids.push_back(config_.sep_id);
  return starts;
}

int WordPiece::MatchAddedToken(std::string_view text, size_t pos) const {
  int best = -1;
  size_t best_length = 0;
  for (size_t k = 0; k < config_.added_tokens.size(); ++k) {
    const std::string& content = config_.added_tokens[k].first;
    if (content.size() > best_length && text.substr(pos, content.size()) == content) {
      best = static_cast<int>(k);
      best_length = content.size();
    }
  }
  return best;
}

void WordPiece::EncodeSegment(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const {
  if (text.empty() || ids.size() >= limit) return;
  // A piece at a time, each ending just after an ASCII space (normalizing never reaches across one, and the space
  // ends any word), so a text far past max_len costs what its first max_len tokens cost.
  constexpr size_t kPiece = 512;
  s.word.clear();
  s.word_chars = 0;
  for (size_t pos = 0; pos < text.size() && ids.size() < limit;) {
    size_t end = text.size();
    if (end - pos > kPiece) {
      const size_t space = text.find(' ', pos + kPiece);
      if (space != std::string_view::npos) end = space + 1;
    }
    NormalizePiece(text.substr(pos, end - pos), ids, limit, s);
    pos = end;
  }
  EncodeWord(s, ids);
}

void WordPiece::NormalizePiece(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const {
  const FlagTable& flags = Flags();
  // BertNormalizer, in HF's order: clean_text, handle_chinese_chars, strip_accents (NFD, then drop Mn).
  std::vector<char32_t>& chars = s.chars;
  chars.clear();
  bool marks = false;
  for (size_t i = 0; i < text.size();) {
    char32_t c = NextCodePoint(text, i);
    uint16_t flag = flags(c);
    if (config_.clean_text) {
      if (flag & kIsDrop) continue;
      if (flag & kIsCleanSpace) c = U' ', flag = flags(c);
    }
    const bool spaced = config_.handle_chinese_chars && (flag & kIsChinese);
    if (spaced) chars.push_back(U' ');
    if (config_.strip_accents) {
      marks = AppendDecomposition(c, flag, flags, chars) || marks;
    } else {
      chars.push_back(c);
    }
    if (spaced) chars.push_back(U' ');
  }
  if (config_.strip_accents) {
    if (marks) CanonicalReorder(chars, flags);
    chars.erase(std::remove_if(chars.begin(), chars.end(),
                               [&flags](char32_t c) { return flags(c) & kIsNonspacingMark; }),
                chars.end());
  }
  // Lowercase (per code point, as HF), then BertPreTokenizer: split on whitespace, isolate punctuation.
  auto add = [&](char32_t c) {
    const uint16_t flag = flags(c);
    if (flag & kIsSplitSpace) {
      EncodeWord(s, ids);
    } else if (flag & kIsPunctuation) {
      EncodeWord(s, ids);
      AppendUtf8(s.word, c);
      s.word_chars = 1;
      EncodeWord(s, ids);
    } else {
      AppendUtf8(s.word, c);
      ++s.word_chars;
    }
  };
  for (const char32_t c : chars) {
    if (ids.size() >= limit) break;
    const Mapping* lower = config_.lowercase && (flags(c) & kHasLowercase) ? FindMapping(kLowercase, c) : nullptr;
    if (lower == nullptr) {
      add(c);
    } else {
      for (uint32_t k = 0; k < lower->length; ++k) add(kLowercasePool[lower->offset + k]);
    }
  }
}

// The WordPiece model on s.word: greedy longest-match-first pieces, or one unk if any part has none.
void WordPiece::EncodeWord(Scratch& s, std::vector<int64_t>& ids) const {
  const std::string_view word = s.word;
  if (word.empty()) return;
  if (s.word_chars > config_.max_input_chars_per_word) {
    ids.push_back(config_.unk_id);
  } else {
    const std::string& prefix = config_.continuing_subword_prefix;
    const size_t first = ids.size();
    for (size_t start = 0; start < word.size();) {
      if (start > 0) {
        s.key.assign(prefix);
        s.key.append(word.substr(start));
      }
      // Candidates are key prefixes; word[start] sits at key[offset].
      const std::string_view key = start == 0 ? word : std::string_view(s.key);
      const size_t offset = start == 0 ? 0 : prefix.size();
      size_t end = word.size();
      while (end > start && offset + end - start > max_token_bytes_) end = PreviousBoundary(word, start, end);
      int64_t id = -1;
      for (; end > start; end = PreviousBoundary(word, start, end)) {
        if (auto it = vocab_ids_.find(key.substr(0, offset + end - start)); it != vocab_ids_.end()) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {
        ids.resize(first);
        ids.push_back(config_.unk_id);
        break;
      }
      ids.push_back(id);
      start = end;
    }
  }
  s.word.clear();
  s.word_chars = 0;
}

}  // namespace ortserve
