"""Property: however concurrent calls are batched together, each reply is its own texts' unbatched logits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.batching import burst_behind_busy
from support.reference import Reference
from support.server_process import ServerProcess, infer_request, logits_of, running_server

from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

WORDS = ["the", "movie", "was", "great", "awful", "service", "quick", "slow", "battery", "died", "love",
         "hate", "it", "and", "but", "very", "not", "really", "phone", "story"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)
call = st.lists(text, min_size=1, max_size=8)


@pytest.fixture(scope="module")
def batching_server(tiny_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    # Small batches and a generous queue: many calls get split across and merged into batches.
    with running_server(["--bundle", str(tiny_bundle), "--frontend", frontend, "--max-batch-size", "4",
                         "--max-queue-items", "4096", "--default-timeout-ms", "0", "--max-padding-ratio", "1.5"]) as s:
        yield s


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def reference(tiny_bundle: Path) -> Reference:
    return Reference(tiny_bundle)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(call, min_size=1, max_size=12))
def test_every_reply_equals_unbatched_inference(batching_server: ServerProcess, reference: Reference,
                                                calls: list[list[str]]) -> None:
    async def send_all() -> list:
        async with grpc.aio.insecure_channel(batching_server.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            return await asyncio.gather(*(stub.ModelInfer(infer_request(c), timeout=60) for c in calls))

    replies = asyncio.run(send_all())
    for texts, reply in zip(calls, replies, strict=True):
        np.testing.assert_allclose(logits_of(reply), reference.logits(texts), atol=1e-5, rtol=0)


def test_batches_really_formed(batching_server: ServerProcess, reference: Reference) -> None:
    """The property above is only meaningful if texts from different calls share engine runs on this server. Not
    left to the property's bursts (on a loaded machine an idle engine may answer each of them alone): a burst of
    such calls sent right behind calls that keep the engine busy (support.batching.burst_behind_busy: sent again,
    a bounded number of times, until some shared a run) shares runs, and each reply is still its own texts'
    unbatched logits."""
    calls = [[" ".join(WORDS[i:i + 2 + i % 7])] for i in range(12)]

    def unbatched(replies: list[Any]) -> None:
        for texts, reply in zip(calls, replies, strict=True):
            np.testing.assert_allclose(logits_of(reply), reference.logits(texts), atol=1e-5, rtol=0)

    burst_behind_busy(batching_server, busy=infer_request([" ".join(WORDS * 3)] * 128),
                      burst=[infer_request(texts) for texts in calls], check=unbatched)
