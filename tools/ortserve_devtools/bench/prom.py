"""The server's Prometheus /metrics, scraped at the edges of a run's window and turned into deltas.

ortserve exposes histograms (texts per engine run, padding ratio, engine/queue/tokenize time) and a
request counter by status code. Triton exposes nv_inference_count / nv_inference_exec_count, whose
ratio is also the mean batch size, so the same report works there. Unknown servers give nothing.
"""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

_HISTOGRAMS = {
    "batch_size": "ortserve_batch_size",
    "padding_ratio": "ortserve_batch_padding_ratio",
    "engine_s": "ortserve_engine_duration_seconds",
    "queue_s": "ortserve_queue_duration_seconds",
    "tokenize_s": "ortserve_tokenize_duration_seconds",
    "request_s": "ortserve_request_duration_seconds",
}
_REQUESTS = "ortserve_requests_total"
_IN_FLIGHT = "ortserve_inflight_requests"
_TRITON_TEXTS = "nv_inference_count"
_TRITON_RUNS = "nv_inference_exec_count"


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)
    """Cumulative counts by upper bound (le), +inf included."""
    count: float = 0.0
    total: float = 0.0

    def minus(self, other: Histogram) -> Histogram:
        return Histogram({le: n - other.buckets.get(le, 0.0) for le, n in self.buckets.items()},
                         self.count - other.count, self.total - other.total)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    def distribution(self, *, integers: bool = False) -> dict[str, float]:
        """Non-cumulative counts per bucket, empty ones left out. Keys: "lo-hi" (hi inclusive), or for
        integer observations such as batch sizes the integer range itself ("1", "3-4", "9-12")."""
        out: dict[str, float] = {}
        previous_le, previous_n = 0.0, 0.0
        for le in sorted(self.buckets):
            n = self.buckets[le]
            if n - previous_n > 0:
                if math.isinf(le):
                    label = f">{_fmt(previous_le)}"
                elif integers:
                    lo, hi = math.floor(previous_le) + 1, math.floor(le)
                    label = str(hi) if lo >= hi else f"{lo}-{hi}"
                else:
                    label = f"{_fmt(previous_le)}-{_fmt(le)}"
                out[label] = n - previous_n
            previous_le, previous_n = le, n
        return out


@dataclass
class Snapshot:
    histograms: dict[str, Histogram] = field(default_factory=dict)
    requests_by_code: dict[str, float] = field(default_factory=dict)
    triton_texts: float = 0.0
    triton_runs: float = 0.0
    in_flight: float = 0.0
    """ortserve_inflight_requests: calls the server is still serving."""


def scrape(url: str, *, model: str = "", timeout_s: float = 5.0) -> Snapshot:
    """Metrics of `model` (all models when empty) summed over versions; raises OSError if unreachable."""
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        text = reply.read().decode("utf-8", errors="replace")
    return parse(text, model=model)


def sample_sum(url: str, prefix: str, *, timeout_s: float = 5.0) -> float:
    """The sum of the samples at url whose exposition lines start with prefix (`ortserve_queue_depth{`, a family's
    `_sum`): one figure over every label set, without parsing families."""
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        body = reply.read().decode("utf-8", errors="replace")
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(prefix))


def parse(text: str, *, model: str = "") -> Snapshot:
    snap = Snapshot()
    # Keyed on sample names, not family names: exposition formats differ on the counter family's name
    # (`x` in OpenMetrics, `x_total` in the 0.0.4 text format).
    histograms = {name + suffix: (key, suffix) for key, name in _HISTOGRAMS.items()
                  for suffix in ("_bucket", "_count", "_sum")}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if model and labels.get("model", model) != model:
                continue
            if sample.name in histograms:
                key, suffix = histograms[sample.name]
                hist = snap.histograms.setdefault(key, Histogram())
                if suffix == "_bucket":
                    le = float(labels["le"])
                    hist.buckets[le] = hist.buckets.get(le, 0.0) + sample.value
                elif suffix == "_count":
                    hist.count += sample.value
                else:
                    hist.total += sample.value
            elif sample.name == _REQUESTS:
                code = labels.get("code", "?")
                snap.requests_by_code[code] = snap.requests_by_code.get(code, 0.0) + sample.value
            elif sample.name == _IN_FLIGHT:
                snap.in_flight += sample.value
            elif sample.name == _TRITON_TEXTS:
                snap.triton_texts += sample.value
            elif sample.name == _TRITON_RUNS:
                snap.triton_runs += sample.value
    return snap


def window_stats(before: Snapshot, after: Snapshot, window_s: float) -> dict[str, Any]:
    """What the server did between two scrapes, as plain JSON-ready numbers."""
    out: dict[str, Any] = {}
    deltas = {k: h.minus(before.histograms.get(k, Histogram())) for k, h in after.histograms.items()}
    batch = deltas.get("batch_size")
    if batch is not None and batch.count > 0:
        out["engine_runs"] = batch.count
        out["mean_batch_texts"] = batch.mean
        out["batch_size_distribution"] = batch.distribution(integers=True)
    elif after.triton_runs - before.triton_runs > 0:
        runs = after.triton_runs - before.triton_runs
        out["engine_runs"] = runs
        out["mean_batch_texts"] = (after.triton_texts - before.triton_texts) / runs
    padding = deltas.get("padding_ratio")
    if padding is not None and padding.count > 0:
        out["mean_padding_ratio"] = padding.mean
    engine = deltas.get("engine_s")
    if engine is not None and engine.count > 0 and window_s > 0:
        # Fraction of the window the engine was running a batch (1.0 = never idle at concurrency 1).
        out["engine_busy"] = engine.total / window_s
        out["mean_engine_ms"] = 1000 * engine.mean
    for key in ("queue_s", "tokenize_s", "request_s"):
        hist = deltas.get(key)
        if hist is not None and hist.count > 0:
            out[f"mean_{key[:-2]}_ms"] = 1000 * hist.mean
    codes = {c: after.requests_by_code[c] - before.requests_by_code.get(c, 0.0) for c in after.requests_by_code}
    codes = {c: n for c, n in codes.items() if n > 0}
    if codes:
        out["server_requests_by_code"] = codes
    return out


def _fmt(x: float) -> str:
    return f"{x:g}"
