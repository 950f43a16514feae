// The batching decision and the engine's measured rate, ported from service/batch_policy.py (the reference:
// tests/engine/test_batch_policy_native.py runs both on the same random pending sets and requires the same
// indices). No Python, no locks: the native batcher calls these under its own mutex.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ortserve {

// Same fields and meaning as service/batch_policy.BatchPolicy; the defaults are service/config.Settings' (the
// server passes every field; tests/service/test_settings_defaults.py holds the two equal).
struct BatchPolicy {
  int max_batch_size = 32;
  double max_queue_delay_s = 0.010;
  double max_padding_ratio = 1.05;
  int batch_overhead_tokens = 0;
  int max_batch_tokens = 1024;
  int sort_window = 48;

  // Throws OptionError with the Python class's messages ("max_batch_size must be >= 1", ...).
  void Validate() const;
};

struct PendingText {
  int length = 0;            // token count
  double enqueued_at = 0.0;  // steady-clock seconds
};

// Indices into `pending` of the next batch, in the order batch_policy.choose_batch returns them
// (empty only when nothing is pending).
std::vector<size_t> ChooseBatch(const std::vector<PendingText>& pending, double now, const BatchPolicy& policy);

// A lone call's rows (token counts, in call order) as consecutive runs the engine may take: each within
// max_batch_size rows and max_batch_tokens padded tokens (a row over max_batch_tokens alone is a run of its own).
// Half-open [begin, end) index ranges covering every row, in order. Both batchers' idle paths run these.
std::vector<std::pair<size_t, size_t>> SplitRows(const std::vector<int>& lengths, const BatchPolicy& policy);

// The shape ladder a batch is padded up to on a GPU (service/config's bucket_rows / bucket_tokens, the token
// rungs capped at the model's max_seq_len): a bounded set of shapes, each of which gets its CUDA graph captured
// once at warm-up and replayed after. Both ladders ascending; empty ones leave batches as they are.
struct ShapeBuckets {
  std::vector<int> rows;
  std::vector<int> tokens;
  bool empty() const { return rows.empty() && tokens.empty(); }
};

// (rows, tokens) padded up to the smallest rung that holds each; a value past the top rung stays as it is (that
// batch runs without a graph).
std::pair<int, int> BucketShape(int rows, int tokens, const ShapeBuckets& buckets);

// service/batch_policy.Throughput: exponentially weighted texts/s over finished batches.
class Throughput {
 public:
  void Observe(int texts, double seconds);
  double WaitS(int texts_ahead) const;  // 0 before any batch ran
  double texts_per_s() const { return texts_per_s_; }

 private:
  double texts_per_s_ = 0.0;
  double alpha_ = 0.2;
};

}  // namespace ortserve
