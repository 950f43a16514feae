#include "classification.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>

namespace ortserve {
namespace {

// classification.format_score: "%.6f", and "nan" whatever the NaN's sign (glibc would print "-nan").
void AppendScore(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "nan";
    return;
  }
  char buffer[400];  // "%.6f" of the largest double: 309 digits, the point, six decimals, a sign
  const int n = std::snprintf(buffer, sizeof buffer, "%.6f", value);
  out.append(buffer, static_cast<size_t>(std::max(0, n)));
}

// classification.softmax, operation for operation.
void Softmax(const float* row, size_t n, std::vector<double>& out) {
  double top = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<double>(row[i]) > top) top = row[i];
  }
  out.resize(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) out[i] = std::exp(static_cast<double>(row[i]) - top);
  for (size_t i = 0; i < n; ++i) total += out[i];
  for (size_t i = 0; i < n; ++i) out[i] = out[i] / total;
}

// A multi-label classifier's probability of each label on its own.
void Sigmoid(const float* row, size_t n, std::vector<double>& out) {
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = 1.0 / (1.0 + std::exp(-static_cast<double>(row[i])));
}

}  // namespace

std::vector<std::string> TopKClasses(const float* scores, int rows, const std::vector<std::string>& labels, int64_t k,
                                     bool probabilities, bool multi_label) {
  const size_t columns = labels.size();
  const size_t keep = static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(k, 0), static_cast<int64_t>(columns)));
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(std::max(rows, 0)) * keep);
  std::vector<size_t> order(columns);
  std::vector<double> shown;
  for (int r = 0; r < rows; ++r) {
    const float* row = scores + static_cast<size_t>(r) * columns;
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [row](size_t a, size_t b) {
      const bool nan_a = std::isnan(row[a]), nan_b = std::isnan(row[b]);
      if (nan_a != nan_b) return nan_b;  // numbers before NaN
      if (!nan_a && row[a] != row[b]) return row[a] > row[b];
      return a < b;
    });
    if (probabilities && multi_label) {
      Sigmoid(row, columns, shown);
    } else if (probabilities) {
      Softmax(row, columns, shown);
    } else {
      shown.assign(row, row + columns);
    }
    for (size_t j = 0; j < keep; ++j) {
      const size_t i = order[j];
      std::string entry;
      AppendScore(entry, shown[i]);
      entry += ':';
      entry += std::to_string(i);
      entry += ':';
      entry += labels[i];
      out.push_back(std::move(entry));
    }
  }
  return out;
}

}  // namespace ortserve
