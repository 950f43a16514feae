"""Serve what the registry says: the watcher in its own thread, snapshots handed to the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from ortserve.registry.address import FileAddress, parse_registry_url
from ortserve.registry.artifacts import ArtifactCache, ArtifactStore
from ortserve.registry.connect import open_store
from ortserve.registry.desired import DesiredState
from ortserve.registry.watcher import Watcher
from ortserve.service.app import StateSource
from ortserve.service.assembly import ArtifactFetcher
from ortserve.service.config import Settings
from ortserve.service.metrics import Metrics
from ortserve.service.rollout_agent import RolloutAgent, replica_name

log = structlog.get_logger("ortserve.registry_source")


def registry_source(settings: Settings) -> tuple[StateSource, ArtifactFetcher]:
    address = parse_registry_url(settings.registry)
    store = open_store(settings.registry)
    roots: list[Path] | None = None
    if settings.artifacts:
        roots = [ArtifactStore.from_url(settings.artifacts).root]
    elif isinstance(address, FileAddress):
        roots = [address.root / "artifacts"]
    cache = ArtifactCache(settings.artifact_cache or None, allowed_roots=roots)

    async def run(apply: Callable[[DesiredState], None], metrics: Metrics) -> None:
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        # The watcher thread may sit in a blocking query past the server's stop: it reaches the server only through
        # this list, emptied at the end, so that it does not keep the stopped server (and its engine objects) alive.
        server: list[tuple[Callable[[DesiredState], None], Metrics]] = [(apply, metrics)]

        def on_state(state: DesiredState) -> None:
            for apply_state, _ in server[:1]:
                loop.call_soon_threadsafe(apply_state, state)

        def on_health(ok: bool, why: str) -> None:
            for _, server_metrics in server[:1]:
                loop.call_soon_threadsafe(server_metrics.watcher_connected.set, 1 if ok else 0)

        watcher = Watcher(store, on_state=on_state, on_health=on_health, models=settings.models, wait_s=10.0)
        # A plain daemon thread, not the loop's executor: a blocking query may hold it for `wait_s`,
        # and shutdown must not wait for that.
        thread = threading.Thread(target=watcher.run, args=(stop,), name="ortserve-watcher", daemon=True)
        thread.start()
        # Its own store handle: a client is not shared between threads (the watcher's sits in blocking queries).
        rollout_store = open_store(settings.registry) if settings.rollout_step_s > 0 else None
        if rollout_store is not None:
            agent = RolloutAgent(rollout_store, metrics.registry, replica=replica_name(),
                                 step_s=settings.rollout_step_s, models=settings.models)
            threading.Thread(target=agent.run, args=(stop,), name="ortserve-rollouts", daemon=True).start()
        try:
            await asyncio.Event().wait()
        finally:
            stop.set()
            server.clear()
            store.close()
            if rollout_store is not None:
                rollout_store.close()

    return run, cache.fetch
