"""Names, weights, record round trips, and the weight blending of `publish --weight`."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ortserve.bundle.manifest import BundleManifest
from ortserve.registry.publishing import Refused, blend_weights
from ortserve.registry.records import (
    ArtifactRef,
    RecordError,
    Routing,
    VersionRecord,
    check_name,
    check_weights,
    routing_key,
    version_key,
)

RECORD = VersionRecord(model="sentiment", version="v2",
                       artifact=ArtifactRef(uri="file:///a/sha256/" + "a" * 64 + ".tar", sha256="a" * 64, size=10),
                       manifest=BundleManifest("onnx-text-classifier", ("neg", "pos"), 128, "n"),
                       created_at="2026-01-01T00:00:00Z", created_by="me@host")


@pytest.mark.parametrize("name", ["v1", "V1.2-rc_3", "a" * 64, "0"])
def test_good_names(name: str) -> None:
    assert check_name("version", name) == name


@pytest.mark.parametrize("name", ["", "a/b", "..", "a..b", "a b", ".hidden", "-x", "a" * 65, "ü", "v1\n"])
def test_bad_names(name: str) -> None:
    with pytest.raises(RecordError, match="invalid version name"):
        check_name("version", name)


def test_keys_follow_the_schema() -> None:
    assert version_key("m", "v1") == "models/m/versions/v1"
    assert routing_key("m") == "models/m/routing"
    with pytest.raises(RecordError):
        version_key("m", "../x")


def test_version_record_round_trip_matches_schema() -> None:
    doc = json.loads(RECORD.to_json())
    assert set(doc) == {"model", "version", "artifact", "format", "created_at", "created_by", "labels",
                        "max_seq_len", "notes"}
    assert set(doc["artifact"]) == {"uri", "sha256", "size"}
    assert VersionRecord.from_json(RECORD.to_json()) == RECORD


def test_embedding_version_record_round_trip() -> None:
    record = VersionRecord(model="search", version="v1", artifact=RECORD.artifact,
                           manifest=BundleManifest("onnx-text-embedding", (), 128, "n", dim=384),
                           created_at=RECORD.created_at, created_by=RECORD.created_by)
    doc = json.loads(record.to_json())
    assert set(doc) == {"model", "version", "artifact", "format", "created_at", "created_by", "dim",
                        "max_seq_len", "notes"}
    assert (doc["format"], doc["dim"]) == ("onnx-text-embedding", 384)
    assert VersionRecord.from_json(record.to_json()) == record


@pytest.mark.parametrize("change", [
    {"version": "../x"}, {"artifact": {"uri": "u", "sha256": "xyz", "size": 1}}, {"labels": []},
    {"max_seq_len": 1}, {"format": "other"}, {"artifact": None},
])
def test_bad_version_records(change: dict) -> None:
    doc = {**json.loads(RECORD.to_json()), **change}
    with pytest.raises(RecordError):
        VersionRecord.from_json(json.dumps(doc).encode())
    with pytest.raises(RecordError, match="not valid JSON"):
        VersionRecord.from_json(b"{")


def test_routing_round_trip_keeps_history() -> None:
    r = Routing(weights={"v1": 95, "v2": 5}, updated_at="t", updated_by="u", history=({"v1": 100},))
    assert Routing.from_json(r.to_json()) == r
    assert json.loads(r.to_json())["history"] == [{"v1": 100}]


@pytest.mark.parametrize("weights,pattern", [
    ({"v1": 50, "v2": 40}, "sum to 100, got 90"), ({"v1": 101, "v2": -1}, ">= 0"), ({}, "non-empty"),
    ({"v1": 50.0, "v2": 50}, "integer"), ({"v1": True, "v2": 99}, "integer"), ({"a b": 100}, "invalid"),
])
def test_bad_weights(weights: dict, pattern: str) -> None:
    with pytest.raises(RecordError, match=pattern):
        check_weights(weights)


def test_weights_must_name_published_versions() -> None:
    with pytest.raises(RecordError, match=r"unpublished version.*v3"):
        check_weights({"v1": 50, "v3": 50}, published={"v1", "v2"})


def test_blend_examples() -> None:
    assert blend_weights({}, "v1", 10) == {"v1": 100}
    assert blend_weights({"v1": 100}, "v2", 5) == {"v1": 95, "v2": 5}
    assert blend_weights({"v1": 50, "v2": 50}, "v3", 10) == {"v1": 45, "v2": 45, "v3": 10}
    # 16.5, 16.5, 17: one point left over goes to the tie first by name.
    assert blend_weights({"a": 33, "b": 33, "c": 34}, "d", 50) == {"a": 17, "b": 16, "c": 17, "d": 50}
    with pytest.raises(Refused):
        blend_weights({"v1": 100}, "v2", 101)


@given(st.dictionaries(st.from_regex(r"v[0-9]{1,3}", fullmatch=True), st.integers(0, 100), min_size=1,
                       max_size=8).filter(lambda d: sum(d.values()) > 0), st.integers(0, 100))
def test_blend_always_sums_to_100_and_keeps_every_version(current: dict[str, int], weight: int) -> None:
    out = blend_weights(current, "new", weight)
    assert sum(out.values()) == 100 and out["new"] == weight
    assert set(out) == set(current) | {"new"}
    total = sum(current.values())
    for v, w in current.items():  # largest remainder: within 1 of the exact share
        assert abs(out[v] - w * (100 - weight) / total) < 1


def test_a_routing_shadow_round_trips_and_takes_no_weight() -> None:
    from ortserve.registry.records import Routing, check_shadow

    r = Routing(weights={"v1": 100}, shadow=("v2", 10))
    assert Routing.from_json(r.to_json()) == r
    assert "shadow" not in Routing(weights={"v1": 100}).to_dict()  # routing without one keeps its old shape
    with pytest.raises(RecordError, match="takes no traffic"):
        check_shadow({"version": "v1", "percent": 10}, {"v1": 100})
    with pytest.raises(RecordError, match=r"1\.\.100"):
        check_shadow({"version": "v2", "percent": 0}, {"v1": 100})
