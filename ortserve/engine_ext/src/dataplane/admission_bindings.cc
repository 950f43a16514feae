// Python binding of admission's pure function (admission.h), for its tests: the batcher calls it in C++ only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>

#include "admission.h"
#include "dataplane_bindings.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindAdmission(nb::module_& m) {
  m.attr("ADMISSION_DEADLINE_SHARE") = kDeadlineShare;
  m.def(
      "admission_refusal",
      [](bool closed, int queued_texts, int running_texts, double texts_per_s, int texts,
         std::optional<double> left_s, int max_queue_items, double max_queue_wait_s) -> nb::object {
        const std::optional<Refusal> refusal =
            Admission(QueueSnapshot{closed, queued_texts, running_texts, texts_per_s}, texts, left_s,
                      AdmissionLimits{max_queue_items, max_queue_wait_s});
        if (!refusal) return nb::none();
        return nb::make_tuple(CodeName(refusal->code), refusal->message, refusal->retry_after_s);
      },
      nb::kw_only(), "closed"_a, "queued_texts"_a, "running_texts"_a, "texts_per_s"_a, "texts"_a, "left_s"_a.none(),
      "max_queue_items"_a, "max_queue_wait_s"_a,
      "Admission over a plain snapshot of the queue: (code name, message, retry_after_s) for a call of `texts` "
      "texts with `left_s` to its deadline (None: no deadline), or None to admit it.");
}
