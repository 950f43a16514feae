#include "infer_wire.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "classification.h"

namespace ortserve {
namespace {

std::string Quote(std::string_view text) { return "'" + std::string(text) + "'"; }

// ['a', 'b'] as Python prints a list of str.
std::string List(const std::vector<std::string_view>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += PyRepr(items[i]);
  }
  return out + "]";
}

// [1, 2] as Python prints a list of int.
std::string List(const std::vector<int64_t>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(items[i]);
  }
  return out + "]";
}

WireError Invalid(std::string message) { return WireError{Code::kInvalidArgument, std::move(message)}; }

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
    return Invalid("input " + input + " has " + std::to_string(count) + " texts, more than the maximum of " +
                   std::to_string(max_texts_per_request) + " per request; split it into several requests");
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
      if (k.kind == WireParam::Kind::kInt64) {
        wanted.classes = k.int64_value;
      } else if (k.kind == WireParam::Kind::kUint64) {
        wanted.classes = k.uint64_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                             ? std::numeric_limits<int64_t>::max()
                             : static_cast<int64_t>(k.uint64_value);
      } else {
        return Invalid(param + " must be an integer (int64_param), got " + k.KindName());
      }
      if (wanted.classes < 1) {
        return Invalid(param + " must be >= 1 (how many of the best classes to return), got " +
                       std::to_string(wanted.classes));
      }
    }
    outputs.push_back(wanted);
  }
  return std::nullopt;
}

std::string Article(std::string_view kind) {
  const bool vowel = !kind.empty() && std::string_view("aeiou").find(kind[0]) != std::string_view::npos;
  return std::string(vowel ? "an " : "a ") + std::string(kind) + " model";
}

bool LittleEndianHost() {
  const uint32_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

void AppendLe32(std::string& out, uint32_t v) {
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
}

// FP32 of `shape` (its product values).
ReplyTensor Fp32Tensor(std::string_view name, const float* values, std::vector<int64_t> shape, bool raw) {
  ReplyTensor t;
  t.name = std::string(name);
  t.datatype = "FP32";
  size_t count = 1;
  for (int64_t dim : shape) count *= static_cast<size_t>(std::max<int64_t>(dim, 0));
  t.shape = std::move(shape);
  t.raw = raw;
  if (raw) {
    t.raw_bytes.resize(count * 4);
    if (LittleEndianHost()) {
      if (count > 0) std::memcpy(t.raw_bytes.data(), values, count * 4);
    } else {
      for (size_t i = 0; i < count; ++i) {
        uint32_t v;
        std::memcpy(&v, &values[i], 4);
        for (int b = 0; b < 4; ++b) t.raw_bytes[i * 4 + b] = static_cast<char>((v >> (8 * b)) & 0xFF);
      }
    }
  } else {
    t.fp32.assign(values, values + count);
  }
  return t;
}

ReplyTensor Fp32Tensor(std::string_view name, const float* values, int rows, int columns, bool raw) {
  return Fp32Tensor(name, values, {rows, columns}, raw);
}

// INT64 of `shape` (its product values; default: [values]).
ReplyTensor Int64Tensor(std::string_view name, const std::vector<int64_t>& values, bool raw,
                        std::vector<int64_t> shape = {}) {
  ReplyTensor t;
  t.name = std::string(name);
  t.datatype = "INT64";
  t.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(values.size())} : std::move(shape);
  t.raw = raw;
  if (raw) {
    t.raw_bytes.reserve(values.size() * 8);
    for (int64_t value : values) {
      const auto v = static_cast<uint64_t>(value);
      for (int b = 0; b < 8; ++b) t.raw_bytes.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
    }
  } else {
    t.int64 = values;
  }
  return t;
}

// BYTES [rows] (`flat`) or [rows, elements / rows].
ReplyTensor BytesTensor(std::string_view name, std::vector<std::string>&& elements, int rows, bool raw,
                        bool flat = false) {
  ReplyTensor t;
  t.name = std::string(name);
  t.datatype = "BYTES";
  t.shape = {rows};
  if (!flat) t.shape.push_back(rows > 0 ? static_cast<int64_t>(elements.size() / static_cast<size_t>(rows)) : 0);
  t.raw = raw;
  if (raw) {
    size_t total = 0;
    for (const std::string& e : elements) total += 4 + e.size();
    t.raw_bytes.reserve(total);
    for (const std::string& e : elements) {
      AppendLe32(t.raw_bytes, static_cast<uint32_t>(e.size()));
      t.raw_bytes.append(e);
    }
  } else {
    t.bytes = std::move(elements);
  }
  return t;
}


