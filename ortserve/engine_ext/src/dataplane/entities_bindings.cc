// Python binding of token classification's entities (entities.h), for its tests: the rule is held to transformers'
// TokenClassificationPipeline before any front end answers with it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "entities.h"

namespace nb = nanobind;
using namespace nb::literals;

void BindEntities(nb::module_& m) {
  nb::list names;
  for (const ortserve::AggregationName& known : ortserve::kAggregations) names.append(std::string(known.name));
  m.attr("AGGREGATIONS") = nb::tuple(names);
  m.def(
      "aggregate_entities",
      [](nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> logits, nb::list spans,
         std::vector<std::string> labels, const std::string& aggregation, std::vector<std::string> ignore) {
        const auto strategy = ortserve::ParseAggregation(aggregation);
        if (!strategy) {
          throw nb::value_error(("aggregation must be " + ortserve::AggregationChoices() + ", got '" + aggregation +
                                 "'")
                                    .c_str());
        }
        if (logits.shape(1) != labels.size() || logits.shape(0) != nb::len(spans)) {
          throw nb::value_error("logits must be [len(spans), len(labels)]");
        }
        std::vector<ortserve::TokenSpan> tokens;
        for (nb::handle item : spans) {
          nb::tuple t = nb::cast<nb::tuple>(item);
          if (t.size() != 4) throw nb::value_error("a span is (start, end, is_subword, special)");
          tokens.push_back({nb::cast<int64_t>(t[0]), nb::cast<int64_t>(t[1]), nb::cast<bool>(t[2]),
                            nb::cast<bool>(t[3])});
        }
        const std::vector<ortserve::Entity> entities =
            ortserve::AggregateEntities(logits.data(), tokens, labels, *strategy, ignore);
        nb::list out;
        for (const ortserve::Entity& e : entities) out.append(nb::make_tuple(e.label, e.score, e.start, e.end, e.index));
        return out;
      },
      "logits"_a, "spans"_a, "labels"_a, "aggregation"_a, "ignore"_a = std::vector<std::string>{"O"},
      "Token classification's entities (entities.h): logits float32 [tokens, labels], spans [(start, end, "
      "is_subword, special)] -> [(label, score, start, end, token index or -1)], as transformers' "
      "TokenClassificationPipeline aggregates.");
}
