// Python bindings of the batch policy's pure functions (batch_policy.h), for their tests: the batcher calls them in
// C++ only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <tuple>
#include <utility>
#include <vector>

#include "batch_policy.h"
#include "dataplane_bindings.h"
#include "py_handles.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindPolicy(nb::module_& m) {
  static const BatchPolicy kPolicyDefaults;
  nb::class_<BatchPolicy>(m, "BatchPolicy", "The batch policy's settings (batch_policy.h; for the tests).")
      .def(
          "__init__",
          [](BatchPolicy* self, int max_batch_size, double max_queue_delay_s, double max_padding_ratio,
             int batch_overhead_tokens, int max_batch_tokens, int sort_window, int bulk_batch_tokens) {
            BatchPolicy policy = MakePolicy(max_batch_size, max_queue_delay_s, max_padding_ratio,
                                            batch_overhead_tokens, max_batch_tokens, sort_window);
            policy.bulk_batch_tokens = bulk_batch_tokens;
            policy.Validate();
            new (self) BatchPolicy(policy);
          },
          nb::kw_only(), "max_batch_size"_a = kPolicyDefaults.max_batch_size,
          "max_queue_delay_s"_a = kPolicyDefaults.max_queue_delay_s,
          "max_padding_ratio"_a = kPolicyDefaults.max_padding_ratio,
          "batch_overhead_tokens"_a = kPolicyDefaults.batch_overhead_tokens,
          "max_batch_tokens"_a = kPolicyDefaults.max_batch_tokens, "sort_window"_a = kPolicyDefaults.sort_window,
          "bulk_batch_tokens"_a = kPolicyDefaults.bulk_batch_tokens)
      .def_ro("max_batch_size", &BatchPolicy::max_batch_size)
      .def_ro("max_queue_delay_s", &BatchPolicy::max_queue_delay_s)
      .def_ro("max_padding_ratio", &BatchPolicy::max_padding_ratio)
      .def_ro("batch_overhead_tokens", &BatchPolicy::batch_overhead_tokens)
      .def_ro("max_batch_tokens", &BatchPolicy::max_batch_tokens)
      .def_ro("sort_window", &BatchPolicy::sort_window)
      .def_ro("bulk_batch_tokens", &BatchPolicy::bulk_batch_tokens);

  m.def(
      "choose_batch",
      [](const std::vector<std::pair<int, double>>& pending, double now, const BatchPolicy& policy) {
        std::vector<PendingText> texts;
        texts.reserve(pending.size());
        for (const auto& [length, enqueued_at] : pending) texts.push_back({length, enqueued_at});
        return ChooseBatch(texts, now, policy);
      },
      "pending"_a, "now"_a, "policy"_a,
      "ChooseBatch over (length, enqueued_at) pairs: the indices of the next batch, shortest first.");
  m.def(
      "choose_next",
      [](const std::vector<std::tuple<int, double, bool>>& pending, double now, const BatchPolicy& policy,
         const std::vector<bool>& shadow) {
        if (!shadow.empty() && shadow.size() != pending.size()) {
          throw nb::value_error("choose_next: shadow needs one flag per pending text");
        }
        std::vector<PendingText> texts;
        texts.reserve(pending.size());
        for (const auto& [length, enqueued_at, bulk] : pending) texts.push_back({length, enqueued_at, bulk});
        for (size_t i = 0; i < shadow.size(); ++i) texts[i].shadow = shadow[i];
        return ChooseNext(texts, now, policy);
      },
      "pending"_a, "now"_a, "policy"_a, "shadow"_a = std::vector<bool>{},
      "ChooseNext over (length, enqueued_at, bulk) triples (`shadow`: empty, or a flag per text, a shadow copy's "
      "text, bulk too): the next batch, interactive texts before bulk ones before shadow ones (bulk and shadow runs "
      "within bulk_batch_tokens); indices, shortest first.");

  m.def(
      "split_rows",
      [](const std::vector<int>& lengths, const BatchPolicy& policy) { return SplitRows(lengths, policy); },
      "lengths"_a, "policy"_a,
      "A lone call's rows (token counts, in order) as [begin, end) runs within max_batch_size rows and "
      "max_batch_tokens padded tokens: the batcher's one rule for a lone call's runs.");
  m.def(
      "bucket_shape",
      [](int rows, int tokens, std::vector<int> bucket_rows, std::vector<int> bucket_tokens) {
        return BucketShape(rows, tokens, ShapeBuckets{std::move(bucket_rows), std::move(bucket_tokens)});
      },
      "rows"_a, "tokens"_a, "bucket_rows"_a, "bucket_tokens"_a,
      "(rows, tokens) padded up to the shape ladder's smallest rungs that hold them; a value past the top rung "
      "stays as it is. The one padding rule of every run.");

  nb::class_<Throughput>(m, "Throughput",
                         "The rate the queue drains at, which admission turns queued work into a wait with "
                         "(batch_policy.h; the batcher observes padded tokens; for the tests).")
      .def(nb::init<>())
      .def("observe", &Throughput::Observe, "texts"_a, "busy_s"_a)
      .def("wait_s", &Throughput::WaitS, "texts_ahead"_a)
      .def_prop_ro("texts_per_s", &Throughput::per_s);
}
