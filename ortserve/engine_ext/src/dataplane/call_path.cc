#include "call_path.h"

#include <algorithm>
#include <utility>

namespace ortserve {
namespace {

// The call asks a classification output (top-k over the version's labels).
bool AsksClassification(const DecodedCall& call) {
  return std::any_of(call.outputs.begin(), call.outputs.end(), [](const RequestedOutput& o) { return o.classes > 0; });
}

}  // namespace

std::variant<RoutedCall, CallMiss> RouteCall(std::shared_ptr<const RouteTable> table, const std::string& model,
                                             std::string_view pinned, std::string_view routing_key,
                                             const DecodedCall& call, bool caller_tokenizes) {
  const auto found = table->models.find(model);
  if (found == table->models.end()) return CallMiss{Passthrough::kModelNotNative, std::nullopt};
  const ModelRoute& route = found->second;
  RoutedCall routed;
  if (!pinned.empty()) {
    routed.version_name = pinned;
    routed.route = "pin";
  } else {
    const int bucket = Bucket(model, routing_key);
    const std::string* picked = route.split.Pick(bucket);
    if (picked == nullptr) return CallMiss{Passthrough::kNoRoutableVersion, std::nullopt};
    routed.version_name = *picked;
    routed.route = "bucket " + std::to_string(bucket);
    routed.bucket = bucket;
  }
  const auto version = route.versions.find(routed.version_name);
  if (version == route.versions.end() || !version->second ||
      (!caller_tokenizes && !version->second->batcher().tokenizes())) {
    return CallMiss{Passthrough::kVersionNotNative, std::nullopt};
  }
  const VersionOutput& served = route.OutputOf(routed.version_name);
  if (served.labels.empty() && AsksClassification(call)) return CallMiss{Passthrough::kBadInput, std::nullopt};
  if (auto refused = CheckOutputs(call, served, model)) return CallMiss{Passthrough::kBadInput, std::move(refused)};
  if (!version->second->Acquire()) return CallMiss{Passthrough::kVersionDraining, std::nullopt};
  routed.version = version->second;
  routed.served = &served;
  routed.table = std::move(table);
  return routed;
}

std::vector<ReplyTensor> ReplyOf(InferResult& result, const DecodedCall& call, const VersionOutput& served,
                                 const TokenRows* tokens, std::string_view model, std::string_view version) {
  if (result.code != Code::kOk) return {};
  if (AsksClassification(call) && served.labels.size() != static_cast<size_t>(result.columns)) {
    result.code = Code::kInternal;
    result.message = "model '" + std::string(model) + "' version '" + std::string(version) + "' returned " +
                     std::to_string(result.columns) + " columns for " + std::to_string(served.labels.size()) +
                     " labels";
    return {};
  }
  return EncodeOutputs(call, served, result.logits.data(), result.rows, result.columns, tokens);
}

}  // namespace ortserve
