"""The watcher over every store backend: snapshots as data, outages, index resets, wiped stores."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ortserve_devtools.consul_standin import ConsulStandin

from ortserve.registry.address import ConsulAddress
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.consulstore import ConsulStore
from ortserve.registry.desired import DesiredState
from ortserve.registry.publishing import publish, route
from ortserve.registry.store import Store
from ortserve.registry.watcher import Backoff, Watcher, desired_state


@contextmanager
def watching(store: Store, **kwargs) -> Iterator[tuple[queue.Queue[DesiredState], list[tuple[bool, str]]]]:
    states: queue.Queue[DesiredState] = queue.Queue()
    health: list[tuple[bool, str]] = []
    watcher = Watcher(store, on_state=states.put, on_health=lambda ok, why: health.append((ok, why)),
                      wait_s=1.0, backoff=Backoff(0.01, 0.05), **kwargs)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield states, health
    finally:
        stop.set()
        thread.join(timeout=10)


def standin_store(standin: ConsulStandin) -> ConsulStore:
    """A fresh client (its own HTTP session) of the stand-in, as a second operator or server would have."""
    return ConsulStore(ConsulAddress(host="127.0.0.1", port=standin.port, prefix="ortserve/"))


def next_state(states: queue.Queue[DesiredState], timeout: float = 10) -> DesiredState:
    return states.get(timeout=timeout)


def test_snapshots_follow_publish_and_route(store: Store, bundles: dict[str, Path], tmp_path: Path) -> None:
    artifacts = ArtifactStore(tmp_path / "artifacts")
    with watching(store) as (states, health):
        assert next_state(states).models == {}
        publish(store, artifacts, model="m", version="v1", bundle_dir=bundles["a"], weight=100)
        state = next_state(states)
        assert dict(state.models["m"].weights) == {"v1": 100}
        assert state.models["m"].versions["v1"].artifact is not None
        publish(store, artifacts, model="m", version="v2", bundle_dir=bundles["b"])
        state = next_state(states)
        assert set(state.models["m"].versions) == {"v1", "v2"}
        route(store, "m", {"v1": 90, "v2": 10})
        state = next_state(states)
        assert dict(state.models["m"].weights) == {"v1": 90, "v2": 10}
        assert state.index >= 1
        assert health[0][0] is True


def test_model_filter(store: Store, bundles: dict[str, Path], tmp_path: Path) -> None:
    artifacts = ArtifactStore(tmp_path / "artifacts")
    publish(store, artifacts, model="wanted", version="v1", bundle_dir=bundles["a"], weight=100)
    publish(store, artifacts, model="other", version="v1", bundle_dir=bundles["a"], weight=100)
    with watching(store, models=["wanted"]) as (states, _):
        assert set(next_state(states).models) == {"wanted"}


def test_outage_keeps_last_state_and_recovers(bundles: dict[str, Path], tmp_path: Path, standin) -> None:
    store = standin_store(standin)
    artifacts = ArtifactStore(tmp_path / "artifacts")
    publish(store, artifacts, model="m", version="v1", bundle_dir=bundles["a"], weight=100)
    with watching(store) as (states, health):
        next_state(states)
        standin.no_leader = True  # every call answers 500 "No cluster leader"
        deadline = time.monotonic() + 10
        while not any(ok is False for ok, _ in health):
            assert time.monotonic() < deadline, "the watcher never noticed the outage"
            time.sleep(0.02)
        assert states.empty()  # nothing emitted while the store is down: the last state stands
        standin.no_leader = False
        route_writer = standin_store(standin)
        publish(route_writer, artifacts, model="m", version="v2", bundle_dir=bundles["b"], weight=50)
        state = next_state(states)
        assert dict(state.models["m"].weights) == {"v1": 50, "v2": 50}
        assert health[-1][0] is True


def test_index_going_backwards_resets_the_watch(bundles: dict[str, Path], tmp_path: Path, standin) -> None:
    store = standin_store(standin)
    artifacts = ArtifactStore(tmp_path / "artifacts")
    publish(store, artifacts, model="m", version="v1", bundle_dir=bundles["a"], weight=100)
    with watching(store) as (states, _):
        next_state(states)
        standin.reset_indexes(to=1)  # as after a snapshot restore
        route_writer = standin_store(standin)
        publish(route_writer, artifacts, model="m", version="v2", bundle_dir=bundles["b"], weight=30)
        state = next_state(states)  # a watch stuck on the old, higher index would never see this
        assert dict(state.models["m"].weights) == {"v1": 70, "v2": 30}


def test_wiped_store_keeps_last_state(bundles: dict[str, Path], tmp_path: Path, standin) -> None:
    store = standin_store(standin)
    publish(store, ArtifactStore(tmp_path / "artifacts"), model="m", version="v1", bundle_dir=bundles["a"],
            weight=100)
    with watching(store) as (states, _):
        assert "m" in next_state(states).models
        store._client.kv.delete("ortserve/", recurse=True)
        threading.Event().wait(0.5)
        assert states.empty()  # an emptied store does not unload every model


def test_desired_state_skips_unparseable_records(store: Store, bundles: dict[str, Path], tmp_path: Path) -> None:
    publish(store, ArtifactStore(tmp_path / "artifacts"), model="m", version="v1", bundle_dir=bundles["a"],
            weight=100)
    store.put("models/m/versions/broken", b"{not json")
    state = desired_state(store.list("models/"), index=7)
    assert set(state.models["m"].versions) == {"v1"}
    assert state.index == 7
