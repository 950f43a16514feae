"""The one closed-loop load (tools/ortserve_devtools: loadgen's run_load, and SteadyLoad, which keeps it up on a thread
until stopped, recording every call)."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import grpc
import pytest
from ortserve_devtools.loadgen import CallRefused, LoadSpec, Payload, run_load
from ortserve_devtools.steady_load import SteadyLoad
from support.server_process import running_server


def test_a_load_without_an_end_runs_until_stopped_and_drains() -> None:
    in_flight: list[int] = [0]

    async def call(body: bytes, timeout: float) -> bytes:
        in_flight[0] += 1
        try:
            await asyncio.sleep(0.002)
            return body
        finally:
            in_flight[0] -= 1

    async def main() -> tuple[float, int]:
        stop = asyncio.Event()
        started = time.monotonic()  # before the stop is scheduled: the load cannot end before 0.2 s from here
        asyncio.get_running_loop().call_later(0.2, stop.set)
        spec = LoadSpec(mode="closed", concurrency=3, warmup_s=0.0, duration_s=math.inf, drain_s=1.0)
        result = await run_load(spec, call, [Payload(b"x", 1)], stop=stop)
        assert result.ok > 10 and not result.errors and result.cancelled_at_drain == 0
        return time.monotonic() - started, in_flight[0]

    took, left = asyncio.run(main())
    assert 0.2 <= took < 5.0 and left == 0  # ends once stopped (its duration is infinite), however loaded the CPU


def test_a_refusal_outside_grpc_is_counted_by_its_code_and_backed_off() -> None:
    calls: list[float] = []

    async def call(body: bytes, timeout: float) -> bytes:
        calls.append(time.monotonic())
        raise CallRefused("RESOURCE_EXHAUSTED", "queue full", retry_after_s=0.05)

    spec = LoadSpec(mode="closed", concurrency=1, warmup_s=0.0, duration_s=0.3)
    result = asyncio.run(run_load(spec, call, [Payload(b"x", 1)]))
    # (a call that ends before the window opens is not counted)
    assert len(calls) - 1 <= result.errors["RESOURCE_EXHAUSTED"] <= len(calls)
    assert result.error_samples["RESOURCE_EXHAUSTED"] == "queue full"
    assert 2 <= len(calls) <= 8  # each waits the server's Retry-After (50 ms), not a busy loop


def test_steady_load_records_every_call_with_its_version(tiny_bundle: Path) -> None:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "m", "--frontend", "python"]) as server:
        began = time.monotonic()
        with SteadyLoad(server.address, "m", texts=["a good film", "a bad one"], concurrency=4, tag="t") as load:
            first = load.first_reply_from("1", after=began)
            time.sleep(0.3)
        outcomes = list(load.outcomes)
        assert outcomes and load.failures() == [] and load.versions() == {"1"}
        assert all(o.ok and o.header_version == o.version for o in outcomes)
        assert len({o.request_id for o in outcomes}) == len(outcomes) and outcomes[0].request_id.startswith("t-")
        assert began <= first == min(o.ended for o in outcomes)
        assert load.min_in_flight_after_ramp == 4  # a closed loop: never a caller idle between two calls
        logged = {e["request_id"] for e in server.events("request")}
        assert {o.request_id for o in outcomes} <= logged
        with pytest.raises(AssertionError, match="no reply from 2"):
            load.first_reply_from("2", timeout=0.1)


def test_steady_load_surfaces_a_server_it_cannot_reach() -> None:
    load = SteadyLoad("127.0.0.1:1", "m", texts=["x"], concurrency=2, timeout_s=1.0)
    with load:
        time.sleep(0.2)
    assert load.failures() and {o.code for o in load.failures()} == {grpc.StatusCode.UNAVAILABLE.name}
