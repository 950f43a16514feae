// Compact embeddings, as sentence-transformers' quantize_embeddings computes them (embedding_types.h).
#include "embedding_types.h"

#include <cmath>
#include <cstddef>

namespace ortserve {
namespace {

constexpr EmbeddingType kAll[] = {EmbeddingType::kFloat, EmbeddingType::kInt8, EmbeddingType::kUint8,
                                  EmbeddingType::kBinary, EmbeddingType::kUbinary};

// clip(floor((x - start) / step), 0, 255) in float32, as numpy evaluates it on float32 arrays (volatile: one
// float32 rounding per operation, never fused or widened); a dimension whose range is empty has step 1.
int Level(float x, float start, float step) {
  const volatile float scaled = (x - start) / step;
  const float level = std::floor(static_cast<float>(scaled));
  if (!(level > 0.0f)) return 0;  // NaN too (the engine refuses non-finite outputs before they get here)
  if (level >= 255.0f) return 255;
  return static_cast<int>(level);
}

}  // namespace

std::optional<EmbeddingType> ParseEmbeddingType(std::string_view name) {
  for (EmbeddingType type : kAll) {
    if (EmbeddingTypeName(type) == name) return type;
  }
  return std::nullopt;
}

std::string_view EmbeddingTypeName(EmbeddingType type) {
  switch (type) {
    case EmbeddingType::kInt8: return "int8";
    case EmbeddingType::kUint8: return "uint8";
    case EmbeddingType::kBinary: return "binary";
    case EmbeddingType::kUbinary: return "ubinary";
    case EmbeddingType::kFloat: break;
  }
  return "float";
}

std::string EmbeddingTypeChoices() {
  std::string out;
  const size_t n = sizeof(kAll) / sizeof(kAll[0]);
  for (size_t i = 0; i < n; ++i) {
    out += (i == 0 ? "" : i + 1 == n ? " or " : ", ");
    out += "'" + std::string(EmbeddingTypeName(kAll[i])) + "'";
  }
  return out;
}

bool NeedsRanges(EmbeddingType type) { return type == EmbeddingType::kInt8 || type == EmbeddingType::kUint8; }

bool Signed(EmbeddingType type) { return type == EmbeddingType::kInt8 || type == EmbeddingType::kBinary; }

int64_t QuantizedColumns(EmbeddingType type, int64_t columns) {
  if (type == EmbeddingType::kBinary || type == EmbeddingType::kUbinary) return (columns + 7) / 8;
  return columns;
}

std::vector<uint8_t> Quantize(const float* values, int rows, int columns, EmbeddingType type, const float* ranges) {
  const size_t n = static_cast<size_t>(rows > 0 ? rows : 0), d = static_cast<size_t>(columns > 0 ? columns : 0);
  const size_t width = static_cast<size_t>(QuantizedColumns(type, static_cast<int64_t>(d)));
  std::vector<uint8_t> out(n * width, 0);
  if (NeedsRanges(type)) {
    std::vector<float> steps(d);
    for (size_t c = 0; c < d; ++c) {
      const volatile float span = ranges[d + c] - ranges[c];
      steps[c] = static_cast<float>(span) / 255.0f;
      if (steps[c] == 0.0f) steps[c] = 1.0f;
    }
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < d; ++c) {
        const int level = Level(values[r * d + c], ranges[c], steps[c]) - (type == EmbeddingType::kInt8 ? 128 : 0);
        out[r * width + c] = static_cast<uint8_t>(level & 0xFF);
      }
    }
  } else if (type == EmbeddingType::kBinary || type == EmbeddingType::kUbinary) {
    const uint8_t shift = type == EmbeddingType::kBinary ? 128 : 0;
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < d; ++c) {
        if (values[r * d + c] > 0.0f) out[r * width + c / 8] |= static_cast<uint8_t>(0x80u >> (c % 8));
      }
      for (size_t b = 0; b < width; ++b) out[r * width + b] = static_cast<uint8_t>(out[r * width + b] - shift);
    }
  }
  return out;
}

}  // namespace ortserve
