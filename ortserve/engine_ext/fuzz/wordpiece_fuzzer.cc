// Fuzz target: the native WordPiece tokenizer (wordpiece.h) on arbitrary bytes, as texts arrive (the decoder checks
// UTF-8 first, but Encode promises to read invalid bytes as U+FFFD, so any bytes are fair). Built by
// scripts/fuzz_native, with libFuzzer or with replay_main.cc.
//
// The first input byte picks one of four tokenizer configurations (cased or not, accents kept or stripped, text
// cleaning and CJK spacing on or off, "##" or no continuation prefix, overlapping added tokens, max_len from 2 to
// 512); the rest is the text. Besides "no crash, no sanitizer report" it checks:
// - the ids are [CLS], at most max_len - 2 ids of the vocabulary or the added tokens, [SEP];
// - Encode into a used buffer equals a fresh Encode (the thread-local scratch leaks nothing between calls);
// - truncation is tokenize-then-truncate: the ids equal the same tokenizer's ids with no length limit, cut to
//   max_len - 2 tokens (the tokenizer stops early; that must not change a single id);
// - a pair (the text cut in two at a byte the input picks) is [CLS] a [SEP] b [SEP] with each text's untruncated
//   tokens cut to what LongestFirst keeps of a max_len - 3 budget (stopping early, and re-reading both texts when
//   both pass the budget, changes no id), and it returns where b begins;
// - EncodeWithSpans gives Encode's ids, one span per id: [CLS]/[SEP] special at (0, 0), the others within the text's
//   code points, starts never decreasing, each is_subword by transformers' rule (ExpectedSubword); chars_read the
//   text's code points unless tokens were cut (then the last kept token's end), and the spans equal the unlimited
//   tokenizer's, cut.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wordpiece.h"
#include "wordpiece_unicode.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "wordpiece_fuzzer: check failed: %s\n", what);
    std::abort();
  }
}

std::vector<std::string> Vocabulary() {
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (char c = '!'; c <= '~'; ++c) {
    if (c >= 'A' && c <= 'Z') continue;
    vocab.emplace_back(1, c);
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) vocab.push_back(std::string("##") + c);
  }
  for (const char* piece : {"the", "movie", "was", "great", "good", "bad", "plot", "un", "##aff", "##able", "play",
                            "##ing", "##ed", "Movie", "THE", "\xc3\xa9", "caf\xc3\xa9", "cafe", "\xe4\xb8\xad",
                            "##\xe4\xb8\xad", "\xe6\x96\x87", "na\xc3\xafve", "naive", "\xc3\x9f", "ss", "##ss",
                            "\xef\xbf\xbd", "a\xcc\x81", "\xf0\x9f\x98\x80", "!!", "##!"}) {
    vocab.emplace_back(piece);
  }
  return vocab;
}

struct Setup {
  std::unique_ptr<ortserve::WordPiece> limited;    // the configuration's max_len
  std::unique_ptr<ortserve::WordPiece> unlimited;  // the same, max_len far past any input
};

ortserve::WordPieceConfig Config(int which) {
  ortserve::WordPieceConfig c;
  c.vocab = Vocabulary();
  c.unk_id = 1, c.cls_id = 2, c.sep_id = 3;
  c.added_tokens = {{"[CLS]", 2}, {"[SEP]", 3}, {"[PAD]", 0}, {"[UNK]", 1}, {"[MASK]", 4}};
  switch (which) {
    case 0:  // bert-base-uncased
      c.max_len = 512;
      break;
    case 1:  // cased, accents kept, short words, overlapping added tokens (one not in the vocabulary)
      c.lowercase = false, c.strip_accents = false, c.max_len = 8, c.max_input_chars_per_word = 5;
      c.added_tokens.push_back({"ab", 5});
      c.added_tokens.push_back({"abc", 6});
      c.added_tokens.push_back({"<x>", 7000});
      break;
    case 2:  // no cleaning, no CJK spacing, no continuation prefix, nothing but [CLS] [SEP]
      c.clean_text = false, c.handle_chinese_chars = false, c.continuing_subword_prefix = "", c.max_len = 2;
      break;
    default:  // cased with accents stripped, a multi-byte prefix
      c.lowercase = false, c.strip_accents = true, c.continuing_subword_prefix = "\xe2\x80\xa6", c.max_len = 5;
      break;
  }
  return c;
}

const std::vector<Setup>& Setups() {
  static const std::vector<Setup>* setups = [] {
    auto* out = new std::vector<Setup>();
    for (int which = 0; which < 4; ++which) {
      ortserve::WordPieceConfig unlimited = Config(which);
      unlimited.max_len = size_t{1} << 24;
      out->push_back({std::make_unique<ortserve::WordPiece>(Config(which)),
                      std::make_unique<ortserve::WordPiece>(std::move(unlimited))});
    }
    return out;
  }();
  return *setups;
}

bool Known(const ortserve::WordPiece& tokenizer, int64_t id) {
  if (id >= 0 && static_cast<size_t>(id) < tokenizer.config().vocab.size()) return true;
  for (const auto& [content, added] : tokenizer.config().added_tokens) {
    if (added == id) return true;
  }
  return false;
}

