"""The batcher's two lanes, in-process on the real engine: a lone request runs on the multi-threaded
session; queued work runs on the one-thread session, side by side; nothing runs beside a wide run.

The classifier is the real one (tiny bundle, two ORT sessions); its `run` is wrapped only to record
which lane each run used and when, so the overlap rules can be checked on what actually happened.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from support.reference import Reference

from ortserve.service.batch_policy import BatchPolicy
from ortserve.service.batcher import Batcher, BatchRun
from ortserve.service.textmodel import EngineOptions, TextClassifier

WORDS = ["the", "movie", "was", "great", "but", "the", "ending", "felt", "slow", "and", "the", "sound", "was", "awful"]


class RecordingClassifier(TextClassifier):
    """The real classifier; every run also records (lane, start, end)."""

    def __init__(self, inner: TextClassifier) -> None:
        super().__init__(engine=inner.engine, tokenizer=inner.tokenizer, manifest=inner.manifest, narrow=inner.narrow)
        self.runs: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()

    def run(self, token_ids: Sequence[np.ndarray], *, narrow: bool = False) -> np.ndarray:
        started = time.monotonic()
        logits = super().run(token_ids, narrow=narrow)
        with self._lock:
            self.runs.append(("narrow" if narrow else "wide", started, time.monotonic()))
        return logits


@pytest.fixture(scope="module")
def classifier(tiny_bundle: Path) -> Iterator[RecordingClassifier]:
    inner = TextClassifier.load(tiny_bundle, EngineOptions(intra_op_threads=2, narrow_engine=True))
    assert inner.narrow is not None
    yield RecordingClassifier(inner)
    inner.close()


def make_batcher(classifier: TextClassifier, pool: ThreadPoolExecutor, seen: list[BatchRun]) -> Batcher:
    return Batcher(classifier, policy=BatchPolicy(max_batch_size=4, max_padding_ratio=2.0), max_queue_items=4096,
                   engine_concurrency=2, tokenize_pool=pool, engine_pool=pool, on_batch=seen.append)


def texts_for(i: int) -> list[str]:
    return [" ".join(WORDS[: 2 + (i * 5 + k) % 12]) for k in range(1 + i % 3)]


def test_lone_request_runs_wide(classifier: RecordingClassifier, tiny_bundle: Path) -> None:
    seen: list[BatchRun] = []
    classifier.runs.clear()

    async def main() -> np.ndarray:
        with ThreadPoolExecutor(4) as pool:
            result = await make_batcher(classifier, pool, seen).infer(["a lone text"])
            return result.logits

    logits = asyncio.run(main())
    np.testing.assert_allclose(logits, Reference(tiny_bundle).logits(["a lone text"]), atol=1e-5)
    assert [run.lane for run in seen] == ["wide"]
    assert [lane for lane, _, _ in classifier.runs] == ["wide"]


def test_queued_work_runs_narrow_side_by_side_and_never_beside_a_wide_run(
    classifier: RecordingClassifier, tiny_bundle: Path
) -> None:
    seen: list[BatchRun] = []
    classifier.runs.clear()
    calls = [texts_for(i) for i in range(48)]

    async def main() -> list[np.ndarray]:
        with ThreadPoolExecutor(6) as pool:
            batcher = make_batcher(classifier, pool, seen)
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
