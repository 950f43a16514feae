"""The limit: what the engine alone does with the same bundle, corpus and thread settings as the server.

Tokenize + Engine.run in this process, no server, no gRPC, no queue: over length-sorted batches (what
perfect length bucketing reaches) of sizes 1..64, the best texts/s is the limit a served run is
compared against; the batch-1 latency (tokenize + run of one text, P50) is what a lone request
cannot go below. Each measurement is the best of `repeats` passes: noise from other processes only
ever slows a pass down, so the best pass is the closest to what the engine can do.

Run it only while the server is idle: both would compete for the same cores.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import numpy as np

from ortserve.service.config import Settings
from ortserve.service.instance import ModelInstance, instance_options
from ortserve.service.tokenization import TokenizerChoice

LIMIT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
SIDE_BY_SIDE_SIZES = (4, 8, 16)
BATCH1_IDLE_S = 0.003
"""Idle before each run of the "after idle" batch-1 pass: about what a c=1 request spends outside the engine
here (gRPC both ways, decode, encode), during which a server's engine sits idle."""
T = TypeVar("T")


@dataclass(frozen=True)
class EngineSettings:
    """The server's engine settings (ortserve serve --intra-op-threads ... --allow-spinning). The defaults are
    ortserve's (tests/bench/test_engine_settings.py holds them to its config); the bench reads the config itself
    when it can, these apply when it cannot."""

    intra_op_threads: int = 2
    inter_op_threads: int = 1
    allow_spinning: bool = True
    spin_between_runs: bool = False
    graph_optimization_level: str = "all"
    engine_concurrency: int = 2
    """Above 1 (with intra_op_threads above 1), the server also runs one-thread sessions side by side."""
    tokenizer: str = "auto"
    """auto, native or hf (ortserve serve --tokenizer)."""


@dataclass(frozen=True)
class SortedPass:
    batch_size: int
    texts_per_s: float
    mean_batch_ms: float
    padding_ratio: float
    """Padded tokens / real tokens over the pass."""


