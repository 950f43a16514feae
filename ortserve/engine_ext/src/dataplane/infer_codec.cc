#include "infer_codec.h"

#include <string>
#include <utility>

namespace ortserve {
namespace {

WireParam Param(const google::protobuf::Map<std::string, inference::InferParameter>& params, const char* key) {
  WireParam out;
  const auto found = params.find(key);
  if (found == params.end()) return out;
  out.present = true;
  const inference::InferParameter& value = found->second;
  switch (value.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      out.kind = WireParam::Kind::kBool;
      out.bool_value = value.bool_param();
      break;
    case inference::InferParameter::kInt64Param:
      out.kind = WireParam::Kind::kInt64;
      out.int64_value = value.int64_param();
      break;
    case inference::InferParameter::kStringParam:
      out.kind = WireParam::Kind::kString;
      out.string_value = value.string_param();
      break;
    case inference::InferParameter::kDoubleParam:
      out.kind = WireParam::Kind::kDouble;
      out.double_value = value.double_param();
      break;
    case inference::InferParameter::kUint64Param:
      out.kind = WireParam::Kind::kUint64;
      out.uint64_value = value.uint64_param();
      break;
    case inference::InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return out;
}

}  // namespace

WireRequest ToWire(const inference::ModelInferRequest& request) {
  WireRequest wire;
  wire.inputs.reserve(static_cast<size_t>(request.inputs_size()));
  for (const auto& tensor : request.inputs()) {
    WireInput& in = wire.inputs.emplace_back();
    in.name = tensor.name();
    in.datatype = tensor.datatype();
    in.shape.assign(tensor.shape().begin(), tensor.shape().end());
    in.has_contents = tensor.has_contents();
    in.bytes_contents.reserve(static_cast<size_t>(tensor.contents().bytes_contents_size()));
    for (const std::string& element : tensor.contents().bytes_contents()) in.bytes_contents.emplace_back(element);
  }
  wire.outputs.reserve(static_cast<size_t>(request.outputs_size()));
  for (const auto& out : request.outputs()) {
    WireOutput& o = wire.outputs.emplace_back();
    o.name = out.name();
    o.classification = Param(out.parameters(), kClassificationParam);
    o.binary_data = Param(out.parameters(), kBinaryDataParam);
  }
  for (const std::string& raw : request.raw_input_contents()) wire.raw_input_contents.emplace_back(raw);
  wire.scores = Param(request.parameters(), kScoresParam);
  wire.routing_key = Param(request.parameters(), kRoutingKeyParam);
  wire.aggregation = Param(request.parameters(), kAggregationParam);
  wire.priority = Param(request.parameters(), kPriorityParam);
  wire.prompt_name = Param(request.parameters(), kPromptNameParam);
  wire.dimensions = Param(request.parameters(), kDimensionsParam);
  wire.embedding_type = Param(request.parameters(), kEmbeddingTypeParam);
  wire.top_k = Param(request.parameters(), kTopKParam);
  wire.threshold = Param(request.parameters(), kThresholdParam);
  return wire;
}

void WriteOutputs(inference::ModelInferResponse& response, std::vector<ReplyTensor>&& tensors) {
  for (ReplyTensor& t : tensors) {
    auto* out = response.add_outputs();
    out->set_name(std::move(t.name));
    out->set_datatype(std::move(t.datatype));
    for (int64_t dim : t.shape) out->add_shape(dim);
    if (t.raw) {
      *response.add_raw_output_contents() = std::move(t.raw_bytes);
    } else if (out->datatype() == "FP32") {
      out->mutable_contents()->mutable_fp32_contents()->Add(t.fp32.begin(), t.fp32.end());
    } else if (out->datatype() == "INT64") {
      out->mutable_contents()->mutable_int64_contents()->Add(t.int64.begin(), t.int64.end());
    } else if (out->datatype() == "INT8") {  // V2 keeps INT8 in int_contents, UINT8 in uint_contents
      for (int64_t v : t.int64) out->mutable_contents()->add_int_contents(static_cast<int32_t>(v));
    } else if (out->datatype() == "UINT8") {
      for (int64_t v : t.int64) out->mutable_contents()->add_uint_contents(static_cast<uint32_t>(v));
    } else {
      auto* contents = out->mutable_contents()->mutable_bytes_contents();
      contents->Reserve(static_cast<int>(t.bytes.size()));
      for (std::string& e : t.bytes) contents->Add(std::move(e));
    }
  }
}

}  // namespace ortserve
