"""Helpers for the hot-reload tests: the registry as the operator drives it, the server's log as evidence.

Everything here talks to real processes: the `registry` CLI as a subprocess, `ortserve serve` (see
support.server_process), the Consul stand-in as a process of its own, gRPC over loopback. The steady load under a
swap is the tools' (ortserve_devtools.steady_load.SteadyLoad, with TEXTS[:2]).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from ortserve_devtools.consul_standin import StandinProcess

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve.registry import publishing
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.catalog import ModelState, read_model_state
from ortserve.registry.connect import open_store
from ortserve.service.app import ADMIN_STATUS_METHOD

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["a good movie", "the plot was awful and far too long", "great", "bad acting, bad story"]


def wait_until(check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# ---- the registry, driven like an operator does ----------------------------------------------------------


@dataclass
class Registry:
    """One registry backend: its URL, where artifacts live, and how to run the `registry` CLI on it."""

    kind: str
    url: str
    artifacts: Path
    standin: StandinProcess | None = None
    cli_calls: list[tuple[str, float]] = field(default_factory=list)

    @property
    def artifacts_url(self) -> str:
        return self.artifacts.as_uri()

    def server_args(self, cache: Path) -> list[str]:
        return ["--registry", self.url, "--artifacts", self.artifacts_url, "--artifact-cache", str(cache)]

    def cli(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`python -m ortserve.registry.cli --registry URL --artifacts URL ARGS` as a subprocess (`timeout`: longer
        for a `publish --optimize`, whose accuracy gate runs both models over the eval texts)."""
        cmd = [sys.executable, "-m", "ortserve.registry.cli", "--registry", self.url,
               "--artifacts", self.artifacts_url, *args]
        started = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        self.cli_calls.append((args[0], time.monotonic() - started))
        if check and done.returncode != 0:
            raise AssertionError(f"registry {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def publish(self, model: str, version: str, bundle: Path, weight: int | None = None, *, cli: bool = True) -> None:
        """`registry publish` as a subprocess, or (cli=False) the same `publishing.publish` call in-process:
        the CLI pays ~1-3 s of `onnx` import per run on a loaded 2-core box, too slow inside a loop."""
        if not cli:
            store = open_store(self.url)
            started = time.monotonic()
            try:
                publishing.publish(store, ArtifactStore(self.artifacts), model=model, version=version,
                                   bundle_dir=bundle, weight=weight)
            finally:
                store.close()
            self.cli_calls.append(("publish (api)", time.monotonic() - started))
            return
        extra = ["--weight", str(weight)] if weight is not None else []
        self.cli("publish", "--model", model, "--version", version, "--bundle", str(bundle), *extra)

    def route(self, model: str, **weights: int) -> None:
        self.cli("route", model, *(f"{v}={w}" for v, w in weights.items()))

    def rollback(self, model: str) -> None:
        self.cli("rollback", model)

    def retire(self, model: str, version: str) -> None:
        self.cli("retire", model, version)

    def state(self, model: str) -> ModelState:
        """The registry's view, read in-process with the registry's Python API (cheap, for assertions)."""
        store = open_store(self.url)
        try:
            return read_model_state(store, model)
        finally:
            store.close()

    def weights(self, model: str) -> dict[str, int]:
        routing = self.state(model).routing
        return dict(routing.weights) if routing else {}


def consul_url(address: str, prefix: str, scheme: str = "http") -> str:
    extra = "&scheme=https" if scheme == "https" else ""
    return f"consul://{address}?prefix={prefix}{extra}"


def unique_prefix() -> str:
    return f"ortserve-reload-test/{uuid.uuid4().hex[:12]}/"


REAL_CONSUL_SKIP = "CONSUL_HTTP_ADDR is not set: no real Consul agent to run against"


def make_registry(kind: str, tmp_path: Path) -> Iterator[Registry]:
    """A registry on `kind` ("file", "standin": a stand-in process, "consul": $CONSUL_HTTP_ADDR or skip)."""
    artifacts = tmp_path / "artifacts"
    if kind == "file":
        yield Registry("file", (tmp_path / "store").as_uri(), artifacts)
    elif kind == "standin":
        standin = StandinProcess(tmp_path / "consul-data.json").start()
        try:
            yield Registry("standin", consul_url(standin.address, "ortserve/"), artifacts, standin=standin)
        finally:
            standin.stop()
    else:
        raw = os.environ.get("CONSUL_HTTP_ADDR")
        if not raw:
            pytest.skip(REAL_CONSUL_SKIP)
        scheme = "https" if raw.startswith("https://") else "http"
        yield Registry("consul", consul_url(raw.split("://", 1)[-1].rstrip("/"), unique_prefix(), scheme), artifacts)


# ---- asking the server --------------------------------------------------------------------------------


def admin_status(address: str, timeout: float = 5.0) -> dict[str, Any]:
    """The admin Status RPC (what `ortserve status --json` prints), without a subprocess per poll."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(ADMIN_STATUS_METHOD, request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        return json.loads(call(b"", timeout=timeout))


def status_cli(address: str) -> dict[str, Any]:
    """`ortserve status --address A --json` as a subprocess: the operator's view."""
    done = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", address, "--json"],
                          capture_output=True, text=True, timeout=30, cwd=REPO)
    assert done.returncode == 0, f"ortserve status exited {done.returncode}: {done.stderr}"
    return json.loads(done.stdout)


