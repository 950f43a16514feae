"""ModelManager with real tiny bundles and the real engine: lifecycle, swaps, leases, failures."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle

from ortserve.registry.desired import DesiredModel, DesiredState, DesiredVersion
from ortserve.service.assembly import VersionFactory
from ortserve.service.config import Settings
from ortserve.service.data_plane import DataPlane
from ortserve.service.errors import NotFound, Unavailable
from ortserve.service.lifecycle import IllegalTransition, State, check_transition
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("versions")
    out = {}
    for i, name in enumerate(("v1", "v2", "v3")):
        build_tiny_bundle(root / name, seed=i)
        out[name] = root / name
    broken = root / "broken"
    shutil.copytree(out["v1"], broken)
    (broken / "model.onnx").write_bytes(b"definitely not an onnx model")
    out["broken"] = broken
    return out


def state(bundles: dict[str, Path], weights: dict[str, int], *, versions: list[str] | None = None,
          sources: dict[str, str] | None = None) -> DesiredState:
    names = versions or list(weights)
    sources = sources or {}
    model = DesiredModel(
        "m",
        {v: DesiredVersion(v, bundle_dir=str(bundles[sources.get(v, v)]), created_at=f"2026-01-0{i + 1}")
         for i, v in enumerate(names)},
        weights,
    )
    return DesiredState({"m": model})


def run(coro_fn, *, on_event: Callable[[ModelManager, str, str], None] | None = None) -> None:
    """`coro_fn(manager, events)` on a real data plane; `on_event` also sees each lifecycle event as it happens."""
    async def main() -> None:
        tok = ThreadPoolExecutor(1)
        events: list[tuple[str, str]] = []
        settings = Settings(intra_op_threads=1)
        plane = DataPlane(settings, Metrics(), tokenize_pool=tok)
        plane.start(asyncio.get_running_loop())
        factory = VersionFactory(settings, plane, fetch=None)

        def observe(event: str, model: str, version: str, **_: object) -> None:
            events.append((event, version))
            if on_event is not None:
                on_event(manager, event, version)

        manager = ModelManager(factory, drain_timeout_s=5, retry_backoff_s=(0.05, 0.2), observer=observe)
        try:
            await coro_fn(manager, events)
        finally:
            await manager.close()
            plane.close()
            tok.shutdown()

    asyncio.run(main())


def routable(manager: ModelManager) -> dict[str, int]:
    route = manager.route_table.models.get("m")
    return dict(route.weights) if route else {}


def test_lifecycle_transitions_are_checked() -> None:
    check_transition(State.NEW, State.LOADING)
    check_transition(State.READY, State.DRAINING)
    for bad in ((State.NEW, State.READY), (State.CLOSED, State.READY), (State.DRAINING, State.READY)):
        with pytest.raises(IllegalTransition):
            check_transition(*bad)


def test_load_route_and_split(bundles) -> None:
    async def body(manager: ModelManager, events) -> None:
        with pytest.raises(NotFound), manager.lease("m", routing_key="k"):
            pass
        manager.apply(state(bundles, {"v1": 100}))
        # wanted but not loaded yet: retry later, not "unknown"
        with pytest.raises(Unavailable), manager.lease("m", routing_key="k"):
            pass
        await manager.wait_converged(30)
        assert routable(manager) == {"v1": 100}
        manager.apply(state(bundles, {"v1": 50, "v2": 50}))
        await manager.wait_converged(30)
        assert routable(manager) == {"v1": 50, "v2": 50}
        seen = set()
        for i in range(200):
            with manager.lease("m", routing_key=f"user-{i}") as lease:
                seen.add(lease.version.version)
                assert lease.route.startswith("bucket ")
        assert seen == {"v1", "v2"}
        with manager.lease("m", version="v2", routing_key="x") as lease:
            assert lease.version.version == "v2" and lease.route == "pin"
        with pytest.raises(NotFound), manager.lease("m", version="v9", routing_key="x"):
            pass
        assert [e for e, _ in events].count("loaded") == 2

    run(body)


def test_failed_load_changes_no_traffic_and_is_reported(bundles) -> None:
    # What the status says of v2 as each retry starts: still failed (and retrying), never back to "loading".
    at_retry: list[dict] = []

    def on_event(manager: ModelManager, event: str, version: str) -> None:
        if event == "loading" and version == "v2" and manager.version_failure("m", "v2"):
            at_retry.append(manager.status()["models"]["m"]["versions"]["v2"])

    async def body(manager: ModelManager, events) -> None:
        manager.apply(state(bundles, {"v1": 100}))
        await manager.wait_converged(30)
        manager.apply(state(bundles, {"v1": 50, "v2": 50}, sources={"v2": "broken"}))
        await manager.wait_converged(30)
        assert routable(manager) == {"v1": 100}
        status = manager.status()["models"]["m"]
        assert status["versions"]["v2"]["state"] == "failed"
        assert "v2" in status["last_error"]
        assert manager.version_failure("m", "v2")
        # Retries with backoff (0.05 s, then 0.1 s) keep failing, with no traffic change meanwhile: watched until the
        # second failure, not for a fixed time that a loaded machine might not fit a retry in.
        for _ in range(500):
            assert routable(manager) == {"v1": 100}
            if [e for e, _ in events].count("failed") >= 2:
                break
            await asyncio.sleep(0.02)
        assert [e for e, _ in events].count("failed") >= 2, "a failed load was never retried"
        assert at_retry and all(v["state"] == "failed" and v["retrying"] and v["attempts"] >= 1 for v in at_retry)
        # A fixed artifact for v2 is loaded and routed.
        manager.apply(state(bundles, {"v1": 50, "v2": 50}))
        await manager.wait_converged(30)
        assert routable(manager) == {"v1": 50, "v2": 50}
        assert manager.status()["models"]["m"]["last_error"] is None

    run(body, on_event=on_event)


def test_retired_version_closes_only_after_its_last_lease(bundles) -> None:
    async def body(manager: ModelManager, events) -> None:
        manager.apply(state(bundles, {"v1": 100}))
        await manager.wait_converged(30)
        with manager.lease("m", routing_key="k") as lease:
            old = lease.version
            manager.apply(state(bundles, {"v2": 100}, versions=["v2"]))
            await manager.wait_converged(30)
            assert routable(manager) == {"v2": 100}
            await asyncio.sleep(0.2)
            assert old.state is State.DRAINING  # still in use by this request: not closed
            result = await old.batcher.infer(["still served by the old version"])
            assert result.outputs.shape == (1, 2)
        for _ in range(100):
            if old.state is State.CLOSED:
                break
            await asyncio.sleep(0.02)
        assert old.state is State.CLOSED and old.instance is None
        assert ("closed", "v1") in events

    run(body)


def test_a_reloaded_version_is_not_closed_while_the_table_still_routes_to_it(bundles) -> None:
    """Same version names, new bytes: the old instances stay open until the swap that routes past them."""
    async def body(manager: ModelManager, events) -> None:
        manager.apply(state(bundles, {"v1": 100, "v2": 0}))
        await manager.wait_converged(30)
        manager.apply(state(bundles, {"v1": 100, "v2": 0}, sources={"v1": "v3", "v2": "v1"}))
        seen: set[State] = set()
        while True:  # v1 reloads first, then v2 takes a load's time: v1's old instance must stay usable
            with manager.lease("m", version="v1", routing_key="k") as lease:
                seen.add(lease.version.state)
                if lease.version.state is State.READY:
                    result = await lease.version.batcher.infer(["routed, so it must run"])
                    assert result.outputs.shape == (1, 2)
            if not manager._busy and not any(e.is_set() for e in manager._wake.values()):
                break
            await asyncio.sleep(0.001)
        assert seen == {State.READY}, f"the table routed to a version in state {seen}"
        route = manager.route_table.models["m"]
        assert route.versions["v1"].spec.bundle_dir == str(bundles["v3"])
        for _ in range(100):  # both old instances close once their retire tasks run
            if events.count(("closed", "v1")) == 1 and events.count(("closed", "v2")) == 1:
                break
            await asyncio.sleep(0.02)
        assert events.count(("closed", "v1")) == 1 and events.count(("closed", "v2")) == 1

    run(body)


def test_later_state_supersedes_earlier(bundles) -> None:
    async def body(manager: ModelManager, events) -> None:
        manager.apply(state(bundles, {"v1": 100}))
        manager.apply(state(bundles, {"v1": 80, "v2": 20}))
        manager.apply(state(bundles, {"v3": 100}, versions=["v3"]))
        await manager.wait_converged(30)
        assert routable(manager) == {"v3": 100}
        for _ in range(500):  # whatever v1 loaded is retired by a task of its own: watched, not given a fixed time
            if set(manager.status()["models"]["m"]["versions"]) == {"v3"}:
                break
            await asyncio.sleep(0.02)
        assert set(manager.status()["models"]["m"]["versions"]) == {"v3"}

    run(body)


def test_model_removed_from_registry_is_unloaded(bundles) -> None:
    async def body(manager: ModelManager, events) -> None:
        manager.apply(state(bundles, {"v1": 100}))
        await manager.wait_converged(30)
        manager.apply(DesiredState({}))
        await manager.wait_converged(30)
        assert manager.route_table.models == {}
        with pytest.raises(NotFound), manager.lease("m", routing_key="k"):
            pass

    run(body)
