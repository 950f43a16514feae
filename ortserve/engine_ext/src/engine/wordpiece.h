// WordPiece: a BERT tokenizer that reproduces Hugging Face tokenizers' ids for one tokenizer.json shape:
// special added tokens (matched on the raw text), BertNormalizer, BertPreTokenizer, WordPiece model,
// "[CLS] $A [SEP]" post-processing, right truncation to max_len ids; pairs as "[CLS] $A [SEP] $B:1 [SEP]:1" with
// HF's longest-first truncation. No Python in here.
//
//   WordPiece tokenizer(config);                 // throws std::invalid_argument
//   std::vector<int64_t> ids = tokenizer.Encode(utf8);  // any number of threads at once
//   int second = tokenizer.EncodePair(a, b, ids);       // [CLS] a [SEP] b [SEP]; token type 1 from `second` on
//   tokenizer.EncodeWithSpans(utf8, ids, spans, chars_read);  // and each token's span in the text
//
// The per-code-point Unicode behaviour comes from wordpiece_tables.inc, probed from HF tokenizers by
// scripts/gen_wordpiece_tables.py, so parity holds on code points where HF's Unicode tables differ
// from the current standard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ortserve {

struct WordPieceConfig {
  std::vector<std::string> vocab;  // the WordPiece model's tokens, index = id
  int64_t unk_id = 0;              // what a word with no WordPiece split becomes
  int64_t cls_id = 0;
  int64_t sep_id = 0;
  // Split off the raw text before normalizing, wherever they occur (leftmost, then longest, first).
  std::vector<std::pair<std::string, int64_t>> added_tokens;
  std::string continuing_subword_prefix = "##";
  size_t max_input_chars_per_word = 100;  // longer words (in code points, after normalizing) -> unk
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;  // HF's strip_accents: null means "same as lowercase"; resolve it before
  bool lowercase = true;
  size_t max_len = 512;  // ids per text, [CLS] and [SEP] included; >= 2
};

// Where one token of EncodeWithSpans came from, as HF's Encoding.offsets give it for a Python str: code points of
// the caller's text (not of the normalized text), [start, end). Four int64s, so a [T, 4] int64 array can hold them
// (dataplane/entities.h's TokenSpan is what the entities read; this is the tokenizer's own, kept in its room).
struct WordPieceSpan {
  int64_t start = 0, end = 0;
  int64_t is_subword = 0;  // 1: continues the word before it, by transformers' rule (MarkSubwords)
  // 1: the [CLS]/[SEP] around the text, at (0, 0). An added token met in the text is 0, at its place in the text,
  // as in HF's special_tokens_mask.
  int64_t special = 0;
};

// How many tokens of each text of a pair HF's longest-first truncation keeps when `budget` tokens fit in all
// (max_len less the pair's three special tokens): nothing cut when both fit, else the longer is cut first, down
// to the shorter's length, then both to half the budget (the second text keeps the odd token, unless the first is
// the longer). Pure, for the tests.
struct PairLengths {
  size_t first = 0, second = 0;
};
PairLengths LongestFirst(size_t first, size_t second, size_t budget);

// The tokenizers release wordpiece_tables.inc was probed from ("0.23.3").
const char* WordPieceTablesVersion();

class WordPiece {
 public:
  explicit WordPiece(WordPieceConfig config);

  // Ids of one text: [CLS], at most max_len - 2 tokens, [SEP]. Invalid UTF-8 bytes read as U+FFFD.
  std::vector<int64_t> Encode(std::string_view utf8) const;
  // Same, into ids (cleared first), so a caller can reuse its buffer.
  void Encode(std::string_view utf8, std::vector<int64_t>& ids) const;

  // Encode's ids, with spans[k] the span of ids[k] (both cleared first) and chars_read the code points of the text
  // that its tokens cover: the whole text's when nothing was cut, else the end of the last kept token that is not
  // special (0 if none). Invalid UTF-8 bytes count one code point each.
  void EncodeWithSpans(std::string_view utf8, std::vector<int64_t>& ids, std::vector<WordPieceSpan>& spans,
                       int64_t& chars_read) const;

  // A pair, as HF's BERT post-processor and longest-first truncation make it: [CLS] a [SEP] b [SEP], at most
  // max_len ids. Returns where b begins (the first id of token type 1). Invalid UTF-8 bytes read as U+FFFD.
  int EncodePair(std::string_view first, std::string_view second, std::vector<int64_t>& ids) const;

  // Added tokens first, then the vocabulary (as HF's token_to_id).
  std::optional<int64_t> TokenToId(std::string_view token) const;
  // Distinct tokens of the vocabulary and the added tokens (HF's get_vocab_size()).
  size_t VocabSize() const { return vocab_size_; }
  const WordPieceConfig& config() const { return config_; }

 private:
  struct Scratch;
  // The text's tokens (no [CLS]/[SEP]) appended to ids while ids.size() < limit, cut to limit. With kSpans, each
  // id's span appended to *spans too (the fast path, kSpans false, tracks no positions at all).
  template <bool kSpans>
  void AppendTokens(std::string_view text, std::vector<int64_t>& ids, size_t limit,
                    std::vector<WordPieceSpan>* spans = nullptr) const;
  template <bool kSpans>
  void EncodeSegment(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const;
  // Normalizes one piece of a segment and feeds its characters to the pre-tokenizer; a word may continue into the
  // next piece only if no space ends this one (EncodeSegment cuts pieces just after a space).
  template <bool kSpans>
  void NormalizePiece(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const;
  template <bool kSpans>
  void EncodeWord(Scratch& s, std::vector<int64_t>& ids) const;
  // Sets each span's is_subword (see the .cc); spans[k] is ids[k]'s.
  void MarkSubwords(std::string_view text, const std::vector<int64_t>& ids, std::vector<WordPieceSpan>& spans) const;
  // Longest added token that starts at text[pos], as an index into config_.added_tokens, or -1.
  int MatchAddedToken(std::string_view text, size_t pos) const;

  WordPieceConfig config_;
  // Views into config_.vocab / config_.added_tokens, which never change after construction.
  std::unordered_map<std::string_view, int64_t> vocab_ids_;
  std::unordered_map<std::string_view, int64_t> added_ids_;
  bool added_first_byte_[256] = {};
  size_t max_token_bytes_ = 0;  // no vocabulary key is longer: bounds the longest-match search
  size_t vocab_size_ = 0;
  std::vector<int64_t> token_chars_;  // code points of each id's token string
};

}  // namespace ortserve
