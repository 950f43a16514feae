"""scripts/dev soak: its pure parts (schedule, holds, the byte flip) and one compressed end-to-end run.

The end-to-end run is the soak itself, seconds long: a real Consul stand-in process killed and restarted, a real
registry-backed server, `registry` CLI runs, client processes, the cache drill. Its timings mean nothing; it checks
that every figure and hold the report promises is there, so the script cannot rot.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from ortserve_devtools.bench.prom import Histogram
from ortserve_devtools.bert_bundle import build_tiny_bundle
from ortserve_devtools.soak import analysis, drill, schedule
from ortserve_devtools.soak.processes import ADMIN_STATUS_METHOD

pytestmark = pytest.mark.slow  # the soak's short runs

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


# ---- the schedule -----------------------------------------------------------------------------------------------


def test_default_schedule_of_a_five_minute_run() -> None:
    plan = schedule.Plan(duration_s=300, route_every_s=10, publish_every_s=60, consul_restarts=2, drill_at=0.5)
    events = plan.events()
    kinds = [e.kind for e in events]
    assert kinds.count("route") == 29 and kinds.count("publish") == 4
    assert [e.at_s for e in events if e.kind == "consul_restart"] == [100, 200]
    assert [e.at_s for e in events if e.kind == "cache_drill"] == [150]
    assert [e.at_s for e in events] == sorted(e.at_s for e in events)
    # Same instant: the restart runs before the route change and the publish.
    at_200 = [e.kind for e in events if e.at_s == 200]
    assert at_200 == ["consul_restart", "route"]


def test_the_drill_needs_a_route_change_before_it() -> None:
    with pytest.raises(ValueError, match="cache drill"):
        schedule.Plan(duration_s=60, route_every_s=40, publish_every_s=60, consul_restarts=0, drill_at=0.5)
    schedule.Plan(duration_s=60, route_every_s=40, publish_every_s=60, consul_restarts=0, drill_at=0)
    schedule.Plan(duration_s=60, route_every_s=30, publish_every_s=60, consul_restarts=0, drill_at=0.5)


def test_route_changes_cycle_over_the_two_newest_versions() -> None:
    versions = ["v001", "v002", "v003"]
    assert [schedule.route_weights(versions, n) for n in range(1, 6)] == [
        {"v002": 90, "v003": 10}, {"v002": 50, "v003": 50}, {"v002": 10, "v003": 90}, {"v003": 100},
        {"v002": 90, "v003": 10}]
    assert schedule.route_weights(["v001"], 3) == {"v001": 100}
    names = [schedule.version_name(n) for n in (9, 10, 100)]
    assert names == sorted(names) == ["v009", "v010", "v100"]


# ---- analysis and holds -----------------------------------------------------------------------------------------


def _calls(n: int, *, duration_s: float, fail_at: float | None = None, latency_ms: float = 5.0) -> analysis.Calls:
    end = np.linspace(0.0, duration_s, n, endpoint=False)
    arrays = {"end": end + 100.0, "latency": np.full(n, latency_ms / 1000), "code": np.zeros(n, dtype=np.int16),
              "refusals": np.zeros(n, dtype=np.uint16), "version": np.zeros(n, dtype=np.int16)}
    codes = ["OK"]
    if fail_at is not None:
        i = int(np.searchsorted(end, fail_at))
        arrays["code"][i], arrays["version"][i] = 1, -1
        codes.append("UNAVAILABLE")
    return analysis.Calls.merge([(arrays, codes, ["v001"])], t0=100.0)


def _samples(duration_s: float, *, rss_mib: float = 300, rss_growth_mib: float = 0, fds: int = 35,
             fd_growth: int = 0) -> list[dict[str, float]]:
    out = []
    for t in np.arange(0, duration_s, 1.0):
        share = t / duration_s
        out.append({"t_s": float(t), "rss_bytes": (rss_mib + rss_growth_mib * share) * MIB,
                    "fds": fds + round(fd_growth * share), "threads": 30, "cpu_s": t})
    return out


def _holds(calls: analysis.Calls, samples: list[dict[str, float]], *, duration_s: float = 120,
           events: list[dict[str, object]] | None = None) -> dict[str, analysis.Hold]:
    events = events if events is not None else [
        {"kind": "route", "at_s": 10.0, "ok": True},
        {"kind": "consul_restart", "at_s": 40.0, "ok": True, "reconnect_s": 1.0},
        {"kind": "cache_drill", "at_s": 60.0, "ok": True}]
    rows = analysis.buckets(calls, samples, events, duration_s=duration_s, bucket_s=30, texts_per_request=1)
    holds = analysis.holds(calls=calls, client_extra_failures={}, samples=samples, rows=rows, events=events,
                           duration_s=duration_s, consul_restarts=1, drill_planned=True, server_exit=0,
                           server_alive_throughout=True, skipped=[], bounds=analysis.Bounds())
    return {h.name: h for h in holds}


def test_a_clean_run_passes_every_hold() -> None:
    holds = _holds(_calls(1200, duration_s=120), _samples(120, rss_growth_mib=5))
    assert all(h.ok for h in holds.values()), {n: h.value for n, h in holds.items() if not h.ok}


def test_one_failed_call_fails_the_run() -> None:
    holds = _holds(_calls(1200, duration_s=120, fail_at=70.0), _samples(120))
    failed = holds["failed calls"]
    assert not failed.ok and failed.value == "1" and failed.detail["by_code"] == {"UNAVAILABLE": 1}


def test_rss_and_fd_growth_over_the_second_half_fail() -> None:
    # 200 MiB over the run: ~90 MiB between the middle and the end windows, past the 32 MiB bound (10% of the
    # 300-400 MiB RSS would be ~40).
    holds = _holds(_calls(1200, duration_s=120), _samples(120, rss_growth_mib=200, fd_growth=40))
    assert not holds["RSS flat (second half)"].ok and holds["RSS flat (second half)"].bound == "<= +40 MiB"
    assert holds["RSS flat (second half)"].detail["slope_mib_per_min"] == pytest.approx(100, rel=0.05)
    assert not holds["open fds flat (second half)"].ok


def test_the_rss_bound_scales_with_a_large_server() -> None:
    # +60 MiB on a 1 GiB server: within 10%; the same on a 300 MiB one is not.
    big = _samples(120, rss_mib=1024, rss_growth_mib=130)
    assert _holds(_calls(1200, duration_s=120), big)["RSS flat (second half)"].ok
    small = _samples(120, rss_mib=300, rss_growth_mib=130)
    assert not _holds(_calls(1200, duration_s=120), small)["RSS flat (second half)"].ok


def test_a_transient_peak_at_the_end_is_not_growth() -> None:
    samples = _samples(120)
    samples[-1]["rss_bytes"] += 500 * MIB  # a version loading at the last sample
    assert _holds(_calls(1200, duration_s=120), samples)["RSS flat (second half)"].ok


def test_p99_drift_and_failed_events_fail() -> None:
    calls = _calls(1200, duration_s=120)
    calls.latency_ms[calls.end_s >= 60] *= 3  # every call of the second half 3x slower
    events = [{"kind": "route", "at_s": 10.0, "ok": False, "error": "not routed"},
              {"kind": "consul_restart", "at_s": 40.0, "ok": False, "error": "no reconnect"}]
    holds = _holds(calls, _samples(120), events=events)
    drift = holds["P99 no drift (trend over the run)"]
    # Buckets of 30 s: P99 5, 5, 15, 15 ms; the robust trend of that step is 3^1.25 over the 90 s between centres.
    assert not drift.ok and drift.value == f"{3 ** 1.25:.2f}x"
    assert (drift.detail["first_half_median_ms"], drift.detail["second_half_median_ms"]) == (5.0, 15.0)
    assert not holds["route changes applied"].ok
    assert not holds["Consul killed + restarted, server reconnected"].ok
    assert holds["corrupted cache file refetched, not served"].value == "not run"


def test_one_slow_minute_is_a_spike_not_drift_but_a_steady_rise_is() -> None:
    def rows(p99s: list[float]) -> list[dict[str, object]]:
        return [{"start_s": 60.0 * i, "end_s": 60.0 * (i + 1), "p99_ms": p, "ok": 1000} for i, p in enumerate(p99s)]

    spike = analysis.p99_drift(rows([180, 140, 170, 2300, 50]), 300, 20)
    assert spike["ratio"] < 1.0
    rise = analysis.p99_drift(rows([100, 130, 170, 220, 290]), 300, 20)
    assert rise["ratio"] == pytest.approx(2.9, rel=0.05)
    assert analysis.p99_drift(rows([100, 200]), 120, 20)["ratio"] is None


def test_buckets_count_calls_refusals_and_versions() -> None:
    parts = [({"end": np.array([1.0, 2.0, 61.0]), "latency": np.array([0.01, 0.02, 0.03]),
               "code": np.array([0, 1, 0]), "refusals": np.array([2, 0, 0]), "version": np.array([0, -1, 1])},
              ["OK", "DEADLINE_EXCEEDED"], ["v001", "v002"]),
             ({"end": np.array([3.0]), "latency": np.array([0.04]), "code": np.array([1]),
               "refusals": np.array([0]), "version": np.array([0])}, ["OK", "OK"], ["v002"])]
    calls = analysis.Calls.merge(parts, t0=0.0)
    rows = analysis.buckets(calls, [], [{"kind": "publish", "at_s": 30.0}], duration_s=90, bucket_s=60,
                            texts_per_request=1)
    first, second = rows
    assert (first["calls"], first["ok"], first["failed"], first["refused_retried"]) == (3, 2, 1, 1)
    assert first["failed_by_code"] == {"DEADLINE_EXCEEDED": 1}
    assert first["versions"] == {"v001": 1, "v002": 1} and first["events"] == {"publish": 1}
    assert first["p99_ms"] == pytest.approx(40.0) and second["end_s"] == 90 and second["ok"] == 1


def test_server_p99_per_bucket_from_histogram_deltas() -> None:
    def hist(le_counts: dict[float, float]) -> Histogram:
        return Histogram(buckets=dict(le_counts), count=le_counts[math.inf], total=0.0)

    # 100 calls <= 10 ms in the first minute; then 100 more of which 2 took 0.5-1 s.
    snapshots = [(-1.0, hist({0.01: 0, 0.5: 0, 1.0: 0, math.inf: 0})),
                 (59.0, hist({0.01: 100, 0.5: 100, 1.0: 100, math.inf: 100})),
                 (119.0, hist({0.01: 198, 0.5: 198, 1.0: 200, math.inf: 200})),
                 (179.0, hist({0.01: 198, 0.5: 198, 1.0: 200, math.inf: 210}))]
    rows: list[dict[str, object]] = [{"start_s": 0.0, "end_s": 60.0}, {"start_s": 60.0, "end_s": 120.0},
                                     {"start_s": 120.0, "end_s": 180.0}, {"start_s": 180.0, "end_s": 240.0}]
    analysis.add_server_p99(rows, snapshots)
    assert [r["server_p99_ms"] for r in rows] == [10.0, 1000.0, None, None]
    assert [r["server_p99_over_max_bound"] for r in rows] == [False, False, True, False]


# ---- the drill's byte flip, the log follower, the admin method ----------------------------------------------------


def test_the_flipped_byte_keeps_the_size_and_changes_the_logits(tmp_path: Path) -> None:
    bundle = build_tiny_bundle(tmp_path / "b", seed=3).path
    original = (bundle / "model.onnx").read_bytes()
    feed = {"input_ids": np.array([[2, 40, 50, 3]], dtype=np.int64), "attention_mask": np.ones((1, 4), np.int64)}

    def logits() -> np.ndarray:
        session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
        names = {i.name for i in session.get_inputs()}
        inputs = {**feed, **({"token_type_ids": np.zeros((1, 4), np.int64)} if "token_type_ids" in names else {})}
        return session.run(["logits"], inputs)[0]

    before = logits()
    flip = drill.corrupt_model(bundle)
    corrupted = (bundle / "model.onnx").read_bytes()
    assert len(corrupted) == len(original)
    assert [i for i, (a, b) in enumerate(zip(original, corrupted, strict=True)) if a != b] == [flip.offset]
    assert flip.where.startswith(drill.TARGET_TENSOR) and flip.before ^ flip.after == 0x80
    assert not np.allclose(logits(), before, rtol=1e-4, atol=1e-5)  # served, it would answer differently


def test_admin_status_method_is_the_servers() -> None:
    from ortserve.service.app import ADMIN_STATUS_METHOD as served

    assert served == ADMIN_STATUS_METHOD


# ---- the compressed run -------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_compressed_soak_runs_every_event_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # A light load (15% of saturation) and a loose P99 bound: the suite may share the cores with anything.
    cmd = [sys.executable, str(ROOT / "scripts" / "dev"), "soak", "--minutes", "0.3", "--route-every", "4",
           "--publish-every", "9", "--consul-outage", "0.5", "--sample-every", "0.25", "--bucket-s", "3",
           "--saturation-s", "1", "--clients", "2", "--load-fraction", "0.15", "--max-p99-drift", "50",
           "--out", str(out), "--workdir", str(tmp_path / "work")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=110, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert "all holds passed" in done.stdout and "p99ms" in done.stdout
    rep = json.loads((out / "soak.json").read_text())
    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "server-events.log").stat().st_size > 0

    totals = rep["totals"]
    assert totals["calls"] > 100 and totals["failed"] == 0 and totals["ok"] == totals["calls"]
    assert rep["saturation"]["requests_per_s"] > 0
    assert rep["load"]["rate_per_s"] == pytest.approx(0.15 * rep["saturation"]["requests_per_s"])
    assert [h["ok"] for h in rep["holds"]] == [True] * len(rep["holds"])
    assert len(rep["buckets"]) == 6 and all(b["ok"] > 0 and b["p99_ms"] > 0 for b in rep["buckets"])
    assert all(b["server_p99_ms"] or b["server_p99_over_max_bound"] for b in rep["buckets"])

    events = rep["events"]
    kinds = [e["kind"] for e in events]
    assert kinds.count("route") == 4 and kinds.count("publish") == 1 and kinds.count("consul_restart") == 2
    assert not rep["events_skipped"]
    for e in events:
        if e["kind"] == "route":
            assert e["propagation_s"] is not None and e["cli_s"] > 0
        if e["kind"] == "consul_restart":
            assert e["outage_seen_after_s"] is not None
            assert e["reconnect_s"] is not None and e["down_s"] >= 0.5
    (drill_event,) = [e for e in events if e["kind"] == "cache_drill"]
    assert all(drill_event["checks"].values()) and drill_event["victim"] in rep["versions_published"]
    assert drill_event["flip"]["where"].startswith(drill.TARGET_TENSOR)
    assert rep["versions_published"] == ["v001", "v002", "v003", "v004"]
    assert rep["server_lifecycle_events"]["registry_unreachable"] == 2
    samples = rep["samples"]
    assert len(samples) > 20 and all(s["rss_bytes"] > 0 and s["fds"] > 0 for s in samples)
