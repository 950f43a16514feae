#include "infer_codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "classification.h"

namespace ortserve {
namespace {

constexpr const char* kInput = "TEXT";
constexpr const char* kClassification = "classification";  // classification.CLASSIFICATION
constexpr const char* kScores = "scores";                  // classification.SCORES
constexpr int kMaxOutputs = 8;

bool LittleEndianHost() {
  const uint32_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

uint32_t ReadLe32(const unsigned char* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// codec.split_raw_bytes, with the same checks; false where Python raises.
bool SplitRaw(std::string_view buffer, std::vector<std::string_view>& out) {
  size_t offset = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(buffer.data());
  while (offset < buffer.size()) {
    if (buffer.size() - offset < 4) return false;
    const uint32_t size = ReadLe32(data + offset);
    offset += 4;
    if (size > buffer.size() - offset) return false;
    out.push_back(buffer.substr(offset, size));
    offset += size;
  }
  return true;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte (they exclude overlongs, surrogates)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (n - i < len) return false;
    if (s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

std::optional<DecodedRequest> DecodeRequest(const inference::ModelInferRequest& request, long long max_texts) {
  if (request.inputs_size() != 1) return std::nullopt;
  const auto& tensor = request.inputs(0);
  if (tensor.name() != kInput || tensor.datatype() != "BYTES") return std::nullopt;
  const auto& shape = tensor.shape();
  if (!(shape.size() == 1 || (shape.size() == 2 && shape[1] == 1))) return std::nullopt;
  const int64_t count = shape[0];
  if (count < 1 || count > max_texts) return std::nullopt;

  DecodedRequest decoded;
  std::vector<std::string_view>& texts = decoded.texts;
  // At most as many views as the message can hold (each raw element has a 4-byte length prefix): the declared count
  // is the caller's word, and reserving it would let a 30-byte call ask for terabytes.
  const size_t held = request.raw_input_contents_size() > 0
                          ? request.raw_input_contents(0).size() / 4
                          : static_cast<size_t>(tensor.contents().bytes_contents_size());
  texts.reserve(std::min(static_cast<size_t>(count), held));
  if (request.raw_input_contents_size() > 0) {
    if (tensor.has_contents() || request.raw_input_contents_size() != 1) return std::nullopt;
    if (!SplitRaw(request.raw_input_contents(0), texts)) return std::nullopt;
  } else {
    for (const std::string& element : tensor.contents().bytes_contents()) texts.emplace_back(element);
  }
  if (static_cast<int64_t>(texts.size()) != count) return std::nullopt;
  for (std::string_view text : texts) {
    if (!IsValidUtf8(text)) return std::nullopt;
  }

  // codec.requested_outputs. A version answers one output, so more than a few are never served: Python answers
  // those (and the duplicate check below stays cheap).
  if (request.outputs_size() > kMaxOutputs) return std::nullopt;
  bool any_classification = false;
  for (const auto& out : request.outputs()) {
    for (const RequestedOutput& seen : decoded.outputs) {
      if (seen.name == out.name()) return std::nullopt;  // requested twice
    }
    RequestedOutput wanted{out.name(), 0};
    const auto param = out.parameters().find(kClassification);
    if (param != out.parameters().end()) {
      const auto& value = param->second;
      if (value.parameter_choice_case() == inference::InferParameter::kInt64Param) {
        wanted.classes = value.int64_param();
      } else if (value.parameter_choice_case() == inference::InferParameter::kUint64Param) {
        const uint64_t k = value.uint64_param();
        wanted.classes = k > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                             ? std::numeric_limits<int64_t>::max()
                             : static_cast<int64_t>(k);
      } else {
        return std::nullopt;
      }
      if (wanted.classes < 1) return std::nullopt;
      any_classification = true;
    }
    decoded.outputs.push_back(wanted);
  }
  // codec.score_mode
  const auto scores = request.parameters().find(kScores);
  if (scores != request.parameters().end()) {
    if (scores->second.parameter_choice_case() != inference::InferParameter::kStringParam) return std::nullopt;
    const std::string& mode = scores->second.string_param();
    if (mode != "logits" && mode != "probabilities") return std::nullopt;
    if (!any_classification) return std::nullopt;
    decoded.probabilities = mode == "probabilities";
  }
  const auto key = request.parameters().find("routing_key");
  if (key != request.parameters().end() &&
      key->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return std::nullopt;
  }
  return decoded;
}

bool OutputsFit(const DecodedRequest& request, const VersionOutput& served) {
  for (const RequestedOutput& out : request.outputs) {
    if (out.name != served.name) return false;
    if (out.classes > 0 && served.labels.empty()) return false;
  }
  return true;
}

bool WantsRawOutput(const inference::ModelInferRequest& request) {
  for (const auto& out : request.outputs()) {
    const auto param = out.parameters().find("binary_data");
    if (param != out.parameters().end() &&
        param->second.parameter_choice_case() == inference::InferParameter::kBoolParam) {
      return param->second.bool_param();
    }
  }
  return true;
}

std::string_view RoutingKeyParam(const inference::ModelInferRequest& request) {
  const auto key = request.parameters().find("routing_key");
  if (key == request.parameters().end() ||
      key->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return {};
  }
  return key->second.string_param();
}

namespace {

void EncodeFp32(inference::ModelInferResponse& response, std::string_view name, const float* values, int rows,
                int columns, bool raw) {
  auto* out = response.add_outputs();
  out->set_name(std::string(name));
  out->set_datatype("FP32");
  out->add_shape(rows);
  out->add_shape(columns);
  const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(columns);
  if (raw) {
    std::string* bytes = response.add_raw_output_contents();
    bytes->resize(count * 4);
    if (LittleEndianHost()) {
      if (count > 0) std::memcpy(bytes->data(), values, count * 4);
    } else {
      for (size_t i = 0; i < count; ++i) {
        uint32_t v;
        std::memcpy(&v, &values[i], 4);
        for (int b = 0; b < 4; ++b) (*bytes)[i * 4 + b] = static_cast<char>((v >> (8 * b)) & 0xFF);
      }
    }
  } else {
    auto* contents = out->mutable_contents()->mutable_fp32_contents();
    contents->Reserve(static_cast<int>(count));
    for (size_t i = 0; i < count; ++i) contents->Add(values[i]);
  }
}

// codec.encode_bytes: BYTES [rows, width], length-prefixed in raw_output_contents or in bytes_contents.
void EncodeBytes(inference::ModelInferResponse& response, std::string_view name, std::vector<std::string>&& elements,
                 int rows, bool raw) {
  const size_t width = rows > 0 ? elements.size() / static_cast<size_t>(rows) : 0;
  auto* out = response.add_outputs();
  out->set_name(std::string(name));
  out->set_datatype("BYTES");
  out->add_shape(rows);
  out->add_shape(static_cast<int64_t>(width));
  if (raw) {
    size_t total = 0;
    for (const std::string& e : elements) total += 4 + e.size();
    std::string* bytes = response.add_raw_output_contents();
    bytes->reserve(total);
    for (const std::string& e : elements) {
      const auto size = static_cast<uint32_t>(e.size());
      for (int b = 0; b < 4; ++b) bytes->push_back(static_cast<char>((size >> (8 * b)) & 0xFF));
      bytes->append(e);
    }
  } else {
    auto* contents = out->mutable_contents()->mutable_bytes_contents();
    contents->Reserve(static_cast<int>(elements.size()));
    for (std::string& e : elements) contents->Add(std::move(e));
  }
}

}  // namespace

void EncodeOutputs(inference::ModelInferResponse& response, const DecodedRequest& request,
                   const VersionOutput& served, const float* values, int rows, int columns, bool raw) {
  if (request.outputs.empty()) {
    EncodeFp32(response, served.name, values, rows, columns, raw);
    return;
  }
  for (const RequestedOutput& out : request.outputs) {
    if (out.classes > 0) {
      EncodeBytes(response, out.name, TopKClasses(values, rows, served.labels, out.classes, request.probabilities),
                  rows, raw);
    } else {
      EncodeFp32(response, out.name, values, rows, columns, raw);
    }
  }
}

}  // namespace ortserve
