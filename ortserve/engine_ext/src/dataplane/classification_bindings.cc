// Python binding of the classification extension's top-k (classification.h), for its tests; both front ends reach
// TopKClasses through EncodeOutputs (infer_wire.h).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "classification.h"

namespace nb = nanobind;
using namespace nb::literals;

void BindClassification(nb::module_& m) {
  m.def(
      "classification_top_k",
      [](nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> scores, std::vector<std::string> labels,
         int64_t k, bool probabilities, bool multi_label) {
        if (scores.shape(1) != labels.size()) {
          throw nb::value_error(("scores have " + std::to_string(scores.shape(1)) + " columns but there are " +
                                 std::to_string(labels.size()) + " labels")
                                    .c_str());
        }
        if (k < 1) throw nb::value_error(("k must be >= 1, got " + std::to_string(k)).c_str());
        const int rows = static_cast<int>(scores.shape(0));
        std::vector<std::string> flat = ortserve::TopKClasses(scores.data(), rows, labels, k, probabilities, multi_label);
        const size_t width = rows > 0 ? flat.size() / static_cast<size_t>(rows) : 0;
        nb::list out;
        for (int r = 0; r < rows; ++r) {
          nb::list row;
          for (size_t j = 0; j < width; ++j) {
            const std::string& s = flat[static_cast<size_t>(r) * width + j];
            row.append(nb::bytes(s.data(), s.size()));
          }
          out.append(row);
        }
        return out;
      },
      "scores"_a, "labels"_a, "k"_a, "probabilities"_a = false, "multi_label"_a = false,
      "Per row of scores (float32 [N, len(labels)]), its min(k, labels) best classes as b'score:index:label', best "
      "first; probabilities: softmax of the row, or with multi_label a sigmoid per label (classification.h).");
}
