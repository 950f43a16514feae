"""The batcher's two lanes, in-process on the real engine: a lone request runs on the multi-threaded
session; queued work runs on the one-thread session, side by side; nothing runs beside a wide run; a lane
starts the batch queued behind its running one without the event loop, and leaves out texts whose call
ended or whose deadline passed while that batch waited.

The classifier is the real one (tiny bundle, two ORT sessions); its `run` is wrapped only to record
which lane each run used, on which thread and when (and, for the deadline test, to make each run take a
known time), so the rules can be checked on what actually happened.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from support.reference import Reference

from ortserve.service.batch_policy import BatchPolicy
from ortserve.service.batcher import Batcher, BatchRun
from ortserve.service.errors import DeadlineExceeded
from ortserve.service.textmodel import EngineOptions, TextClassifier

WORDS = ["the", "movie", "was", "great", "but", "the", "ending", "felt", "slow", "and", "the", "sound", "was", "awful"]


class RecordingClassifier(TextClassifier):
    """The real classifier; every run also records (lane, start, end)."""

    def __init__(self, inner: TextClassifier) -> None:
        super().__init__(engine=inner.engine, tokenizer=inner.tokenizer, manifest=inner.manifest, narrow=inner.narrow)
        self.runs: list[tuple[str, float, float]] = []
        self.threads: list[int] = []  # the thread of each run, in the order of `runs`
        self.texts_run = 0
        self.delay_s = 0.0
        self._lock = threading.Lock()

    def run(self, token_ids: Sequence[np.ndarray], *, narrow: bool = False) -> np.ndarray:
        started = time.monotonic()
        if self.delay_s:
            time.sleep(self.delay_s)  # a slow engine: a batch queued behind this one waits a known time
        logits = super().run(token_ids, narrow=narrow)
        with self._lock:
            self.runs.append(("narrow" if narrow else "wide", started, time.monotonic()))
            self.threads.append(threading.get_ident())
            self.texts_run += len(token_ids)
        return logits

    def reset(self) -> None:
        self.runs.clear()
        self.threads.clear()
        self.texts_run = 0
        self.delay_s = 0.0


@pytest.fixture(scope="module")
def classifier(tiny_bundle: Path) -> Iterator[RecordingClassifier]:
    inner = TextClassifier.load(tiny_bundle, EngineOptions(intra_op_threads=2, narrow_engine=True))
    assert inner.narrow is not None
    yield RecordingClassifier(inner)
    inner.close()


def make_batcher(classifier: TextClassifier, pool: ThreadPoolExecutor, seen: list[BatchRun], *,
                 lanes: Sequence[ThreadPoolExecutor] = (), policy: BatchPolicy | None = None,
                 on_batch: Callable[[BatchRun], None] | None = None) -> Batcher:
    policy = policy or BatchPolicy(max_batch_size=4, max_padding_ratio=2.0)
    return Batcher(classifier, policy=policy, max_queue_items=4096, engine_concurrency=2, tokenize_pool=pool,
                   engine_pool=pool, lane_pools=lanes, on_batch=on_batch or seen.append)


def texts_for(i: int) -> list[str]:
    return [" ".join(WORDS[: 2 + (i * 5 + k) % 12]) for k in range(1 + i % 3)]


def test_lone_request_runs_wide(classifier: RecordingClassifier, tiny_bundle: Path) -> None:
    seen: list[BatchRun] = []
    classifier.reset()

    async def main() -> np.ndarray:
        with ThreadPoolExecutor(4) as pool:
            result = await make_batcher(classifier, pool, seen).infer(["a lone text"])
            return result.logits

    logits = asyncio.run(main())
    np.testing.assert_allclose(logits, Reference(tiny_bundle).logits(["a lone text"]), atol=1e-5)
    assert [run.lane for run in seen] == ["wide"]
    assert [lane for lane, _, _ in classifier.runs] == ["wide"]


@pytest.mark.parametrize("lane_threads", [False, True], ids=["shared-pool", "lane-threads"])
def test_queued_work_runs_narrow_side_by_side_and_never_beside_a_wide_run(
    classifier: RecordingClassifier, tiny_bundle: Path, lane_threads: bool
) -> None:
    seen: list[BatchRun] = []
    classifier.reset()
    calls = [texts_for(i) for i in range(48)]

    async def main() -> list[np.ndarray]:
        with ThreadPoolExecutor(6) as pool, ThreadPoolExecutor(1) as lane0, ThreadPoolExecutor(1) as lane1:
            # With lane threads each lane also queues a batch behind its running one: still two runs at most.
            batcher = make_batcher(classifier, pool, seen, lanes=(lane0, lane1) if lane_threads else ())
            results = await asyncio.gather(*(batcher.infer(texts) for texts in calls))
            return [r.logits for r in results]

    replies = asyncio.run(main())
    reference = Reference(tiny_bundle)
    for texts, logits in zip(calls, replies, strict=True):
        np.testing.assert_allclose(logits, reference.logits(texts), atol=1e-5)

    lanes = [run.lane for run in seen]
    assert "narrow" in lanes, lanes  # 48 calls at once queue: their batches run on the narrow session
    runs = classifier.runs
    for i, (lane, start, end) in enumerate(runs):
        overlapping = [other for j, other in enumerate(runs) if j != i and other[1] < end and start < other[2]]
        if lane == "wide":
            assert not overlapping, (lane, start, end, overlapping)
    # Never more than engine_concurrency (2) runs at one moment.
    edges = sorted([(start, 1) for _, start, _ in runs] + [(end, -1) for _, _, end in runs], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak <= 2, peak


def test_a_lane_starts_its_queued_batch_while_the_event_loop_is_busy(
    classifier: RecordingClassifier, tiny_bundle: Path
) -> None:
    """The point of the lane threads: a batch queued behind a running one starts when the engine returns, even
    while the event loop is busy elsewhere (here: blocked outright for 0.3 s, once, after the fifth batch)."""
    seen: list[BatchRun] = []
    classifier.reset()
    classifier.delay_s = 0.05  # runs long enough that both lanes are still busy when the loop blocks
    calls = [[f"{' '.join(WORDS[: 2 + i % 3])} {i}"] for i in range(60)]
    blocked: list[float] = []

    def block() -> None:
        blocked.append(time.monotonic())
        time.sleep(0.3)
        blocked.append(time.monotonic())

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def observe(run: BatchRun) -> None:
            seen.append(run)
            if len(seen) == 5:  # after this batch's dispatch: both lanes hold a running and a queued batch
                loop.call_soon(block)

        with ThreadPoolExecutor(4) as pool, ThreadPoolExecutor(1) as lane0, ThreadPoolExecutor(1) as lane1:
            # A sort window of 4 and batches of 4: with 60 calls pending, every lane queues one behind.
            policy = BatchPolicy(max_batch_size=4, max_padding_ratio=2.0, sort_window=4)
            batcher = make_batcher(classifier, pool, seen, lanes=(lane0, lane1), policy=policy, on_batch=observe)
            results = await asyncio.gather(*(batcher.infer(texts) for texts in calls))
        reference = Reference(tiny_bundle)
        for texts, result in zip(calls, results, strict=True):
            np.testing.assert_allclose(result.logits, reference.logits(texts), atol=1e-5)

    try:
        asyncio.run(main())
    finally:
        classifier.delay_s = 0.0
    start, end = blocked
    # A run that ended and the next run on the same thread that started, both while the loop was blocked: that
    # start needed nothing from the loop.
    by_thread: dict[int, list[tuple[float, float]]] = {}
    for (_lane, run_start, run_end), thread in zip(classifier.runs, classifier.threads, strict=True):
        by_thread.setdefault(thread, []).append((run_start, run_end))
    handoffs = [
        (a, b) for runs in by_thread.values() for a, b in itertools.pairwise(sorted(runs))
        if start < a[1] and b[0] < end
    ]
    assert handoffs, (start, end, by_thread)


def test_a_batch_queued_on_a_lane_leaves_out_expired_and_cancelled_calls(
    classifier: RecordingClassifier, tiny_bundle: Path
) -> None:
    """Each run takes 0.4 s, batches hold 2 texts. c0 runs alone (wide); then (c1, c2) and (c3, c4) run on the
    lanes while (c5, c6) and (c7, c8) wait queued behind them. c5's deadline passes and c7 is cancelled during
    that wait: neither reaches the engine; their batch-mates run, and their queue time counts the wait on the
    lane up to the engine's start."""
    seen: list[BatchRun] = []
    classifier.reset()
    classifier.delay_s = 0.4
    texts = [[f"call number {i}"] for i in range(9)]

    async def main() -> list[object]:
        with ThreadPoolExecutor(1) as tok, ThreadPoolExecutor(2) as pool, ThreadPoolExecutor(1) as lane0, \
                ThreadPoolExecutor(1) as lane1:
            policy = BatchPolicy(max_batch_size=2, sort_window=2, max_padding_ratio=2.0, max_queue_delay_s=10.0)
            batcher = Batcher(classifier, policy=policy, max_queue_items=64, engine_concurrency=2, tokenize_pool=tok,
                              engine_pool=pool, lane_pools=(lane0, lane1), on_batch=seen.append)
            now = time.monotonic()
            tasks = [asyncio.create_task(batcher.infer(texts[0]))]
            await asyncio.sleep(0.05)  # c0 holds the engine (a wide run); the rest queue in order
            for i in range(1, 9):
                deadline = now + 0.6 if i == 5 else None  # alive at dispatch (~0.4 s), expired at its start (~0.8 s)
                tasks.append(asyncio.create_task(batcher.infer(texts[i], deadline=deadline)))
                await asyncio.sleep(0.005)
            asyncio.get_running_loop().call_later(0.6 - (time.monotonic() - now), tasks[7].cancel)
            return await asyncio.gather(*tasks, return_exceptions=True)

    try:
        outcomes = asyncio.run(main())
    finally:
        classifier.delay_s = 0.0
    assert isinstance(outcomes[5], DeadlineExceeded), outcomes[5]
    assert isinstance(outcomes[7], asyncio.CancelledError), outcomes[7]
    reference = Reference(tiny_bundle)
    ok = [i for i in range(9) if i not in (5, 7)]
    for i in ok:
        np.testing.assert_allclose(outcomes[i].logits, reference.logits(texts[i]), atol=1e-5)  # type: ignore[union-attr]
    assert classifier.texts_run == 7  # the two left out never ran
    assert [run.texts for run in seen] == [1, 2, 2, 1, 1]
    # c6 and c8 were tokenized at ~0.05 s and started at ~0.8 s, after waiting behind a lane's running batch.
    assert outcomes[6].queue_s > 0.55 and outcomes[8].queue_s > 0.55, (outcomes[6], outcomes[8])  # type: ignore[union-attr]


