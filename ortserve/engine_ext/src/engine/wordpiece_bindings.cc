// Python bindings for ortserve::WordPiece: strs in, one int64 numpy array per text out, the GIL released
// while tokenizing.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <string_view>

#include "py_text.h"
#include "wordpiece.h"

namespace nb = nanobind;
using namespace nb::literals;
using ortserve::WordPiece;
using ortserve::WordPieceConfig;

namespace {

using IdArray = nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>;
using SpanArray = nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>;

nb::list Encode(const WordPiece& tokenizer, nb::handle texts) {
  std::vector<nb::object> keep;  // holds the strs the views point into
  const std::vector<std::string_view> views = ortserve::TextViews(texts, keep);
  std::vector<std::vector<int64_t>> ids(views.size());
  {
    nb::gil_scoped_release release;
    for (size_t i = 0; i < views.size(); ++i) tokenizer.Encode(views[i], ids[i]);
  }
  nb::list result;
  for (std::vector<int64_t>& row : ids) {
    // The array owns the vector's buffer: moved, not copied.
    auto* owned = new std::vector<int64_t>(std::move(row));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
    const size_t shape[1] = {owned->size()};
    result.append(IdArray(owned->data(), 1, shape, owner).cast());
  }
  return result;
}

// One pair per index of texts and pairs (equal lengths): (ids, where the second text begins).
nb::list EncodePairs(const WordPiece& tokenizer, nb::handle texts, nb::handle pairs) {
  std::vector<nb::object> keep;
  const std::vector<std::string_view> first = ortserve::TextViews(texts, keep);
  const std::vector<std::string_view> second = ortserve::TextViews(pairs, keep);
  if (first.size() != second.size()) {
    throw nb::value_error(("encode_pairs: " + std::to_string(first.size()) + " texts and " +
                           std::to_string(second.size()) + " pairs").c_str());
  }
  std::vector<std::vector<int64_t>> ids(first.size());
  std::vector<int> starts(first.size());
  {
    nb::gil_scoped_release release;
    for (size_t i = 0; i < first.size(); ++i) starts[i] = tokenizer.EncodePair(first[i], second[i], ids[i]);
  }
  nb::list result;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto* owned = new std::vector<int64_t>(std::move(ids[i]));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
    const size_t shape[1] = {owned->size()};
    result.append(nb::make_tuple(IdArray(owned->data(), 1, shape, owner).cast(), starts[i]));
  }
  return result;
}

// (ids, spans [T, 4]: start, end, is_subword, special, in code points of the str; chars_read) per text.
nb::list EncodeSpans(const WordPiece& tokenizer, nb::handle texts) {
  std::vector<nb::object> keep;
  const std::vector<std::string_view> views = ortserve::TextViews(texts, keep);
  std::vector<std::vector<int64_t>> ids(views.size());
  std::vector<std::vector<ortserve::WordPieceSpan>> spans(views.size());
  std::vector<int64_t> read(views.size());
  {
    nb::gil_scoped_release release;
    for (size_t i = 0; i < views.size(); ++i) tokenizer.EncodeWithSpans(views[i], ids[i], spans[i], read[i]);
  }
  static_assert(sizeof(ortserve::WordPieceSpan) == 4 * sizeof(int64_t), "a span is a row of four int64s");
  nb::list result;
  for (size_t i = 0; i < views.size(); ++i) {
    auto* owned_ids = new std::vector<int64_t>(std::move(ids[i]));
    nb::capsule ids_owner(owned_ids, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
    const size_t ids_shape[1] = {owned_ids->size()};
    auto* owned_spans = new std::vector<ortserve::WordPieceSpan>(std::move(spans[i]));
    nb::capsule spans_owner(owned_spans,
                            [](void* p) noexcept { delete static_cast<std::vector<ortserve::WordPieceSpan>*>(p); });
    const size_t spans_shape[2] = {owned_spans->size(), 4};
    result.append(nb::make_tuple(IdArray(owned_ids->data(), 1, ids_shape, ids_owner).cast(),
                                 SpanArray(reinterpret_cast<int64_t*>(owned_spans->data()), 2, spans_shape,
                                           spans_owner).cast(),
                                 read[i]));
  }
  return result;
}

}  // namespace