// `text` as a JSON string (RFC 8259: quotes, backslashes and C0 controls escaped; UTF-8 passed through).
void AppendJsonString(std::string& out, std::string_view text) {
  static const char* hex = "0123456789abcdef";
  out.push_back('"');
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default: out += "\\u00"; out.push_back(hex[u >> 4]); out.push_back(hex[u & 0xF]);
      }
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// The shortest decimal that reads back as the same float; null for NaN and infinities (JSON has neither; the
// engine refuses non-finite outputs before they get here).
void AppendFloat(std::string& out, float value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[32];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, error == std::errc() ? end : buffer);
}

// Byte offset of each code point of valid UTF-8 `text`, and its size at the end (one past the last code point).
std::vector<size_t> CodePointOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(text.size());
  return offsets;
}

// One text's entities as a JSON array; offsets are code points of `text`.
std::string EntitiesJson(const std::vector<Entity>& entities, std::string_view text) {
  const std::vector<size_t> at = CodePointOffsets(text);
  const auto chars = static_cast<int64_t>(at.size() - 1);
  std::string out = "[";
  for (size_t i = 0; i < entities.size(); ++i) {
    const Entity& e = entities[i];
    const int64_t start = std::clamp<int64_t>(e.start, 0, chars), end = std::clamp<int64_t>(e.end, start, chars);
    if (i) out.push_back(',');
    out += "{\"label\":";
    AppendJsonString(out, e.label);
    out += ",\"score\":";
    AppendFloat(out, e.score);
    out += ",\"start\":" + std::to_string(e.start) + ",\"end\":" + std::to_string(e.end) + ",\"text\":";
    AppendJsonString(out, text.substr(at[static_cast<size_t>(start)], at[static_cast<size_t>(end)] -
                                                                          at[static_cast<size_t>(start)]));
    if (e.index >= 0) out += ",\"index\":" + std::to_string(e.index);
    out.push_back('}');
  }
  return out + "]";
}

}  // namespace

const char* WireParam::KindName() const {
  switch (kind) {
    case Kind::kBool: return "bool_param";
    case Kind::kInt64: return "int64_param";
    case Kind::kString: return "string_param";
    case Kind::kDouble: return "double_param";
    case Kind::kUint64: return "uint64_param";
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
  for (const WireOutput& out : request.outputs) {
    if (out.binary_data.kind == WireParam::Kind::kBool) {
      call.raw_output = out.binary_data.bool_value;
      break;
    }
  }
  return call;
}

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

namespace {

// The most tokens any of the call's texts has (T of the per-token outputs).
size_t LongestRow(const TokenRows& tokens, int rows) {
  size_t longest = 0;
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) longest = std::max(longest, tokens.spans[r].size());
  return longest;
}

ReplyTensor TokenOffsets(int rows, const TokenRows& tokens, bool raw) {
  const size_t longest = LongestRow(tokens, rows);
  std::vector<int64_t> out(static_cast<size_t>(rows) * longest * 2, -1);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    for (size_t t = 0; t < tokens.spans[r].size(); ++t) {
      out[(r * longest + t) * 2] = tokens.spans[r][t].start;
      out[(r * longest + t) * 2 + 1] = tokens.spans[r][t].end;
    }
  }
  return Int64Tensor(kTokenOffsetsOutput, out, raw, {rows, static_cast<int64_t>(longest), 2});
}

ReplyTensor TokenLogits(const float* values, int rows, int columns, size_t labels, const TokenRows& tokens, bool raw) {
  const size_t longest = LongestRow(tokens, rows);
  std::vector<float> out(static_cast<size_t>(rows) * longest * labels, 0.0f);
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    std::copy_n(values + r * static_cast<size_t>(columns), tokens.spans[r].size() * labels,
                out.begin() + static_cast<std::ptrdiff_t>(r * longest * labels));
  }
  return Fp32Tensor(kTokenLogitsOutput, out.data(),
                    {rows, static_cast<int64_t>(longest), static_cast<int64_t>(labels)}, raw);
}

ReplyTensor Entities(const DecodedCall& call, const VersionOutput& version, const float* values, int rows,
                     int columns, const TokenRows& tokens) {
  std::vector<std::string> elements;
  elements.reserve(static_cast<size_t>(rows));
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const std::vector<Entity> entities =
        AggregateEntities(values + r * static_cast<size_t>(columns), tokens.spans[r], version.labels,
                          call.aggregation.value_or(Aggregation::kSimple));
    elements.push_back(EntitiesJson(entities, r < call.texts.size() ? call.texts[r] : std::string_view()));
  }
  return BytesTensor(kEntitiesOutput, std::move(elements), rows, call.raw_output, /*flat=*/true);
}

