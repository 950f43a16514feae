"""Dynamic batching for one model version: admission, token-length grouping, deadlines, engine runs.

Owned by the event loop: `infer` and every `_`-method except the executor bodies run on the loop
thread, so the queue needs no lock. Tokenization happens as soon as a request is admitted (it never
waits behind the engine): on the loop when the C++ tokenizer makes it a matter of microseconds, else
in the shared tokenizer pool; batches run in the engine pool, at most `engine_concurrency` at once. The
decision of what to run next is `batch_policy.choose_batch`.

    infer(texts) ─► admit (bounded) ─► tokenize (loop|pool) ─► pending ─► choose_batch ─► engine (pool)
                                                                       ◄─ results split back per request

Two lanes when the classifier has a one-thread ("narrow") session: a request that finds the engine
idle and nothing queued runs alone on the multi-threaded ("wide") session, which is what sets unloaded
latency; anything that had to queue runs on the narrow session, up to `engine_concurrency` runs side
by side. Under load that keeps every core on its own batch: runs of a multi-threaded session wait at
every operator for whichever of their threads the event loop preempted, and leave the other core idle.
A wide run uses every thread, so nothing else starts while it runs.

Queued batches run on the server's lane threads (`lane_pools`: one single-thread executor per unit of
`engine_concurrency`), and once the pending texts fill the sort window every lane also holds one batch
queued behind the one it runs. The lane then starts that batch the moment the engine returns, instead of
waiting for the event loop to hear of the result and dispatch: under load the loop is busy answering the
batch that just came back, and lanes sat idle ~8% of the time between batches (measured at c=64: submit
to start 1.0 ms P50, gap 1.6 ms per ~24 ms batch). With that many texts pending, the batch chosen early is
the one chosen later: the candidates are the same oldest `sort_window` texts. A queued batch re-checks its
texts on the lane thread just before it runs, so one whose deadline passed or whose call ended meanwhile
never reaches the engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

from ortserve.engine_ext import EngineError, NativeBatchPolicy, OutOfMemoryError, split_rows
from ortserve.service.batch_policy import BatchPolicy, PendingText, Throughput, choose_batch
from ortserve.service.errors import DeadlineExceeded, Internal, ResourceExhausted, ServiceError
from ortserve.service.textmodel import TextClassifier


@dataclass(frozen=True, slots=True)
class BatchRun:
    """What one engine run looked like; handed to the metrics observer."""

    texts: int
    padded_tokens: int
    real_tokens: int
    engine_s: float
    lane: str = "wide"
    """"wide" (the multi-threaded session) or "narrow" (the one-thread session)."""


@dataclass(slots=True)
class InferResult:
    logits: np.ndarray
    tokenize_s: float
    queue_s: float
    """Longest time any of this request's texts waited between tokenized and engine start."""
    engine_s: float
    """Engine time of the batches this request's texts ran in (summed when split)."""
    batch_size: int
    """Largest batch any of this request's texts ran in."""


@dataclass(eq=False, slots=True)
class _Request:
    future: asyncio.Future[None]
    deadline: float | None
    logits: np.ndarray
    remaining: int
    queue_s: float = 0.0
    engine_s: float = 0.0
    batch_size: int = 0
    abandoned: bool = False
    """Set on the loop when the call has ended (answered, failed or cancelled); read by lane threads."""


@dataclass(eq=False, slots=True)
class _Item:
    request: _Request
    row: int
    ids: np.ndarray
    enqueued_at: float
    key: PendingText = field(init=False)

    def __post_init__(self) -> None:
        self.key = PendingText(len(self.ids), self.enqueued_at)


