"""Calls that must share an engine run, arranged rather than hoped for.

A test whose power depends on texts of different calls meeting in one batch cannot leave it to a burst of concurrent
calls: an idle engine runs a lone call at once (on the caller's own thread, on the native front end), so on a loaded
machine a burst of small calls can be read and answered one by one, and no two ever meet. `burst_behind_busy` sends
the burst right behind calls of many texts that keep the engine busy (runs of max_batch_size texts, every lane), on
the same connection, so the burst's calls find the engine busy and queue together. A try in which none of them
shared a run (the busy calls were done before the burst was read) is sent again, with one more busy call each time,
up to `tries` times; only then is it a failure, which names what each try saw.

    lines = burst_behind_busy(server, busy=infer_request(["long text ..."] * 128),
                              burst=[infer_request(texts) for texts in calls], check=compare_with_unbatched)
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from ortserve_devtools.server_process import ServerProcess

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

TRIES = 8
_bursts = itertools.count()


def shared_a_batch(line: dict[str, Any]) -> bool:
    """Whether a call's `request` log line says its texts ran with another call's (a run larger than the call)."""
    return bool(line.get("batch_size", 0) > line.get("texts", 0))


async def _send(address: str, busy: Sequence[pb.ModelInferRequest], burst: Sequence[pb.ModelInferRequest],
                ids: Sequence[str], timeout_s: float) -> list[pb.ModelInferResponse]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        # grpc.aio starts each call on a task of its own, in the order made: the busy calls go out first.
        calls = [stub.ModelInfer(request, timeout=timeout_s) for request in busy]
        calls += [stub.ModelInfer(request, timeout=timeout_s, metadata=(("x-request-id", request_id),))
                  for request, request_id in zip(burst, ids, strict=True)]
        replies = await asyncio.gather(*calls)
    return list(replies[len(busy):])


def burst_behind_busy(server: ServerProcess, *, busy: pb.ModelInferRequest, burst: Sequence[pb.ModelInferRequest],
                      check: Callable[[list[pb.ModelInferResponse]], None], tries: int = TRIES,
                      timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Sends `burst` behind `busy` (sent 1, 2, ... times) until some call of the burst shared an engine run with
    another call, `tries` times at most; `check` judges every try's replies (in `burst`'s order). Returns the
    `request` log lines of the burst's calls that shared a run; AssertionError when no try had one."""
    assert len(burst) >= 2, "a burst of one call has no other call of its own to meet"
    seen: list[list[tuple[int, int]]] = []
    for attempt in range(tries):
        tag = next(_bursts)
        ids = [f"burst-{tag}-{i}" for i in range(len(burst))]
        check(asyncio.run(_send(server.address, [busy] * (attempt + 1), burst, ids, timeout_s)))
        lines = [server.wait_event("request", timeout=30, request_id=request_id) for request_id in ids]
        shared = [line for line in lines if shared_a_batch(line)]
        if shared:
            return shared
        seen.append([(int(line.get("texts", 0)), int(line.get("batch_size", 0))) for line in lines])
    raise AssertionError(f"in {tries} bursts sent behind busy calls no call shared an engine run with another; "
                         f"(texts, batch_size) of each call, by try: {seen}")