class EngineAlone:
    """Owned by the benchmark's main thread; closes its engine on `close`."""

    def __init__(self, bundle: Path, settings: EngineSettings) -> None:
        # The server's own compute path (same tokenizer set-up, padding and feeds), minus the server.
        server = Settings(intra_op_threads=settings.intra_op_threads, inter_op_threads=settings.inter_op_threads,
                          allow_spinning=settings.allow_spinning, spin_between_runs=settings.spin_between_runs,
                          graph_optimization_level=settings.graph_optimization_level,
                          engine_concurrency=settings.engine_concurrency)
        self.classifier = ModelInstance.load(bundle, instance_options(server),
                                             tokenizer=cast(TokenizerChoice, settings.tokenizer))
        self.streams = settings.engine_concurrency
        self._corpus: list[str] = []
        self._lengths: list[int] = []
        self._order: list[int] = []

    def close(self) -> None:
        self.classifier.close()

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self.classifier.tokenize(texts)]

    def run_texts(self, texts: Sequence[str]) -> int:
        """Tokenize and run one batch; returns the padded width."""
        token_ids = self.classifier.tokenize(texts)
        self.classifier.run(token_ids)
        return max(len(ids) for ids in token_ids)

    def use_corpus(self, corpus: Sequence[str]) -> None:
        """Tokenize the corpus once to know every text's length (the passes below sort by it)."""
        self._corpus = list(corpus)
        self._lengths = self.token_lengths(self._corpus)
        self._order = sorted(range(len(self._corpus)), key=lambda i: self._lengths[i])

    def length_sample(self, count: int) -> list[str]:
        """`count` corpus texts, in corpus order, whose token-length mix equals the whole corpus's
        (every k-th text in length order): what a client cycling over the corpus sends."""
        picked = sorted(_spread(self._order, count))
        return [self._corpus[i] for i in picked]

    def side_by_side_pass(self, batch_size: int, *, texts: int, repeats: int = 1) -> SortedPass | None:
        """The same length-sorted batches, run by `engine_concurrency` threads at once on the one-thread
        session (what the server does under load); None when the server would not do it."""
        if self.classifier.narrow is None or self.streams < 2:
            return None
        # Each stream needs several batches to itself, or one slow batch decides the pass.
        chosen, real, padded = self._sorted_batches(batch_size, max(2 * texts, 8 * self.streams * batch_size))
        batches = [[self._corpus[i] for i in batch] for batch in chosen]
        shares = [batches[k :: self.streams] for k in range(self.streams)]

        def stream(share: list[list[str]]) -> None:
            for batch in share:
                self.classifier.run(self.classifier.tokenize(batch), narrow=True)

        stream(shares[0][:1])  # the narrow session's first run, outside the timed passes
        best = float("inf")
        with ThreadPoolExecutor(self.streams) as pool:
            for _ in range(max(2, repeats)):
                started = time.perf_counter()
                list(pool.map(stream, shares))
                best = min(best, time.perf_counter() - started)
        count = sum(len(b) for b in batches)
        return SortedPass(batch_size, count / best, 1000 * best * self.streams / len(batches), padded / real)

    def _sorted_batches(self, batch_size: int, texts: int) -> tuple[list[list[int]], int, int]:
        order, lengths = self._order, self._lengths
        cut = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
        chosen = _spread(cut, max(4, round(texts / batch_size)))
        real = sum(lengths[i] for batch in chosen for i in batch)
        padded = sum(len(batch) * max(lengths[i] for i in batch) for batch in chosen)
        return chosen, real, padded

    def sorted_pass(self, batch_size: int, *, texts: int, repeats: int = 1) -> SortedPass:
        """About `texts` texts (at least 4 batches) in batches of `batch_size`, as perfect length bucketing
        forms them.

        The whole corpus is sorted by token length and cut into consecutive batches (so even batches
        of 64 pad little, as they would from a large pool), and an evenly spread subset of those
        batches, covering short and long texts alike, is timed: the cost of one pass stays the same
        for every batch size.
        """
        lengths = self._lengths
        # At least 4 batches, so that even batches of 64 sample both short and long texts.
        chosen, real, padded = self._sorted_batches(batch_size, texts)
        batches = [[self._corpus[i] for i in batch] for batch in chosen]
        count = sum(len(b) for b in batches)
        # The widest batch first: ORT's memory arena grows to its size outside the timed pass.
        widest = max(range(len(chosen)), key=lambda k: len(chosen[k]) * max(lengths[i] for i in chosen[k]))
        self.run_texts(batches[widest])
        best = float("inf")
        for _ in range(max(1, repeats)):
            started = time.perf_counter()
            for batch in batches:
                self.run_texts(batch)
            best = min(best, time.perf_counter() - started)
        return SortedPass(batch_size, count / best, 1000 * best / len(batches), padded / real)

    def batch1_latency_ms(self, texts: Sequence[str], *, idle_s: float = 0.0) -> dict[str, float]:
        """Tokenize + run of one text at a time, in the given order (as a c=1 client sends): P50/P90/P99 ms.

        `idle_s` sleeps before each run, as a server's engine idles between lone requests: on a VM an idle
        core is handed back to the host, and the run after it pays to get it (and its caches) back."""
        for text in texts[:4]:
            self.run_texts([text])
        samples = sorted(self.batch1_samples_ms(texts, idle_s=idle_s))
        return {"p50": statistics.median(samples), "p90": _pct(samples, 90), "p99": _pct(samples, 99)}

    def batch1_samples_ms(self, texts: Sequence[str], *, idle_s: float = 0.0) -> list[float]:
        """Milliseconds of tokenize + run for each text, one at a time, in order (no warm-up)."""
        samples = []
        for text in texts:
            if idle_s:
                time.sleep(idle_s)
            started = time.perf_counter()
            self.run_texts([text])
            samples.append(1000 * (time.perf_counter() - started))
        return samples


def _spread(items: Sequence[T], count: int) -> list[T]:
    """`count` items evenly spread over `items` (all of them when there are fewer)."""
    if count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int((k + 0.5) * step)] for k in range(count)]


def _pct(sorted_values: Sequence[float], p: float) -> float:
    return float(np.percentile(np.asarray(sorted_values), p))
