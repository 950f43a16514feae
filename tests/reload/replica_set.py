"""Several `ortserve serve --registry` processes on one registry, and callers that balance over them.

The servers are support.server_process.ServerProcess (real processes, loopback gRPC, their JSON log in memory); the
callers use gRPC's own client-side balancing with the service config deploy/ ships for them
(deploy/client/service-config.json: round robin, retries on UNAVAILABLE), as a caller outside a mesh would.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from subprocess import TimeoutExpired
from typing import Any

import grpc
from reload_harness import REPO, Registry, wait_routing, wait_version_state
from support.server_process import ServerProcess

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

SERVICE_CONFIG = REPO / "deploy" / "client" / "service-config.json"


def client_options(*, retry: bool) -> list[tuple[str, Any]]:
    """Channel arguments of a caller: the shipped service config, or the same without its retry policy."""
    config = json.loads(SERVICE_CONFIG.read_text())
    if not retry:
        for method in config.get("methodConfig", []):
            method.pop("retryPolicy", None)
        config.pop("retryThrottling", None)
    return [("grpc.service_config", json.dumps(config)), ("grpc.enable_retries", int(retry))]


class ReplicaSet:
    """`count` servers watching `registry`, each with its own artifact cache; a context manager."""

    def __init__(self, registry: Registry, workdir: Path, *, count: int = 3, extra: Sequence[str] = ()) -> None:
        self.servers = [ServerProcess([*registry.server_args(workdir / f"cache-{i}"), *extra]) for i in range(count)]

    def __enter__(self) -> ReplicaSet:
        try:
            for server in self.servers:
                server.wait_started()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for server in self.servers:
            with suppress(TimeoutExpired):
                server.terminate()

    @property
    def target(self) -> str:
        """One gRPC target naming every replica (what DNS of a headless Service gives a client)."""
        return "ipv4:" + ",".join(s.address for s in self.servers)

    def wait_routing(self, model: str, weights: Mapping[str, int], timeout: float = 60.0) -> None:
        for server in self.servers:
            wait_routing(server.address, model, weights, timeout=timeout)

    def wait_ready(self, model: str, version: str, timeout: float = 60.0) -> None:
        for server in self.servers:
            wait_version_state(server.address, model, version, "ready", timeout=timeout)

    def replica_of(self, ids: Collection[str] = (), timeout_s: float = 10.0) -> dict[str, int]:
        """request id -> index of the replica whose log has its `request` line; with `ids`, until each of them is
        there (a native call's line is written by the events thread after its reply)."""
        deadline = time.monotonic() + timeout_s
        while True:
            where = {str(e["request_id"]): i for i, s in enumerate(self.servers) for e in s.events("request")}
            if set(ids) <= where.keys() or time.monotonic() > deadline:
                return where
            time.sleep(0.05)


def sweep_keys(target: str, options: Sequence[tuple[str, Any]], model: str, keys: Sequence[str], *,
               repeat: int, concurrency: int = 16) -> dict[str, list[tuple[str, str]]]:
    """Each key `repeat` times through one balancing channel (x-routing-key, a fresh x-request-id per call):
    key -> [(request id, version that answered)]."""

    async def run() -> dict[str, list[tuple[str, str]]]:
        out: dict[str, list[tuple[str, str]]] = {k: [] for k in keys}
        gate = asyncio.Semaphore(concurrency)
        async with grpc.aio.insecure_channel(target, options=list(options)) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)

            async def one(key: str) -> None:
                request = pb.ModelInferRequest(model_name=model)
                request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"good")
                request_id = f"sticky-{uuid.uuid4().hex[:12]}"
                async with gate:
                    reply = await stub.ModelInfer(request, timeout=20, metadata=(("x-routing-key", key),
                                                                                 ("x-request-id", request_id)))
                out[key].append((request_id, reply.model_version))

            # Round by round, so that one key's calls are spread over the replicas in turn.
            for _ in range(repeat):
                await asyncio.gather(*(one(k) for k in keys))
        return out

    return asyncio.run(run())