class Batcher:
    def __init__(
        self,
        classifier: TextClassifier,
        *,
        policy: BatchPolicy,
        max_queue_items: int,
        max_queue_wait_s: float = 0.0,
        engine_concurrency: int,
        tokenize_pool: Executor,
        engine_pool: Executor,
        lane_pools: Sequence[Executor] = (),
        on_batch: Callable[[BatchRun], None] | None = None,
    ) -> None:
        self._classifier = classifier
        self._policy = policy
        self._native_policy = NativeBatchPolicy(
            max_batch_size=policy.max_batch_size, max_queue_delay_s=policy.max_queue_delay_s,
            max_padding_ratio=policy.max_padding_ratio, batch_overhead_tokens=policy.batch_overhead_tokens,
            max_batch_tokens=policy.max_batch_tokens, sort_window=policy.sort_window,
        )
        self._max_queue_items = max_queue_items
        self._max_queue_wait_s = max_queue_wait_s
        self._throughput = Throughput()
        self._running_texts = 0  # texts in batches the engine is running now
        self._engine_concurrency = engine_concurrency
        self._tokenize_pool = tokenize_pool
        self._engine_pool = engine_pool
        self._on_batch = on_batch
        self._labels = len(classifier.labels)
        self._admitted = 0  # texts admitted and not yet handed to the engine (tokenizing + pending)
        self._pending: list[_Item] = []
        self._in_flight = 0
        self._wide_running = False
        # Lanes only pay when runs go side by side; with one at a time the wide session does everything.
        self._has_narrow = classifier.narrow is not None and engine_concurrency > 1
        # One single-thread executor per lane (shared by every version the server holds); without them, queued
        # batches go to `engine_pool` and nothing is queued behind a running batch.
        self._lane_pools = list(lane_pools)[:engine_concurrency] if len(lane_pools) >= engine_concurrency else []
        self._lane_load = [0] * len(self._lane_pools)  # batches each lane holds for this version: running + queued
        self._queue_behind_at = policy.sort_window or policy.max_batch_size

    @property
    def policy(self) -> BatchPolicy:
        return self._policy

    @property
    def queue_depth(self) -> int:
        return self._admitted

    async def infer(self, texts: Sequence[str], *, deadline: float | None = None) -> InferResult:
        """Logits for `texts`, in order. `deadline` is in `time.monotonic()` seconds."""
        n = len(texts)
        self._admit(n)
        loop = asyncio.get_running_loop()
        if not self._admitted:
            lane = self._lane(queued=False)
            if lane is not None:
                return await self._run_alone(texts, lane)
        self._admitted += n
        request = _Request(
            future=loop.create_future(),
            deadline=deadline,
            logits=np.empty((n, self._labels), dtype=np.float32),
            remaining=n,
        )
        queued = False
        try:
            started = time.monotonic()
            if self._classifier.tokenizes_inline(texts):  # microseconds: cheaper here than a thread hop away
                token_ids = self._classifier.tokenize(texts)
            else:
                token_ids = await loop.run_in_executor(self._tokenize_pool, self._classifier.tokenize, texts)
            now = time.monotonic()
            tokenize_s = now - started
            if deadline is not None and now >= deadline:
                raise DeadlineExceeded("deadline exceeded before the request reached the engine")
            self._pending.extend(_Item(request, row, ids, now) for row, ids in enumerate(token_ids))
            queued = True
            self._dispatch()
            await request.future
            return InferResult(
                logits=request.logits,
                tokenize_s=tokenize_s,
                queue_s=request.queue_s,
                engine_s=request.engine_s,
                batch_size=request.batch_size,
            )
        finally:
            if not request.future.done():
                request.future.cancel()
            if queued:
                self._forget(request)
            else:
                self._admitted -= n

    def _admit(self, n: int) -> None:
        """Refuse at once, rather than queue, past the queue's bound in texts or in expected wait.

        An empty queue always admits: the per-request maximum, not the queue size, bounds what one
        call may send, and a lone request must never be refused.
        """
        if not self._admitted:
            return
        # Batches run `engine_concurrency` at a time, so the queue drains that much faster.
        wait = self._throughput.wait_s(self._admitted + self._running_texts) / self._engine_concurrency
        if self._admitted + n > self._max_queue_items:
            raise ResourceExhausted(
                f"server busy: {self._admitted} texts queued for this model version "
                f"(limit {self._max_queue_items}); retry with backoff",
                retry_after_s=wait,
            )
        if self._max_queue_wait_s and wait > self._max_queue_wait_s:
            raise ResourceExhausted(
                f"server busy: {self._admitted} texts queued for this model version, about "
                f"{wait * 1000:.0f} ms of work (limit {self._max_queue_wait_s * 1000:.0f} ms); retry with backoff",
                retry_after_s=wait,
            )

    def _lane(self, *, queued: bool) -> str | None:
        """The session the next run goes to, or None while the engine has no room for it."""
        if self._wide_running:
            return None
        if self._in_flight >= self._engine_concurrency:
            # Every lane is busy: queue one more batch behind a running one once the pending texts fill the sort
            # window (the batch chosen now is the one chosen when that lane frees). Only behind lane runs: a lone
            # request's run is on the engine pool, and nothing may start beside it on a lane.
            behind = (queued and self._lane_pools and self._in_flight < 2 * self._engine_concurrency
                      and sum(self._lane_load) == self._in_flight and len(self._pending) >= self._queue_behind_at)
            if not behind:
                return None
        if not self._has_narrow:
            return "wide"  # one session; with engine_concurrency > 1 its runs share its threads
        return "wide" if self._in_flight == 0 and not queued else "narrow"

    def _start(self, lane: str, texts: int) -> None:
        self._in_flight += 1
        self._running_texts += texts
        # With a narrow session, a wide run holds every intra-op thread: nothing runs beside it.
        self._wide_running = lane == "wide" and self._has_narrow

    def _stop(self, texts: int) -> None:
        self._in_flight -= 1
        self._running_texts -= texts
        self._wide_running = False

    async def _run_alone(self, texts: Sequence[str], lane: str) -> InferResult:
        """Nothing queued: nothing to batch with, so tokenize and run in one thread hop.

        Saves a hand-off through the loop on the path that sets unloaded latency. Calls that
        arrive meanwhile queue as usual and are dispatched when this run ends.
        """
        self._start(lane, len(texts))
        run = asyncio.get_running_loop().run_in_executor(
            self._engine_pool, _tokenize_and_run, self._classifier, list(texts), lane == "narrow", self._native_policy
        )
        # The slot is released when the engine is done, even if this call was cancelled meanwhile.
        run.add_done_callback(lambda f: self._release_slot(len(texts), f))
        try:
            logits, runs, seconds, tokenize_s = await run
        except EngineError as e:
            raise engine_failure(e) from None
        if self._on_batch is not None:
            for lengths, engine_s in zip(runs, seconds, strict=True):  # one record per engine run
                self._on_batch(BatchRun(len(lengths), max(lengths) * len(lengths), sum(lengths), engine_s, lane))
        return InferResult(logits=logits, tokenize_s=tokenize_s, queue_s=0.0, engine_s=sum(seconds),
                           batch_size=max(len(lengths) for lengths in runs))

    def _release_slot(self, texts: int,
                      run: asyncio.Future[tuple[np.ndarray, list[list[int]], list[float], float]]) -> None:
        self._stop(texts)
        if not run.cancelled() and run.exception() is None:
            self._throughput.observe(texts, sum(run.result()[2]))
        self._dispatch()

    def _forget(self, request: _Request) -> None:
        """Drop a finished request's texts that are still pending (failed, expired or cancelled)."""
        request.abandoned = True  # texts of it already queued on a lane are dropped there
        before = len(self._pending)
        self._pending = [item for item in self._pending if item.request is not request]
        self._admitted -= before - len(self._pending)

    def _dispatch(self) -> None:
        while self._pending and (lane := self._lane(queued=True)) is not None:
            now = time.monotonic()
            self._expire(now)
            if not self._pending:
                return
            chosen = choose_batch([item.key for item in self._pending], now, self._policy)
            picked = set(chosen)
            batch = [self._pending[i] for i in chosen]
            self._pending = [item for i, item in enumerate(self._pending) if i not in picked]
            self._admitted -= len(batch)
            self._start(lane, len(batch))
            pool, slot = self._engine_pool, -1
            if self._lane_pools:
                slot = min(range(len(self._lane_load)), key=self._lane_load.__getitem__)  # an idle lane first
                self._lane_load[slot] += 1
                pool = self._lane_pools[slot]
            loop = asyncio.get_running_loop()
            task = loop.run_in_executor(pool, _run_batch, self._classifier, batch, lane == "narrow")
            task.add_done_callback(lambda f, batch=batch, lane=lane, slot=slot: self._finish(batch, lane, slot, f))

    def _expire(self, now: float) -> None:
        keep: list[_Item] = []
        for item in self._pending:
            req = item.request
            if req.future.done():
                continue
            if req.deadline is not None and now >= req.deadline:
                req.future.set_exception(
                    DeadlineExceeded("deadline exceeded while queued; the request never reached the engine")
                )
                continue
            keep.append(item)
        self._admitted -= len(self._pending) - len(keep)
        self._pending = keep

    def _dropped_on_lane(self, items: list[_Item]) -> None:
        """Texts a lane left out: their call had ended (nothing to answer) or their deadline had passed."""
        for item in items:
            if not item.request.future.done():
                item.request.future.set_exception(
                    DeadlineExceeded("deadline exceeded while queued; the request never reached the engine")
                )

    def _finish(self, batch: list[_Item], lane: str, slot: int, outcome: asyncio.Future[_Ran]) -> None:
        self._stop(len(batch))
        if slot >= 0:
            self._lane_load[slot] -= 1
        try:
            logits, ran, started, engine_s = outcome.result()
        except Exception as e:  # the engine's message is for operators and callers alike
            error = engine_failure(e)
            for item in batch:
                if not item.request.future.done():
                    item.request.future.set_exception(error)
        else:
            if len(ran) < len(batch):
                kept = {id(item) for item in ran}
                self._dropped_on_lane([item for item in batch if id(item) not in kept])
            batch = ran
            if batch:
                self._throughput.observe(len(batch), engine_s)
                width = max(len(item.ids) for item in batch)
                real = sum(len(item.ids) for item in batch)
                if self._on_batch is not None:
                    self._on_batch(BatchRun(len(batch), width * len(batch), real, engine_s, lane))
            seen: set[int] = set()
            for row, item in enumerate(batch):
                req = item.request
                if req.future.done():
                    continue
                # Queued until the engine started it: a batch queued behind a lane's running one waits there too.
                req.queue_s = max(req.queue_s, started - item.enqueued_at)
                req.logits[item.row] = logits[row]
                if id(req) not in seen:  # a request split over batches pays each batch once
                    seen.add(id(req))
                    req.engine_s += engine_s
                    req.batch_size = max(req.batch_size, len(batch))
                req.remaining -= 1
                if req.remaining == 0:
                    req.future.set_result(None)
        self._dispatch()


