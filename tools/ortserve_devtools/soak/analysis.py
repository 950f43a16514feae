"""From what the soak recorded to its figures and holds; pure functions of plain data (tested without a server).

Calls: one row per call of every load process (end time from the start of the load, latency, final status, refused
attempts, answering version). Samples: the server's RSS / open fds / threads / CPU every few seconds. Events: what
the schedule did, each with whether it did what it should.

Flatness is judged on the second half, after warm-up and the first loads: the median of the samples in the last 15%
of the run against the median of those around the middle (40-60%). Medians, not the last sample, so that a version
loading at that instant (a transient peak of its weights) does not count as growth; a leak of one fd per route change
or one buffer per call still shows, as it keeps growing through the second half.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ortserve_devtools.bench.prom import Histogram

MIB = 1024 * 1024
MID_WINDOW = (0.40, 0.60)
END_WINDOW = (0.85, 1.00)


@dataclass
class Calls:
    """Every call, as columns; `code`/`version` index into `codes`/`versions` (version -1: no reply)."""

    end_s: np.ndarray
    latency_ms: np.ndarray
    code: np.ndarray
    refusals: np.ndarray
    version: np.ndarray
    codes: list[str]
    versions: list[str]

    @classmethod
    def merge(cls, parts: Sequence[tuple[Mapping[str, np.ndarray], Sequence[str], Sequence[str]]],
              t0: float) -> Calls:
        """Joins the load processes' logs ((arrays, codes, versions) each) onto shared code/version lists; end
        times become seconds since `t0` (CLOCK_MONOTONIC, shared by the processes)."""
        codes: list[str] = ["OK"]
        versions: list[str] = []
        cols: dict[str, list[np.ndarray]] = {k: [] for k in ("end", "latency", "code", "refusals", "version")}
        for arrays, part_codes, part_versions in parts:
            for name in part_codes:
                if name not in codes:
                    codes.append(name)
            for name in part_versions:
                if name not in versions:
                    versions.append(name)
            code_map = np.array([codes.index(c) for c in part_codes] or [0], dtype=np.int16)
            version_map = np.array([versions.index(v) for v in part_versions] + [-1], dtype=np.int16)
            cols["end"].append(np.asarray(arrays["end"], dtype=np.float64) - t0)
            cols["latency"].append(1000 * np.asarray(arrays["latency"], dtype=np.float64))
            cols["code"].append(code_map[np.asarray(arrays["code"], dtype=np.int64)])
            cols["refusals"].append(np.asarray(arrays["refusals"], dtype=np.int64))
            # -1 (no reply) indexes the appended -1.
            cols["version"].append(version_map[np.asarray(arrays["version"], dtype=np.int64)])

        def cat(name: str, dtype: Any) -> np.ndarray:
            return np.concatenate(cols[name]).astype(dtype) if cols[name] else np.zeros(0, dtype=dtype)

        return cls(cat("end", np.float64), cat("latency", np.float64), cat("code", np.int16),
                   cat("refusals", np.int64), cat("version", np.int16), codes, versions)

    @property
    def ok(self) -> np.ndarray:
        return self.code == 0

    def failed_by_code(self, mask: np.ndarray | None = None) -> dict[str, int]:
        selected = self.code if mask is None else self.code[mask]
        counts = Counter(int(c) for c in selected[selected != 0])
        return {self.codes[c]: n for c, n in sorted(counts.items())}


def percentile(values: np.ndarray, q: float) -> float | None:
    """Nearest rank (the value below which q% of the calls fall, one of the observed values)."""
    if values.size == 0:
        return None
    ordered = np.sort(values)
    return float(ordered[min(values.size - 1, int(q / 100 * values.size))])


def buckets(calls: Calls, samples: Sequence[Mapping[str, float]], events: Sequence[Mapping[str, Any]], *,
            duration_s: float, bucket_s: float, texts_per_request: int) -> list[dict[str, Any]]:
    """Per `bucket_s` of the load (calls that ended after the load, while it drained, count in the last bucket)."""
    count = max(1, math.ceil(duration_s / bucket_s - 1e-9))
    index = np.clip((calls.end_s // bucket_s).astype(np.int64), 0, count - 1)
    out = []
    for b in range(count):
        start, end = b * bucket_s, min(duration_s, (b + 1) * bucket_s)
        mask = index == b
        ok = mask & calls.ok
        lat = calls.latency_ms[ok]
        in_samples = [s for s in samples if start <= s["t_s"] < end or (b == count - 1 and s["t_s"] >= end)]
        kinds = Counter(str(e["kind"]) for e in events if start <= float(e["at_s"]) < end)
        row: dict[str, Any] = {
            "start_s": round(start, 3), "end_s": round(end, 3),
            "calls": int(mask.sum()), "ok": int(ok.sum()), "failed": int((mask & ~calls.ok).sum()),
            "failed_by_code": calls.failed_by_code(mask),
            "refused_retried": int((ok & (calls.refusals > 0)).sum()),
            "refusals": int(calls.refusals[mask].sum()),
            "texts_per_s": round(int(ok.sum()) * texts_per_request / (end - start), 1) if end > start else None,
            "p50_ms": _round(percentile(lat, 50)), "p99_ms": _round(percentile(lat, 99)),
            "max_ms": _round(float(lat.max()) if lat.size else None),
            "rss_mib_max": _round(max(s["rss_bytes"] for s in in_samples) / MIB if in_samples else None, 1),
            "fds_max": max(int(s["fds"]) for s in in_samples) if in_samples else None,
            "threads_max": max(int(s["threads"]) for s in in_samples) if in_samples else None,
            "versions": {calls.versions[v]: int(n) for v, n in sorted(Counter(
                int(x) for x in calls.version[ok]).items()) if v >= 0},
            "events": dict(sorted(kinds.items())),
        }
        out.append(row)
    return out


def histogram_quantile_ms(hist: Histogram, q: float) -> float | None:
    """Upper bound (ms) of the histogram bucket holding quantile q; inf past the last bound; None when empty."""
    total = hist.count or max(hist.buckets.values(), default=0.0)
    if total <= 0:
        return None
    for le in sorted(hist.buckets):
        if hist.buckets[le] >= q * total:
            return 1000 * le
    return math.inf


def add_server_p99(rows: Sequence[dict[str, Any]], snapshots: Sequence[tuple[float, Histogram]]) -> None:
    """Adds "server_p99_ms" to each bucket: the server's own request-duration histogram (ortserve_request_duration
    _seconds, from receiving a call to its reply) between the last snapshots at or before the bucket's edges, as
    the upper bound of the histogram bucket holding the 99th percentile. Set beside the clients' P99, it tells time
    spent in the server from time spent before it reads a call or after it answers (transport, a starved client)."""
    for row in rows:
        start = [h for t, h in snapshots if t <= row["start_s"]]
        end = [h for t, h in snapshots if t <= row["end_s"]]
        value = None
        if start and end:
            value = histogram_quantile_ms(end[-1].minus(start[-1]), 0.99)
        row["server_p99_ms"] = None if value is None else (value if math.isfinite(value) else None)
        row["server_p99_over_max_bound"] = value is not None and not math.isfinite(value)


def window_median(samples: Sequence[Mapping[str, float]], key: str, duration_s: float,
                  window: tuple[float, float]) -> float | None:
    lo, hi = window[0] * duration_s, window[1] * duration_s
    values = [float(s[key]) for s in samples if lo <= s["t_s"] <= hi or (window[1] >= 1.0 and s["t_s"] > hi)]
    return float(np.median(values)) if values else None


def growth(samples: Sequence[Mapping[str, float]], key: str, duration_s: float) -> dict[str, Any]:
    """Median over the end window minus median over the middle window, and the least-squares slope (per minute)
    over the second half."""
    mid = window_median(samples, key, duration_s, MID_WINDOW)
    end = window_median(samples, key, duration_s, END_WINDOW)
    half = [(float(s["t_s"]), float(s[key])) for s in samples if s["t_s"] >= duration_s / 2]
    slope = None
    if len(half) >= 3 and half[-1][0] > half[0][0]:
        t, v = np.array(half).T
        slope = float(np.polyfit(t, v, 1)[0]) * 60
    return {"mid": mid, "end": end, "growth": None if mid is None or end is None else end - mid,
            "slope_per_min": slope}


@dataclass(frozen=True)
class Bounds:
    max_failed: int = 0
    max_rss_growth_mib: float = 32.0
    max_rss_growth_pct: float = 10.0
    """RSS growth allowed: the larger of max_rss_growth_mib and this share of the mid-run RSS (a big model's server
    holds hundreds of MiB, and a version load moves it by its weights)."""
    max_fd_growth: int = 8
    max_p99_drift: float = 2.0
    min_bucket_calls: int = 20
    """Buckets with fewer successful calls do not count for the P99 drift."""


@dataclass
class Hold:
    name: str
    ok: bool
    value: str
    bound: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "value": self.value, "bound": self.bound, **self.detail}


def p99_drift(rows: Sequence[Mapping[str, Any]], duration_s: float, min_calls: int) -> dict[str, Any]:
    """The trend of the per-bucket P99 over the run, as a factor: exp(slope x span) of a Theil-Sen fit (the median
    of the pairwise slopes) of log(P99) against time. Drift is a sustained trend; a lone slow minute (a neighbour on
    a shared machine, a version loading) is a spike, which the table shows and which moves a median of pairwise
    slopes little, where it would dominate a comparison of two short halves. Needs 3 buckets; the medians of the
    two halves are reported beside it."""
    usable = [((r["start_s"] + r["end_s"]) / 2, float(r["p99_ms"])) for r in rows
              if r["p99_ms"] is not None and r["p99_ms"] > 0 and r["ok"] >= min_calls]
    first = [p for t, p in usable if t < duration_s / 2]
    second = [p for t, p in usable if t >= duration_s / 2]
    out: dict[str, Any] = {"ratio": None, "buckets": len(usable),
                           "first_half_median_ms": float(np.median(first)) if first else None,
                           "second_half_median_ms": float(np.median(second)) if second else None}
    if len(usable) < 3:
        return out
    slopes = [(math.log(pj) - math.log(pi)) / (tj - ti)
              for i, (ti, pi) in enumerate(usable) for tj, pj in usable[i + 1 :] if tj > ti]
    span = usable[-1][0] - usable[0][0]
    out["ratio"] = math.exp(float(np.median(slopes)) * span)
    return out


def holds(*, calls: Calls, client_extra_failures: Mapping[str, int], samples: Sequence[Mapping[str, float]],
          rows: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]], duration_s: float,
          consul_restarts: int, drill_planned: bool, server_exit: int | None, server_alive_throughout: bool,
          skipped: Sequence[Mapping[str, Any]], bounds: Bounds) -> list[Hold]:
    out: list[Hold] = []
    failed = int((~calls.ok).sum()) + sum(client_extra_failures.values())
    detail = {**calls.failed_by_code(), **{k: v for k, v in client_extra_failures.items() if v}}
    out.append(Hold("failed calls", failed <= bounds.max_failed, str(failed), f"<= {bounds.max_failed}",
                    {"by_code": detail, "calls": int(calls.code.size),
                     "refused_retried": int((calls.ok & (calls.refusals > 0)).sum()),
                     "refusals": int(calls.refusals.sum())}))
    if not calls.code.size:
        out.append(Hold("calls made", False, "0", "> 0"))

    rss = growth(samples, "rss_bytes", duration_s)
    rss_mib = None if rss["growth"] is None else rss["growth"] / MIB
    rss_bound = max(bounds.max_rss_growth_mib, bounds.max_rss_growth_pct / 100 * (rss["mid"] or 0.0) / MIB)
    out.append(Hold("RSS flat (second half)", rss_mib is not None and rss_mib <= rss_bound,
                    "n/a" if rss_mib is None else f"{rss_mib:+.1f} MiB", f"<= +{rss_bound:.0f} MiB",
                    {"mid_mib": _mib(rss["mid"]), "end_mib": _mib(rss["end"]),
                     "slope_mib_per_min": _mib(rss["slope_per_min"])}))
    fds = growth(samples, "fds", duration_s)
    out.append(Hold("open fds flat (second half)", fds["growth"] is not None and fds["growth"] <= bounds.max_fd_growth,
                    "n/a" if fds["growth"] is None else f"{fds['growth']:+.0f}", f"<= +{bounds.max_fd_growth}",
                    {"mid": fds["mid"], "end": fds["end"], "slope_per_min": _round(fds["slope_per_min"], 2)}))
    drift = p99_drift(rows, duration_s, bounds.min_bucket_calls)
    ratio = drift["ratio"]
    out.append(Hold("P99 no drift (trend over the run)", ratio is not None and ratio <= bounds.max_p99_drift,
                    "n/a (< 3 buckets)" if ratio is None else f"{ratio:.2f}x", f"<= {bounds.max_p99_drift:g}x",
                    {k: _round(v) for k, v in drift.items()}))

    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for e in events:
        by_kind.setdefault(str(e["kind"]), []).append(e)
    for kind, name in (("route", "route changes applied"), ("publish", "publishes loaded")):
        done = by_kind.get(kind, [])
        bad = [e for e in done if not e["ok"]]
        out.append(Hold(name, not bad, f"{len(done) - len(bad)}/{len(done)}", "all",
                        {"failed": [_brief(e) for e in bad]}))
    restarts = by_kind.get("consul_restart", [])
    reconnected = [e for e in restarts if e["ok"]]
    out.append(Hold("Consul killed + restarted, server reconnected",
                    len(reconnected) == consul_restarts and len(restarts) == consul_restarts,
                    f"{len(reconnected)}/{len(restarts)}", f"{consul_restarts}/{consul_restarts}",
                    {"reconnect_s": [e.get("reconnect_s") for e in restarts],
                     "failed": [_brief(e) for e in restarts if not e["ok"]]}))
    if drill_planned:
        drills = by_kind.get("cache_drill", [])
        ok = len(drills) == 1 and bool(drills[0]["ok"])
        out.append(Hold("corrupted cache file refetched, not served", ok,
                        "yes" if ok else ("not run" if not drills else "no"), "yes",
                        {"drill": _brief(drills[0]) if drills else None}))
    out.append(Hold("every scheduled event ran in the window", not skipped, f"{len(skipped)} not run", "0",
                    {"not_run": list(skipped)}))
    probes = by_kind.get("probe_mismatch", [])
    out.append(Hold("pinned probes answer each version's logits", not probes, str(len(probes)) + " mismatches", "0",
                    {"mismatches": [_brief(e) for e in probes]}))
    out.append(Hold("server up throughout, clean exit on SIGTERM", server_alive_throughout and server_exit == 0,
                    f"exit {server_exit}" + ("" if server_alive_throughout else ", died during the run"), "exit 0"))
    return out


def _brief(event: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in ("kind",)}


def _mib(value: float | None) -> float | None:
    return None if value is None else round(value / MIB, 2)


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
