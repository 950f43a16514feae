"""The data plane's Python side: every ModelInfer runs on the one C++ batcher, whichever front end received it.

`DataPlane` owns what the process has once: the route table both front ends read (`Routes`, replaced by the manager
on every swap), the lane threads every version's batches run on, the event sink (one record per engine run and per
natively answered call, turned into metrics and log lines on its own thread) and the completion queue through which
answers reach the event loop (an eventfd the loop watches, so no C++ thread ever takes the GIL). A Python front end's
call takes the call path in one crossing (`engine_ext.start_call`, `inference.py`; a version on HF tokenizers gets
its ids in a second) and its answer comes back encoded; `VersionBatcher` is one loaded version's handle for the
rest: the load-time check (texts, or ids tokenized in the tokenizer pool), the Python path's calls, the drain.

    ModelInfer ─► engine_ext.start_call ─► [C++: decode, route, lease, admit, tokenize, queue, batch, run, encode]
        ◄── future resolved on the loop ◄── Completions (eventfd, loop.add_reader) ◄── done callback
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from ortserve import engine_ext
from ortserve.service.config import Settings
from ortserve.service.errors import Cancelled, DeadlineExceeded, Internal, ResourceExhausted, ServiceError, Unavailable
from ortserve.service.instance import ModelInstance
from ortserve.service.metrics import Metrics
from ortserve.service.request_log import EVERY_CALL, LogSampling, log_call
from ortserve.service.shadow import ShadowBook
from ortserve.service.shadow_tokenize import ShadowTokenizer
from ortserve.service.tokenization import TokenEncoding

server_log = structlog.get_logger("ortserve.server")


def batcher_settings(settings: Settings) -> engine_ext.BatcherSettings:
    """The batcher's settings, from their one definition (`config.Settings`)."""
    return engine_ext.BatcherSettings(
        max_batch_size=settings.max_batch_size,
        max_queue_delay_s=settings.max_queue_delay_ms / 1000,
        max_padding_ratio=settings.max_padding_ratio,
        batch_overhead_tokens=settings.batch_overhead_tokens,
        max_batch_tokens=settings.max_batch_tokens,
        sort_window=settings.sort_window,
        max_queue_items=settings.max_queue_items,
        default_timeout_s=settings.default_timeout_ms / 1000,
        engine_concurrency=settings.engine_concurrency,
        bulk_min_texts=settings.bulk_min_texts,
        bulk_batch_tokens=settings.bulk_batch_tokens,
        interactive_lane_s=settings.interactive_lane_ms / 1000,
    )


@dataclass(slots=True)
class InferResult:
    outputs: np.ndarray
    """float32 [texts, columns]: the version's output for each text, in call order (logits, embeddings)."""
    tokenize_s: float
    queue_s: float
    """Longest time any of the call's texts waited between tokenized and engine start."""
    engine_s: float
    """Engine time of the runs the call's texts were in (summed when split)."""
    batch_size: int
    """Largest run any of the call's texts was in."""
    token_count: int
    """The tokens the model read for the call (special tokens included, after truncation)."""
    tokens: list[TokenEncoding] | None = None
    """A token classifier's: each text's tokens as the model read them (`outputs` rows hold their logits first)."""


def failure_of(code: str, message: str, retry_after_s: float) -> ServiceError:
    """The error a call's answer (code name, message, retry hint) ends it with."""
    if code == "RESOURCE_EXHAUSTED":
        return ResourceExhausted(message, retry_after_s=retry_after_s)
    if code == "DEADLINE_EXCEEDED":
        return DeadlineExceeded(message)
    if code == "UNAVAILABLE":
        return Unavailable(message)
    if code == "CANCELLED":
        return Cancelled(message)
    return Internal(message)


_Answer = tuple[str, str, np.ndarray | None, dict[str, float]]


