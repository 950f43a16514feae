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

}  // namespace

std::optional<WireError> CheckOutputs(const DecodedCall& call, const VersionOutput& version, std::string_view model) {
  if (version.pairs && call.pairs.empty()) {
    return Invalid("missing input " + Quote(kPairInput) + ": model " + Quote(model) + " takes pairs of texts; send " +
                   Quote(kTextInput) + " [N] and " + Quote(kPairInput) + " [N] (one per text) or [1] (one for all)");
  }
  if (!version.pairs && !call.pairs.empty()) {
    return Invalid("unexpected input " + Quote(kPairInput) + ": model " + Quote(model) + " (" + Article(version.kind) +
                   ") takes " + Quote(kTextInput) + " alone, not pairs");
  }
  const bool reranker = !version.score.empty(), tokens = version.kind == kTokenClassifier;
  if (call.aggregation && !tokens) {
    return Invalid("request parameter " + Quote(kAggregationParam) + " applies to a token classifier's " +
                   Quote(kEntitiesOutput) + "; model " + Quote(model) + " is " + Article(version.kind));
  }
  // What the version answers besides its output.
  std::vector<std::string_view> also;
  if (reranker) also.push_back(kClassifierOutput);
  if (tokens) also = {kTokenLogitsOutput, kTokenOffsetsOutput, kCharsReadOutput};
  for (const RequestedOutput& out : call.outputs) {
    if (out.name != version.name && std::find(also.begin(), also.end(), out.name) == also.end()) {
      std::string names = Quote(version.name);
      for (std::string_view name : also) names += ", " + Quote(name);
      return Invalid("unknown output " + Quote(out.name) + " requested; model " + Quote(model) + " (" +
                     Article(version.kind) + ") has outputs [" + names + "]");
    }
    if (out.classes > 0 && (version.kind != "classifier" || out.name != kClassifierOutput)) {
      return Invalid("output " + Quote(out.name) + " does not take parameter " + Quote(kClassificationParam) +
                     ": model " + Quote(model) + " is " + Article(version.kind) + "; classification applies to a "
                     "classifier's " + Quote(kClassifierOutput));
    }
  }
  return std::nullopt;
}

}  // namespace ortserve