// A token classifier's reply (EncodeOutputs).
std::vector<ReplyTensor> EncodeTokens(const DecodedCall& call, const VersionOutput& version, const float* values,
                                      int rows, int columns, const TokenRows& tokens) {
  const size_t labels = version.labels.size();
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {  // the caller's contract, checked: never read past a row
    if (r >= tokens.spans.size() || r >= tokens.chars_read.size() ||
        tokens.spans[r].size() * labels > static_cast<size_t>(std::max(columns, 0))) {
      throw std::invalid_argument("token rows do not fit the values: one TokenRows entry per row, within columns");
    }
  }
  std::vector<ReplyTensor> tensors;
  std::vector<std::string_view> wanted;
  for (const RequestedOutput& out : call.outputs) wanted.push_back(out.name);
  if (wanted.empty()) wanted = {kEntitiesOutput, kCharsReadOutput};
  for (std::string_view name : wanted) {
    if (name == kEntitiesOutput) {
      tensors.push_back(Entities(call, version, values, rows, columns, tokens));
    } else if (name == kTokenLogitsOutput) {
      tensors.push_back(TokenLogits(values, rows, columns, labels, tokens, call.raw_output));
    } else if (name == kTokenOffsetsOutput) {
      tensors.push_back(TokenOffsets(rows, tokens, call.raw_output));
    } else {
      tensors.push_back(Int64Tensor(kCharsReadOutput, std::vector<int64_t>(tokens.chars_read.begin(),
                                                                           tokens.chars_read.begin() + rows),
                                    call.raw_output));
    }
  }
  return tensors;
}

}  // namespace

std::vector<ReplyTensor> EncodeOutputs(const DecodedCall& call, const VersionOutput& version, const float* values,
                                        int rows, int columns, const TokenRows* tokens) {
  if (version.kind == kTokenClassifier) {
    if (tokens == nullptr) throw std::invalid_argument("a token classifier's reply needs its token rows");
    return EncodeTokens(call, version, values, rows, columns, *tokens);
  }
  std::vector<ReplyTensor> tensors;
  auto score = [&] {
    std::vector<float> scores(static_cast<size_t>(std::max(rows, 0)));
    for (size_t r = 0; r < scores.size(); ++r) {
      const float x = columns > 0 ? values[r * static_cast<size_t>(columns)] : 0.0f;
      scores[r] = version.score == "sigmoid" ? 1.0f / (1.0f + std::exp(-x)) : x;
    }
    return Fp32Tensor(kScoreOutput, scores.data(), std::vector<int64_t>{rows}, call.raw_output);
  };
  if (call.outputs.empty()) {
    tensors.push_back(version.score.empty() ? Fp32Tensor(version.name, values, rows, columns, call.raw_output)
                                            : score());
    return tensors;
  }
  for (const RequestedOutput& out : call.outputs) {
    if (!version.score.empty() && out.name == kScoreOutput) {
      tensors.push_back(score());
    } else if (out.classes > 0) {
      tensors.push_back(BytesTensor(out.name, TopKClasses(values, rows, version.labels, out.classes,
                                                          call.probabilities, version.multi_label),
                                    rows, call.raw_output));
    } else {
      tensors.push_back(Fp32Tensor(out.name, values, rows, columns, call.raw_output));
    }
  }
  return tensors;
}

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  static const char* hex = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    uint64_t v = rng();
    for (int i = 0; i < 16; ++i, v >>= 4) id[half * 16 + i] = hex[v & 0xF];
  }
  return id;
}

RequestIdChoice ChooseRequestId(std::string_view header) {
  if (!header.empty() && header.size() <= kMaxRequestIdBytes) return {std::string(header), std::nullopt};
  RequestIdChoice choice{NewRequestId(), std::nullopt};
  if (header.size() > kMaxRequestIdBytes) {
    choice.error = Invalid("x-request-id is " + std::to_string(header.size()) + " bytes; at most " +
                           std::to_string(kMaxRequestIdBytes));
  }
  return choice;
}

std::string_view ChooseRoutingKey(std::string_view param, std::string_view header, std::string_view request_id) {
  if (!param.empty()) return param;
  if (!header.empty()) return header;
  return request_id;
}

