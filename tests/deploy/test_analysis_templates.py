"""deploy/analysis: the Flagger MetricTemplates and the Argo AnalysisTemplate judge what `registry rollout` judges.

Each file validates against its CRD's schema (crd_schemas.py), and each query, its placeholders filled in, is run
by `promtool test rules` over series that a real ortserve.service.metrics.Metrics exposes after the calls a server
records: the candidate's error rate comes out as the share of its failed calls, and the P99 ratio as the rollout's
own figure (registry/rollout.py, the same buckets and histogram_quantile's rule).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_schemas import crd_problems
from manifest_files import DEPLOY_ROOT, load_docs
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_alerts import promtool

from ortserve.registry.rollout import LATENCY_BOUNDS_S, Figures, Side, p99_ratio
from ortserve.service.metrics import Metrics

ANALYSIS = DEPLOY_ROOT / "analysis"
TARGET = 'instance="10.0.0.7:8002",job="ortserve"'
MINUTES = 10
PER_MINUTE = {"v1": {"OK": (0.004, 198), "slow": (0.3, 2)}, "v2": {"OK": (0.008, 196), "slow": (0.3, 4),
                                                                  "UNAVAILABLE": (0.0, 2)}}
"""Each version's calls per minute: (seconds, count) per kind; v2 fails 2 of 202 and is slower."""
SHADOW_PER_MINUTE = (120, 90)
"""Answers of v2 as v1's shadow judged and agreed per minute (the server's ortserve_shadow_* counters; rates that
are exact in binary, as promtool compares exactly)."""


def queries() -> dict[str, str]:
    """name -> query with its placeholders filled in (model sentiment, stable v1, candidate v2, a 5m window)."""
    out = {}
    for doc in load_docs(ANALYSIS / "flagger-metric-templates.yaml"):
        q = doc["spec"]["query"]
        q = re.sub(r"\{\{ variables\.(\w+) \}\}", lambda m: {"model": "sentiment", "stable": "v1",
                                                             "candidate": "v2"}[m.group(1)], q)
        out[f"flagger {doc['metadata']['name']}"] = q.replace("{{ interval }}", "5m")
    (argo,) = load_docs(ANALYSIS / "argo-analysis-template.yaml")
    for metric in argo["spec"]["metrics"]:
        q = metric["provider"]["prometheus"]["query"]
        q = re.sub(r"\{\{args\.([\w-]+)\}\}", lambda m: {"model": "sentiment", "stable": "v1",
                                                        "candidate": "v2"}[m.group(1)], q)
        out[f"argo {metric['name']}"] = q.replace("[2m]", "[5m]")
    return out


def minute_of_calls(metrics: Metrics) -> None:
    for version, kinds in PER_MINUTE.items():
        for kind, (seconds, count) in kinds.items():
            for _ in range(count):
                if kind == "UNAVAILABLE":
                    metrics.requests.labels("sentiment", version, kind).inc()
                else:
                    m = metrics.for_version("sentiment", version)
                    m.ok.inc()
                    m.request_seconds.observe(seconds)
    metrics.shadow_judged.labels("sentiment", "v1", "v2").inc(SHADOW_PER_MINUTE[0])
    metrics.shadow_agreed.labels("sentiment", "v1", "v2").inc(SHADOW_PER_MINUTE[1])


def input_series() -> list[dict[str, str]]:
    """Every request series of a Metrics fed one minute of calls, growing by as much each minute."""
    metrics = Metrics()
    minute_of_calls(metrics)
    text = generate_latest(metrics.registry).decode()
    series = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("ortserve_requests_total", "ortserve_request_duration_seconds_bucket",
                          "ortserve_shadow_judged_total", "ortserve_shadow_agreed_total"):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                series.append({"series": f"{s.name}{{{labels},{TARGET}}}", "values": f"0+{s.value:g}x{MINUTES}"})
    return series


def expected() -> dict[str, float]:
    side: dict[str, Side] = {}
    for version, kinds in PER_MINUTE.items():
        s = Side()
        for kind, (seconds, count) in kinds.items():
            for _ in range(count):  # a failed call is counted, not timed (as the server's series do)
                s = s + Side(1, 1) if kind == "UNAVAILABLE" else s.observe(seconds, ok=True)
        side[version] = s
    ratio = p99_ratio(Figures(stable=side["v1"], candidate=side["v2"]))
    assert ratio is not None
    rate = side["v2"].errors / side["v2"].calls
    return {"error-rate": rate, "p99-ratio": ratio, "agreement": SHADOW_PER_MINUTE[1] / SHADOW_PER_MINUTE[0]}


def test_the_templates_validate_against_their_crds() -> None:
    docs = [d for path in sorted(ANALYSIS.glob("*.yaml")) for d in load_docs(path)]
    assert sorted(d["kind"] for d in docs) == ["AnalysisTemplate", "MetricTemplate", "MetricTemplate",
                                               "MetricTemplate"]
    assert {str(d["kind"]): crd_problems(d) for d in docs} == {k: [] for k in ("AnalysisTemplate", "MetricTemplate")}


@pytest.mark.parametrize("name", list(queries()))
def test_each_query_reads_the_figure_the_rollout_judges(tmp_path: Path, name: str) -> None:
    query = queries()[name]
    want = expected()["error-rate" if "error-rate" in name else "agreement" if "agreement" in name else "p99-ratio"]
    test: dict[str, Any] = {
        "rule_files": [], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series(),
                   "promql_expr_test": [{"expr": query, "eval_time": "8m",
                                         "exp_samples": [{"labels": "{}", "value": want}]}]}]}
    path = tmp_path / "query.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


def test_the_latency_buckets_are_the_servers_series_buckets() -> None:
    metrics = Metrics()
    minute_of_calls(metrics)
    text = generate_latest(metrics.registry).decode()
    les = sorted({float(s.labels["le"]) for f in text_string_to_metric_families(text) for s in f.samples
                  if s.name == "ortserve_request_duration_seconds_bucket"})
    assert les == [*LATENCY_BOUNDS_S, float("inf")]
