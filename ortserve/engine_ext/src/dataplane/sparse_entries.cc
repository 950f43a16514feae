// A sparse embedding's entries (sparse_entries.h).
#include "sparse_entries.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>

namespace ortserve {

SparseRows SparseEntries(const float* values, int rows, int columns, int64_t top_k, double threshold) {
  if (top_k < 0) throw std::invalid_argument("top_k must be >= 0 (0: every entry above the threshold)");
  if (!std::isfinite(threshold) || threshold < 0) throw std::invalid_argument("threshold must be finite and >= 0");
  SparseRows out;
  std::vector<int> kept;
  for (int r = 0; r < rows; ++r) {
    const float* row = values + static_cast<size_t>(r) * static_cast<size_t>(std::max(columns, 0));
    kept.clear();
    for (int c = 0; c < columns; ++c) {
      if (static_cast<double>(row[c]) > threshold) kept.push_back(c);
    }
    if (top_k > 0 && static_cast<int64_t>(kept.size()) > top_k) {
      const auto larger = [row](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
      std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(top_k), kept.end(), larger);
      kept.resize(static_cast<size_t>(top_k));
      std::sort(kept.begin(), kept.end());
    }
    for (const int c : kept) {
      out.coordinates.push_back(r);
      out.coordinates.push_back(c);
      out.weights.push_back(row[c]);
    }
  }
  return out;
}

}  // namespace ortserve
