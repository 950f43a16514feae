#include "wordpiece.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "wordpiece_unicode.h"

namespace ortserve {

using namespace wordpiece_internal;

namespace {

// Start of the UTF-8 character that ends at word[end] (word is valid UTF-8), not before begin.
size_t PreviousBoundary(std::string_view word, size_t begin, size_t end) {
  do {
    --end;
  } while (end > begin && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
  return end;
}

}  // namespace

const char* WordPieceTablesVersion() { return TablesVersion(); }

// Per-thread buffers, so Encode allocates only while they grow.
struct WordPiece::Scratch {
  std::vector<char32_t> chars;  // the normalized segment
  std::string word;             // the word being collected, UTF-8
  size_t word_chars = 0;
  std::string key;  // continuing_subword_prefix + the rest of word, for continuation lookups
  // Spans only (EncodeWithSpans): where each char / each byte of word came from, in code points of the text.
  std::vector<WordPieceSpan>* spans = nullptr;
  int64_t read = 0;               // code points of the text read so far
  std::vector<int64_t> origin;    // per chars[k]
  std::vector<uint8_t> inserted;  // per chars[k]: NFD added it after its code point's first char
  std::vector<int64_t> nfd_in;    // per char NFD read: its origin
  std::vector<int64_t> word_origin;  // per byte of word
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
  // Each id's token length in code points, added tokens first (HF's id_to_token): EncodeWithSpans' subword rule.
  size_t ids = config_.vocab.size();
  for (const auto& added : config_.added_tokens) ids = std::max(ids, static_cast<size_t>(added.second) + 1);
  token_chars_.assign(ids, 0);
  for (size_t id = 0; id < config_.vocab.size(); ++id) {
    token_chars_[id] = static_cast<int64_t>(CountCodePoints(config_.vocab[id]));
  }
  for (const auto& [content, id] : config_.added_tokens) {
    token_chars_[static_cast<size_t>(id)] = static_cast<int64_t>(CountCodePoints(content));
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
  AppendTokens<false>(text, ids, config_.max_len - 1);  // [CLS] + max_len - 2 tokens
  ids.push_back(config_.sep_id);
}

void WordPiece::EncodeWithSpans(std::string_view text, std::vector<int64_t>& ids, std::vector<WordPieceSpan>& spans,
                                int64_t& chars_read) const {
  ids.clear();
  spans.clear();
  ids.push_back(config_.cls_id);
  spans.push_back({0, 0, 0, 1});
  // One token past the limit tells whether truncation cut anything (HF's `overflowing`).
  const size_t limit = config_.max_len - 1;
  AppendTokens<true>(text, ids, limit + 1, &spans);
  if (ids.size() > limit) {
    ids.resize(limit);
    spans.resize(limit);
    chars_read = 0;
    for (const WordPieceSpan& span : spans) {
      if (!span.special) chars_read = std::max(chars_read, span.end);
    }
  } else {
    chars_read = static_cast<int64_t>(CountCodePoints(text));
  }
  ids.push_back(config_.sep_id);
  spans.push_back({0, 0, 0, 1});
  MarkSubwords(text, ids, spans);
}

void WordPiece::MarkSubwords(std::string_view text, const std::vector<int64_t>& ids,
                             std::vector<WordPieceSpan>& spans) const {
  // transformers' rule (TokenClassificationPipeline.gather_pre_entities), the one the entities follow whichever
  // tokenizer read the text: with a continuing prefix, a token continues a word when its string's length differs
  // from its span's ([CLS]/[SEP] included, as there); without one, when no space borders its start. Never [UNK].
  std::vector<char32_t> chars;
  if (config_.continuing_subword_prefix.empty()) {
    for (size_t i = 0; i < text.size();) chars.push_back(NextCodePoint(text, i));
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    WordPieceSpan& span = spans[k];
    bool subword = false;
    if (!config_.continuing_subword_prefix.empty()) {
      subword = token_chars_[static_cast<size_t>(ids[k])] != span.end - span.start;
    } else if (span.start > 0) {
      const auto at = static_cast<size_t>(span.start);
      subword = chars[at - 1] != U' ' && (at >= chars.size() || chars[at] != U' ');
    }
    span.is_subword = subword && ids[k] != config_.unk_id ? 1 : 0;
  }
}

template <bool kSpans>
void WordPiece::AppendTokens(std::string_view text, std::vector<int64_t>& ids, size_t limit,
                             std::vector<WordPieceSpan>* spans) const {
  thread_local Scratch scratch;
  if constexpr (kSpans) {
    scratch.spans = spans;
    scratch.read = 0;
  }
  // HF matches non-normalized added tokens on the raw text and normalizes only the pieces between them.
  size_t segment_start = 0;
  for (size_t pos = 0; pos < text.size() && ids.size() < limit;) {
    const int match = added_first_byte_[static_cast<unsigned char>(text[pos])] ? MatchAddedToken(text, pos) : -1;
    if (match < 0) {
      ++pos;
      continue;
    }
    EncodeSegment<kSpans>(text.substr(segment_start, pos - segment_start), ids, limit, scratch);
    const std::string& content = config_.added_tokens[match].first;
    ids.push_back(config_.added_tokens[match].second);
    if constexpr (kSpans) {
      // Past the limit the segment may not have been read to its end: that span is cut below anyway. Not special:
      // HF's special_tokens_mask marks only what the post-processor adds.
      const auto length = static_cast<int64_t>(CountCodePoints(content));
      spans->push_back({scratch.read, scratch.read + length, 0, 0});
      scratch.read += length;
    }
    pos += content.size();
    segment_start = pos;
  }
  EncodeSegment<kSpans>(text.substr(segment_start), ids, limit, scratch);
  if (ids.size() > limit) {  // HF truncates the whole encoding; stopping early is equal
    ids.resize(limit);
    if constexpr (kSpans) spans->resize(limit);
  }
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
  AppendTokens<false>(first, a, budget + 1);
  AppendTokens<false>(second, b, budget + 1);
  if (a.size() > budget && b.size() > budget) {
    a.clear();
    b.clear();
    AppendTokens<false>(first, a, SIZE_MAX);
    AppendTokens<false>(second, b, SIZE_MAX);
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

template <bool kSpans>
void WordPiece::EncodeSegment(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const {
  if (text.empty() || ids.size() >= limit) return;
  // A piece at a time, each ending just after an ASCII space (normalizing never reaches across one, and the space
  // ends any word), so a text far past max_len costs what its first max_len tokens cost.
  constexpr size_t kPiece = 512;
  s.word.clear();
  s.word_chars = 0;
  if constexpr (kSpans) s.word_origin.clear();
  for (size_t pos = 0; pos < text.size() && ids.size() < limit;) {
    size_t end = text.size();
    if (end - pos > kPiece) {
      const size_t space = text.find(' ', pos + kPiece);
      if (space != std::string_view::npos) end = space + 1;
    }
    NormalizePiece<kSpans>(text.substr(pos, end - pos), ids, limit, s);
    pos = end;
  }
  EncodeWord<kSpans>(s, ids);
}

template <bool kSpans>
void WordPiece::NormalizePiece(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const {
  const FlagTable& flags = Flags();
  // BertNormalizer, in HF's order: clean_text, handle_chinese_chars, strip_accents (NFD, then drop Mn).
  // With kSpans, s.origin[k] is the code point of the text chars[k] came from (HF's alignments, which every step
  // but NFD's reordering keeps per character).
  std::vector<char32_t>& chars = s.chars;
  chars.clear();
  if constexpr (kSpans) {
    s.origin.clear();
    s.inserted.clear();
  }
  bool marks = false;
  for (size_t i = 0; i < text.size();) {
    char32_t c = NextCodePoint(text, i);
    [[maybe_unused]] const int64_t at = kSpans ? s.read++ : 0;
    uint16_t flag = flags(c);
    if (config_.clean_text) {
      if (flag & kIsDrop) continue;
      if (flag & kIsCleanSpace) c = U' ', flag = flags(c);
    }
    const bool spaced = config_.handle_chinese_chars && (flag & kIsChinese);
    if (spaced) chars.push_back(U' ');
    if constexpr (kSpans) {
      if (spaced) s.inserted.push_back(0);  // NFD reads the spaces as characters of their own
    }
    if (config_.strip_accents) {
      marks = AppendDecomposition(c, flag, flags, chars) || marks;
    } else {
      chars.push_back(c);
    }
    if constexpr (kSpans) {
      s.inserted.push_back(0);
      s.inserted.resize(chars.size(), 1);
    }
    if (spaced) chars.push_back(U' ');
    if constexpr (kSpans) {
      if (spaced) s.inserted.push_back(0);
      s.origin.resize(chars.size(), at);
    }
  }
  if (config_.strip_accents) {
    if constexpr (kSpans) {
      if (marks) {
        // HF's NFD moves each character's change (new, or replacing a character it read) with it when it reorders,
        // then aligns by position: a replacing character takes the next character it read, a new one the last.
        s.nfd_in.clear();
        for (size_t k = 0; k < chars.size(); ++k) {
          if (!s.inserted[k]) s.nfd_in.push_back(s.origin[k]);
        }
        CanonicalReorder(chars, s.inserted, flags);
        size_t next = 0;
        for (size_t k = 0; k < chars.size(); ++k) {
          s.origin[k] = s.inserted[k] ? s.nfd_in[next > 0 ? next - 1 : 0] : s.nfd_in[next++];
        }
      }
      size_t kept = 0;
      for (size_t k = 0; k < chars.size(); ++k) {
        if (flags(chars[k]) & kIsNonspacingMark) continue;
        chars[kept] = chars[k];
        s.origin[kept++] = s.origin[k];
      }
      chars.resize(kept);
      s.origin.resize(kept);
    } else {
      if (marks) CanonicalReorder(chars, flags);
      chars.erase(std::remove_if(chars.begin(), chars.end(),
                                 [&flags](char32_t c) { return flags(c) & kIsNonspacingMark; }),
                  chars.end());
    }
  }
  // Lowercase (per code point, as HF), then BertPreTokenizer: split on whitespace, isolate punctuation.
  auto add = [&](char32_t c, [[maybe_unused]] int64_t origin) {
    const uint16_t flag = flags(c);
    if (flag & kIsSplitSpace) {
      EncodeWord<kSpans>(s, ids);
      return;
    }
    const bool punctuation = flag & kIsPunctuation;
    if (punctuation) EncodeWord<kSpans>(s, ids);
    AppendUtf8(s.word, c);
    ++s.word_chars;
    if constexpr (kSpans) s.word_origin.resize(s.word.size(), origin);
    if (punctuation) EncodeWord<kSpans>(s, ids);
  };
  for (size_t k = 0; k < chars.size(); ++k) {
    if (ids.size() >= limit) break;
    const char32_t c = chars[k];
    const int64_t origin = kSpans ? s.origin[k] : 0;
    if (config_.lowercase && (flags(c) & kHasLowercase)) {
      const LowerCase lower = LowercaseOf(c);
      for (uint32_t n = 0; n < lower.length; ++n) add(lower.data[n], origin);
    } else {
      add(c, origin);
    }
  }
}

// The WordPiece model on s.word: greedy longest-match-first pieces, or one unk if any part has none.
template <bool kSpans>
void WordPiece::EncodeWord(Scratch& s, std::vector<int64_t>& ids) const {
  const std::string_view word = s.word;
  if (word.empty()) return;
  // A piece's span: from its first byte's code point to past its last's (HF's alignments only grow).
  [[maybe_unused]] auto span = [&s](size_t begin, size_t end, bool subword) {
    s.spans->push_back({s.word_origin[begin], s.word_origin[end - 1] + 1, subword ? 1 : 0, 0});
  };
  if (s.word_chars > config_.max_input_chars_per_word) {
    ids.push_back(config_.unk_id);
    if constexpr (kSpans) span(0, word.size(), false);
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
        if constexpr (kSpans) {
          s.spans->resize(first);
          span(0, word.size(), false);
        }
        break;
      }
      ids.push_back(id);
      if constexpr (kSpans) span(start, end, start > 0);
      start = end;
    }
  }
  s.word.clear();
  s.word_chars = 0;
  if constexpr (kSpans) s.word_origin.clear();
}

}  // namespace ortserve