long long PushbackMs(double retry_after_s) {
  // Half to even (std::nearbyint in the default rounding mode), so a hint of 0.0025 s is 2 ms, as Python's round().
  return std::max(1LL, static_cast<long long>(std::nearbyint(retry_after_s * 1000)));
}

namespace {

bool IsHex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// A B3 trace id: 32 hex digits, or 16 left-padded to 32; "" when neither (or all zeros).
std::string B3TraceId(std::string_view raw) {
  const std::string id = Lower(raw);
  if (IsHex(id, 32) && !AllZero(id)) return id;
  if (IsHex(id, 16) && !AllZero(id)) return std::string(16, '0') + id;
  return "";
}

std::string B3SpanId(std::string_view raw) {
  const std::string id = Lower(raw);
  return IsHex(id, 16) && !AllZero(id) ? id : "";
}

// W3C Trace Context, level 1: version-trace_id-parent_id-flags; a later version may append fields after a '-'.
bool ParseTraceparent(std::string_view value, TraceContext& out) {
  if (value.size() < 55 || value[2] != '-' || value[35] != '-' || value[52] != '-') return false;
  const std::string_view version = value.substr(0, 2), trace = value.substr(3, 32), parent = value.substr(36, 16),
                         flags = value.substr(53, 2);
  if (!IsHex(version, 2) || version == "ff" || !IsHex(trace, 32) || !IsHex(parent, 16) || !IsHex(flags, 2)) {
    return false;
  }
  if (AllZero(trace) || AllZero(parent)) return false;
  if (version == "00" ? value.size() != 55 : (value.size() > 55 && value[55] != '-')) return false;
  out.trace_id = std::string(trace);
  out.parent_span_id = std::string(parent);
  const int bits = std::stoi(std::string(flags), nullptr, 16);
  out.sampled = bits & 1;
  return true;
}

}  // namespace

TraceContext ParseTraceContext(const TraceHeaders& headers) {
  TraceContext out;
  if (ParseTraceparent(headers.traceparent, out)) {
    out.tracestate = std::string(headers.tracestate);
    return out;
  }
  if (!headers.b3.empty()) {  // {trace}-{span}[-{sampling}[-{parent}]], or a lone sampling decision
    if (headers.b3 == "0" || headers.b3 == "1" || headers.b3 == "d") {
      out.sampled = headers.b3 == "0" ? 0 : 1;
      return out;
    }
    const size_t first = headers.b3.find('-');
    const size_t second = first == std::string_view::npos ? first : headers.b3.find('-', first + 1);
    const std::string trace = B3TraceId(headers.b3.substr(0, first));
    const std::string span = first == std::string_view::npos
                                 ? ""
                                 : B3SpanId(headers.b3.substr(first + 1, second == std::string_view::npos
                                                                              ? std::string_view::npos
                                                                              : second - first - 1));
    if (!trace.empty() && !span.empty()) {
      out.trace_id = trace;
      out.parent_span_id = span;
      if (second != std::string_view::npos) {
        const std::string_view sampling = headers.b3.substr(second + 1, 1);
        out.sampled = sampling == "0" ? 0 : (sampling == "1" || sampling == "d") ? 1 : -1;
      }
      return out;
    }
    return TraceContext{};
  }
  const std::string trace = B3TraceId(headers.b3_trace_id), span = B3SpanId(headers.b3_span_id);
  if (!trace.empty() && !span.empty()) {
    out.trace_id = trace;
    out.parent_span_id = span;
  }
  if (headers.b3_flags == "1") {
    out.sampled = 1;
  } else if (headers.b3_sampled == "1" || headers.b3_sampled == "true") {
    out.sampled = 1;
  } else if (headers.b3_sampled == "0" || headers.b3_sampled == "false") {
    out.sampled = 0;
  }
  return out;
}

bool IsValidUtf8(std::string_view bytes, const char** reason, size_t* at) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  auto fail = [&](size_t where, const char* why) {
    if (reason) *reason = why;
    if (at) *at = where;
    return false;
  };
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
      return fail(i, "invalid start byte");
    }
    // As CPython: a continuation byte that is there and wrong, else a sequence cut short by the end.
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n) return fail(i, "unexpected end of data");
      const unsigned char b = s[i + k];
      const bool ok = k == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
      if (!ok) return fail(i, "invalid continuation byte");
    }
    i += len;
  }
  return true;
}

std::string PyRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xF];
    } else if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      const auto cont = static_cast<unsigned char>(text[i + 1]);  // a C1 control, U+0080..U+009F
      out += "\\x";
      out += hex[cont >> 4];
      out += hex[cont & 0xF];
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace ortserve
