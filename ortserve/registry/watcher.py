"""Turns registry changes into immutable DesiredState snapshots. Never loads an engine.

One blocking query on the whole models prefix (Consul: index + wait; file store: its watch), so
a single loop sees every model. Blocking and thread-bound (py-consul's sync client): run `run()`
in its own thread and hand the snapshots to the serving side.

Invariant 7: when the store is unreachable the last good state stays in force (nothing is
emitted), the loop backs off with full jitter, and an index that goes backwards (a Consul
snapshot restore or a restarted dev agent) restarts the watch from index 0.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from ortserve.registry.catalog import model_state_from_entries
from ortserve.registry.desired import DesiredModel, DesiredState, DesiredVersion
from ortserve.registry.records import MODELS_PREFIX, NAME_RE
from ortserve.registry.store import Entry, Store, StoreError

log = structlog.get_logger("ortserve.watcher")


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 0.25
    max_s: float = 10.0

    def delay(self, failures: int) -> float:
        """Full jitter: uniform in [0, min(max, initial * 2^failures)]."""
        return random.uniform(0, min(self.max_s, self.initial_s * 2 ** min(failures, 30)))


def desired_state(entries: Iterable[Entry], index: int, models: frozenset[str] | None = None) -> DesiredState:
    """The registry's entries under MODELS_PREFIX as one DesiredState (pure)."""
    by_model: dict[str, list[Entry]] = {}
    for entry in entries:
        name = entry.key[len(MODELS_PREFIX) :].split("/", 1)[0]
        if NAME_RE.fullmatch(name) and (models is None or name in models):
            by_model.setdefault(name, []).append(entry)
    desired: dict[str, DesiredModel] = {}
    for name, model_entries in by_model.items():
        state = model_state_from_entries(name, model_entries)
        for key, problem in state.problems.items():
            log.warning("registry_record_skipped", key=key, problem=problem)
        versions = {
            v: DesiredVersion(v, artifact=record.artifact, created_at=record.created_at)
            for v, record in state.versions.items()
        }
        weights = dict(state.routing.weights) if state.routing else {}
        desired[name] = DesiredModel(name, versions, weights, shadow=state.routing.shadow if state.routing else None)
    return DesiredState(desired, index=index)


class Watcher:
    def __init__(
        self,
        store: Store,
        *,
        on_state: Callable[[DesiredState], None],
        on_health: Callable[[bool, str], None] = lambda ok, why: None,
        models: Iterable[str] = (),
        wait_s: float = 30.0,
        backoff: Backoff | None = None,
        min_interval_s: float = 0.02,
    ) -> None:
        self._store = store
        self._on_state = on_state
        self._on_health = on_health
        self._models = frozenset(models) or None
        self._wait_s = wait_s
        self._backoff = backoff or Backoff()
        self._min_interval_s = min_interval_s

    def run(self, stop: threading.Event) -> None:
        """Watch until `stop` is set (checked after every blocking call returns)."""
        index = 0
        last: DesiredState | None = None
        failures = 0
        healthy: bool | None = None
        while not stop.is_set():
            started = time.monotonic()
            try:
                new_index, entries = self._store.watch(MODELS_PREFIX, index, self._wait_s)
            except StoreError as e:
                failures += 1
                if healthy is not False:
                    log.warning("registry_unreachable", store=self._store.describe(), error=str(e))
                    self._on_health(False, str(e))
                    healthy = False
                stop.wait(self._backoff.delay(failures))
                continue
            if healthy is not True:
                log.info("registry_connected", store=self._store.describe(), index=new_index)
                self._on_health(True, "")
                healthy = True
            failures = 0
            if new_index < index:
                log.warning("registry_index_went_backwards", previous=index, now=new_index)
                index = 0
                continue
            state = desired_state(entries, new_index, self._models)
            if not state.models and last is not None and last.models:
                # Every model gone at once is a wiped or restarted store (a Consul dev agent
                # loses its data), not an operator's change: the CLI cannot delete a routed
                # version. Keep serving the last good state rather than unload everything.
                log.warning("registry_empty_keeping_last_state", index=new_index, models=sorted(last.models))
            elif last is None or state.models != last.models:
                self._on_state(state)
                last = state
            index = max(new_index, 1)  # index 0 would make the next call return at once
            # A return does not mean a change (timeouts, idempotent writes): never spin.
            spare = self._min_interval_s - (time.monotonic() - started)
            if spare > 0:
                stop.wait(spare)
