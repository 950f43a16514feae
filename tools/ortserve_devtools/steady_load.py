"""A steady closed-loop load kept up until its owner stops it, every call recorded: the reload tests and
scripts/dev bench swap, which ask which version answered which call, and when.

    with SteadyLoad(server.address, "sentiment", concurrency=16, tag="swap") as load:
        ... change the registry ...
        load.first_reply_from("v2", after=changed)     # when the new version first answered
    assert load.failures() == []

It is loadgen's closed loop (`run_load` with no end but `stop()`) on a grpc.aio channel of its own, on an event loop
in its own thread. Each call carries a unique `x-request-id` (so a reply can be matched with the server's log line)
and is kept as an `Outcome`: the status code, the version in the reply and in the `x-model-version` trailer, when it
started and ended (time.monotonic). A RESOURCE_EXHAUSTED refusal backs off as loadgen's callers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from ortserve.proto import grpc_service_pb2 as pb
from ortserve_devtools.loadgen import LoadSpec, Payload, run_load

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True, slots=True)
class Outcome:
    request_id: str
    code: str
    """The gRPC status code's name ("OK", "UNAVAILABLE", ...)."""
    version: str
    """The reply's model_version ("" for a failed call)."""
    header_version: str
    """The `x-model-version` trailer."""
    started: float
    ended: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.code == "OK"


class SteadyLoad:
    """`concurrency` ModelInfer calls of `texts` kept in flight until `stop()`; a context manager that returns once
    every caller has a call in flight. `outcomes` is appended by the load's thread and read by any (copy it with
    list() first); `in_flight` and `min_in_flight_after_ramp` are written by the load's thread only."""

    def __init__(self, address: str, model: str, *, texts: Sequence[str], concurrency: int = 16,
                 timeout_s: float = 20.0, tag: str = "load", options: Sequence[tuple[str, Any]] = ()) -> None:
        self.address = address
        self.model = model
        self.texts = list(texts)
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.tag = tag
        self.options = list(options)
        """Channel arguments, e.g. a service config balancing over several replicas."""
        self.outcomes: list[Outcome] = []
        self.in_flight = 0
        self.min_in_flight_after_ramp: int | None = None
        """The fewest calls in flight seen after the ramp, sampled on the load's loop every 10 ms."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = threading.Event()
        self._ramped = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"steady-load-{tag}", daemon=True)
        self._ids = itertools.count()

    def __enter__(self) -> SteadyLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, ramp_timeout_s: float = 30.0) -> SteadyLoad:
        self._thread.start()
        if not self._ramped.wait(ramp_timeout_s):
            self.stop()
            raise RuntimeError("the load never reached its concurrency")
        if self._error is not None:
            self.stop()
        return self

    def stop(self) -> None:
        """Ends the load and waits until every call in flight has ended (a call's deadline at most); raises what
        failed in the load's thread."""
        self._stopping.set()
        if self._thread.is_alive():
            if self._loop is not None and self._stop is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the load has ended
                    self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(self.timeout_s + 10)
        if self._error is not None:
            raise self._error

    # ---- what it saw ------------------------------------------------------------------------------------------

    def failures(self) -> list[Outcome]:
        return [o for o in list(self.outcomes) if not o.ok]

    def versions(self) -> set[str]:
        return {o.version for o in list(self.outcomes) if o.ok}

    def count(self) -> int:
        return len(self.outcomes)

    def first_reply_from(self, version: str, *, after: float = 0.0, timeout: float = 20.0) -> float:
        """Waits for an OK reply from `version` to a call started at or after `after` (monotonic); returns the
        earliest end of such a reply."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ends = [o.ended for o in list(self.outcomes) if o.ok and o.version == version and o.started >= after]
            if ends:
                return min(ends)
            if self._error is not None or not self._thread.is_alive():
                break
            time.sleep(0.005)
        raise AssertionError(f"no reply from {version} to a call started after {after:.3f} within {timeout}s "
                             f"({len(self.outcomes)} calls, versions {sorted(self.versions())})")

    # ---- the load's thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # surfaced by stop()
            self._error = e
            self._ramped.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stopping.is_set():
            return
        request = pb.ModelInferRequest(model_name=self.model)
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(self.texts)])
        request.inputs[0].contents.bytes_contents.extend(t.encode() for t in self.texts)
        payload = Payload(request.SerializeToString(), len(self.texts))
        spec = LoadSpec(mode="closed", concurrency=self.concurrency, warmup_s=0.0, duration_s=math.inf,
                        timeout_s=self.timeout_s, drain_s=self.timeout_s + 5)
        async with grpc.aio.insecure_channel(self.address, options=self.options) as channel:
            method = channel.unary_unary(MODEL_INFER)
            sampler = asyncio.create_task(self._sample())
            try:
                await run_load(spec, self._recording(method), [payload], stop=self._stop)
            finally:
                sampler.cancel()

    def _recording(self, method: grpc.aio.UnaryUnaryMultiCallable) -> Any:
        """loadgen's `call`, recording each call's Outcome; a call counts as in flight from its first line to its
        last, so that between two calls of a caller the loop never sees it idle."""

        async def call(body: bytes, timeout: float) -> bytes:
            request_id = f"{self.tag}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
            started = time.monotonic()
            self.in_flight += 1
            try:
                pending = method(body, timeout=timeout, metadata=(("x-request-id", request_id),))
                reply = await pending
                trailers = dict(await pending.trailing_metadata() or ())
                version = pb.ModelInferResponse.FromString(reply).model_version
                self.outcomes.append(Outcome(request_id, "OK", version, str(trailers.get("x-model-version", "")),
                                             started, time.monotonic()))
                return bytes(reply)
            except grpc.aio.AioRpcError as e:
                self.outcomes.append(Outcome(request_id, e.code().name, "", "", started, time.monotonic(),
                                             e.details() or ""))
                raise
            finally:
                self.in_flight -= 1

        return call

    async def _sample(self) -> None:
        while self.in_flight < self.concurrency:
            await asyncio.sleep(0.001)
        self._ramped.set()
        while True:
            await asyncio.sleep(0.01)
            if self._stop is not None and self._stop.is_set():
                return  # callers stop re-issuing from here on
            low = self.in_flight
            if self.min_in_flight_after_ramp is None or low < self.min_in_flight_after_ramp:
                self.min_in_flight_after_ramp = low