// transformers' subword rule, restated: with a continuing prefix, the token's string (added tokens first, as HF's
// id_to_token) is not as long as its span; without one, no space borders its start; never the unknown token.
// `chars`: the text's code points (decoded once per input).
int64_t ExpectedSubword(const ortserve::WordPiece& tokenizer, const std::vector<char32_t>& chars, int64_t id,
                        const ortserve::WordPieceSpan& span) {
  const ortserve::WordPieceConfig& config = tokenizer.config();
  if (id == config.unk_id) return 0;
  if (config.continuing_subword_prefix.empty()) {
    if (span.start == 0) return 0;
    const auto at = static_cast<size_t>(span.start);
    return chars[at - 1] != U' ' && (at >= chars.size() || chars[at] != U' ') ? 1 : 0;
  }
  const std::string* token = nullptr;
  for (const auto& [content, added] : config.added_tokens) {
    if (added == id && token == nullptr) token = &content;
  }
  if (token == nullptr) token = &config.vocab.at(static_cast<size_t>(id));
  return static_cast<int64_t>(ortserve::wordpiece_internal::CountCodePoints(*token)) != span.end - span.start ? 1 : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Setup& setup = Setups()[data[0] % 4];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const ortserve::WordPiece& tokenizer = *setup.limited;
  const ortserve::WordPieceConfig& config = tokenizer.config();

  const std::vector<int64_t> ids = tokenizer.Encode(text);
  Check(ids.size() >= 2 && ids.size() <= config.max_len, "length outside 2..max_len");
  Check(ids.front() == config.cls_id && ids.back() == config.sep_id, "not [CLS] ... [SEP]");
  for (const int64_t id : ids) Check(Known(tokenizer, id), "an id outside the vocabulary and the added tokens");

  std::vector<int64_t> reused(37, -5);
  tokenizer.Encode(text, reused);
  Check(reused == ids, "Encode into a used buffer differs");

  const std::vector<int64_t> full = setup.unlimited->Encode(text);
  const size_t tokens = std::min(full.size() - 2, config.max_len - 2);
  std::vector<int64_t> truncated(full.begin(), full.begin() + 1 + static_cast<std::ptrdiff_t>(tokens));
  truncated.push_back(config.sep_id);
  Check(ids == truncated, "early truncation differs from tokenize-then-truncate");

  std::vector<int64_t> span_ids{9};
  std::vector<ortserve::WordPieceSpan> spans(3);
  int64_t chars_read = -1;
  tokenizer.EncodeWithSpans(text, span_ids, spans, chars_read);
  Check(span_ids == ids && spans.size() == ids.size(), "EncodeWithSpans differs from Encode");
  std::vector<int64_t> full_ids;
  std::vector<ortserve::WordPieceSpan> full_spans;
  int64_t text_chars = -1;
  setup.unlimited->EncodeWithSpans(text, full_ids, full_spans, text_chars);
  Check(full_ids == full, "unlimited EncodeWithSpans differs from Encode");
  std::vector<char32_t> chars;
  for (size_t i = 0; i < text.size();) chars.push_back(ortserve::wordpiece_internal::NextCodePoint(text, i));
  int64_t last_start = 0, last_end = 0;
  for (size_t k = 0; k < spans.size(); ++k) {
    const ortserve::WordPieceSpan& span = spans[k];
    const bool outer = k == 0 || k + 1 == spans.size();
    Check(span.special == (outer ? 1 : 0), "special is not [CLS]/[SEP]'s alone");
    Check(span.is_subword == ExpectedSubword(tokenizer, chars, ids[k], span), "is_subword not transformers' rule");
    if (outer) {
      Check(span.start == 0 && span.end == 0, "[CLS]/[SEP] not at (0, 0)");
      continue;
    }
    const ortserve::WordPieceSpan& whole = full_spans[k];
    Check(span.start == whole.start && span.end == whole.end && span.is_subword == whole.is_subword,
          "truncation changed a span");
    Check(span.start >= last_start && span.start < span.end && span.end <= text_chars, "a span out of order");
    last_start = span.start;
    last_end = std::max(last_end, span.end);
  }
  const bool cut_tokens = full_ids.size() > ids.size();
  Check(chars_read == (cut_tokens ? last_end : text_chars), "chars_read is neither the text nor the last end");

  if (config.max_len >= 3) {
    const size_t cut = text.empty() ? 0 : static_cast<unsigned char>(text[0]) % (text.size() + 1);
    const std::string_view first = text.substr(0, cut), second = text.substr(cut);
    std::vector<int64_t> pair{1, 2, 3};
    const int starts = tokenizer.EncodePair(first, second, pair);
    const std::vector<int64_t> a = setup.unlimited->Encode(first), b = setup.unlimited->Encode(second);
    const ortserve::PairLengths keep = ortserve::LongestFirst(a.size() - 2, b.size() - 2, config.max_len - 3);
    std::vector<int64_t> expected{config.cls_id};
    expected.insert(expected.end(), a.begin() + 1, a.begin() + 1 + static_cast<std::ptrdiff_t>(keep.first));
    expected.push_back(config.sep_id);
    expected.insert(expected.end(), b.begin() + 1, b.begin() + 1 + static_cast<std::ptrdiff_t>(keep.second));
    expected.push_back(config.sep_id);
    Check(pair == expected, "a pair differs from its texts tokenized whole, then cut longest first");
    Check(starts == static_cast<int>(keep.first) + 2, "the second text does not begin after the first [SEP]");
    Check(pair.size() <= config.max_len, "a pair longer than max_len");
  }
  return 0;
}
