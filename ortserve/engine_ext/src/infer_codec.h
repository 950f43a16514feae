// KServe V2 ModelInfer <-> texts and logits for the native front end: the fast path of service/codec.py only.
// A request the Python codec would refuse (or anything unusual) is "not mine": DecodeTexts returns nullopt and
// the front end proxies the call to the Python server, which answers with its own message. So this file never
// writes an error message: service/codec.py stays the one implementation of them.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "grpc_service.pb.h"

namespace ortserve {

// The texts (views into `request`) when it is exactly what codec.decode_texts, check_requested_outputs and
// the routing_key check accept: one input TEXT, BYTES, shape [N] or [N, 1], 1 <= N <= max_texts, N elements
// in contents.bytes_contents or in the one raw_input_contents entry (checked 4-byte little-endian length
// prefixes), each strict UTF-8, every requested output LOGITS, parameter routing_key absent or a string.
std::optional<std::vector<std::string_view>> DecodeTexts(const inference::ModelInferRequest& request,
                                                         long long max_texts);

// Strict UTF-8 as Python's bytes.decode("utf-8"): no overlongs, no surrogates, nothing past U+10FFFF.
bool IsValidUtf8(std::string_view bytes);

// codec.wants_raw_output: the first output with a bool `binary_data` parameter decides; raw by default.
bool WantsRawOutput(const inference::ModelInferRequest& request);

// codec.encode_logits: output LOGITS, FP32 [rows, labels]; raw little-endian bytes in raw_output_contents, or
// contents.fp32_contents when !raw.
void EncodeLogits(inference::ModelInferResponse& response, const float* logits, int rows, int labels, bool raw);

// The routing_key request parameter when it is set as a string ("" when absent).
std::string_view RoutingKeyParam(const inference::ModelInferRequest& request);

}  // namespace ortserve