def model_status(address: str, model: str) -> dict[str, Any]:
    return admin_status(address)["models"].get(model, {})


def wait_routing(address: str, model: str, weights: Mapping[str, int], timeout: float = 30.0) -> dict[str, Any]:
    """Until the server's routing in force is exactly `weights` (and every weighted version routable)."""
    want = dict(weights)

    def applied() -> dict[str, Any] | None:
        info = model_status(address, model)
        routed = {v for v, w in want.items() if w > 0}
        if info.get("routing") == want and routed <= set(info.get("routable", [])):
            return info
        return None

    return wait_until(applied, timeout=timeout, what=f"{model} routing {want} on the server")


def wait_version_state(address: str, model: str, version: str, state: str | None,
                       timeout: float = 30.0) -> dict[str, Any]:
    """Until `version` is in `state` (None: no longer listed at all)."""

    def reached() -> dict[str, Any] | None:
        info = model_status(address, model)
        entry = info.get("versions", {}).get(version)
        if state is None:
            return info if entry is None else None
        return info if entry is not None and entry.get("state") == state else None

    return wait_until(reached, timeout=timeout, what=f"{model}/{version} state {state}")


# ---- the server's log as evidence -----------------------------------------------------------------------


def parse_ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


@dataclass(frozen=True, slots=True)
class Violation:
    request_id: str
    version: str
    candidates: list[dict[str, int]]


def unroutable_replies(logs: list[dict[str, Any]], model: str, *,
                       slack_s: float = 0.005) -> tuple[int, list[Violation]]:
    """Replies (unpinned, OK) whose version had weight 0 in every route table that was in force while
    the request could have taken its lease. Returns (replies checked, violations).

    The server writes a `version_swapped` line (the new `weights`) once every front end has the new table,
    with `since`, the instant the Python front end took it; the native front end keeps serving the old
    table until it has the new one, i.e. until that line's timestamp at the latest. So table k was in force
    from its `since` to the next swap line's timestamp (the last one: to the end). A call takes its lease
    synchronously at its very start, i.e. at end - total_ms, and the request line's timestamp is the call's
    end (either front end). The tables that could have served it are those in force at that instant, give or
    take `slack_s`; the version that answered must have weight > 0 in at least one of them. Timestamps, not
    log order, decide (a native call on the new table may be logged before its swap line). `slack_s` only
    widens the window (more candidates), never narrows it.
    """
    swaps = [(parse_ts(e["since"]), parse_ts(e["timestamp"]), dict(e.get("weights") or {})) for e in logs
             if e.get("model") == model and e.get("event") == "version_swapped"]
    windows = [(since, swaps[k + 1][1] if k + 1 < len(swaps) else float("inf"), weights)
               for k, (since, _, weights) in enumerate(swaps)]
    checked = 0
    violations: list[Violation] = []
    for event in logs:
        if event.get("model") != model or event.get("event") != "request" or event.get("status") != "OK" \
                or not str(event.get("route", "")).startswith("bucket"):
            continue
        checked += 1
        began = parse_ts(event["timestamp"]) - event["total_ms"] / 1000
        candidates = [w for since, until, w in windows if since <= began + slack_s and until >= began - slack_s]
        if not any(c.get(event["version"], 0) > 0 for c in candidates):
            violations.append(Violation(event["request_id"], event["version"], candidates))
    return checked, violations


# ---- which version answers which routing key ------------------------------------------------------------


def versions_for_keys(address: str, model: str, keys: list[str], *, via: str = "param", pin: str = "",
                      concurrency: int = 32, options: Sequence[tuple[str, Any]] = ()) -> dict[str, str]:
    """Send one call per key (request parameter `routing_key`, or `x-routing-key` metadata with
    via="metadata"), `concurrency` at a time over grpc.aio; returns key -> the version that answered.
    `options` are channel arguments (a service config that balances over several replicas)."""

    async def sweep() -> dict[str, str]:
        out: dict[str, str] = {}
        gate = asyncio.Semaphore(concurrency)
        async with grpc.aio.insecure_channel(address, options=list(options)) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)

            async def one(key: str) -> None:
                request = pb.ModelInferRequest(model_name=model, model_version=pin)
                request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"good")
                metadata: tuple[tuple[str, str], ...] = ()
                if via == "param":
                    request.parameters["routing_key"].string_param = key
                else:
                    metadata = (("x-routing-key", key),)
                async with gate:
                    reply = await stub.ModelInfer(request, timeout=20, metadata=metadata)
                out[key] = reply.model_version

            await asyncio.gather(*(one(k) for k in keys))
        return out

    return asyncio.run(sweep())
