"""A canary between two embedding versions, through the registry and a real server: each caller sticks to the
version its routing key's bucket picks, gets that version's embeddings, and a ramp and a rollback move callers
between them without an answer from the wrong weights."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import numpy as np
import pytest
from ortserve_devtools.bert_bundle import build_tiny_embedding_bundle
from reload_harness import Registry, wait_routing
from support.reference import Reference
from support.server_process import infer_request, logits_of, running_server, stub_for

from ortserve import engine_ext
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

MODEL = "search"
TEXT = "the battery died but the story was great"
KEYS = [f"user-{i:04d}" for i in range(600)]


def answers(address: str, keys: list[str], *, pin: str = "") -> dict[str, tuple[str, np.ndarray]]:
    """key -> (version, embedding of TEXT) for one call per key, 32 at a time."""

    async def sweep() -> dict[str, tuple[str, np.ndarray]]:
        out: dict[str, tuple[str, np.ndarray]] = {}
        gate = asyncio.Semaphore(32)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)

            async def one(key: str) -> None:
                async with gate:
                    reply = await stub.ModelInfer(infer_request([TEXT], model=MODEL, version=pin, routing_key=key),
                                                  timeout=30)
                assert reply.outputs[0].name == "EMBEDDING"
                out[key] = (reply.model_version, logits_of(reply)[0])

            await asyncio.gather(*(one(k) for k in keys))
        return out

    return asyncio.run(sweep())


def test_embedding_canary(file_registry: Registry, tmp_path: Path, frontend: str) -> None:
    bundles = {v: build_tiny_embedding_bundle(tmp_path / v, seed=seed).path for v, seed in (("v1", 1), ("v2", 2))}
    expected = {v: Reference(b).embeddings([TEXT])[0] for v, b in bundles.items()}
    assert float(expected["v1"] @ expected["v2"]) < 0.99  # two versions a caller can tell apart
    reg = file_registry
    reg.publish(MODEL, "v1", bundles["v1"], weight=100, cli=False)
    reg.publish(MODEL, "v2", bundles["v2"], weight=20, cli=False)

    def check(got: dict[str, tuple[str, np.ndarray]], weights: list[tuple[str, int]]) -> float:
        """Every key on the version the router's split picks, with that version's embedding; v2's share."""
        split = engine_ext.Split.of(weights)
        for key, (version, embedding) in got.items():
            assert version == split.pick(engine_ext.route_bucket(MODEL, key)), key
            np.testing.assert_allclose(embedding, expected[version], rtol=0, atol=1e-5)
        return 100.0 * sum(v == "v2" for v, _ in got.values()) / len(got)

    with running_server([*reg.server_args(tmp_path / "cache"), "--frontend", frontend]) as server:
        wait_routing(server.address, MODEL, {"v1": 80, "v2": 20})
        at20 = answers(server.address, KEYS)
        assert abs(check(at20, [("v1", 80), ("v2", 20)]) - 20) <= 6  # 600 keys: ~3.5 sigma
        again = answers(server.address, KEYS[:100])  # sticky: the same key, the same version
        assert {k: v for k, (v, _) in again.items()} == {k: at20[k][0] for k in KEYS[:100]}

        pinned = answers(server.address, KEYS[:50], pin="v2")
        assert {v for v, _ in pinned.values()} == {"v2"}
        check(pinned, [("v2", 100)])

        reg.route(MODEL, v1=50, v2=50)
        wait_routing(server.address, MODEL, {"v1": 50, "v2": 50})
        at50 = answers(server.address, KEYS)
        assert abs(check(at50, [("v1", 50), ("v2", 50)]) - 50) <= 7
        assert {k for k, (v, _) in at20.items() if v == "v2"} <= {k for k, (v, _) in at50.items() if v == "v2"}

        reg.rollback(MODEL)
        wait_routing(server.address, MODEL, {"v1": 80, "v2": 20})
        back = answers(server.address, KEYS)
        assert {k: v for k, (v, _) in back.items()} == {k: v for k, (v, _) in at20.items()}

        channel, stub = stub_for(server.address)
        with channel:
            for version in ("v1", "v2"):  # either version is an embedding model: a classifier's output is refused
                request = infer_request([TEXT], model=MODEL, version=version)
                request.outputs.add(name="LOGITS")
                with pytest.raises(grpc.RpcError) as err:
                    stub.ModelInfer(request, timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "has outputs ['EMBEDDING']" in (err.value.details() or "")
