"""The one load generator: closed-loop and open-loop (Poisson) load over gRPC aio or HTTP/REST (aiohttp), one event
loop, bounded in time and count. bench serve, the soak's client processes and the GPU check drive it directly;
steady_load.SteadyLoad (the reload tests, scripts/dev bench swap) runs its closed loop on a thread until stopped.

A run is: warm-up (sent, not counted) → measured window → drain (outstanding calls get at most
`drain_s`, then are cancelled). A call counts in the window when it *completes* inside it, so
throughput is completions per second of the window. Latency of a closed-loop call runs from send to
reply; of an open-loop call from its scheduled arrival (so a client that falls behind shows up as
latency, not as a silently lower rate: no coordinated omission), and the client's lag is reported.

    result = await run_load(LoadSpec(mode="closed", concurrency=8, ...), call, payloads, hooks)

`call(body, timeout=..., metadata=...)` is one call: a grpc.aio unary-unary method on serialized bytes, or any
coroutine function that raises grpc.aio.AioRpcError or CallRefused (a REST client's error status) as the server
answered. Wrapping it records more per call (the soak's per-call log, SteadyLoad's outcomes).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from array import array
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc


@dataclass(frozen=True)
class LoadSpec:
    mode: str
    """"closed" (concurrency callers, back to back) or "open" (Poisson arrivals at `rate`)."""
    warmup_s: float
    duration_s: float
    """The measured window; math.inf: until run_load's `stop` is set."""
    concurrency: int = 1
    rate: float = 0.0
    """Arrivals per second (open loop)."""
    max_outstanding: int = 512
    """Open loop: arrivals beyond this many calls in flight are skipped (and counted), not queued."""
    timeout_s: float | None = 10.0
    """Deadline of every call (gRPC's; a REST client's own timeout); None: none, as batch clients call."""
    drain_s: float = 5.0
    max_requests: int = 0
    """Stop the window after this many counted calls (0 = no limit)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("closed", "open"):
            raise ValueError(f"mode must be closed or open, got {self.mode!r}")
        if self.mode == "closed" and self.concurrency < 1:
            raise ValueError("closed loop needs concurrency >= 1")
        if self.mode == "open" and self.rate <= 0:
            raise ValueError("open loop needs a rate > 0 requests/s")
        if self.duration_s <= 0 or self.warmup_s < 0:
            raise ValueError("duration must be > 0 and warm-up >= 0 seconds")


@dataclass(frozen=True)
class Payload:
    body: bytes
    texts: int
    metadata: tuple[tuple[str, str], ...] = ()
    """Sent with the call (a REST body's Inference-Header-Content-Length)."""


@dataclass
class LoadResult:
    window_s: float = 0.0
    ok: int = 0
    ok_texts: int = 0
    latencies_s: array = field(default_factory=lambda: array("d"))
    """Successful calls completed in the window."""
    errors: Counter[str] = field(default_factory=Counter)
    error_latencies_s: dict[str, array] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)
    """One message per status code, for the report."""
    sent_in_window: int = 0
    skipped: int = 0
    """Open loop: arrivals not sent because `max_outstanding` calls were in flight."""
    max_lag_s: float = 0.0
    """Open loop: how far behind schedule the client sent (should stay ~1 ms)."""
    cancelled_at_drain: int = 0
    client_cpu_s: float = 0.0


class CallRefused(Exception):
    """A call a server answered with an error status outside gRPC (a REST client's): its gRPC code's name, the
    message, and the server's Retry-After in seconds (0 when absent)."""

    def __init__(self, code_name: str, details: str, retry_after_s: float) -> None:
        super().__init__(details)
        self.code_name = code_name
        self.details = details
        self.retry_after_s = retry_after_s


class _Window:
    """When counting starts and stops; owned by the event loop."""

    def __init__(self) -> None:
        self.start = float("inf")
        self.end = float("inf")
        self.sending = True

    def counts(self, t: float) -> bool:
        return self.start <= t <= self.end


Call = Callable[..., Awaitable[bytes]]
Hook = Callable[[], Awaitable[None]]
Refusal = grpc.aio.AioRpcError | CallRefused
Send = Callable[[Payload, float], Awaitable[Refusal | None]]
"""Send one payload timed from the given start; returns the error when the server refused it."""
_BACKOFF_START_S = 0.010
_BACKOFF_MAX_S = 0.5


