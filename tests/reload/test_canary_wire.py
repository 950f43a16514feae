"""Canary routing over the wire (invariant 6): sticky keys, a split near the weights, pins, monotone ramps.

The exact accuracy (within 0.5 points over 100,000 keys) is a unit test of the route
(tests/service/test_router.py); here the same properties are checked end to end, through the
registry and a real server process, on 2,000 distinct keys with a loose bound.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from reload_harness import Registry, versions_for_keys, wait_routing
from support.server_process import infer_request, running_server, stub_for

from ortserve import engine_ext

MODEL = "sentiment"
KEYS = [f"customer-{i:05d}" for i in range(2000)]
TOLERANCE_POINTS = 4.0


def share(answers: dict[str, str], version: str) -> float:
    return 100.0 * sum(v == version for v in answers.values()) / len(answers)


def canary_keys(answers: dict[str, str]) -> set[str]:
    return {k for k, v in answers.items() if v == "v2"}


def test_canary_over_the_wire(file_registry: Registry, bundle: Callable[..., Path], tmp_path: Path,
                              frontend: str) -> None:
    reg = file_registry
    reg.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    reg.publish(MODEL, "v2", bundle(2), weight=5, cli=False)  # one write: the record and v1=95 v2=5
    assert reg.weights(MODEL) == {"v1": 95, "v2": 5}
    with running_server([*reg.server_args(tmp_path / "cache"), "--frontend", frontend]) as server:
        addr = server.address
        wait_routing(addr, MODEL, {"v1": 95, "v2": 5})
        at5 = versions_for_keys(addr, MODEL, KEYS[:1000])  # half the keys suffice for the ramp check

        reg.route(MODEL, v1=80, v2=20)
        wait_routing(addr, MODEL, {"v1": 80, "v2": 20})
        at20 = versions_for_keys(addr, MODEL, KEYS)
        assert abs(share(at20, "v2") - 20) <= TOLERANCE_POINTS, share(at20, "v2")
        assert abs(share(at5, "v2") - 5) <= TOLERANCE_POINTS, share(at5, "v2")  # 1,000 keys: still ~3 sigma

        if frontend == "native":  # the C++ bucket and split chose these, not a pass-through to Python
            lines = server.events("request")
            assert sum(1 for e in lines if e.get("frontend") == "native") >= 0.9 * len(lines)

        # Deterministic across processes: the server's choice is the router's pure function of the key.
        split = engine_ext.Split.of([("v1", 80), ("v2", 20)])
        assert at20 == {k: split.pick(engine_ext.route_bucket(MODEL, k)) for k in KEYS}

        # Sticky: the same key again, and the same key as x-routing-key metadata, land on the same version.
        sample = KEYS[:200]
        assert versions_for_keys(addr, MODEL, sample) == {k: at20[k] for k in sample}
        assert versions_for_keys(addr, MODEL, sample, via="metadata") == {k: at20[k] for k in sample}

        # A pin always wins over the hash, both ways.
        on_v2 = sorted(canary_keys(at20))[:100]
        on_v1 = sorted(set(KEYS) - canary_keys(at20))[:100]
        assert set(versions_for_keys(addr, MODEL, on_v2, pin="v1").values()) == {"v1"}
        assert set(versions_for_keys(addr, MODEL, on_v1, pin="v2").values()) == {"v2"}
        channel, stub = stub_for(addr)
        with channel, pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(infer_request(["good"], model=MODEL, version="v9", routing_key=on_v1[0]), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

        reg.route(MODEL, v1=50, v2=50)
        wait_routing(addr, MODEL, {"v1": 50, "v2": 50})
        at50 = versions_for_keys(addr, MODEL, KEYS)
        assert abs(share(at50, "v2") - 50) <= TOLERANCE_POINTS, share(at50, "v2")

        # Ramping up only moves keys from stable to canary, never back.
        assert canary_keys(at5) <= canary_keys(at20) <= canary_keys(at50)
        assert len(canary_keys(at5)) < len(canary_keys(at20) & set(at5)) < len(canary_keys(at50) & set(at5))

        # And ramping back down returns exactly the keys that moved (rollback pops the history).
        reg.rollback(MODEL)
        wait_routing(addr, MODEL, {"v1": 80, "v2": 20})
        back = KEYS[:400]
        assert versions_for_keys(addr, MODEL, back) == {k: at20[k] for k in back}