def test_one_lane_never_runs_a_queued_batch_beside_a_lone_request(
    classifier: RecordingClassifier, tiny_bundle: Path
) -> None:
    """engine_concurrency 1: the lone request runs on the engine pool, queued batches on the lane thread; a batch
    is queued behind lane runs only, so the two never overlap however many texts wait."""
    classifier.reset()
    classifier.delay_s = 0.05
    seen: list[BatchRun] = []
    calls = [[f"{' '.join(WORDS[: 2 + i % 4])} {i}"] for i in range(30)]

    async def main() -> None:
        with ThreadPoolExecutor(2) as pool, ThreadPoolExecutor(1) as lane0:
            policy = BatchPolicy(max_batch_size=4, max_padding_ratio=2.0, sort_window=2)
            batcher = Batcher(classifier, policy=policy, max_queue_items=4096, engine_concurrency=1,
                              tokenize_pool=pool, engine_pool=pool, lane_pools=(lane0,), on_batch=seen.append)
            await asyncio.gather(*(batcher.infer(texts) for texts in calls))

    try:
        asyncio.run(main())
    finally:
        classifier.delay_s = 0.0
    runs = sorted((start, end) for _, start, end in classifier.runs)
    assert len(runs) >= 2 and classifier.texts_run == 30
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs)), runs  # one at a time
