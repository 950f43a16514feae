// Python binding of the batcher's settings (batcher.h): one struct, built from service/config.Settings.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "batcher.h"
#include "dataplane_bindings.h"
#include "py_handles.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindBatcherSettings(nb::module_& m) {
  m.def(
      "batcher_defaults",
      [] {
        const BatcherSettings batcher;
        nb::dict defaults;
        defaults["max_batch_size"] = batcher.policy.max_batch_size;
        defaults["max_queue_delay_ms"] = batcher.policy.max_queue_delay_s * 1000;
        defaults["max_padding_ratio"] = batcher.policy.max_padding_ratio;
        defaults["batch_overhead_tokens"] = batcher.policy.batch_overhead_tokens;
        defaults["max_batch_tokens"] = batcher.policy.max_batch_tokens;
        defaults["sort_window"] = batcher.policy.sort_window;
        defaults["bulk_batch_tokens"] = batcher.policy.bulk_batch_tokens;
        defaults["bulk_min_texts"] = batcher.bulk_min_texts;
        defaults["max_queue_items"] = batcher.max_queue_items;
        defaults["default_timeout_ms"] = batcher.default_timeout_s * 1000;
        defaults["engine_concurrency"] = batcher.engine_concurrency;
        defaults["interactive_lane_ms"] = batcher.interactive_lane_s * 1000;
        return defaults;
      },
      "The C++ structs' own defaults, under service/config.Settings' names and units (a test holds them equal).");

  nb::class_<BatcherSettings>(m, "BatcherSettings",
                              "Every batching setting, built from service/config.Settings (batcher_settings()).")
      .def(
          "__init__",
          [](BatcherSettings* self, int max_batch_size, double max_queue_delay_s, double max_padding_ratio,
             int batch_overhead_tokens, int max_batch_tokens, int sort_window, int max_queue_items,
             double default_timeout_s, int engine_concurrency, int bulk_min_texts, int bulk_batch_tokens,
             double interactive_lane_s) {
            BatcherSettings settings;
            settings.policy = MakePolicy(max_batch_size, max_queue_delay_s, max_padding_ratio, batch_overhead_tokens,
                                         max_batch_tokens, sort_window);
            settings.policy.bulk_batch_tokens = bulk_batch_tokens;
            settings.bulk_min_texts = bulk_min_texts;
            settings.max_queue_items = max_queue_items;
            settings.default_timeout_s = default_timeout_s;
            settings.engine_concurrency = engine_concurrency;
            settings.interactive_lane_s = interactive_lane_s;
            new (self) BatcherSettings(settings);
          },
          nb::kw_only(), "max_batch_size"_a, "max_queue_delay_s"_a, "max_padding_ratio"_a, "batch_overhead_tokens"_a,
          "max_batch_tokens"_a, "sort_window"_a, "max_queue_items"_a, "default_timeout_s"_a, "engine_concurrency"_a,
          "bulk_min_texts"_a = BatcherSettings().bulk_min_texts,
          "bulk_batch_tokens"_a = BatchPolicy().bulk_batch_tokens,
          "interactive_lane_s"_a = BatcherSettings().interactive_lane_s)
      .def_prop_ro("policy", [](const BatcherSettings& self) { return self.policy; })
      .def_ro("max_queue_items", &BatcherSettings::max_queue_items)
      .def_ro("default_timeout_s", &BatcherSettings::default_timeout_s)
      .def_ro("engine_concurrency", &BatcherSettings::engine_concurrency)
      .def_ro("bulk_min_texts", &BatcherSettings::bulk_min_texts)
      .def_ro("interactive_lane_s", &BatcherSettings::interactive_lane_s);
}