_Ran = tuple[np.ndarray | None, list[_Item], float, float]
"""A lane's outcome: logits of the texts that ran, those texts, when the run started (monotonic), engine seconds."""


def engine_failure(error: Exception) -> ServiceError:
    """What a caller gets when its batch's run failed: RESOURCE_EXHAUSTED when it ran out of memory (with no CPU
    fallback to answer it; a smaller request may fit), else INTERNAL with the engine's message, as the native
    batcher answers."""
    if isinstance(error, OutOfMemoryError):
        return ResourceExhausted(f"inference failed: {error}", retry_after_s=1.0)
    return Internal(f"inference failed: {error}")


def _run_batch(classifier: TextClassifier, batch: list[_Item], narrow: bool) -> _Ran:
    """Runs on a lane thread. A batch queued behind another waited for it: texts whose deadline passed or whose
    call ended meanwhile are left out here, so they never reach the engine (plain reads of values the loop set)."""
    now = time.monotonic()
    ran = [item for item in batch
           if not item.request.abandoned and (item.request.deadline is None or now < item.request.deadline)]
    if not ran:
        return None, ran, now, 0.0
    logits = classifier.run([item.ids for item in ran], narrow=narrow)
    return logits, ran, now, time.monotonic() - now


def _tokenize_and_run(
    classifier: TextClassifier, texts: list[str], narrow: bool, policy: NativeBatchPolicy
) -> tuple[np.ndarray, list[list[int]], list[float], float]:
    """A lone call: tokenize, then run in the engine runs `split_rows` allows (max_batch_size, max_batch_tokens),
    the native batcher's rule, so a large call never becomes one oversized batch. Returns the logits in call order,
    each run's token lengths and engine seconds, and the tokenizing seconds."""
    started = time.monotonic()
    token_ids = classifier.tokenize(texts)
    tokenize_s = time.monotonic() - started
    lengths = [len(ids) for ids in token_ids]
    parts: list[np.ndarray] = []
    runs: list[list[int]] = []
    seconds: list[float] = []
    for begin, end in split_rows(lengths, policy):
        run_started = time.monotonic()
        parts.append(classifier.run(token_ids[begin:end], narrow=narrow))
        seconds.append(time.monotonic() - run_started)
        runs.append(lengths[begin:end])
    logits = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return logits, runs, seconds, tokenize_s
