"""A server's part in a rollout, on a real metrics registry and a real file store: its figures are the calls of the
stage since it saw it begin, per version, read from the same series Prometheus scrapes."""

from __future__ import annotations

from pathlib import Path

from support.tiny_bundle import build_tiny_bundle

from ortserve.registry import stepper
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.filestore import FileStore
from ortserve.registry.publishing import publish
from ortserve.registry.records import NAME_RE
from ortserve.registry.rollout import LATENCY_BOUNDS_S, Checks, Plan
from ortserve.service.metrics import Metrics
from ortserve.service.rollout_agent import RolloutAgent, replica_name, served_sides, shadow_sides


def answer(metrics: Metrics, version: str, seconds: float, code: str = "OK") -> None:
    if code == "OK":
        m = metrics.for_version("m", version)
        m.ok.inc()
        m.request_seconds.observe(seconds)
    else:
        metrics.requests.labels("m", version, code).inc()


def test_each_versions_calls_errors_and_latency_come_from_the_request_series() -> None:
    metrics = Metrics()
    answer(metrics, "v1", 0.003)
    answer(metrics, "v1", 0.003, code="UNAVAILABLE")
    answer(metrics, "v2", 0.2)
    sides = served_sides(metrics.registry, "m")
    assert (sides["v1"].calls, sides["v1"].errors, sides["v2"].calls) == (2, 1, 1)
    at = LATENCY_BOUNDS_S.index(0.004)
    assert sides["v1"].latency.counts[at] == 1 and sides["v1"].latency.total == 1
    assert served_sides(metrics.registry, "other") == {}
    assert NAME_RE.fullmatch(replica_name())


def test_a_tick_writes_this_stages_figures_and_steps(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store", poll_s=0.02)
    artifacts = ArtifactStore(tmp_path / "artifacts")
    publish(store, artifacts, model="m", version="v1", bundle_dir=build_tiny_bundle(tmp_path / "a", seed=0),
            weight=100)
    publish(store, artifacts, model="m", version="v2", bundle_dir=build_tiny_bundle(tmp_path / "b", seed=1))
    metrics = Metrics()
    for _ in range(5):  # before the rollout: not the stage's
        answer(metrics, "v1", 0.003)
    plan = Plan("m", "v1", "v2", steps=(50,), shadow_s=0, interval_s=3600,
                checks=Checks(min_calls=3, max_error_rate=0.5))
    rollout = stepper.start(store, plan)
    agent = RolloutAgent(store, metrics.registry, replica="r0", step_s=1.0)
    agent.tick()  # sees the stage begin
    for _ in range(3):
        answer(metrics, "v1", 0.003)
        answer(metrics, "v2", 0.003, code="INTERNAL")
    agent.tick()  # every v2 call failed: rolled back, on this stage's calls only
    after = stepper.read(store, "m").rollout
    assert after is not None and after.id == rollout.id and after.status == "rolled_back"
    assert after.reason.startswith("error rate") and "(3 of 3 calls failed)" in after.reason
    assert "candidate 3 calls 3 errors, stable 3 calls" in after.story[-1].detail
    assert stepper.figures(store, "m") == []  # the replicas' keys went with the last step


def test_a_shadow_stage_reads_the_copies_series_dropped_copies_are_not_the_candidates() -> None:
    metrics = Metrics()
    pair = ("m", "v1", "v2")
    for outcome, n in (("compared", 3), ("dropped", 5), ("failed", 1)):
        metrics.shadow_calls.labels(*pair, outcome).inc(n)
    metrics.shadow_judged.labels(*pair).inc(10)
    metrics.shadow_agreed.labels(*pair).inc(9)
    metrics.shadow_engine_seconds.labels(*pair, "stable").observe(0.003)
    metrics.shadow_engine_seconds.labels(*pair, "candidate").observe(0.2)
    stable, candidate, tally = shadow_sides(metrics.registry, "m", "v1", "v2")
    assert (stable.calls, stable.errors, candidate.calls, candidate.errors) == (3, 0, 4, 1)
    assert (tally.calls, tally.judged, tally.agreed) == (3, 10, 9)
    assert candidate.latency.counts[LATENCY_BOUNDS_S.index(0.25)] == 1
    assert stable.latency.counts[LATENCY_BOUNDS_S.index(0.004)] == 1
    assert shadow_sides(metrics.registry, "m", "v1", "v3")[2].calls == 0  # another pair's copies are not these
