"""Routing is deterministic, accurate over many keys, and monotone when a canary ramps."""

from __future__ import annotations

import subprocess
import sys
from itertools import pairwise

from ortserve.engine_ext import ROUTE_BUCKETS as BUCKETS
from ortserve.engine_ext import Split
from ortserve.engine_ext import route_bucket as bucket

KEYS = [f"user-{i}" for i in range(100_000)]


def shares(split: Split, keys: list[str], model: str = "m") -> dict[str, float]:
    counts: dict[str, int] = {}
    for key in keys:
        v = split.pick(bucket(model, key))
        counts[v] = counts.get(v, 0) + 1
    return {v: 100 * c / len(keys) for v, c in counts.items()}


def test_bucket_is_stable_across_processes() -> None:
    code = "from ortserve.engine_ext import route_bucket as b; print([b('m', f'k{i}') for i in range(50)])"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", **__import__("os").environ})
    assert other.stdout.strip() == str([bucket("m", f"k{i}") for i in range(50)])
    assert all(0 <= bucket("m", k) < BUCKETS for k in KEYS[:1000])


def test_shares_within_half_a_point_over_100k_keys() -> None:
    for weights in ([("v1", 95), ("v2", 5)], [("v1", 50), ("v2", 50)], [("v1", 20), ("v2", 30), ("v3", 50)]):
        got = shares(Split.of(weights), KEYS)
        for version, weight in weights:
            assert abs(got.get(version, 0.0) - weight) <= 0.5, (weights, got)


def test_zero_weight_versions_get_nothing() -> None:
    got = shares(Split.of([("v1", 100), ("v2", 0)]), KEYS[:5000])
    assert got == {"v1": 100.0}


def test_same_key_same_version_while_weights_unchanged() -> None:
    split = Split.of([("v1", 70), ("v2", 30)])
    first = [split.pick(bucket("m", k)) for k in KEYS[:5000]]
    again = [Split.of([("v1", 70), ("v2", 30)]).pick(bucket("m", k)) for k in KEYS[:5000]]
    assert first == again


def test_ramping_up_only_moves_stable_to_canary_and_down_only_back() -> None:
    ramp = [5, 20, 50, 100]
    picks = [[Split.of([("v1", 100 - c), ("v2", c)]).pick(bucket("m", k)) for k in KEYS[:20000]] for c in ramp]
    for before, after in pairwise(picks):
        for a, b in zip(before, after, strict=True):
            assert not (a == "v2" and b == "v1"), "ramping up moved a key from canary back to stable"
    for before, after in pairwise(picks[::-1]):
        for a, b in zip(before, after, strict=True):
            assert not (a == "v1" and b == "v2"), "ramping down moved a key from stable to canary"


def test_models_hash_independently() -> None:
    assert [bucket("a", k) for k in KEYS[:100]] != [bucket("b", k) for k in KEYS[:100]]
