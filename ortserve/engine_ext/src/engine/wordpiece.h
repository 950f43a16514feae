// WordPiece: a BERT tokenizer that reproduces Hugging Face tokenizers' ids for one tokenizer.json shape:
// special added tokens (matched on the raw text), BertNormalizer, BertPreTokenizer, WordPiece model,
// "[CLS] $A [SEP]" post-processing, right truncation to max_len ids. No Python in here.
//
//   WordPiece tokenizer(config);                 // throws std::invalid_argument
//   std::vector<int64_t> ids = tokenizer.Encode(utf8);  // any number of threads at once
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

// The tokenizers release wordpiece_tables.inc was probed from ("0.23.3").
const char* WordPieceTablesVersion();

class WordPiece {
 public:
  explicit WordPiece(WordPieceConfig config);

  // Ids of one text: [CLS], at most max_len - 2 tokens, [SEP]. Invalid UTF-8 bytes read as U+FFFD.
  std::vector<int64_t> Encode(std::string_view utf8) const;
  // Same, into ids (cleared first), so a caller can reuse its buffer.
  void Encode(std::string_view utf8, std::vector<int64_t>& ids) const;

  // Added tokens first, then the vocabulary (as HF's token_to_id).
  std::optional<int64_t> TokenToId(std::string_view token) const;
  // Distinct tokens of the vocabulary and the added tokens (HF's get_vocab_size()).
  size_t VocabSize() const { return vocab_size_; }
  const WordPieceConfig& config() const { return config_; }

 private:
  struct Scratch;
  void EncodeSegment(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const;
  // Normalizes one piece of a segment and feeds its characters to the pre-tokenizer; a word may continue into the
  // next piece only if no space ends this one (EncodeSegment cuts pieces just after a space).
  void NormalizePiece(std::string_view text, std::vector<int64_t>& ids, size_t limit, Scratch& s) const;
  void EncodeWord(Scratch& s, std::vector<int64_t>& ids) const;
  // Longest added token that starts at text[pos], as an index into config_.added_tokens, or -1.
  int MatchAddedToken(std::string_view text, size_t pos) const;

  WordPieceConfig config_;
  // Views into config_.vocab / config_.added_tokens, which never change after construction.
  std::unordered_map<std::string_view, int64_t> vocab_ids_;
  std::unordered_map<std::string_view, int64_t> added_ids_;
  bool added_first_byte_[256] = {};
  size_t max_token_bytes_ = 0;  // no vocabulary key is longer: bounds the longest-match search
  size_t vocab_size_ = 0;
};

}  // namespace ortserve
