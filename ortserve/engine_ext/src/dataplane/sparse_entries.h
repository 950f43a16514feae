// A sparse embedding's entries (a SPLADE model's [rows, vocabulary] weights, every one >= 0): the one
// implementation of which of a row's weights a reply carries, for every front end and HTTP API.
//
//   SparseEntries(values, rows, columns, top_k, threshold)
//     each row's weights above `threshold` (strictly: 0 keeps every non-zero), at most `top_k` of them (0: no bound),
//     the largest, a tie going to the lower column; a row's entries in ascending column order, rows in order:
//     (row, column) pairs and their weights, as COO of the [rows, columns] matrix with only those weights kept.
#pragma once

#include <cstdint>
#include <vector>

namespace ortserve {

struct SparseRows {
  std::vector<int64_t> coordinates;  // (row, column) per entry: 2 x entries
  std::vector<float> weights;        // one per entry
};

// `values` row-major rows x columns; top_k >= 0, threshold finite and >= 0 (else std::invalid_argument).
SparseRows SparseEntries(const float* values, int rows, int columns, int64_t top_k, double threshold);

}  // namespace ortserve
