// What the data plane's binding files share (see py_handles.h).
#include "py_handles.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <chrono>

namespace nb = nanobind;

namespace ortserve {

std::shared_ptr<ServedVersion> ServedVersionPtr(nb::handle object) {
  return nb::cast<PyServedVersion&>(object).version;
}

std::shared_ptr<EventSink> EventSinkPtr(nb::handle object) { return nb::cast<PyEventSink&>(object).sink; }

std::optional<Clock::time_point> DeadlineIn(std::optional<double> timeout_s) {
  if (!timeout_s) return std::nullopt;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout_s));
}

nb::dict Timings(const InferResult& result) {
  nb::dict timings;
  timings["tokenize_s"] = result.tokenize_s;
  timings["queue_s"] = result.queue_s;
  timings["engine_s"] = result.engine_s;
  timings["batch_size"] = result.batch_size;
  timings["retry_after_s"] = result.retry_after_s;
  timings["tokens"] = result.tokens;
  return timings;
}

nb::tuple ResultTuple(InferResult& result) {
  nb::object logits = nb::none();
  if (result.code == Code::kOk) {
    auto* owned = new std::vector<float>(std::move(result.logits));
    nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
    const size_t shape[2] = {static_cast<size_t>(result.rows), static_cast<size_t>(result.columns)};
    logits = nb::ndarray<nb::numpy, float, nb::ndim<2>>(owned->data(), 2, shape, owner).cast();
  }
  return nb::make_tuple(CodeName(result.code), result.message, logits, Timings(result));
}

BatchPolicy MakePolicy(int max_batch_size, double max_queue_delay_s, double max_padding_ratio,
                       int batch_overhead_tokens, int max_batch_tokens, int sort_window) {
  BatchPolicy policy;
  policy.max_batch_size = max_batch_size;
  policy.max_queue_delay_s = max_queue_delay_s;
  policy.max_padding_ratio = max_padding_ratio;
  policy.batch_overhead_tokens = batch_overhead_tokens;
  policy.max_batch_tokens = max_batch_tokens;
  policy.sort_window = sort_window;
  return policy;
}

std::vector<std::vector<int64_t>> IdRows(nb::handle rows) {
  std::vector<std::vector<int64_t>> ids;
  for (nb::handle row : rows) {
    auto array = nb::cast<nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu>>(row);
    const int64_t* data = array.data();
    const size_t n = array.shape(0);
    const int64_t stride = array.stride(0);
    std::vector<int64_t>& out = ids.emplace_back(n);
    for (size_t i = 0; i < n; ++i) out[i] = data[static_cast<int64_t>(i) * stride];
  }
  return ids;
}

}  // namespace ortserve
