// A ModelInfer from its decoded call to its reply, for both front ends: which version answers it (a pin, else the
// canary bucket and the split), whether that version takes it (CheckOutputs) and its lease; then the reply's tensors
// from the batcher's result. The native front end runs it on its gRPC threads, the Python front end in one crossing
// (call_path_bindings.cc, `engine_ext.start_call`), so a call is routed, checked and answered by one implementation.
//
//   auto routed = RouteCall(routes.Load(), model, pinned, routing_key, call);  // RoutedCall (leased) | CallMiss
//   ... batcher().Submit(...) ... done: ReplyOf(result, call, *routed.served, tokens, model, routed.version_name);
//   routed.version->Release();
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "call.h"
#include "infer_wire.h"
#include "route.h"
#include "served_version.h"

namespace ortserve {

// Why the data plane does not answer a call itself: the Python side names the refusal (an unknown model, a version
// not loaded: the manager knows why) or serves it (a version whose texts HF `tokenizers` tokenizes).
// kPassthroughReasons names each; the native front end counts its calls passed on by them.
enum class Passthrough : size_t {
  kUnparsable,         // the body is not a ModelInferRequest (Python answers INVALID_ARGUMENT)
  kModelNotNative,     // not in the route table: unknown, or still loading
  kBadInput,           // the rules refuse the call (Python names it), or it asks classification of a version
                       // without labels
  kNoRoutableVersion,  // the split routes the key nowhere
  kVersionNotNative,   // the pinned version is not loaded, or the version's texts are tokenized in Python
  kVersionDraining,    // the version stopped taking calls between the route lookup and the lease
};
inline constexpr const char* kPassthroughReasons[] = {"unparsable",          "model_not_native",
                                                      "bad_input",           "no_routable_version",
                                                      "version_not_native",  "version_draining"};
static_assert(std::size(kPassthroughReasons) == static_cast<size_t>(Passthrough::kVersionDraining) + 1);

// A call routed to a version and holding its lease: Release() it once answered.
struct RoutedCall {
  std::shared_ptr<ServedVersion> version;
  std::shared_ptr<const RouteTable> table;  // keeps `served` alive
  const VersionOutput* served = nullptr;    // what the version takes and answers
  std::string version_name;
  std::string route;  // "pin" or "bucket N"
  int bucket = -1;    // N; -1 for a pin
};

// A call RouteCall did not lease a version for: why, and the rules' refusal when CheckOutputs refused it.
struct CallMiss {
  Passthrough reason;
  std::optional<WireError> refused;
};

// The version for a decoded call (`pinned`, else Bucket(model, routing_key) through the split), checked against what
// it answers (CheckOutputs) and leased; a CallMiss when the table cannot serve it here. `caller_tokenizes`: a version
// on HF tokenizers is routed too (the Python front end tokenizes its texts), else it is a miss.
std::variant<RoutedCall, CallMiss> RouteCall(std::shared_ptr<const RouteTable> table, const std::string& model,
                                             std::string_view pinned, std::string_view routing_key,
                                             const DecodedCall& call, bool caller_tokenizes = false);

// The reply's tensors for a routed call's result (EncodeOutputs), after one check: a classification answer needs one
// label per column, else the result becomes INTERNAL naming both. A result not OK gives none.
std::vector<ReplyTensor> ReplyOf(InferResult& result, const DecodedCall& call, const VersionOutput& served,
                                 const TokenRows* tokens, std::string_view model, std::string_view version);

}  // namespace ortserve