void BindWordPiece(nb::module_& m) {
  m.def(
      "longest_first",
      [](size_t first, size_t second, size_t budget) {
        const ortserve::PairLengths keep = ortserve::LongestFirst(first, second, budget);
        return std::make_pair(keep.first, keep.second);
      },
      "first"_a, "second"_a, "budget"_a, "Tokens of each text of a pair that HF's longest-first truncation keeps.");
  m.def("wordpiece_tables_version", &ortserve::WordPieceTablesVersion,
        "The tokenizers release the native WordPiece's Unicode tables were probed from.");

  nb::class_<WordPiece>(m, "WordPiece", "Native BERT WordPiece tokenizer; encode() releases the GIL.")
      .def(
          "__init__",
          [](WordPiece* self, std::vector<std::string> vocab, int64_t unk_id, int64_t cls_id, int64_t sep_id,
             std::vector<std::pair<std::string, int64_t>> added_tokens, size_t max_len,
             std::string continuing_subword_prefix, size_t max_input_chars_per_word, bool clean_text,
             bool handle_chinese_chars, bool strip_accents, bool lowercase) {
            WordPieceConfig config;
            config.vocab = std::move(vocab);
            config.unk_id = unk_id;
            config.cls_id = cls_id;
            config.sep_id = sep_id;
            config.added_tokens = std::move(added_tokens);
            config.max_len = max_len;
            config.continuing_subword_prefix = std::move(continuing_subword_prefix);
            config.max_input_chars_per_word = max_input_chars_per_word;
            config.clean_text = clean_text;
            config.handle_chinese_chars = handle_chinese_chars;
            config.strip_accents = strip_accents;
            config.lowercase = lowercase;
            new (self) WordPiece(std::move(config));
          },
          "vocab"_a, nb::kw_only(), "unk_id"_a, "cls_id"_a, "sep_id"_a, "added_tokens"_a,
          "max_len"_a, "continuing_subword_prefix"_a = "##", "max_input_chars_per_word"_a = 100,
          "clean_text"_a = true, "handle_chinese_chars"_a = true, "strip_accents"_a = true,
          "lowercase"_a = true)
      .def("encode", &Encode, "texts"_a, "Ids of each text: [CLS], at most max_len - 2 tokens, [SEP].")
      .def("encode_pairs", &EncodePairs, "texts"_a, "pairs"_a,
           "(ids, start of the second text) of each pair: [CLS] a [SEP] b [SEP], longest-first truncated to "
           "max_len.")
      .def("encode_spans", &EncodeSpans, "texts"_a,
           "(ids, spans, chars_read) per text: encode()'s ids; spans, int64 [T, 4] rows of start, end (HF's offsets,\n"
           "in code points of the str; (0, 0) for [CLS]/[SEP]), is_subword (transformers' rule: continues a word), special (HF's\n"
           "special_tokens_mask); chars_read, the whole text's length, or where the last kept non-special token ends\n"
           "when truncation cut tokens.")
      .def("token_to_id", &WordPiece::TokenToId, "token"_a)
      .def_prop_ro("vocab_size", &WordPiece::VocabSize)
      .def_prop_ro("unk_id", [](const WordPiece& self) { return self.config().unk_id; })
      .def_prop_ro("cls_id", [](const WordPiece& self) { return self.config().cls_id; })
      .def_prop_ro("sep_id", [](const WordPiece& self) { return self.config().sep_id; })
      .def_prop_ro("max_len", [](const WordPiece& self) { return self.config().max_len; })
      .def("__repr__", [](const WordPiece& self) {
        return "WordPiece(vocab_size=" + std::to_string(self.VocabSize()) +
               ", max_len=" + std::to_string(self.config().max_len) + ")";
      });
}
