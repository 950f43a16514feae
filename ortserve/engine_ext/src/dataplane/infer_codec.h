// KServe V2 ModelInfer <-> texts and outputs for the native front end: the fast path of service/codec.py only.
// A request the Python codec would refuse (or anything unusual) is "not mine": DecodeRequest returns nullopt (or
// OutputsFit false) and the front end proxies the call to the Python server, which answers with its own message.
// So this file never writes an error message: service/codec.py stays the one implementation of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "grpc_service.pb.h"
#include "route.h"

namespace ortserve {

// One requested output (codec.RequestedOutput): its name and the classification extension's k (0: the tensor).
struct RequestedOutput {
  std::string_view name;
  int64_t classes = 0;
};

// A request on the native fast path; the views point into the request.
struct DecodedRequest {
  std::vector<std::string_view> texts;
  std::vector<RequestedOutput> outputs;  // as requested; empty: the version's output tensor
  bool probabilities = false;            // request parameter scores = "probabilities"
};

// The request when it is exactly what codec.decode_texts, requested_outputs, score_mode and the routing_key
// check accept: one input TEXT, BYTES, shape [N] or [N, 1], 1 <= N <= max_texts, N elements in
// contents.bytes_contents or in the one raw_input_contents entry (checked 4-byte little-endian length prefixes),
// each strict UTF-8; at most 8 outputs, each name once, a `classification` parameter an int64 or uint64 >= 1;
// parameter scores absent, or "logits" / "probabilities" with a classification output; routing_key absent or a
// string. What the outputs are checked against (the version) comes later: OutputsFit.
std::optional<DecodedRequest> DecodeRequest(const inference::ModelInferRequest& request, long long max_texts);

// codec.check_outputs passes for this version: every requested output is the one it answers, and classification
// only where it has labels (a classifier whose labels the route table carries).
bool OutputsFit(const DecodedRequest& request, const VersionOutput& served);

// Strict UTF-8 as Python's bytes.decode("utf-8"): no overlongs, no surrogates, nothing past U+10FFFF.
bool IsValidUtf8(std::string_view bytes);

// codec.wants_raw_output: the first output with a bool `binary_data` parameter decides; raw by default.
bool WantsRawOutput(const inference::ModelInferRequest& request);

// codec.encode_outputs for a request that fits `served` (OutputsFit): the version's output FP32 [rows, columns]
// when none was requested, else each requested output, a classification one as BYTES [rows, min(k, labels)]
// "score:index:label" strings (classification.h). Raw: little-endian floats / length-prefixed strings in
// raw_output_contents; else contents.fp32_contents / bytes_contents. A classification output needs
// served.labels.size() == columns (the caller checks).
void EncodeOutputs(inference::ModelInferResponse& response, const DecodedRequest& request,
                   const VersionOutput& served, const float* values, int rows, int columns, bool raw);

// The routing_key request parameter when it is set as a string ("" when absent).
std::string_view RoutingKeyParam(const inference::ModelInferRequest& request);

}  // namespace ortserve
