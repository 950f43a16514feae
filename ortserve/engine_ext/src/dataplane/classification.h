// The KServe/Triton classification extension, for both front ends: scores -> top-k "score:index:label". A requested
// output with the parameter `classification` = k (tritonclient: InferRequestedOutput("LOGITS", class_count=k)) is
// answered, per text, with its k best classes: rank by raw score (higher first, ties by lower index, NaN last);
// probabilities = softmax in double (max with NaN skipped, std::exp(x - max), summed left to right, divided), or,
// for a multi-label classifier (labels independent, the manifest's multi_label), a sigmoid per label in double,
// 1 / (1 + std::exp(-x)); the score printed as C's "%.6f" (Triton's std::to_string), "nan" for any NaN.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ortserve {

// Per row of `scores` (row-major, rows x labels.size()), its min(k, labels) best classes as "score:index:label",
// best first: rows x min(k, labels) strings, row-major. k >= 1 (the caller checked it). `probabilities` reports
// softmax(row), or with `multi_label` sigmoid(score) per label (the order is the raw scores' either way).
std::vector<std::string> TopKClasses(const float* scores, int rows, const std::vector<std::string>& labels, int64_t k,
                                     bool probabilities, bool multi_label = false);

}  // namespace ortserve
