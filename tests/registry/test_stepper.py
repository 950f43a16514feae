"""A rollout through real stores (file, the Consul stand-in): stepped once per stage however many replicas step it,
back to stable with the reason on a breach, aborted by a person's routing, and finished by another process when the
one that started it is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ortserve.bundle.agreement import Tally
from ortserve.registry import stepper
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.catalog import read_model_state
from ortserve.registry.publishing import Refused, publish, route
from ortserve.registry.rollout import Checks, Figures, Hold, Plan, Rollout, Side
from ortserve.registry.store import Store

CHECKS = Checks(min_agreement=0.99, max_error_rate=0.01, max_p99_ratio=1.5, min_calls=10, min_judged=10)


@pytest.fixture
def model(store: Store, tmp_path: Path, bundles: dict[str, Path]) -> str:
    artifacts = ArtifactStore(tmp_path / "artifacts")
    publish(store, artifacts, model="m", version="v1", bundle_dir=bundles["a"], weight=100)
    publish(store, artifacts, model="m", version="v2", bundle_dir=bundles["b"])
    return "m"


def side(calls: int, errors: int = 0, seconds: float = 0.01) -> Side:
    s = Side()
    for i in range(calls):
        s = s.observe(seconds, ok=i >= errors)
    return s


def report(store: Store, rollout: Rollout, replicas: int = 2, *, errors: int = 0, agreed: int = 10) -> None:
    """Each replica's figures for the rollout's current stage, as the servers write them."""
    for i in range(replicas):
        stepper.put_figures(store, "m", f"replica-{i}", Figures(
            rollout.id, rollout.stage, stable=side(10), candidate=side(10, errors=errors),
            agreement=Tally(calls=10, judged=10, agreed=agreed)))


def routing(store: Store) -> tuple[dict[str, int], tuple[str, int] | None]:
    r = read_model_state(store, "m").routing
    assert r is not None
    return dict(r.weights), r.shadow


def test_a_healthy_rollout_goes_shadow_canary_promoted_each_stage_stepped_once(store: Store, model: str,
                                                                                reopen) -> None:
    plan = Plan(model, "v1", "v2", steps=(50, 100), interval_s=10, shadow_s=10, shadow_percent=20, checks=CHECKS)
    r = stepper.start(store, plan, who="me", now=0.0)
    assert routing(store) == ({"v1": 100}, ("v2", 20))
    with pytest.raises(Refused, match="rollout running"):
        stepper.start(store, plan, now=0.0)
    # Four replicas (each its own store handle, as separate servers) step at once at every tick.
    handles = [reopen(store) for _ in range(4)]
    now = 0.0
    while r.running:
        report(store, r)
        now += 5.0
        barrier = threading.Barrier(len(handles))

        def one(handle: Store, at: float = now, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            stepper.step(handle, "m", now=at)

        threads = [threading.Thread(target=one, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = stepper.read(store, "m").rollout
        assert got is not None
        if got.stage == 1 and got.running:
            assert routing(store) == ({"v1": 50, "v2": 50}, None)
        r = got
        assert now < 100
    assert r.status == "promoted" and routing(store) == ({"v2": 100}, None)
    assert stepper.figures(store, "m") == []  # the last step took the replicas' keys with it
    assert [(s.event, s.stage) for s in r.story] == [
        ("started", "shadow"), ("advanced", "canary 50%"), ("advanced", "canary 100%"), ("promoted", "canary 100%")]
    assert "2 replica(s)" in r.story[1].detail


@pytest.mark.parametrize(("errors", "agreed", "check"), [(0, 9, "agreement"), (1, 10, "error rate")])
def test_a_breach_returns_traffic_to_stable_and_records_the_check(store: Store, model: str, errors: int,
                                                                  agreed: int, check: str) -> None:
    plan = Plan(model, "v1", "v2", steps=(25, 100), interval_s=10, shadow_s=10, checks=CHECKS)
    r = stepper.start(store, plan, now=0.0)
    report(store, r)
    r, _ = stepper.step(store, "m", now=11.0)
    assert r is not None and r.stage == 1 and routing(store) == ({"v1": 75, "v2": 25}, None)
    report(store, r, errors=errors, agreed=agreed)
    r, _ = stepper.step(store, "m", now=12.0)
    assert r is not None and r.status == "rolled_back" and r.reason.startswith(check)
    assert routing(store) == ({"v1": 100}, None)
    assert stepper.read(store, "m").rollout == r
    # Stale figures of the rolled-back rollout move nothing, and a new rollout may start.
    assert stepper.step(store, "m", now=99.0)[0] == r
    assert stepper.start(store, plan, now=100.0).running


def test_a_person_routing_by_hand_aborts_the_rollout(store: Store, model: str) -> None:
    r = stepper.start(store, Plan(model, "v1", "v2", shadow_s=10, checks=CHECKS), now=0.0)
    route(store, "m", {"v1": 100})  # drops the shadow
    after, decision = stepper.step(store, "m", now=1.0)
    assert after is not None and after.status == "aborted" and "routing changed" in after.reason
    assert isinstance(decision, Hold) and routing(store) == ({"v1": 100}, None)
    assert after.id == r.id


def test_abort_and_the_refusals_of_start(store: Store, model: str) -> None:
    with pytest.raises(Refused, match="not published"):
        stepper.start(store, Plan(model, "v1", "v9"))
    route(store, "m", {"v1": 90, "v2": 10})
    with pytest.raises(Refused, match="starts from v1=100"):
        stepper.start(store, Plan(model, "v1", "v2"))
    route(store, "m", {"v1": 100})
    stepper.start(store, Plan(model, "v1", "v2", steps=(10,), shadow_s=0), now=0.0)
    assert routing(store) == ({"v1": 90, "v2": 10}, None)
    done = stepper.abort(store, "m", "a test")
    assert done.status == "aborted" and routing(store) == ({"v1": 100}, None)
    with pytest.raises(Refused, match="no rollout running"):
        stepper.abort(store, "m", "again")


def _cli(registry: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "ortserve.registry.cli", "--registry", registry, *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTSERVE_", "CONSUL_HTTP"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def test_a_killed_stepper_neither_loses_the_rollout_nor_steps_it_twice(tmp_path: Path,
                                                                        bundles: dict[str, Path]) -> None:
    """`registry rollout --wait` starts and steps the rollout; it is SIGKILLed after the first advance, and two other
    processes (`registry rollout --step` in loops, as servers would) finish it, every stage once."""
    root = tmp_path / "store"
    url = root.as_uri()
    from ortserve.registry.filestore import FileStore

    store = FileStore(root, poll_s=0.02)
    artifacts = ArtifactStore(root / "artifacts")
    publish(store, artifacts, model="m", version="v1", bundle_dir=bundles["a"], weight=100)
    publish(store, artifacts, model="m", version="v2", bundle_dir=bundles["b"])
    starter = subprocess.Popen(
        _cli(url, "rollout", "m", "v2", "--steps", "50,100", "--interval", "1s", "--min-calls", "10", "--wait"),
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    stop = threading.Event()

    def replicas() -> None:  # the servers' side: figures for whatever stage is current
        while not stop.is_set():
            current = stepper.read(store, "m").rollout
            if current is not None and current.running:
                report(store, current)
            stop.wait(0.1)

    reporter = threading.Thread(target=replicas)
    reporter.start()
    try:
        while True:  # until the starter advanced once
            current = stepper.read(store, "m").rollout
            if current is not None and current.stage >= 1:
                break
            assert time.monotonic() < deadline and starter.poll() is None, starter.communicate()
            time.sleep(0.05)
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        step_once = " ".join(_cli(url, "rollout", "m", "--step"))
        loops = [subprocess.Popen(["bash", "-c", f"for i in $(seq 60); do {step_once} >/dev/null; sleep 0.2; done"],
                                  env=_env()) for _ in range(2)]
        try:
            while True:
                current = stepper.read(store, "m").rollout
                assert current is not None
                if not current.running:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    finally:
        stop.set()
        reporter.join()
    assert current.status == "promoted", current.story
    assert [s.event for s in current.story] == ["started", "advanced", "promoted"]
    assert routing(store) == ({"v2": 100}, None)


def test_the_cli_rolls_out_aborts_and_shows_the_rollouts_story(tmp_path: Path, bundles: dict[str, Path]) -> None:
    root = tmp_path / "store"
    url = root.as_uri()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(_cli(url, *args), env=_env(), capture_output=True, text=True, timeout=60)

    for version, bundle, weight in (("v1", "a", ["--weight", "100"]), ("v2", "b", [])):
        assert run("publish", "--model", "m", "--version", version, "--bundle", str(bundles[bundle]),
                   *weight).returncode == 0
    assert run("route", "m", "v1=100").returncode == 0
    started = run("rollout", "m", "v2", "--steps", "50,100", "--max-p99-ratio", "2")
    assert started.returncode == 0 and "canary 50% for 120s, canary 100% for 120s" in started.stdout, started.stderr
    assert "shadow" not in started.stdout
    aborted = run("rollout", "m", "--abort")
    assert aborted.returncode == 0 and "routing v1=100" in aborted.stdout
    shown = run("show", "m")
    assert "rollout " in shown.stdout and "aborted" in shown.stdout and "started" in shown.stdout, shown.stdout
    assert run("rollout", "m", "v2", "--steps", "50,25").returncode == 2
