"""deploy/prometheus's alerting rules, run by `promtool test rules` against series the server's metrics name.

Each scenario feeds a real ortserve.service.metrics.Metrics through the calls the server makes (a counter's `inc`,
a histogram's `observe`, the manager's status read at scrape time) and reads its exposition: the series handed to
promtool carry the names and labels that registry gives them, found by the metric object or by the value fed in,
never spelled here. A metric renamed in metrics.py renames the series but not the rule, and the expected alert goes
missing (test_a_renamed_series_fails_the_alert_test shows promtool failing so). promtool comes from Debian's
`prometheus` package: scripts/bootstrap dev extracts it into .venv/bin.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from manifest_files import DEPLOY_ROOT, K8S_ROOT, load_docs
from manifest_rules import load_toml_settings
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ortserve.service.metrics import Metrics

RULES = DEPLOY_ROOT / "prometheus" / "ortserve-alerts.yaml"
OPERATOR_RULE = K8S_ROOT / "optional" / "prometheusrule.yaml"
TARGET = {"instance": "10.0.0.7:8002", "job": "ortserve"}  # what Prometheus adds to every scraped series
MODEL = "sentiment"


def promtool() -> str:
    """The venv's promtool (scripts/bootstrap dev puts it there), else one on PATH."""
    beside = Path(sys.executable).parent / "promtool"
    found = str(beside) if beside.is_file() else shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: scripts/bootstrap dev extracts it into .venv/bin (Debian's prometheus)")
    return found


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float

    def series(self, **extra: str) -> str:
        labels = {**self.labels, **TARGET, **extra}
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def exposition(feed: Callable[[Metrics], None]) -> list[Sample]:
    """Every sample a Metrics registry exposes after `feed` ran on it."""
    metrics = Metrics()
    feed(metrics)
    text = generate_latest(metrics.registry).decode()
    return [Sample(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def of(samples: list[Sample], metric: Any, suffix: str = "", **labels: str) -> list[Sample]:
    """The samples of a metric object (a prometheus_client Counter, Gauge or Histogram of Metrics)."""
    name = metric.describe()[0].name + suffix
    return [s for s in samples if s.name == name and labels.items() <= s.labels.items()]


def one(samples: list[Sample]) -> Sample:
    assert len(samples) == 1, samples
    return samples[0]


def status(**versions: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """What the manager's status says (the collector reads it at scrape time): one model, these versions."""
    return lambda: {"models": {MODEL: {"versions": versions, "routing": {"v1": 100}}}}


def annotations(alert: str, labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations as Prometheus renders them for `labels` (they use only {{ $labels.x }})."""
    (rule,) = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r.get("alert") == alert]
    return {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], v)
            for k, v in rule["annotations"].items()}


@dataclass(frozen=True)
class Case:
    """One promtool test: input series (series -> promtool values), when to look, which alert labels to expect."""

    input_series: dict[str, str]
    eval_time: str
    expect: dict[str, str] | None  # the alert's labels, or None: it must not fire

    def promtool_test(self, alert: str) -> dict[str, Any]:
        expected = []
        if self.expect is not None:
            expected = [{"exp_labels": self.expect, "exp_annotations": annotations(alert, self.expect)}]
        return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in self.input_series.items()],
                "alert_rule_test": [{"eval_time": self.eval_time, "alertname": alert, "exp_alerts": expected}]}


# ---- one scenario per alert: it fires, and a near miss does not ---------------------------------------------------


def gpu_oom_fallback() -> list[Case]:
    samples = exposition(lambda m: m.watch_manager(status(
        v1={"state": "ready", "device": "cuda:0", "fallback_runs": 7, "oom_errors": 3})))
    (fallback,) = [s for s in samples if s.value == 7]  # the counter fed 7: whatever its name is
    series = fallback.series()
    labels = {**fallback.labels, **TARGET, "severity": "warning"}
    return [Case({series: "0x5 3 7x10"}, "8m", labels),
            Case({series: "7x20"}, "15m", None)]  # old fallbacks only (or a reload's reset to 0): quiet


def version_failed_to_load() -> list[Case]:
    samples = exposition(lambda m: m.watch_manager(status(v1={"state": "ready"}, v2={"state": "failed"})))
    failed = one([s for s in samples if s.labels.get("state") == "failed"]).series()
    ready = one([s for s in samples if s.labels.get("state") == "ready"])
    v2_ready = ready.series(version="v2")
    labels = {"model": MODEL, "version": "v2", "severity": "warning"}
    return [Case({failed: "1x20", ready.series(): "1x20"}, "5m", labels),
            Case({failed: "1x5 _x15", ready.series(): "1x20", v2_ready: "_x6 1x14"}, "10m", None)]  # it loaded


def version_failed_to_verify() -> list[Case]:
    samples = exposition(lambda m: m.verify.labels(MODEL, "v2", "failed").inc())  # as app._on_lifecycle counts it
    failed = one(of(samples, Metrics().verify, "_total", result="failed")).series()
    labels = {"model": MODEL, "version": "v2", "severity": "warning"}
    return [Case({failed: "0 1x20"}, "5m", labels),  # failed a minute in
            Case({failed: "1x30"}, "20m", None)]  # long ago, nothing since: quiet


def sustained_refusals() -> list[Case]:
    def feed(m: Metrics) -> None:
        m.for_version(MODEL, "v1").ok.inc()  # as request_log.finish_request counts a call
        m.requests.labels(MODEL, "v1", "RESOURCE_EXHAUSTED").inc()

    samples = exposition(feed)
    ok = one(of(samples, Metrics().requests, "_total", code="OK")).series()
    refused = one(of(samples, Metrics().requests, "_total", code="RESOURCE_EXHAUSTED")).series()
    labels = {"model": MODEL, "severity": "critical"}
    return [Case({ok: "0+600x30", refused: "0+60x30"}, "20m", labels),  # 9 % refused for 15 minutes
            Case({ok: "0+600x30", refused: "0+12x30"}, "20m", None),  # 2 %
            Case({ok: "0+600x30", refused: "0+600x8 4800x22"}, "9m", None)]  # overloaded for 8 minutes only


def latency_over_slo() -> list[Case]:
    settings = load_toml_settings(_configmap_toml())

    def feed(m: Metrics) -> None:
        m.for_version(MODEL, "v1").request_seconds.observe(0.01)
        m.latency_slo.set(settings.latency_slo_p99_ms / 1000)  # as ortserve.service.app.Server does

    samples = exposition(feed)
    buckets = of(samples, Metrics().request_seconds, "_bucket")
    assert len(buckets) > 5, buckets
    slo = one([s for s in samples if s.value == settings.latency_slo_p99_ms / 1000])

    def calls_taking(seconds: float) -> dict[str, str]:
        """600 calls a minute, each taking `seconds`, as cumulative bucket counters."""
        series = {b.series(): ("0+600x30" if float(b.labels["le"]) >= seconds else "0x30") for b in buckets}
        return {**series, slo.series(): f"{slo.value}x30"}

    slow = settings.latency_slo_p99_ms / 1000 * 1.5
    fast = settings.latency_slo_p99_ms / 1000 / 5
    return [Case(calls_taking(slow), "20m", {"model": MODEL, "severity": "warning"}),
            Case(calls_taking(slow), "8m", None),  # slow for less than the alert's 10 minutes
            Case(calls_taking(fast), "20m", None)]


def registry_watch_failing() -> list[Case]:
    samples = exposition(lambda m: m.watcher_connected.set(0))
    connected = one(of(samples, Metrics().watcher_connected)).series()
    labels = {**TARGET, "severity": "critical"}
    return [Case({connected: "1x2 0x20"}, "10m", labels),
            Case({connected: "1x5 0x4 1x10"}, "9m", None)]  # a 4-minute outage: backoff and reconnect


SCENARIOS: dict[str, Callable[[], list[Case]]] = {
    "OrtserveGpuOomFallback": gpu_oom_fallback,
    "OrtserveVersionFailedToLoad": version_failed_to_load,
    "OrtserveVersionFailedToVerify": version_failed_to_verify,
    "OrtserveSustainedRefusals": sustained_refusals,
    "OrtserveLatencyOverSLO": latency_over_slo,
    "OrtserveRegistryWatchFailing": registry_watch_failing,
}


def _configmap_toml() -> str:
    (configmap,) = [d for d in load_docs(K8S_ROOT / "base" / "configmap.yaml") if d["kind"] == "ConfigMap"]
    return str(configmap["data"]["ortserve.toml"])


def _alerts(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for g in groups for r in g["rules"] if "alert" in r]


def run_promtool(tmp_path: Path, alert: str, cases: list[Case]) -> subprocess.CompletedProcess[str]:
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [c.promtool_test(alert) for c in cases]}
    path = tmp_path / f"{alert}.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("alert", list(SCENARIOS))
def test_alert_fires_on_the_servers_series(tmp_path: Path, alert: str) -> None:
    done = run_promtool(tmp_path, alert, SCENARIOS[alert]())
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_renamed_series_fails_the_alert_test(tmp_path: Path) -> None:
    """What the tests above guard against: the same scenario with the metric named otherwise fails in promtool."""
    cases = sustained_refusals()
    rename = {"ortserve_requests_total": "ortserve_calls_total"}
    renamed = [Case({re.sub("|".join(rename), lambda m: rename[m.group(0)], s): v for s, v in c.input_series.items()},
                    c.eval_time, c.expect) for c in cases]
    assert any("ortserve_calls_total" in s for c in renamed for s in c.input_series)
    done = run_promtool(tmp_path, "OrtserveSustainedRefusals", renamed)
    assert done.returncode != 0 and "OrtserveSustainedRefusals" in done.stdout + done.stderr


def test_every_alert_has_a_scenario_and_a_one_line_runbook() -> None:
    alerts = _alerts(yaml.safe_load(RULES.read_text())["groups"])
    assert sorted(a["alert"] for a in alerts) == sorted(SCENARIOS)
    for a in alerts:
        notes = a.get("annotations", {})
        assert notes.get("summary") and notes.get("runbook"), a["alert"]
        assert "\n" not in notes["runbook"].strip(), a["alert"]
        assert a.get("labels", {}).get("severity") in ("warning", "critical"), a["alert"]


def test_the_operator_rule_carries_the_same_groups() -> None:
    (rule,) = load_docs(OPERATOR_RULE)
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_both_files_pass_promtool_check(tmp_path: Path) -> None:
    (rule,) = load_docs(OPERATOR_RULE)
    spec = tmp_path / "prometheusrule-spec.yaml"
    spec.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    for path in (RULES, spec):
        done = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_config_states_the_slo_the_alert_reads() -> None:
    assert re.search(r"^latency_slo_p99_ms\s*=", _configmap_toml(), re.M), "the ConfigMap should state the SLO"
