// Decode: a ModelInfer's texts, pairs, outputs and parameters, or the first wire rule it breaks (infer_wire.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "infer_wire.h"
#include "wire_text.h"

namespace ortserve {
namespace {

uint32_t ReadLe32(const unsigned char* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// The elements of a raw BYTES buffer (4-byte little-endian length, then the bytes, repeated), or the error.
std::optional<WireError> SplitRaw(std::string_view buffer, std::string_view input, std::vector<std::string_view>& out) {
  const std::string what = "raw_input_contents for " + Quote(input);
  const auto* data = reinterpret_cast<const unsigned char*>(buffer.data());
  size_t offset = 0;
  while (offset < buffer.size()) {
    if (buffer.size() - offset < 4) {
      return Invalid(what + ": truncated length prefix at byte " + std::to_string(offset) + " (buffer is " +
                     std::to_string(buffer.size()) + " bytes)");
    }
    const uint32_t size = ReadLe32(data + offset);
    offset += 4;
    if (size > buffer.size() - offset) {
      return Invalid(what + ": element " + std::to_string(out.size()) + " declares " + std::to_string(size) +
                     " bytes but only " + std::to_string(buffer.size() - offset) + " remain");
    }
    out.push_back(buffer.substr(offset, size));
    offset += size;
  }
  return std::nullopt;
}

// The strict UTF-8 BYTES elements of request.inputs[index], shaped [count] or [count, 1], from its contents or from
// raw_input_contents[index] (raw: every input's elements come raw, one entry per input in input order).
std::optional<WireError> DecodeElements(const WireRequest& request, size_t index, long long max_texts_per_request,
                                        std::vector<std::string_view>& elements) {
  const WireInput& tensor = request.inputs[index];
  const std::string input = Quote(tensor.name);
  if (tensor.datatype != "BYTES") {
    return Invalid("input " + input + " has datatype " +
                   (tensor.datatype.empty() ? std::string("(empty)") : std::string(tensor.datatype)) +
                   ", expected BYTES");
  }
  const std::vector<int64_t>& shape = tensor.shape;
  if (!(shape.size() == 1 || (shape.size() == 2 && shape[1] == 1))) {
    return Invalid("input " + input + " has shape " + List(shape) + ", expected [N] or [N, 1]");
  }
  const int64_t count = shape[0];
  if (count < 1) return Invalid("input " + input + " has shape " + List(shape) + ": send at least one text");
  if (count > max_texts_per_request) {
    WireError error = Invalid("input " + input + " has " + std::to_string(count) + " texts, more than the maximum of " +
                              std::to_string(max_texts_per_request) + " per request; split it into several requests");
    error.too_many_texts = true;
    return error;
  }
  if (!request.raw_input_contents.empty()) {
    if (tensor.has_contents) return Invalid("input " + input + " sets both contents and raw_input_contents");
    if (request.raw_input_contents.size() != request.inputs.size()) {
      return Invalid("raw_input_contents has " + std::to_string(request.raw_input_contents.size()) +
                     " entries, expected " + std::to_string(request.inputs.size()) + " (one per input)");
    }
    // At most count views reserved: the declared count is the caller's word, the buffer is what it sent.
    elements.reserve(std::min(static_cast<size_t>(count), request.raw_input_contents[index].size() / 4));
    if (auto error = SplitRaw(request.raw_input_contents[index], tensor.name, elements)) return error;
  } else {
    elements = tensor.bytes_contents;
  }
  if (static_cast<int64_t>(elements.size()) != count) {
    return Invalid("input " + input + " has shape " + List(shape) + " but carries " +
                   std::to_string(elements.size()) + " elements");
  }
  for (size_t i = 0; i < elements.size(); ++i) {
    const char* reason = nullptr;
    size_t at = 0;
    if (!IsValidUtf8(elements[i], &reason, &at)) {
      return Invalid("input " + input + " element " + std::to_string(i) + " is not valid UTF-8 (" + reason +
                     " at byte " + std::to_string(at) + ")");
    }
  }
  return std::nullopt;
}

// TEXT, and TEXT_PAIR when sent: [N] queries, or [1] to pair one query with each of the N texts. A pair is read
// query first, (TEXT_PAIR, TEXT), as cross-encoders are trained (CrossEncoder.predict([(query, passage)]), TEI's
// /rerank): `texts` gets the queries and `pairs` TEXT's elements, so that every tokenizer makes (texts[i], pairs[i]).
std::optional<WireError> DecodeTexts(const WireRequest& request, long long max_texts_per_request,
                                     std::vector<std::string_view>& texts, std::vector<std::string_view>& pairs) {
  const std::string input = Quote(kTextInput);
  std::vector<std::string_view> names;
  for (const WireInput& tensor : request.inputs) names.push_back(tensor.name);
  const auto text_at = std::find(names.begin(), names.end(), kTextInput);
  if (text_at == names.end()) {
    return Invalid("missing input " + input + " (BYTES [N]); got inputs " + (names.empty() ? "none" : List(names)));
  }
  std::vector<std::string_view> extra;
  for (std::string_view name : names) {
    if (name != kTextInput && name != kPairInput) extra.push_back(name);
  }
  std::sort(extra.begin(), extra.end());
  extra.erase(std::unique(extra.begin(), extra.end()), extra.end());
  const auto pair_count = std::count(names.begin(), names.end(), std::string_view(kPairInput));
  if (!extra.empty() || std::count(names.begin(), names.end(), std::string_view(kTextInput)) != 1 || pair_count > 1) {
    return Invalid("unexpected inputs " + List(extra.empty() ? names : extra) + ": a model takes " + input +
                   ", and a model of pairs also " + Quote(kPairInput));
  }
  const auto text_index = static_cast<size_t>(text_at - names.begin());
  if (auto error = DecodeElements(request, text_index, max_texts_per_request, texts)) return error;
  if (pair_count == 0) return std::nullopt;
  const auto pair_index = static_cast<size_t>(std::find(names.begin(), names.end(), kPairInput) - names.begin());
  std::vector<std::string_view> second;
  if (auto error = DecodeElements(request, pair_index, max_texts_per_request, second)) return error;
  if (second.size() != 1 && second.size() != texts.size()) {
    return Invalid("input " + Quote(kPairInput) + " has shape " + List(request.inputs[pair_index].shape) +
                   " and input " + input + " shape " + List(request.inputs[text_index].shape) + ": send " +
                   Quote(kPairInput) + " [" + std::to_string(texts.size()) + "] (one per text) or [1] (one for all)");
  }
  pairs = std::move(texts);
  texts.assign(pairs.size(), second[0]);
  if (second.size() == pairs.size()) texts = std::move(second);
  return std::nullopt;
}

// The one rule of an integer parameter that counts something (classification's k, dimensions): int64 or uint64,
// >= 1; a uint64 past int64 reads as int64's largest (more than any version has, which later rules refuse by name).
std::optional<WireError> PositiveInteger(const WireParam& param, const std::string& what, const char* meaning,
                                         int64_t& value) {
  if (param.kind == WireParam::Kind::kInt64) {
    value = param.int64_value;
  } else if (param.kind == WireParam::Kind::kUint64) {
    value = param.uint64_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                ? std::numeric_limits<int64_t>::max()
                : static_cast<int64_t>(param.uint64_value);
  } else if (param.kind == WireParam::Kind::kBigInt) {
    return Invalid(what + " must be an integer from 1 to 2^64 - 1 (" + meaning + "), got " +
                   (param.big_int_negative ? "one below -2^63" : "one of 2^64 or more"));
  } else {
    return Invalid(what + " must be an integer (int64_param), got " + param.KindName());
  }
  if (value < 1) return Invalid(what + " must be >= 1 (" + meaning + "), got " + std::to_string(value));
  return std::nullopt;
}

std::optional<WireError> DecodeOutputs(const WireRequest& request, std::vector<RequestedOutput>& outputs) {
  for (const WireOutput& out : request.outputs) {
    const std::string name = Quote(out.name);
    for (const RequestedOutput& seen : outputs) {
      if (seen.name == out.name) return Invalid("output " + name + " is requested twice");
    }
    RequestedOutput wanted{out.name, 0};
    const WireParam& k = out.classification;
    if (k.present) {
      const std::string param = "output " + name + " parameter " + Quote(kClassificationParam);
      if (auto error = PositiveInteger(k, param, "how many of the best classes to return", wanted.classes)) {
        return error;
      }
    }
    outputs.push_back(wanted);
  }
  return std::nullopt;
}

// The dimensions parameter: an integer >= 1 (int64_param or uint64_param); 0 when absent.
std::optional<WireError> DecodeDimensions(const WireParam& param, int64_t& dimensions) {
  if (!param.present) return std::nullopt;
  return PositiveInteger(param, "request parameter " + Quote(kDimensionsParam),
                         "the embedding width to truncate to", dimensions);
}

// The shortest decimal that reads back as `value` (a finite double).
std::string ShortestDouble(double value) {
  char buffer[32];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, error == std::errc() ? end : buffer);
}

// top_k: an integer >= 1; threshold: a finite number >= 0 (double_param, or an integer one); absent: no bound.
std::optional<WireError> DecodeSparseBounds(const WireRequest& request, DecodedCall& call) {
  if (request.top_k.present) {
    if (auto error = PositiveInteger(request.top_k, "request parameter " + Quote(kTopKParam),
                                     "the most weights kept per text", call.top_k)) {
      return error;
    }
  }
  const WireParam& t = request.threshold;
  if (t.present) {
    const std::string what = "request parameter " + Quote(kThresholdParam);
    if (t.kind == WireParam::Kind::kDouble) {
      call.threshold = t.double_value;
    } else if (t.kind == WireParam::Kind::kInt64) {
      call.threshold = static_cast<double>(t.int64_value);
    } else if (t.kind == WireParam::Kind::kUint64) {
      call.threshold = static_cast<double>(t.uint64_value);
    } else {
      return Invalid(what + " must be a number (double_param), got " + t.KindName());
    }
    if (!std::isfinite(call.threshold) || call.threshold < 0) {
      const bool finite = std::isfinite(call.threshold);
      return Invalid(what + " must be a finite number >= 0 (the least weight kept, exclusive), got " +
                     (finite ? ShortestDouble(call.threshold) : std::string("a non-finite one")));
    }
  }
  call.sparse_bound = request.top_k.present || t.present;
  return std::nullopt;
}

}  // namespace

const char* WireParam::KindName() const {
  switch (kind) {
    case Kind::kBool: return "bool_param";
    case Kind::kInt64: return "int64_param";
    case Kind::kString: return "string_param";
    case Kind::kDouble: return "double_param";
    case Kind::kUint64: return "uint64_param";
    case Kind::kBigInt: return "an integer outside 64 bits";
    case Kind::kNone: break;
  }
  return "no value";
}

std::variant<DecodedCall, WireError> Decode(const WireRequest& request, long long max_texts_per_request) {
  DecodedCall call;
  if (auto error = DecodeTexts(request, max_texts_per_request, call.texts, call.pairs)) return *error;
  if (auto error = DecodeOutputs(request, call.outputs)) return *error;
  const std::string scores = "request parameter " + Quote(kScoresParam);
  if (request.scores.present) {
    if (request.scores.kind != WireParam::Kind::kString) return Invalid(scores + " must be a string");
    const std::string_view mode = request.scores.string_value;
    if (mode != "logits" && mode != "probabilities") {
      return Invalid(scores + " must be 'logits' or 'probabilities', got " + PyRepr(mode));
    }
    const bool classification =
        std::any_of(call.outputs.begin(), call.outputs.end(), [](const RequestedOutput& o) { return o.classes > 0; });
    if (!classification) {
      return Invalid(scores + " applies to classification outputs: request " + Quote(kClassifierOutput) +
                     " with the output parameter " + Quote(kClassificationParam) + " = k");
    }
    call.probabilities = mode == "probabilities";
  }
  if (request.routing_key.present) {
    if (request.routing_key.kind != WireParam::Kind::kString) {
      return Invalid("request parameter " + Quote(kRoutingKeyParam) + " must be a string");
    }
    call.routing_key = request.routing_key.string_value;
  }
  if (request.aggregation.present) {
    const std::string aggregation = "request parameter " + Quote(kAggregationParam);
    if (request.aggregation.kind != WireParam::Kind::kString) {
      return Invalid(aggregation + " must be a string (string_param), got " + request.aggregation.KindName());
    }
    call.aggregation = ParseAggregation(request.aggregation.string_value);
    if (!call.aggregation) {
      return Invalid(aggregation + " must be " + AggregationChoices() + ", got " +
                     PyRepr(request.aggregation.string_value));
    }
  }
  if (request.priority.present) {
    const std::string priority = "request parameter " + Quote(kPriorityParam);
    if (request.priority.kind != WireParam::Kind::kString) {
      return Invalid(priority + " must be a string (string_param), got " + request.priority.KindName());
    }
    const std::string_view value = request.priority.string_value;
    if (value != "interactive" && value != "bulk") {
      return Invalid(priority + " must be 'interactive' or 'bulk', got " + PyRepr(value));
    }
    call.bulk = value == "bulk";
  }
  if (request.prompt_name.present) {
    if (request.prompt_name.kind != WireParam::Kind::kString) {
      return Invalid("request parameter " + Quote(kPromptNameParam) + " must be a string (string_param), got " +
                     request.prompt_name.KindName());
    }
    call.prompt_name = request.prompt_name.string_value;
  }
  if (auto error = DecodeDimensions(request.dimensions, call.dimensions)) return *error;
  if (request.embedding_type.present) {
    const std::string what = "request parameter " + Quote(kEmbeddingTypeParam);
    if (request.embedding_type.kind != WireParam::Kind::kString) {
      return Invalid(what + " must be a string (string_param), got " + request.embedding_type.KindName());
    }
    const auto type = ParseEmbeddingType(request.embedding_type.string_value);
    if (!type) {
      return Invalid(what + " must be " + EmbeddingTypeChoices() + ", got " +
                     PyRepr(request.embedding_type.string_value));
    }
    call.embedding_type = *type;
  }
  if (auto error = DecodeSparseBounds(request, call)) return *error;
  for (const WireOutput& out : request.outputs) {
    if (out.binary_data.kind == WireParam::Kind::kBool) {
      call.raw_output = out.binary_data.bool_value;
      break;
    }
  }
  return call;
}

}  // namespace ortserve
