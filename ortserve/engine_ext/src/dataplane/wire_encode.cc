// EncodeOutputs: the reply's tensors (raw or typed contents), a classifier's top-k, a reranker's SCORE, a token
// classifier's ENTITIES JSON and per-token outputs (infer_wire.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "classification.h"
#include "infer_wire.h"
#include "sparse_entries.h"

namespace ortserve {
namespace {

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

// A sparse embedding model's reply: each row's kept entries (sparse_entries.h) as SPARSE_INDICES, SPARSE_VALUES and
// SPARSE_COUNTS, each requested one in the call's order, else all three.
std::vector<ReplyTensor> EncodeSparse(const DecodedCall& call, const float* values, int rows, int columns) {
  const SparseRows kept = SparseEntries(values, rows, columns, call.top_k, call.threshold);
  std::vector<int64_t> indices, counts(static_cast<size_t>(std::max(rows, 0)), 0);
  indices.reserve(kept.weights.size());
  for (size_t e = 0; e < kept.weights.size(); ++e) {
    counts[static_cast<size_t>(kept.coordinates[2 * e])] += 1;
    indices.push_back(kept.coordinates[2 * e + 1]);
  }
  std::vector<std::string_view> wanted;
  for (const RequestedOutput& out : call.outputs) wanted.push_back(out.name);
  if (wanted.empty()) wanted = {kSparseIndicesOutput, kSparseValuesOutput, kSparseCountsOutput};
  std::vector<ReplyTensor> tensors;
  for (std::string_view name : wanted) {
    if (name == kSparseValuesOutput) {
      tensors.push_back(Fp32Tensor(kSparseValuesOutput, kept.weights.data(),
                                   std::vector<int64_t>{static_cast<int64_t>(kept.weights.size())}, call.raw_output));
    } else {
      tensors.push_back(Int64Tensor(name, name == kSparseIndicesOutput ? indices : counts, call.raw_output));
    }
  }
  return tensors;
}

// Each row's first `k` values, renormalised to unit L2 length (a zero row stays zero): a Matryoshka embedding
// truncated, as sentence-transformers' truncate_dim with normalize_embeddings gives it.
std::vector<float> Truncated(const float* values, int rows, int columns, int k) {
  std::vector<float> out(static_cast<size_t>(std::max(rows, 0)) * static_cast<size_t>(k));
  for (size_t r = 0; r < static_cast<size_t>(std::max(rows, 0)); ++r) {
    const float* row = values + r * static_cast<size_t>(columns);
    double squares = 0;
    for (int c = 0; c < k; ++c) squares += static_cast<double>(row[c]) * row[c];
    const double scale = squares > 0 ? 1.0 / std::sqrt(squares) : 1.0;
    for (int c = 0; c < k; ++c) out[r * static_cast<size_t>(k) + c] = static_cast<float>(row[c] * scale);
  }
  return out;
}

// An embedding's values as the call's compact type (embedding_types.h): INT8 or UINT8, one byte a value, raw or as
// ints; `ranges` the width's (CheckOutputs let int8 and uint8 through only where the version has them).
ReplyTensor QuantizedTensor(std::string_view name, const float* values, int rows, int columns, EmbeddingType type,
                            const VersionOutput& version, bool raw) {
  const auto found = version.ranges.find(columns);
  const bool ranged = found != version.ranges.end() && found->second.size() == 2 * static_cast<size_t>(columns);
  if (NeedsRanges(type) && !ranged) throw std::invalid_argument("int8 and uint8 need the width's ranges");
  const std::vector<uint8_t> bytes = Quantize(values, rows, columns, type, ranged ? found->second.data() : nullptr);
  ReplyTensor t;
  t.name = std::string(name);
  t.datatype = Signed(type) ? "INT8" : "UINT8";
  t.shape = {rows, QuantizedColumns(type, columns)};
  t.raw = raw;
  if (raw) {
    t.raw_bytes.assign(bytes.begin(), bytes.end());
  } else {
    t.int64.reserve(bytes.size());
    for (uint8_t b : bytes) t.int64.push_back(Signed(type) ? static_cast<int8_t>(b) : b);
  }
  return t;
}

}  // namespace

std::vector<ReplyTensor> EncodeOutputs(const DecodedCall& call, const VersionOutput& version, const float* values,
                                        int rows, int columns, const TokenRows* tokens) {
  if (version.per_token) {
    if (tokens == nullptr) throw std::invalid_argument("a token classifier's reply needs its token rows");
    return EncodeTokens(call, version, values, rows, columns, *tokens);
  }
  if (version.sparse) return EncodeSparse(call, values, rows, columns);
  if (call.dimensions > 0 && call.dimensions < columns) {  // CheckOutputs let only an embedding's widths through
    const int k = static_cast<int>(call.dimensions);
    const std::vector<float> truncated = Truncated(values, rows, columns, k);
    DecodedCall full = call;
    full.dimensions = 0;
    return EncodeOutputs(full, version, truncated.data(), rows, k, tokens);
  }
  std::vector<ReplyTensor> tensors;
  if (call.embedding_type != EmbeddingType::kFloat) {  // CheckOutputs let it through for an embedding model only
    tensors.push_back(QuantizedTensor(version.name, values, rows, columns, call.embedding_type, version,
                                      call.raw_output));
    return tensors;
  }
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

}  // namespace ortserve