async def run_load(spec: LoadSpec, call: Call, payloads: Sequence[Payload], *,
                   on_window_start: Hook | None = None, on_window_end: Hook | None = None,
                   stop: asyncio.Event | None = None) -> LoadResult:
    """Drive `call(body, timeout=...)` per `spec`; hooks run (concurrently with the load) at the window edges.
    `stop`, when set, ends the window early, as `max_requests` does (a load kept up until its owner stops it)."""
    if not payloads:
        raise ValueError("no payloads to send")
    result = LoadResult()
    window = _Window()
    stop_early = stop if stop is not None else asyncio.Event()

    def record(started: float, code: str, texts: int, details: str) -> None:
        ended = time.perf_counter()
        if not window.counts(ended):
            return
        latency = ended - started
        if code == "OK":
            result.ok += 1
            result.ok_texts += texts
            result.latencies_s.append(latency)
            if spec.max_requests and result.ok >= spec.max_requests:
                stop_early.set()
        else:
            result.errors[code] += 1
            result.error_latencies_s.setdefault(code, array("d")).append(latency)
            result.error_samples.setdefault(code, details)

    async def one(payload: Payload, started: float) -> Refusal | None:
        """Send one call; returns the error when the server refused it (RESOURCE_EXHAUSTED, HTTP 429)."""
        try:
            if payload.metadata:
                await call(payload.body, timeout=spec.timeout_s, metadata=payload.metadata)
            else:
                await call(payload.body, timeout=spec.timeout_s)
        except grpc.aio.AioRpcError as e:
            record(started, e.code().name, payload.texts, e.details() or "")
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                return e
        except CallRefused as e:
            record(started, e.code_name, payload.texts, e.details)
            if e.code_name == "RESOURCE_EXHAUSTED":
                return e
        except Exception as e:  # a client-side failure is a result to report, not a crash of the run
            record(started, f"CLIENT_{type(e).__name__}", payload.texts, str(e))
            await asyncio.sleep(0)  # a call that fails before it awaits would otherwise starve the window's timers
        else:
            record(started, "OK", payload.texts, "")
        return None

    async def clock() -> None:
        await asyncio.sleep(spec.warmup_s)
        window.start = time.perf_counter()
        cpu_start = time.process_time()  # all of this process's threads, gRPC's included
        if on_window_start is not None:
            await on_window_start()
        remaining = spec.duration_s - (time.perf_counter() - window.start)
        if remaining == math.inf:  # until stopped
            await stop_early.wait()
        elif remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_early.wait(), remaining)
        window.end = time.perf_counter()
        result.client_cpu_s = time.process_time() - cpu_start
        window.sending = False
        if on_window_end is not None:
            await on_window_end()

    clock_task = asyncio.create_task(clock())
    if spec.mode == "closed":
        senders = [asyncio.create_task(_closed_caller(i, spec, payloads, window, one, result))
                   for i in range(spec.concurrency)]
        in_flight: set[asyncio.Task[Refusal | None]] = set()
    else:
        in_flight = set()
        senders = [asyncio.create_task(_open_arrivals(spec, payloads, window, one, result, in_flight))]
    await clock_task
    result.window_s = window.end - window.start
    pending = [t for t in [*senders, *in_flight] if not t.done()]
    if pending:
        _done, still = await asyncio.wait(pending, timeout=spec.drain_s)
        result.cancelled_at_drain = len(still)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=1.0)
    return result


def pushback_s(error: Refusal) -> float:
    """The server's `grpc-retry-pushback-ms` trailer (REST: Retry-After), or 0 when it sent none."""
    if isinstance(error, CallRefused):
        return error.retry_after_s
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-retry-pushback-ms":
            with contextlib.suppress(ValueError):
                return max(0.0, int(value) / 1000)
    return 0.0


async def _closed_caller(index: int, spec: LoadSpec, payloads: Sequence[Payload], window: _Window,
                         one: Send, result: LoadResult) -> None:
    """One caller, back to back; refused calls back off as a real client does (the refusal is counted).

    A caller that retried a RESOURCE_EXHAUSTED at once would only measure how fast the server says no.
    It waits the server's pushback (`grpc-retry-pushback-ms`) or a jittered exponential backoff (10 ms,
    doubling to 0.5 s, as gRPC's retry policy), whichever is longer.
    """
    rng = random.Random(spec.seed * 1000 + index)
    # Callers start at spread offsets so they do not all send the same text at once.
    position = index * max(1, len(payloads) // max(1, spec.concurrency))
    backoff = _BACKOFF_START_S
    while window.sending:
        payload = payloads[position % len(payloads)]
        position += 1
        started = time.perf_counter()
        if window.counts(started):
            result.sent_in_window += 1
        refused = await one(payload, started)
        if refused is None:
            backoff = _BACKOFF_START_S
            continue
        await asyncio.sleep(max(pushback_s(refused), rng.uniform(0, backoff)))
        backoff = min(backoff * 2, _BACKOFF_MAX_S)


async def _open_arrivals(spec: LoadSpec, payloads: Sequence[Payload], window: _Window,
                         one: Send, result: LoadResult,
                         in_flight: set[asyncio.Task[Refusal | None]]) -> None:
    rng = random.Random(spec.seed)
    position = 0
    due = time.perf_counter()
    while window.sending:
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
            continue
        # Every arrival whose time has come is sent now (catch-up), each timed from its own schedule.
        if window.counts(now):
            result.max_lag_s = max(result.max_lag_s, now - due)
        if len(in_flight) >= spec.max_outstanding:
            if window.counts(now):
                result.skipped += 1
        else:
            payload = payloads[position % len(payloads)]
            position += 1
            if window.counts(now):
                result.sent_in_window += 1
            task = asyncio.create_task(one(payload, due))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        due += rng.expovariate(spec.rate)

