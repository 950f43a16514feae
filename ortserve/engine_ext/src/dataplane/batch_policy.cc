// The batch policy (see batch_policy.h). Every sort is stable, so equal keys keep their arrival order.
#include "batch_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <tuple>

#include "errors.h"

namespace ortserve {

void BatchPolicy::Validate() const {
  if (max_batch_size < 1) throw OptionError("max_batch_size must be >= 1");
  if (max_queue_delay_s < 0) throw OptionError("max_queue_delay_s must be >= 0");
  if (max_padding_ratio < 1.0) throw OptionError("max_padding_ratio must be >= 1.0");
  if (batch_overhead_tokens < 0) throw OptionError("batch_overhead_tokens must be >= 0");
  if (max_batch_tokens < 1) throw OptionError("max_batch_tokens must be >= 1");
  if (sort_window < 0) throw OptionError("sort_window must be >= 0");
  if (bulk_batch_tokens < 1) throw OptionError("bulk_batch_tokens must be >= 1");
}

std::vector<size_t> ChooseBatch(const std::vector<PendingText>& pending, double now, const BatchPolicy& policy) {
  if (pending.empty()) return {};
  std::vector<size_t> candidates(pending.size());
  std::iota(candidates.begin(), candidates.end(), size_t{0});
  auto by_age = [&](size_t a, size_t b) { return pending[a].enqueued_at < pending[b].enqueued_at; };
  if (policy.sort_window > 0 && pending.size() > static_cast<size_t>(policy.sort_window)) {
    std::stable_sort(candidates.begin(), candidates.end(), by_age);
    candidates.resize(static_cast<size_t>(policy.sort_window));
  }
  std::vector<size_t> order = candidates;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_tuple(pending[a].length, pending[a].enqueued_at) <
           std::make_tuple(pending[b].length, pending[b].enqueued_at);
  });
  // The first candidate of least enqueued_at.
  const size_t oldest = *std::min_element(candidates.begin(), candidates.end(), by_age);
  const bool must_include = now - pending[oldest].enqueued_at >= policy.max_queue_delay_s;

  size_t best_start = 0, best_end = 1;
  std::optional<std::tuple<size_t, bool, long long>> best_score;
  for (size_t start = 0; start < order.size(); ++start) {
    long long total = 0;
    size_t end = start;
    while (end < order.size() && end - start < static_cast<size_t>(policy.max_batch_size)) {
      const long long length = pending[order[end]].length;
      // Sorted order: the newest member is the longest, so it sets the padded width.
      const long long n = static_cast<long long>(end - start + 1);
      const long long real = total + length;
      const long long waste = n * length - real;
      const double allowed = std::max((policy.max_padding_ratio - 1.0) * static_cast<double>(real),
                                      static_cast<double>((n - 1) * policy.batch_overhead_tokens));
      if (end > start && (static_cast<double>(waste) > allowed || n * length > policy.max_batch_tokens)) break;
      total += length;
      ++end;
    }
    const bool has_oldest = std::find(order.begin() + start, order.begin() + end, oldest) != order.begin() + end;
    if (must_include && !has_oldest) continue;
    const std::tuple<size_t, bool, long long> score{end - start, has_oldest, -pending[order[end - 1]].length};
    if (!best_score || score > *best_score) {
      best_start = start;
      best_end = end;
      best_score = score;
    }
  }
  return {order.begin() + best_start, order.begin() + best_end};
}

std::vector<size_t> ChooseNext(const std::vector<PendingText>& pending, double now, const BatchPolicy& policy) {
  // The class served now: 0 interactive, 1 bulk, 2 shadow; the lowest pending number.
  auto class_of = [](const PendingText& t) { return t.shadow ? 2 : (t.bulk ? 1 : 0); };
  int served = 2;
  for (const PendingText& t : pending) served = std::min(served, class_of(t));
  std::vector<size_t> from;  // indices of the class served now
  std::vector<PendingText> texts;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (class_of(pending[i]) == served) {
      from.push_back(i);
      texts.push_back(pending[i]);
    }
  }
  BatchPolicy class_policy = policy;
  if (served > 0) class_policy.max_batch_tokens = std::min(policy.max_batch_tokens, policy.bulk_batch_tokens);
  std::vector<size_t> chosen = ChooseBatch(texts, now, class_policy);
  for (size_t& i : chosen) i = from[i];
  return chosen;
}

void Throughput::Observe(int64_t work, double busy_s) {
  if (work <= 0 || busy_s < 0) return;
  const double keep = std::exp(-busy_s / kWindowS);
  work_ = keep * work_ + static_cast<double>(work);
  seconds_ = keep * seconds_ + busy_s;
}

double Throughput::WaitS(int64_t work_ahead) const {
  const double rate = per_s();
  return rate > 0 ? static_cast<double>(work_ahead) / rate : 0.0;
}

namespace {

int Rung(int value, const std::vector<int>& ladder) {
  for (int rung : ladder) {
    if (rung >= value) return rung;
  }
  return value;
}

}  // namespace

std::pair<int, int> BucketShape(int rows, int tokens, const ShapeBuckets& buckets) {
  return {Rung(rows, buckets.rows), Rung(tokens, buckets.tokens)};
}

std::vector<std::pair<size_t, size_t>> SplitRows(const std::vector<int>& lengths, const BatchPolicy& policy) {
  std::vector<std::pair<size_t, size_t>> runs;
  size_t begin = 0;
  int longest = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int wider = std::max(longest, lengths[i]);
    const size_t rows = i - begin + 1;
    const bool over = static_cast<int>(rows) > policy.max_batch_size ||
                      static_cast<long long>(rows) * wider > policy.max_batch_tokens;
    if (over && rows > 1) {
      runs.emplace_back(begin, i);
      begin = i;
      longest = lengths[i];
    } else {
      longest = wider;
    }
  }
  if (begin < lengths.size()) runs.emplace_back(begin, lengths.size());
  return runs;
}

}  // namespace ortserve
