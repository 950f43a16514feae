// CheckOutputs: a decoded call's inputs and outputs against what the leased version takes and answers (infer_wire.h).
#include <algorithm>
#include <string>

#include "infer_wire.h"
#include "wire_text.h"

namespace ortserve {
namespace {

std::string Article(std::string_view kind) {
  const bool vowel = !kind.empty() && std::string_view("aeiou").find(kind[0]) != std::string_view::npos;
  return std::string(vowel ? "an " : "a ") + std::string(kind) + " model";
}

// prompt_name: one of the version's prompts; the message lists them, or says it keeps none.
std::optional<WireError> CheckPrompt(const DecodedCall& call, const VersionOutput& version, std::string_view model) {
  if (!call.prompt_name || version.prompts.count(std::string(*call.prompt_name)) > 0) return std::nullopt;
  std::string known;
  for (const auto& [name, text] : version.prompts) known += (known.empty() ? "" : ", ") + PyRepr(name);
  return Invalid("request parameter " + Quote(kPromptNameParam) + " " + PyRepr(*call.prompt_name) +
                 " is not a prompt of model " + Quote(model) +
                 (known.empty() ? " (its bundle keeps no prompts: put the prompt in front of each text)"
                                : " (its prompts: " + known + ")"));
}

// What a sparse embedding model answers instead of a dense one's widths and compact types; "" for any other.
std::string SparseHint(const VersionOutput& version) {
  if (!version.sparse) return "";
  return " (a sparse embedding's width is its vocabulary, answered as " + Quote(kSparseIndicesOutput) + " and " +
         Quote(kSparseValuesOutput) + " in float; bound its entries with " + Quote(kTopKParam) + " or " +
         Quote(kThresholdParam) + ")";
}

// top_k and threshold: a sparse embedding model's only.
std::optional<WireError> CheckSparseBounds(const DecodedCall& call, const VersionOutput& version,
                                           std::string_view model) {
  if (!call.sparse_bound || version.sparse) return std::nullopt;
  return Invalid("request parameters " + Quote(kTopKParam) + " and " + Quote(kThresholdParam) + " apply to a sparse "
                 "embedding model's " + Quote(kSparseValuesOutput) + "; model " + Quote(model) + " is " +
                 Article(version.kind));
}

// dimensions: an embedding model's width, its own or one it was trained to be truncated to (the message lists them).
std::optional<WireError> CheckDimensions(const DecodedCall& call, const VersionOutput& version,
                                         std::string_view model) {
  if (call.dimensions == 0) return std::nullopt;
  const std::string what = "request parameter " + Quote(kDimensionsParam);
  if (version.widths.empty()) {
    return Invalid(what + " applies to an embedding model's " + Quote(kEmbeddingOutput) + "; model " + Quote(model) +
                   " is " + Article(version.kind) + SparseHint(version));
  }
  if (std::find(version.widths.begin(), version.widths.end(), call.dimensions) != version.widths.end()) {
    return std::nullopt;
  }
  const std::string asked = what + " " + std::to_string(call.dimensions) + " is refused: model " + Quote(model);
  const std::string width = std::to_string(version.widths.front());
  if (version.widths.size() == 1) {
    return Invalid(asked + " answers " + width + " dimensions and its bundle does not record that it was trained to "
                   "be truncated (Matryoshka); send " + width + " or leave " + Quote(kDimensionsParam) + " out");
  }
  std::string narrower, allowed = width;
  for (size_t i = 1; i < version.widths.size(); ++i) {
    narrower += (i > 1 ? ", " : "") + std::to_string(version.widths[i]);
  }
  return Invalid(asked + " answers " + width + " dimensions and was trained to be truncated (Matryoshka) to " +
                 narrower + " only: send one of " + allowed + ", " + narrower);
}

// embedding_type: float for every version; a compact type for an embedding model; int8 and uint8 where its manifest
// recorded the ranges of the width the call gets.
std::optional<WireError> CheckEmbeddingType(const DecodedCall& call, const VersionOutput& version,
                                            std::string_view model) {
  if (call.embedding_type == EmbeddingType::kFloat) return std::nullopt;
  const std::string what = "request parameter " + Quote(kEmbeddingTypeParam) + " " +
                           PyRepr(EmbeddingTypeName(call.embedding_type));
  if (version.widths.empty()) {
    return Invalid(what + " applies to an embedding model's " + Quote(kEmbeddingOutput) + "; model " + Quote(model) +
                   " is " + Article(version.kind) + SparseHint(version));
  }
  if (!NeedsRanges(call.embedding_type)) return std::nullopt;
  const int64_t width = call.dimensions > 0 ? call.dimensions : version.widths.front();
  const auto found = version.ranges.find(width);
  if (found != version.ranges.end() && found->second.size() == static_cast<size_t>(2 * width)) return std::nullopt;
  return Invalid(what + " is refused: model " + Quote(model) + "'s bundle records no calibrated ranges" +
                 (version.ranges.empty() ? std::string() : " at " + std::to_string(width) + " dimensions") +
                 " (embedding_ranges, written at import); ask for 'float', 'binary' or 'ubinary', or re-import it");
}

}  // namespace

std::vector<std::string> PromptedTexts(const DecodedCall& call, const VersionOutput& version) {
  std::vector<std::string> texts;
  if (!call.prompt_name) return texts;
  const auto found = version.prompts.find(std::string(*call.prompt_name));
  if (found == version.prompts.end()) return texts;  // CheckOutputs refuses it first
  texts.reserve(call.texts.size());
  for (std::string_view text : call.texts) {
    std::string& prompted = texts.emplace_back(found->second);
    prompted.append(text);
  }
  return texts;
}

std::optional<WireError> CheckOutputs(const DecodedCall& call, const VersionOutput& version, std::string_view model) {
  if (version.pairs && call.pairs.empty()) {
    return Invalid("missing input " + Quote(kPairInput) + ": model " + Quote(model) + " takes pairs of texts; send " +
                   Quote(kTextInput) + " [N] and " + Quote(kPairInput) + " [N] (one per text) or [1] (one for all)");
  }
  if (!version.pairs && !call.pairs.empty()) {
    return Invalid("unexpected input " + Quote(kPairInput) + ": model " + Quote(model) + " (" + Article(version.kind) +
                   ") takes " + Quote(kTextInput) + " alone, not pairs");
  }
  if (call.aggregation && !version.per_token) {
    return Invalid("request parameter " + Quote(kAggregationParam) + " applies to a token classifier's " +
                   Quote(kEntitiesOutput) + "; model " + Quote(model) + " is " + Article(version.kind));
  }
  const std::vector<std::string>& also = version.also;
  for (const RequestedOutput& out : call.outputs) {
    if (out.name != version.name && std::find(also.begin(), also.end(), out.name) == also.end()) {
      std::string names = Quote(version.name);
      for (std::string_view name : also) names += ", " + Quote(name);
      return Invalid("unknown output " + Quote(out.name) + " requested; model " + Quote(model) + " (" +
                     Article(version.kind) + ") has outputs [" + names + "]");
    }
    if (out.classes > 0 && out.name != kClassifierOutput) {
      return Invalid("output " + Quote(out.name) + " does not take parameter " + Quote(kClassificationParam) +
                     ": model " + Quote(model) + " is " + Article(version.kind) + "; classification applies to a "
                     "classifier's " + Quote(kClassifierOutput));
    }
  }
  if (auto error = CheckPrompt(call, version, model)) return error;
  if (auto error = CheckDimensions(call, version, model)) return error;
  if (auto error = CheckEmbeddingType(call, version, model)) return error;
  return CheckSparseBounds(call, version, model);
}

}  // namespace ortserve
