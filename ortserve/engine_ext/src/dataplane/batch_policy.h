// The batching decision and the engine's measured rate: pure functions over plain values, tested with plain values
// (tests/dataplane/test_batch_policy.py). No locks: the batcher calls them under its own mutex.
//
// ChooseBatch is called whenever the engine has room. It never waits: an idle engine runs whatever is pending at
// once, so a lone request pays no batching delay. Under load, the texts that arrived while the engine was busy are
// pending, and it picks the next batch from them:
// - sort by token length and take the window with the most texts whose padding is worth it, within max_batch_size
//   texts and max_batch_tokens padded tokens. On a CPU, padding is what makes naive batches no faster than batch 1;
//   length-sorted batches are. Padding is worth it while the wasted tokens stay under max_padding_ratio of the real
//   ones, or under what the runs saved by merging would have cost: each engine run has a fixed cost worth about
//   batch_overhead_tokens tokens, so n texts in one run may waste up to (n - 1) x that.
// - starvation bound: once the oldest text has waited max_queue_delay_s, the batch must include it.
// - sort window: only the sort_window oldest texts are candidates. Sorting the whole queue lets a text of an unusual
//   length be passed over until it is the oldest of all (under overload a P99 wait ~3x the mean). The tighter the
//   padding allowed, the more candidates a batch needs: 1.05 over the oldest 48 padded 1.02 where 1.15 over 24
//   padded 1.10, for 4-8% more texts/s on MiniLM (docs/benchmarks.md).
// Ties: the window with the most texts, then the one holding the oldest text, then the shortest.
//
// Interactive before bulk (ChooseNext): a bulk call (Batcher: bulk_min_texts texts or more) queues its texts
// however idle the engine, and they are batched only while no interactive text is pending, in runs of at most
// bulk_batch_tokens padded tokens. The engine cannot stop a run, so what an interactive call waits for behind a
// bulk job is at most one short run per lane; a long run held it up for the whole run. On a CPU a text costs about
// the same in a small run as in a big one (padding, not batch size, is what costs), so bulk loses little.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ortserve {

// The defaults are service/config.Settings' (the server passes every field; tests/service/test_settings_defaults.py
// holds the two equal).
struct BatchPolicy {
  int max_batch_size = 32;
  double max_queue_delay_s = 0.010;
  double max_padding_ratio = 1.05;
  int batch_overhead_tokens = 0;
  int max_batch_tokens = 1024;
  int sort_window = 48;
  int bulk_batch_tokens = 256;  // a bulk batch's most padded tokens (ChooseNext); a longer text still runs alone

  // Throws OptionError naming the field ("max_batch_size must be >= 1", ...).
  void Validate() const;
};

struct PendingText {
  int length = 0;            // token count
  double enqueued_at = 0.0;  // steady-clock seconds
  bool bulk = false;         // of a bulk call: batched only while no interactive text is pending
  bool shadow = false;       // of a shadow copy (bulk too): batched only while nothing else is pending
};

// Indices into `pending` of the next batch, shortest first (empty only when nothing is pending). Every text is of
// one class here (ChooseNext picks it).
std::vector<size_t> ChooseBatch(const std::vector<PendingText>& pending, double now, const BatchPolicy& policy);

// The next batch, interactive before bulk before shadow: ChooseBatch over the interactive texts while any is
// pending, else over the bulk ones, else over the shadow copies', both within bulk_batch_tokens. Indices into
// `pending`, shortest first.
std::vector<size_t> ChooseNext(const std::vector<PendingText>& pending, double now, const BatchPolicy& policy);

// A lone call's rows (token counts, in call order) as consecutive runs the engine may take: each within
// max_batch_size rows and max_batch_tokens padded tokens (a row over max_batch_tokens alone is a run of its own).
// Half-open [begin, end) index ranges covering every row, in order: a lone call's runs (RunSplit) and its work as
// admission counts it (CallTokens).
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

// The rate the engine drains the queue at, runs side by side included: work finished over the wall-clock time the
// engine was busy finishing it, both summed with weights that decay over kWindowS of busy time. The batcher counts
// work in padded tokens (admission.h), so that queued work turns into the wait a new call would see whatever the
// texts' lengths, and admission bounds latency (what callers feel) rather than a count whose cost depends on the
// model and texts. Wall-clock, not engine time: what else takes the cores (the front end, gaps between runs) slows
// the drain too. The window is long against one run because admission under overload keeps the queue at its limit,
// so calls are admitted whenever the estimate is high: a per-run average (the rate of the last few runs) admitted
// them at ~1.3x the rate the queue actually drained at, and they finished late.
class Throughput {
 public:
  // `work` finished `busy_s` after the previous run finished, or after the engine went busy if it was idle.
  void Observe(int64_t work, double busy_s);
  double WaitS(int64_t work_ahead) const;  // 0 before any run ended
  double per_s() const { return seconds_ > 0 ? work_ / seconds_ : 0.0; }

 private:
  static constexpr double kWindowS = 0.5;
  double work_ = 0.0, seconds_ = 0.0;
};

}  // namespace ortserve
