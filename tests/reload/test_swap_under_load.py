"""Swap under load: >= 20 registry changes while 16 calls stay in flight; zero failed calls.

Real parts only: `ortserve serve --registry URL` as a process, the `registry` CLI as subprocesses
for every route, rollback and retire and for the first publish (later publishes call the same
`publishing.publish` in-process: the CLI's `onnx` import costs seconds per run here), a grpc.aio
client keeping 16 ModelInfer calls in flight, and the server's own JSON log as the evidence of
which table served which call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ortserve_devtools.steady_load import SteadyLoad
from reload_harness import TEXTS, Registry, unroutable_replies, wait_routing, wait_until, wait_version_state
from support.server_process import running_server

pytestmark = pytest.mark.slow  # swaps under steady load

MODEL = "sentiment"
CONCURRENCY = 16


def replies_after_close(logs: list[dict[str, Any]], model: str) -> list[str]:
    """Request lines answered by a version after its engine was closed (and before it was loaded again)."""
    closed: set[str] = set()
    bad = []
    for event in logs:
        if event.get("model") != model:
            continue
        name = event.get("event")
        if name == "version_loaded":
            closed.discard(event["version"])
        elif name == "version_closed":
            closed.add(event["version"])
        elif name == "request" and event.get("version") in closed:
            bad.append(event["request_id"])
    return bad


def test_swap_under_load(registry: Registry, bundle: Callable[..., Path], tmp_path: Path, frontend: str) -> None:
    """20+ changes, each waited for on the server (admin Status RPC) while the load runs.

    Checks, in order: no call failed; at least 16 calls were in flight whenever sampled; every
    reply's `model_version` equals its `x-model-version` trailer and its server log line; every
    version we routed to answered; and, from the server log (see `unroutable_replies` for the exact
    rule), every unpinned reply came from a version with weight > 0 in a table in force while that
    call took its lease, and no version answered after its engine was closed.
    """
    reg = registry
    reg.publish(MODEL, "v1", bundle(1), weight=100)
    changes: list[str] = []

    with running_server([*reg.server_args(tmp_path / "cache"), "--frontend", frontend], ready=True) as server:
        addr = server.address

        def routed(label: str) -> None:
            changes.append(label)
            wait_routing(addr, MODEL, reg.weights(MODEL))

        def published(version: str, seed: int, weight: int | None = None) -> None:
            reg.publish(MODEL, version, bundle(seed), weight=weight, cli=version == "v2")
            changes.append(f"publish {version}")
            wait_version_state(addr, MODEL, version, "ready")
            wait_routing(addr, MODEL, reg.weights(MODEL))

        def retired(version: str) -> None:
            reg.retire(MODEL, version)
            changes.append(f"retire {version}")
            wait_version_state(addr, MODEL, version, None)

        with SteadyLoad(addr, MODEL, texts=TEXTS[:2], concurrency=CONCURRENCY, tag=reg.kind) as load:
            started = time.monotonic()
            published("v2", 2)
            reg.route(MODEL, v1=95, v2=5)
            routed("route v1=95 v2=5")
            reg.route(MODEL, v1=50, v2=50)
            routed("route 50/50")
            load.first_reply_from("v2")
            reg.route(MODEL, v1=0, v2=100)
            routed("route v2=100")
            reg.rollback(MODEL)
            routed("rollback to 50/50")
            reg.route(MODEL, v1=0, v2=100)
            routed("route v2=100")
            published("v3", 3)
            reg.route(MODEL, v2=80, v3=20)
            routed("route v2=80 v3=20")
            reg.route(MODEL, v2=50, v3=50)
            routed("route v2=50 v3=50")
            retired("v1")
            reg.route(MODEL, v3=100)
            routed("route v3=100")
            load.first_reply_from("v3")
            reg.rollback(MODEL)
            routed("rollback to v2=50 v3=50")
            reg.route(MODEL, v2=10, v3=90)
            routed("route v2=10 v3=90")
            published("v4", 4, weight=5)  # one atomic write: the record and a 5% canary
            reg.route(MODEL, v3=50, v4=50)
            routed("route v3=50 v4=50")
            load.first_reply_from("v4")
            retired("v2")
            reg.route(MODEL, v3=0, v4=100)
            routed("route v4=100")
            reg.rollback(MODEL)
            routed("rollback to v3=50 v4=50")
            reg.route(MODEL, v4=100)
            routed("route v4=100 (drops v3's entry)")
            retired("v3")
            published("v5", 5, weight=50)
            load.first_reply_from("v5")
            reg.route(MODEL, v4=0, v5=100)
            routed("route v5=100")
            after_last = time.monotonic()
            load.first_reply_from("v5", after=after_last)
            took = time.monotonic() - started
        # SteadyLoad.__exit__ stopped the load and waited for every call to finish.

        assert len(changes) >= 20, changes
        assert load.failures() == [], f"{len(load.failures())} failed calls, e.g. {load.failures()[:3]}"
        assert load.min_in_flight_after_ramp is not None and load.min_in_flight_after_ramp >= CONCURRENCY
        outcomes = list(load.outcomes)
        assert all(o.version == o.header_version for o in outcomes), "reply version and header disagree"
        assert {o.version for o in outcomes} == {"v1", "v2", "v3", "v4", "v5"}
        assert {o.version for o in outcomes if o.started > after_last} == {"v5"}

        ids = {o.request_id: o.version for o in outcomes}
        logged = wait_until(lambda: _request_lines(server.logs, ids), timeout=10,
                            what="a server log line for every reply")
        mismatched = [rid for rid, event in logged.items() if event["version"] != ids[rid] or event["status"] != "OK"]
        assert mismatched == [], f"log and reply disagree for {mismatched[:5]}"
        if frontend == "native":  # served by the C++ path, not passed on to Python (only a draining version's are)
            native = sum(1 for event in logged.values() if event.get("frontend") == "native")
            assert native >= 0.9 * len(logged), f"only {native} of {len(logged)} calls were served natively"

        checked, violations = unroutable_replies(list(server.logs), MODEL)
        assert checked >= len(outcomes)
        assert violations == [], f"{len(violations)} replies from unroutable versions, e.g. {violations[:3]}"
        assert replies_after_close(list(server.logs), MODEL) == []
        swaps = [e for e in server.logs if e.get("event") == "version_swapped"]
        assert len(swaps) >= 15, "the server should have swapped its table for (almost) every change"
        print(f"{reg.kind}: {len(changes)} changes, {len(outcomes)} calls in {took:.1f}s, 0 failed, "
              f"{len(swaps)} swaps; CLI seconds: {[(c, round(t, 2)) for c, t in reg.cli_calls]}")


def _request_lines(logs: list[dict[str, Any]], ids: dict[str, str]) -> dict[str, dict[str, Any]] | None:
    found = {e["request_id"]: e for e in list(logs) if e.get("event") == "request" and e.get("request_id") in ids}
    return found if len(found) == len(ids) else None


def test_the_routing_check_allows_the_old_table_until_every_front_end_has_the_new_one() -> None:
    """Plain values: v1's table from t=0, v2's from t=10 (Python) to t=10.05 (the native front end had it)."""
    def at(seconds: float) -> str:
        return f"2026-01-01T00:00:{seconds:09.6f}+00:00"

    def swap(since: float, logged: float, weights: dict[str, int]) -> dict[str, Any]:
        return {"event": "version_swapped", "model": MODEL, "since": at(since), "timestamp": at(logged),
                "weights": weights}

    def call(rid: str, version: str, began: float, total_ms: float = 4.0) -> dict[str, Any]:
        return {"event": "request", "model": MODEL, "request_id": rid, "version": version, "route": "bucket 7",
                "status": "OK", "timestamp": at(began + total_ms / 1000), "total_ms": total_ms}

    logs = [swap(0.0, 0.001, {"v1": 100}), call("native-old", "v1", 10.03), call("early-new", "v2", 10.001),
            swap(10.0, 10.05, {"v2": 100}), call("late-old", "v1", 10.2), call("new", "v2", 10.2),
            call("before-v2", "v2", 5.0)]
    checked, violations = unroutable_replies(logs, MODEL)
    assert checked == 5
    assert [v.request_id for v in violations] == ["late-old", "before-v2"]