class DataPlane:
    """The process's batching resources and the loop's side of them. Built before the loop runs; `start` on it."""

    def __init__(self, settings: Settings, metrics: Metrics, *, tokenize_pool: Executor, tracing: Any = None,
                 sampling: LogSampling = EVERY_CALL) -> None:
        self._metrics = metrics
        self._sampling = sampling
        self.tracing = tracing
        """tracing.Tracing when spans are exported; the native front end's calls are traced here."""
        self.tokenize_pool = tokenize_pool
        self.settings = batcher_settings(settings)
        # One lane thread per unit of engine_concurrency, shared by every version (a canary's two versions take
        # turns on the cores), plus a thread per loadable version for lone calls on the wide session.
        self.lanes = engine_ext.Lanes(settings.engine_concurrency, settings.max_loaded_versions + 1)
        self.events = engine_ext.EventSink()
        self.shadows: ShadowBook | None = None
        """Judges the shadow copies' events (set by the server before start; None: they are not judged)."""
        self.shadow_tokenizer = ShadowTokenizer()
        """Tokenizes the shadow copies of versions on HF tokenizers (handed over on the event queue)."""
        self.routes = engine_ext.Routes()
        """The route table both front ends read; the manager replaces it on every swap (`manager.data_plane_routes`)."""
        self.completions = engine_ext.Completions()
        self._waiting: dict[int, asyncio.Future[_Answer]] = {}  # loop thread only
        self._tokens = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drainer = threading.Thread(target=self._drain_events, name="ortserve-events", daemon=True)
        self._processed = 0  # events handled by the drain thread (it alone writes it)
        self._caught_up = threading.Condition()
        self._after_reply = 0
        """Records `after_reply` queued on the loop and not yet run; guarded by `_replied`."""
        self._replied = threading.Condition()
        metrics.before_scrape(self.flush)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.completions.fd, self._answered)
        self._drainer.start()

    def version(self, model: str, version: str, instance: ModelInstance) -> VersionBatcher:
        """The version's batcher over its sessions and tokenizer (on the loop, once it is warm)."""
        native = engine_ext.ServedVersion(model, version, text_model=instance.text_model, settings=self.settings,
                                          lanes=self.lanes, events=self.events)
        if instance.tokenizer.native is None:  # its shadow copies come to Python for their ids
            self.shadow_tokenizer.add(model, version, instance.tokenize_rows)
        return VersionBatcher(self, native, instance)

    def close(self) -> None:
        """After every version closed: stop the lane threads, then the event thread (its last records logged)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.completions.fd)
        self.lanes.stop()
        self.flush()
        self.events.close()
        if self._drainer.is_alive():
            self._drainer.join(timeout=5)
        self.shadow_tokenizer.close()
        if self.events.dropped:
            server_log.warning("events_dropped", dropped=self.events.dropped)

    # ---- answers -> the loop ----------------------------------------------------------------------

    def expect(self) -> tuple[int, asyncio.Future[Any]]:
        """A fresh token and the future its answer resolves (on the loop); `forget` it if nothing is submitted."""
        assert self._loop is not None, "DataPlane.start() first"
        token = next(self._tokens)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._waiting[token] = future
        return token, future

    def forget(self, token: int) -> None:
        self._waiting.pop(token, None)

    def submit(self, send: Callable[[int], Any]) -> tuple[asyncio.Future[_Answer], Any]:
        """Register a future under a fresh token and submit with it (`send(token)` returns the call)."""
        token, future = self.expect()
        try:
            return future, send(token)
        except BaseException:
            self.forget(token)
            raise

    def _answered(self) -> None:
        for token, answer in self.completions.drain():
            future = self._waiting.pop(token, None)
            if future is not None and not future.done():
                future.set_result(answer)

    # ---- events -> logs and metrics (own thread) --------------------------------------------------

    def flush(self, timeout_s: float = 2.0) -> None:
        """Wait until every event pushed so far is logged and counted, and every call's record queued by
        `after_reply` (a scrape right after a reply sees it; from the loop's own thread those run after the current
        step, so only the events are waited for)."""
        target = self.events.pushed
        with self._caught_up:
            self._caught_up.wait_for(lambda: self._processed >= target or not self._drainer.is_alive(), timeout_s)
        loop = self._loop
        if loop is not None and not loop.is_closed() and loop.is_running() and not _on_loop(loop):
            with self._replied:
                self._replied.wait_for(lambda: self._after_reply == 0, timeout_s)

    def after_reply(self, record: Callable[[], None]) -> None:
        """Run `record` (a finished call's log line and metrics) once the loop is done with the current step, so
        after the call's reply is written (it costs the caller no time); `flush` waits for it. On the loop."""
        assert self._loop is not None, "DataPlane.start() first"
        with self._replied:
            self._after_reply += 1
        self._loop.call_soon(self._recorded, record)

    def _recorded(self, record: Callable[[], None]) -> None:
        try:
            record()
        finally:
            with self._replied:
                self._after_reply -= 1
                self._replied.notify_all()

    def _drain_events(self) -> None:
        observers: dict[tuple[str, str], Callable[[Any], None]] = {}
        while True:
            events = self.events.drain(512, 0.5)
            if not events:
                if self.events.closed:
                    return
                continue
            for event in events:
                self._handle(event, observers)
            with self._caught_up:
                self._processed += len(events)
                self._caught_up.notify_all()

    def _handle(self, event: Any, observers: dict[tuple[str, str], Callable[[Any], None]]) -> None:
        try:
            if isinstance(event, engine_ext.RequestEvent):
                self._log_request(event)
                return
            if isinstance(event, engine_ext.ShadowEvent):
                if self.shadows is not None:
                    self.shadows.observe(event)
                return
            if isinstance(event, engine_ext.ShadowTokenize):
                self.shadow_tokenizer.hand_over(event)
                return
            observe = observers.get((event.model, event.version))
            if observe is None:
                observe = observers[(event.model, event.version)] = self._metrics.batch_observer(
                    event.model, event.version)
            observe(event)
        except Exception:  # a bad record must not stop the logs of every later call
            server_log.exception("event_failed", record=repr(event)[:200])  # `event` is the line's own key

    def _log_request(self, event: Any) -> None:
        # A RequestEvent has CallRecord's fields.
        log_call(self._metrics, event, frontend="native", tracing=self.tracing, sampling=self._sampling)


class VersionBatcher:
    """One loaded version on the batcher, as the Python front end and the manager use it."""

    def __init__(self, plane: DataPlane, native: Any, instance: ModelInstance) -> None:
        self._plane = plane
        self.native = native
        """The engine_ext.ServedVersion: the native front end routes to it, leases included."""
        self._instance = instance
        # A token classifier's texts come with their spans (tokenize_tokens), which submit_async does not return.
        self._tokenizes = instance.tokenizer.native is not None and not instance.manifest.per_token

    @property
    def queue_depth(self) -> int:
        return int(self.native.queue_depth)

    @property
    def in_flight(self) -> int:
        """Calls holding a lease on the version, from either front end."""
        return int(self.native.in_flight)

    def acquire(self) -> bool:
        """A call's lease (the one count both front ends keep); False once the version drains."""
        return bool(self.native.acquire())

    def release(self) -> None:
        self.native.release()

    async def infer(self, texts: Sequence[str], *, deadline: float | None = None,
                    pairs: Sequence[str] | None = None, bulk: bool | None = None) -> InferResult:
        """The version's output for `texts`, in order (with `pairs`: for each text and its second text, one row
        each). `deadline` is in `time.monotonic()` seconds; `bulk` the call's priority (None: by its size)."""
        native, instance = self.native, self._instance
        inline = instance.tokenizes_inline(texts if pairs is None else [*texts, *pairs])
        tokens: list[TokenEncoding] | None = None
        if self._tokenizes and inline:  # microseconds: cheaper here than a thread hop
            future, call = self._plane.submit(
                lambda token: native.submit_async(texts, _left(deadline), self._plane.completions, token, pairs,
                                                  bulk))
        else:
            refusal = native.refusal(len(texts), _left(deadline), bulk)
            if refusal is not None:  # refused as the queue stands: not worth tokenizing (submitting checks again)
                raise failure_of(*refusal)
            started = time.monotonic()
            ids, seconds, tokens = await asyncio.get_running_loop().run_in_executor(
                self._plane.tokenize_pool, instance.tokenize_rows, texts, pairs)
            tokenize_s = time.monotonic() - started
            future, call = self._plane.submit(
                lambda token: native.submit_ids_async(ids, _left(deadline), self._plane.completions, token,
                                                      tokenize_s, seconds, bulk))
        try:
            code, message, output, timings = await future
        except asyncio.CancelledError:
            call.cancel()  # its texts leave the queue; a running batch finishes and its answer is dropped
            raise
        if output is None:
            raise failure_of(code, message, timings["retry_after_s"])
        return InferResult(outputs=output, tokenize_s=timings["tokenize_s"], queue_s=timings["queue_s"],
                           engine_s=timings["engine_s"], batch_size=int(timings["batch_size"]),
                           token_count=int(timings["tokens"]), tokens=tokens)

    async def close(self, drain_timeout_s: float) -> None:
        """Its leases (both front ends' calls) drain (bounded by `drain_timeout_s`), then queued calls are answered
        UNAVAILABLE and running batches finish; the sessions may close after this."""
        loop = asyncio.get_running_loop()
        native = self.native
        if not await loop.run_in_executor(None, native.drain, drain_timeout_s):
            server_log.warning("drain_timeout", model=native.model, version=native.version,
                               leases=native.in_flight)
        await loop.run_in_executor(None, native.close)
        self._plane.shadow_tokenizer.remove(native.model, native.version)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread runs `loop`."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()
