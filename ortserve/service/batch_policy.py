"""The batching decision, as one pure function over plain data (unit-tested with plain lists).

Called whenever the engine has room. It never waits: an idle engine runs whatever is pending at
once, so a lone request pays no batching delay. Under load, the requests that arrived while the
engine was busy are pending, and this picks the next batch from them:

- sort by token length and take the window with the most texts whose padding is worth it, within
  `max_batch_size` texts and `max_batch_tokens` padded tokens. On this kind of CPU, padding is what
  makes naive batches no faster than batch 1; length-sorted batches are. Padding is worth it while
  the wasted tokens stay under `max_padding_ratio` of the real ones, or under what the runs saved
  by merging would have cost: each engine run has a fixed cost worth about `batch_overhead_tokens`
  tokens, so n texts in one run may waste up to (n - 1) x that.
- starvation bound: once the oldest text has waited `max_queue_delay_s`, the batch must include it,
  so a rare long text is never passed over for long.
- sort window: only the `sort_window` oldest texts are candidates. Sorting the whole queue lets a text
  of an unusual length be passed over until it is the oldest of all, which under overload put the P99
  wait at ~3x the mean (a closed-loop simulation on the real engine at padding 1.3: same texts/s, P99
  wait 545 vs 714-731 ms). The tighter the padding allowed, the more candidates a batch needs: the
  server's defaults (1.05 over the oldest 48) pad 1.02 where 1.15 over 24 padded 1.10, for 4-8% more
  texts/s on MiniLM; the whole queue at 1.05 adds a little more under overload at a P99 about a fifth
  higher.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortserve.service.config import default


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    # Defaults: config.Settings' (the one definition of each setting).
    max_batch_size: int = default("max_batch_size")
    """Most texts in one engine run."""
    max_queue_delay_s: float = default("max_queue_delay_ms") / 1000
    """Once the oldest pending text has waited this long, the next batch includes it."""
    max_padding_ratio: float = default("max_padding_ratio")
    """Padded tokens / real tokens allowed in one batch; 1.0 means equal lengths only."""
    batch_overhead_tokens: int = default("batch_overhead_tokens")
    """The fixed cost of one engine run, in tokens' worth of work (measured: scripts/bench)."""
    max_batch_tokens: int = default("max_batch_tokens")
    """Most padded tokens (texts x longest) in one batch: past a few thousand, a CPU engine's
    throughput falls (cache) while the batch's latency keeps growing."""
    sort_window: int = default("sort_window")
    """Only the oldest this-many pending texts are sorted into windows (bounds how long a text can be
    passed over); 0 sorts them all."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if self.max_queue_delay_s < 0:
            raise ValueError("max_queue_delay_s must be >= 0")
        if self.max_padding_ratio < 1.0:
            raise ValueError("max_padding_ratio must be >= 1.0")
        if self.batch_overhead_tokens < 0:
            raise ValueError("batch_overhead_tokens must be >= 0")
        if self.max_batch_tokens < 1:
            raise ValueError("max_batch_tokens must be >= 1")
        if self.sort_window < 0:
            raise ValueError("sort_window must be >= 0")


@dataclass(frozen=True, slots=True)
class PendingText:
    length: int
    """Token count."""
    enqueued_at: float
    """Monotonic seconds."""


def choose_batch(pending: Sequence[PendingText], now: float, policy: BatchPolicy) -> list[int]:
    """Indices into `pending` of the next batch (empty only when nothing is pending)."""
    if not pending:
        return []
    candidates = range(len(pending))
    if policy.sort_window and len(pending) > policy.sort_window:
        candidates = sorted(candidates, key=lambda i: pending[i].enqueued_at)[: policy.sort_window]
    order = sorted(candidates, key=lambda i: (pending[i].length, pending[i].enqueued_at))
    oldest = min(candidates, key=lambda i: pending[i].enqueued_at)
    must_include = oldest if now - pending[oldest].enqueued_at >= policy.max_queue_delay_s else None

    best: tuple[int, int] = (0, 1)
    best_score: tuple[int, bool, int] | None = None
    for start in range(len(order)):
        total = 0
        end = start
        while end < len(order) and end - start < policy.max_batch_size:
            length = pending[order[end]].length
            # Sorted order: the newest member is the longest, so it sets the padded width.
            n, real = end - start + 1, total + length
            waste = n * length - real
            allowed = max((policy.max_padding_ratio - 1.0) * real, (n - 1) * policy.batch_overhead_tokens)
            if end > start and (waste > allowed or n * length > policy.max_batch_tokens):
                break
            total += length
            end += 1
        window = order[start:end]
        has_oldest = oldest in window
        if must_include is not None and not has_oldest:
            continue
        score = (len(window), has_oldest, -pending[order[end - 1]].length)
        if best_score is None or score > best_score:
            best, best_score = (start, end), score
    return order[best[0] : best[1]]


@dataclass(slots=True)
class Throughput:
    """The engine's recent texts/s, an exponentially weighted mean over finished batches.

    Turns a queue depth into the wait a new request would see, so admission can bound latency
    (what callers feel) rather than a count whose cost depends on the model and the texts.
    """

    texts_per_s: float = 0.0
    alpha: float = 0.2

    def observe(self, texts: int, seconds: float) -> None:
        if seconds <= 0:
            return
        rate = texts / seconds
        self.texts_per_s = rate if self.texts_per_s == 0 else (1 - self.alpha) * self.texts_per_s + self.alpha * rate

    def wait_s(self, texts_ahead: int) -> float:
        """Expected seconds until `texts_ahead` texts are through the engine (0 before any batch ran)."""
        return texts_ahead / self.texts_per_s if self.texts_per_s > 0 else 0.0
