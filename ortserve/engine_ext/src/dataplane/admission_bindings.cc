// Python bindings of admission's pure functions (admission.h), for their tests: the batcher calls them in C++ only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "admission.h"
#include "dataplane_bindings.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindAdmission(nb::module_& m) {
  m.attr("ADMISSION_DEADLINE_SHARE") = kDeadlineShare;
  m.def(
      "call_tokens",
      [](const std::vector<int>& lengths, const BatchPolicy& policy, std::vector<int> bucket_rows,
         std::vector<int> bucket_tokens) {
        return CallTokens(lengths, policy, ShapeBuckets{std::move(bucket_rows), std::move(bucket_tokens)});
      },
      "lengths"_a, "policy"_a, "bucket_rows"_a = std::vector<int>{}, "bucket_tokens"_a = std::vector<int>{},
      "The padded tokens the engine runs for rows of these token counts alone: SplitRows' runs, each padded to its "
      "longest row and up to the shape ladder. A call's work as admission counts it.");
  m.def(
      "admission_refusal",
      [](bool closed, int queued_texts, int64_t queued_tokens, int64_t running_tokens, double tokens_per_s,
         int texts, int64_t tokens, std::optional<double> left_s, int max_queue_items,
         bool default_budget, int queued_bulk_texts, int64_t queued_bulk_tokens, bool bulk) -> nb::object {
        QueueSnapshot queue{closed, queued_texts, queued_tokens, running_tokens, tokens_per_s};
        queue.queued_bulk_texts = queued_bulk_texts;
        queue.queued_bulk_tokens = queued_bulk_tokens;
        const std::optional<Refusal> refusal =
            Admission(queue, CallWork{texts, tokens, default_budget, bulk}, left_s, AdmissionLimits{max_queue_items});
        if (!refusal) return nb::none();
        return nb::make_tuple(CodeName(refusal->code), refusal->message, refusal->retry_after_s);
      },
      nb::kw_only(), "closed"_a, "queued_texts"_a, "queued_tokens"_a, "running_tokens"_a, "tokens_per_s"_a,
      "texts"_a, "tokens"_a, "left_s"_a.none(), "max_queue_items"_a, "default_budget"_a = false,
      "queued_bulk_texts"_a = 0, "queued_bulk_tokens"_a = 0, "bulk"_a = false,
      "Admission over a plain snapshot of the queue: (code name, message, retry_after_s) for a call of `texts` "
      "texts and `tokens` padded tokens with `left_s` left of its time budget (None: no time bound; "
      "`default_budget`: the server's default, the call sent no deadline), or None to admit it.");
}
