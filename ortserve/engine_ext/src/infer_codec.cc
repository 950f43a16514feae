#include "infer_codec.h"

#include <cstdint>
#include <cstring>

namespace ortserve {
namespace {

constexpr const char* kInput = "TEXT";
constexpr const char* kOutput = "LOGITS";

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

std::optional<std::vector<std::string_view>> DecodeTexts(const inference::ModelInferRequest& request,
                                                         long long max_texts) {
  if (request.inputs_size() != 1) return std::nullopt;
  const auto& tensor = request.inputs(0);
  if (tensor.name() != kInput || tensor.datatype() != "BYTES") return std::nullopt;
  const auto& shape = tensor.shape();
  if (!(shape.size() == 1 || (shape.size() == 2 && shape[1] == 1))) return std::nullopt;
  const int64_t count = shape[0];
  if (count < 1 || count > max_texts) return std::nullopt;

  std::vector<std::string_view> texts;
  texts.reserve(static_cast<size_t>(count));
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
  for (const auto& out : request.outputs()) {
    if (out.name() != kOutput) return std::nullopt;
  }
  const auto key = request.parameters().find("routing_key");
  if (key != request.parameters().end() &&
      key->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return std::nullopt;
  }
  return texts;
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

void EncodeLogits(inference::ModelInferResponse& response, const float* logits, int rows, int labels, bool raw) {
  auto* out = response.add_outputs();
  out->set_name(kOutput);
  out->set_datatype("FP32");
  out->add_shape(rows);
  out->add_shape(labels);
  const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(labels);
  if (raw) {
    std::string* bytes = response.add_raw_output_contents();
    bytes->resize(count * 4);
    if (LittleEndianHost()) {
      if (count > 0) std::memcpy(bytes->data(), logits, count * 4);
    } else {
      for (size_t i = 0; i < count; ++i) {
        uint32_t v;
        std::memcpy(&v, &logits[i], 4);
        for (int b = 0; b < 4; ++b) (*bytes)[i * 4 + b] = static_cast<char>((v >> (8 * b)) & 0xFF);
      }
    }
  } else {
    auto* values = out->mutable_contents()->mutable_fp32_contents();
    values->Reserve(static_cast<int>(count));
    for (size_t i = 0; i < count; ++i) values->Add(logits[i]);
  }
}

}  // namespace ortserve
