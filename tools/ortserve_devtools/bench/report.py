"""Turning runs into numbers: latency percentiles, the stdout table, the summary against targets, the plot."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ortserve_devtools.loadgen import LoadResult


def latency_ms(values_s: Sequence[float]) -> dict[str, float]:
    if not len(values_s):
        return {}
    ms = np.asarray(values_s, dtype=np.float64) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(ms.max()), "mean": float(ms.mean())}


def run_record(name: str, result: LoadResult, **extra: Any) -> dict[str, Any]:
    """The JSON-ready record of one load run (server-side figures are merged in by the caller)."""
    window = max(result.window_s, 1e-9)
    record: dict[str, Any] = {
        "name": name,
        **extra,
        "window_s": result.window_s,
        "ok": result.ok,
        "requests_per_s": result.ok / window,
        "texts_per_s": result.ok_texts / window,
        "latency_ms": latency_ms(result.latencies_s),
        "errors": dict(result.errors),
        "error_latency_ms": {code: latency_ms(v) for code, v in result.error_latencies_s.items()},
        "error_samples": dict(result.error_samples),
        "sent_in_window": result.sent_in_window,
        "client_cpu_percent": 100.0 * result.client_cpu_s / window,
        "cancelled_at_drain": result.cancelled_at_drain,
    }
    if record.get("mode") == "open":
        record["skipped_at_client_cap"] = result.skipped
        record["max_client_lag_ms"] = 1000.0 * result.max_lag_s
    return record


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


_COLUMNS = (
    ("run", 28), ("req/s", 7), ("texts/s", 8), ("p50ms", 7), ("p90ms", 7), ("p99ms", 7), ("maxms", 7),
    ("errors", 16), ("batch", 6), ("pad", 5), ("busy", 5), ("srvCPU", 6), ("engCPU", 6), ("cliCPU", 6), ("/limit", 6),
    ("/local", 6),
)


def table(runs: Sequence[dict[str, Any]]) -> str:
    head = " ".join(f"{name:>{w}}" if i else f"{name:<{w}}" for i, (name, w) in enumerate(_COLUMNS))
    lines = [head, "-" * len(head)]
    for r in runs:
        lat = r.get("latency_ms", {})
        srv = r.get("server", {})
        errors = ",".join(f"{_short(c)}:{n}" for c, n in sorted(r.get("errors", {}).items())) or "0"
        cells = [
            r["name"], _f(r["requests_per_s"]), _f(r["texts_per_s"]), _f(lat.get("p50"), 2), _f(lat.get("p90"), 2),
            _f(lat.get("p99"), 2), _f(lat.get("max"), 1), errors, _f(srv.get("mean_batch_texts"), 1),
            _f(srv.get("mean_padding_ratio"), 2), _f(srv.get("engine_busy"), 2),
            _percent(r.get("server_cpu_percent")), _percent(r.get("server_engine_threads_cpu_percent")),
            _f(r.get("client_cpu_percent"), 0) + "%", _f(r.get("served_over_limit"), 2),
            _f(r.get("served_over_local_limit"), 2),
        ]
        lines.append(" ".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, (_n, w)) in enumerate(zip(cells, _COLUMNS,
                                                                                                  strict=True))))
    return "\n".join(lines)


def _short(code: str) -> str:
    return {"RESOURCE_EXHAUSTED": "RE", "DEADLINE_EXCEEDED": "DE", "UNAVAILABLE": "UNAV"}.get(code, code)


def limit_table(limit: dict[str, Any]) -> str:
    lines = ["engine alone (tokenize + Engine.run, length-sorted batches):",
             f"  {'batch':>5} {'texts/s':>8} {'ms/batch':>9} {'pad':>5}"]
    for p in limit["sorted_passes"]:
        mark = "  <- limit" if p["batch_size"] == limit["best_batch_size"] else ""
        lines.append(f"  {p['batch_size']:>5} {p['texts_per_s']:>8.1f} {p['mean_batch_ms']:>9.2f} "
                     f"{p['padding_ratio']:>5.2f}{mark}")
    side = limit.get("side_by_side")
    if side:
        lines.append(f"  side by side: {limit['engine']['engine_concurrency']} one-thread runs at once, best at "
                     f"batches of {side['batch_size']}: {side['texts_per_s']:.1f} texts/s "
                     "(how the server runs batches under load)")
    b1 = limit["batch1_latency_ms"]
    lines.append(f"  batch-1 latency (one text, tokenize + run): P50 {b1['p50']:.2f} ms, P99 {b1['p99']:.2f} ms")
    idle = limit.get("batch1_after_idle_ms")
    if idle:
        lines.append(f"  batch-1 latency after {idle['idle_ms']:.0f} ms idle before each run: "
                     f"P50 {idle['p50']:.2f} ms, P99 {idle['p99']:.2f} ms")
    return "\n".join(lines)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    out = []
    sat = summary.get("saturation")
    if sat:
        ratio = sat.get("served_over_limit")
        out.append(f"saturation: {sat['run']}: {sat['texts_per_s']:.1f} texts/s"
                   + (f" = {ratio:.2f} x the engine-alone limit ({summary['limit_texts_per_s']:.1f} texts/s)"
                      " [target >= 0.90]" if ratio is not None else ""))
        around = sat.get("limit_around")
        if around:
            out.append(f"  vs the limit's batch size ({around['batch_size']}) measured right before and right after "
                       f"that run ({around['before']:.1f}, {around['after']:.1f} texts/s): "
                       f"{sat['served_over_local_limit']:.2f}")
        if sat.get("limit_after_runs_texts_per_s") is not None:
            out.append(f"  limit re-measured after the load runs: {sat['limit_after_runs_texts_per_s']:.1f} texts/s "
                       f"(drift {100 * sat['limit_drift']:+.0f}%); vs the mean of both: "
                       f"{sat['served_over_limit_both']:.2f}")
        side = sat.get("served_over_side_by_side")
        if side is not None:
            out.append(f"  vs engine alone with one-thread runs side by side ({summary['side_by_side_texts_per_s']:.1f}"
                       f" texts/s): {side:.2f}")
        formed = sat.get("served_over_engine_at_formed_batch")
        if formed is not None:
            out.append(f"  vs engine alone at the batch size the server formed ({sat['formed_batch_size']}): "
                       f"{formed:.2f}")
        server, engine = sat.get("server_cpu_percent"), sat.get("server_engine_threads_cpu_percent")
        if server is not None and engine is not None:
            # The engine alone has every core; served, it shares them with the serving and the client.
            out.append(f"  CPU during that run (100% = one core): the engine's lane threads {engine:.0f}%, the rest of "
                       f"the server {server - engine:.0f}%, this benchmark's client {sat['client_cpu_percent']:.0f}%")
    paired = summary.get("concurrency1_paired")
    if paired:
        rounds = paired["round_added_ms"]
        out.append(f"concurrency 1, paired: P50 {paired['served_p50_ms']:.2f} ms vs engine batch-1 P50 "
                   f"{paired['engine_batch1_p50_ms']:.2f} ms on the same texts = {paired['added_ms']:+.2f} ms "
                   f"[target <= +1 ms] ({paired['rounds']} alternating rounds of {paired['texts_per_round']} texts; "
                   f"per round {min(rounds):+.2f} to {max(rounds):+.2f} ms)")
    c1 = summary.get("concurrency1")
    if c1:
        out.append(f"concurrency 1: P50 {c1['p50_ms']:.2f} ms vs engine batch-1 P50 {c1['engine_batch1_p50_ms']:.2f} ms"
                   f" = {c1['added_ms']:+.2f} ms [target <= +1 ms]")
        if c1.get("grpc_floor_p50_ms") is not None:
            out.append(f"  gRPC floor: an empty call (ServerLive) to the same server takes P50 "
                       f"{c1['grpc_floor_p50_ms']:.2f} ms")
        idle = c1.get("after_idle")
        if idle:
            engine_extra = idle["engine_batch1_p50_ms"] - c1["engine_batch1_p50_ms"]
            floor = c1.get("grpc_floor_p50_ms")
            floor_extra = "" if floor is None else f" ({idle['grpc_floor_p50_ms'] - floor:+.2f})"
            out.append(f"  after idle, as a c=1 request meets them: engine batch-1 P50 "
                       f"{idle['engine_batch1_p50_ms']:.2f} ms ({engine_extra:+.2f}) after "
                       f"{idle['engine_idle_ms']:.0f} ms idle; empty call P50 {idle['grpc_floor_p50_ms']:.2f} ms"
                       f"{floor_extra} after {idle['floor_idle_ms']:.0f} ms idle")
        b = c1.get("breakdown_mean_ms")
        if b:
            grpc_ms = b["client"] - b["server_handler"]
            rest = b["server_handler"] - sum(b[k] or 0.0 for k in ("engine", "tokenize", "queue"))
            out.append(f"  means: client {b['client']:.2f} ms = gRPC/transport {grpc_ms:.2f} + server handler "
                       f"{b['server_handler']:.2f} (engine {_f(b['engine'], 2)}, tokenize {_f(b['tokenize'], 2)}, "
                       f"queue {_f(b['queue'], 2)}, other {rest:.2f})")
    over = summary.get("overload")
    if over:
        out.append(f"overload: open loop at {over['rate']:.0f} req/s (2 x saturation): "
                   f"{over['resource_exhausted']} RESOURCE_EXHAUSTED of {over['sent']} sent "
                   f"({100 * over['rejected_fraction']:.0f}%), rejected in P50 {_f(over.get('reject_p50_ms'), 2)} ms / "
                   f"P99 {_f(over.get('reject_p99_ms'), 2)} ms; other errors {over['other_errors'] or 'none'}")
        out.append(f"  admitted P99 {_f(over.get('admitted_p99_ms'), 2)} ms = {_f(over.get('p99_over_unloaded'), 2)} x "
                   f"unloaded (c=1) P99, {_f(over.get('p99_over_saturation'), 2)} x P99 at saturation "
                   "[target <= 2 x unloaded]")
        out.append(f"  successful {over['texts_per_s']:.1f} texts/s = {_f(over.get('texts_over_saturation'), 2)} x "
                   "saturation [target >= 0.90]")
    spin = summary.get("spinning")
    if spin:
        for label, s in spin.items():
            out.append(f"spinning {label:>3}: {s['run']}: {s['texts_per_s']:.1f} texts/s, P50 {_f(s.get('p50_ms'), 2)} "
                       f"ms, P99 {_f(s.get('p99_ms'), 2)} ms, server CPU {_f(s.get('server_cpu_percent'), 0)}%")
            one = s.get("concurrency1")
            if one:
                out.append(f"             c=1: P50 {_f(one.get('p50_ms'), 2)} ms, P99 {_f(one.get('p99_ms'), 2)} ms, "
                           f"server CPU {_f(one.get('server_cpu_percent'), 0)}%")
    return out


def write_json(path: Path, report: Any) -> None:
    """Every tool's JSON report: two-space indent, a final newline, numpy scalars as numbers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=False, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    """numpy scalars as numbers, anything else JSON has no form for (a Path, ...) as its text."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def plot(path: Path, runs: Sequence[dict[str, Any]], *, limit_texts_per_s: float | None, title: str) -> None:
    """Latency (P50 and P99, log scale) against achieved texts/s; one line per series of runs."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    series: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        if r.get("latency_ms"):
            series.setdefault(r.get("series", r["name"]), []).append(r)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, rs) in enumerate(series.items()):
        # Points stay in run order (rising concurrency), the usual shape of a latency-throughput curve.
        color = colors[index % len(colors)]
        x = [r["texts_per_s"] for r in rs]
        ax.plot(x, [r["latency_ms"]["p50"] for r in rs], "-o", color=color, label=f"{label} P50")
        ax.plot(x, [r["latency_ms"]["p99"] for r in rs], "--^", color=color, alpha=0.6, label=f"{label} P99")
        for r in rs:
            ax.annotate(r.get("point", ""), (r["texts_per_s"], r["latency_ms"]["p50"]), textcoords="offset points",
                        xytext=(3, -10), fontsize=7, color=color)
    if limit_texts_per_s:
        ax.axvline(limit_texts_per_s, color="grey", linestyle=":", label=f"engine-alone limit {limit_texts_per_s:.0f}")
    ax.set_yscale("log")
    ax.set_xlim(left=0)
    ax.set_xlabel("successful texts/s")
    ax.set_ylabel("latency (ms, log)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> None:
    """A matplotlib figure as a PNG at path (parents made), then closed: every tool's plot."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
