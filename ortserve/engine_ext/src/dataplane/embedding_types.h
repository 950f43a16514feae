// An embedding's compact types (the embedding_type request parameter): the one implementation of each, used by
// EncodeOutputs for both front ends and every HTTP API. Each is sentence-transformers' quantize_embeddings (6.x):
//
//   uint8   clip(floor((x - start) / step), 0, 255), step = (end - start) / 255 (1 where that is 0), each
//           operation in float32 as numpy computes it on float32 arrays                     UINT8 [N, D]
//   int8    the uint8 level - 128                                                            INT8 [N, D]
//   ubinary each row's bits (x > 0) packed 8 to a byte, first bit highest (numpy.packbits(axis=-1))   UINT8 [N, ceil(D/8)]
//   binary  those bytes - 128                                                                INT8 [N, ceil(D/8)]
//
// int8 and uint8 read the version's calibrated ranges (each dimension's start and end, recorded in its manifest at
// import: `embedding_ranges`), so a value past its range is clipped to the range's end level.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ortserve {

enum class EmbeddingType { kFloat, kInt8, kUint8, kBinary, kUbinary };

std::optional<EmbeddingType> ParseEmbeddingType(std::string_view name);
std::string_view EmbeddingTypeName(EmbeddingType type);
std::string EmbeddingTypeChoices();  // "'float', 'int8', 'uint8', 'binary' or 'ubinary'"
bool NeedsRanges(EmbeddingType type);  // int8, uint8
bool Signed(EmbeddingType type);       // int8, binary: the reply's datatype is INT8, else UINT8
int64_t QuantizedColumns(EmbeddingType type, int64_t columns);  // D, or ceil(D / 8) for the packed bits

// `values` row-major rows x columns; `ranges` 2 x columns (starts, then ends) for int8 and uint8, else unread.
// One byte per value of the reply (int8 as two's complement), row-major rows x QuantizedColumns.
std::vector<uint8_t> Quantize(const float* values, int rows, int columns, EmbeddingType type, const float* ranges);

}  // namespace ortserve
