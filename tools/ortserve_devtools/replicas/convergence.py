"""Store write -> every replica swapped: one route change at a time, timed from the servers' own logs.

Each change is one `publishing.route` call on the store (what `registry route` does, without the CLI's start-up); a
replica has converged when its log has the `version_swapped` line of exactly those weights. Times are wall-clock on
one host: the write's start, the swap lines' timestamps (microseconds). Between changes a random 0.2-0.5 s gap keeps
the changes from lining up with the file store's 50 ms poll.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from ortserve.registry import publishing
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.connect import open_store
from ortserve.registry.store import Store
from ortserve_devtools.bert_bundle import build_tiny_bundle
from ortserve_devtools.consul_standin import StandinProcess
from ortserve_devtools.server_process import ServerLog, ServerProcess
from ortserve_devtools.soak.processes import AdminClient, start_registry_server

MODEL = "sentiment"
CANARY_STEPS = (5, 20, 50, 80, 95, 50, 20)  # v2's weight, in turn (each differs from the one before)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Change:
    weights: dict[str, int]
    wrote_at: float  # wall clock, when the write started
    write_s: float  # how long the store write took
    swapped_at: list[float]  # wall clock, per replica

    @property
    def last_s(self) -> float:
        return max(self.swapped_at) - self.wrote_at

    @property
    def first_s(self) -> float:
        return min(self.swapped_at) - self.wrote_at


@contextmanager
def registry(backend: str, workdir: Path) -> Iterator[str]:
    """A registry URL on `backend` (file: the embedded store; standin: the Consul stand-in as its own process)."""
    if backend == "file":
        yield (workdir / "store").as_uri()
        return
    standin = StandinProcess(workdir / "consul-kv.json", log_path=workdir / "standin.log").start()
    try:
        yield f"consul://{standin.address}?prefix=ortserve/"
    finally:
        standin.stop()


def _swap_time(log: ServerLog, weights: dict[str, int], after: float) -> float | None:
    for event in log.events:
        if event.get("event") == "version_swapped" and event.get("model") == MODEL \
                and event.get("weights") == weights:
            at = dt.datetime.fromisoformat(event["timestamp"]).timestamp()
            if at >= after:
                return at
    return None


def measure(backend: str, workdir: Path, *, replicas: int, changes: int, progress: Progress,
            timeout_s: float = 30.0) -> list[Change]:
    """`changes` route changes on `backend` with `replicas` servers watching it; one Change per route."""
    workdir.mkdir(parents=True)
    artifacts = workdir / "artifacts"
    with registry(backend, workdir) as url:
        store: Store = open_store(url)
        servers: list[ServerProcess] = []
        try:
            for seed, (version, weight) in enumerate((("v1", 100), ("v2", None)), start=1):
                bundle = build_tiny_bundle(workdir / f"bundle-{version}", seed=seed).path
                publishing.publish(store, ArtifactStore(artifacts), model=MODEL, version=version, bundle_dir=bundle,
                                   weight=weight)
            for i in range(replicas):
                servers.append(start_registry_server(registry_url=url, artifacts=artifacts,
                                                     cache=workdir / f"cache-{i}", model=MODEL,
                                                     log_path=workdir / f"server-{i}.log", timeout_s=120))
            _wait_loaded(servers, timeout_s=120)
            progress(f"{backend}: {replicas} replicas on {url} serve v1, v2 loaded beside it")
            logs = [ServerLog(workdir / f"server-{i}.log") for i in range(replicas)]
            out = []
            for n in range(changes):
                canary = CANARY_STEPS[n % len(CANARY_STEPS)]
                weights = {"v1": 100 - canary, "v2": canary}
                time.sleep(random.uniform(0.2, 0.5))
                wrote_at = time.time()
                publishing.route(store, MODEL, weights)
                write_s = time.time() - wrote_at
                swapped = _wait_swaps(logs, weights, wrote_at, timeout_s)
                out.append(Change(weights, wrote_at, write_s, swapped))
            return out
        finally:
            for server in servers:
                server.stop()
            with suppress(Exception):
                store.close()


def _wait_loaded(servers: list[ServerProcess], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for server in servers:
        admin = AdminClient(server.address)
        try:
            while admin.status()["models"].get(MODEL, {}).get("versions", {}).get("v2", {}).get("state") != "ready":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{server.address} did not load v2 within {timeout_s:.0f} s")
                time.sleep(0.05)
        finally:
            admin.close()


def _wait_swaps(logs: list[ServerLog], weights: dict[str, int], after: float, timeout_s: float) -> list[float]:
    deadline = time.monotonic() + timeout_s
    found: list[float | None] = [None] * len(logs)
    while None in found:
        if time.monotonic() > deadline:
            missing = [i for i, f in enumerate(found) if f is None]
            raise RuntimeError(f"replicas {missing} did not swap to {weights} within {timeout_s:.0f} s")
        time.sleep(0.01)
        for i, log in enumerate(logs):
            if found[i] is None:
                log.poll()
                found[i] = _swap_time(log, weights, after)
    return [f for f in found if f is not None]
