// What the wire rules' bindings share (wire_bindings.cc, call_path_bindings.cc, completions_bindings.cc): a call's
// parts as Python hands them over, turned into the rules' views, and the rules' results turned into Python objects.
// Every function here runs with the GIL held.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infer_wire.h"

namespace ortserve {

// A call the rules accepted, owning its texts and names (the views of DecodedCall point into the request, which
// Python frees after the call to decode_call).
struct OwnedWireCall {
  std::vector<std::string> texts;
  std::vector<std::string> pairs;  // with TEXT_PAIR: TEXT's elements, `texts` then the queries (DecodedCall)
  std::vector<std::pair<std::string, int64_t>> outputs;
  bool probabilities = false;
  bool raw_output = true;
  std::string routing_key;
  std::optional<Aggregation> aggregation;
  std::optional<bool> bulk;
  std::optional<std::string> prompt_name;
  int64_t dimensions = 0;
  EmbeddingType embedding_type = EmbeddingType::kFloat;
  int64_t top_k = 0;
  double threshold = 0;
  bool sparse_bound = false;

  DecodedCall View() const {
    DecodedCall call;
    for (const auto& text : texts) call.texts.emplace_back(text);
    for (const auto& text : pairs) call.pairs.emplace_back(text);
    for (const auto& [name, k] : outputs) call.outputs.push_back({name, k});
    call.probabilities = probabilities;
    call.raw_output = raw_output;
    call.routing_key = routing_key;
    call.aggregation = aggregation;
    call.bulk = bulk;
    if (prompt_name) call.prompt_name = *prompt_name;
    call.dimensions = dimensions;
    call.embedding_type = embedding_type;
    call.top_k = top_k;
    call.threshold = threshold;
    call.sparse_bound = sparse_bound;
    return call;
  }
};


// A bytes object's contents (valid while it lives).
std::string_view BytesView(nanobind::handle bytes);
// A str's UTF-8, cached by CPython inside the object (valid while it lives).
std::string_view Utf8(nanobind::handle text);
// None (absent), or (oneof field name or None, value) as InferParameter.WhichOneof and getattr give them.
WireParam ParamOf(nanobind::handle param);
nanobind::list Strs(const std::vector<std::string>& texts);

// A ModelInfer's parts as Python hands them over (decode_call's arguments), as views for the wire rules.
WireRequest RequestOf(nanobind::list inputs, nanobind::list outputs, nanobind::list raw_input_contents,
                      nanobind::handle scores, nanobind::handle routing_key, nanobind::handle aggregation,
                      nanobind::handle priority, nanobind::handle prompt_name, nanobind::handle dimensions,
                      nanobind::handle embedding_type, nanobind::handle top_k, nanobind::handle threshold);
// The headers PrepareCall reads, from the 9 strs of inference.CALL_HEADERS' order.
CallHeaders CallHeadersOf(nanobind::tuple headers);
OwnedWireCall Own(const DecodedCall& call);
// A token classifier's rows as Python gives them: [(spans int64 [T, 4] of start, end, is_subword, special;
// chars_read)] per row.
TokenRows TokenRowsOf(nanobind::handle rows);
// (trace_id, parent_span_id, sampled, tracestate), as parse_trace_context gives them.
nanobind::tuple TraceTuple(const TraceContext& trace);
// EncodeOutputs' tensors as Python reads them: [(name, datatype, shape tuple, raw, payload)], payload the raw bytes,
// else a list of floats, ints or bytes.
nanobind::list ReplyTensors(std::vector<ReplyTensor>& tensors);

}  // namespace ortserve
