"""The soak's outputs: the per-minute table and the holds on stdout, the plot (PNG)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ortserve_devtools.bench.report import save_figure
from ortserve_devtools.soak.analysis import MIB, Calls, Hold, percentile

_EVENT_SHORT = {"route": "R", "publish": "P", "consul_restart": "K", "cache_drill": "C", "probe_mismatch": "!"}


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _span(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}" if seconds >= 60 else f"{seconds:.1f}s"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _server_p99(row: Mapping[str, Any]) -> str:
    if row.get("server_p99_over_max_bound"):
        return ">5000"
    value = row.get("server_p99_ms")
    return "-" if value is None else f"<={value:g}"


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per bucket: calls, failures, refused-and-retried, texts/s, latency, server RSS / fds, events."""
    cols = (("window", 15), ("calls", 7), ("failed", 6), ("refused+ok", 10), ("texts/s", 8), ("p50ms", 7),
            ("p99ms", 8), ("maxms", 8), ("srvP99", 7), ("RSS MiB", 8), ("fds", 4), ("thr", 4), ("events", 14))
    head = " ".join(f"{n:<{w}}" if i in (0, len(cols) - 1) else f"{n:>{w}}" for i, (n, w) in enumerate(cols))
    lines = [head, "-" * len(head)]
    for r in rows:
        events = " ".join(f"{_EVENT_SHORT.get(k, k)}{n}" for k, n in r["events"].items()) or "-"
        cells = [f"{_span(r['start_s'])}-{_span(r['end_s'])}", str(r["calls"]), str(r["failed"]),
                 str(r["refused_retried"]), _f(r["texts_per_s"]), _f(r["p50_ms"], 2), _f(r["p99_ms"], 2),
                 _f(r["max_ms"], 1), _server_p99(r), _f(r["rss_mib_max"]), _count(r["fds_max"]),
                 _count(r["threads_max"]), events]
        lines.append(" ".join(f"{c:<{w}}" if i in (0, len(cols) - 1) else f"{c:>{w}}"
                              for i, (c, (_n, w)) in enumerate(zip(cells, cols, strict=True))))
    lines.append("latency: at the clients, from sending a call to its reply (refusals retried included); srvP99: "
                 "the server's own P99 (its request histogram's bucket bound), receipt to reply")
    lines.append("events: R route change, P publish, K Consul stand-in killed + restarted, C cache drill, "
                 "! probe mismatch; RSS MiB / fds / thr: the server's maxima in the window")
    return "\n".join(lines)


def holds_table(holds: Sequence[Hold]) -> str:
    width = max(len(h.name) for h in holds)
    lines = [f"{'hold':<{width}}  {'result':<6}  {'value':<16}  bound"]
    for h in holds:
        lines.append(f"{h.name:<{width}}  {'PASS' if h.ok else 'FAIL':<6}  {h.value:<16}  {h.bound}")
    return "\n".join(lines)


def plot(path: Path, *, calls: Calls, rows: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, float]],
         events: Sequence[Mapping[str, Any]], duration_s: float, fine_s: float, title: str) -> None:
    """Three panels over time: latency (P99 per `fine_s` and per bucket, P50) with throughput; RSS; open fds.
    Publishes, Consul restarts and the cache drill are vertical lines; route changes are ticks on the top panel."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    minutes = duration_s >= 120
    scale = 60.0 if minutes else 1.0
    unit = "min" if minutes else "s"
    fig, (ax_lat, ax_rss, ax_fd) = plt.subplots(3, 1, figsize=(10, 8.5), sharex=True,
                                                 gridspec_kw={"height_ratios": [2.2, 1, 1]})
    # Fine-grained percentiles: windows of fine_s.
    n_fine = max(1, int(np.ceil(duration_s / fine_s)))
    idx = np.clip((calls.end_s // fine_s).astype(np.int64), 0, n_fine - 1)
    mids, p50, p99, tput = [], [], [], []
    for i in range(n_fine):
        lat = calls.latency_ms[(idx == i) & calls.ok]
        span = min(duration_s, (i + 1) * fine_s) - i * fine_s
        mids.append((i * fine_s + min(duration_s, (i + 1) * fine_s)) / 2 / scale)
        p50.append(percentile(lat, 50) or np.nan)
        p99.append(percentile(lat, 99) or np.nan)
        tput.append(lat.size / span if span > 0 else np.nan)
    ax_lat.plot(mids, p99, color="tab:red", lw=1, alpha=0.7, label=f"P99 per {fine_s:g} s")
    ax_lat.plot(mids, p50, color="tab:blue", lw=1, alpha=0.7, label=f"P50 per {fine_s:g} s")
    bucket_mid = [(r["start_s"] + r["end_s"]) / 2 / scale for r in rows]
    ax_lat.plot(bucket_mid, [r["p99_ms"] if r["p99_ms"] is not None else np.nan for r in rows], "o-",
                color="darkred", lw=2, label="P99 per bucket")
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency ms (log)")
    ax_t = ax_lat.twinx()
    ax_t.plot(mids, tput, color="grey", lw=0.8, alpha=0.6)
    ax_t.set_ylabel("successful calls/s", color="grey")
    ax_t.set_ylim(bottom=0)
    failed_t = calls.end_s[~calls.ok] / scale
    if failed_t.size:
        ax_lat.plot(failed_t, np.full(failed_t.size, max(1.0, np.nanmax(p99) if p99 else 1.0)), "kx",
                    label=f"failed calls ({failed_t.size})")

    t = [s["t_s"] / scale for s in samples]
    ax_rss.plot(t, [s["rss_bytes"] / MIB for s in samples], color="tab:green")
    ax_rss.set_ylabel("server RSS MiB")
    ax_fd.plot(t, [s["fds"] for s in samples], color="tab:purple", label="open fds")
    ax_fd.plot(t, [s["threads"] for s in samples], color="tab:olive", lw=0.8, label="threads")
    ax_fd.set_ylabel("count")
    ax_fd.legend(fontsize=7, loc="lower right")
    ax_fd.set_xlabel(f"time since the load started ({unit})")

    styles = {"publish": ("tab:blue", ":"), "consul_restart": ("red", "--"), "cache_drill": ("purple", "-.")}
    labelled: set[str] = set()
    for e in events:
        kind = str(e["kind"])
        x = float(e["at_s"]) / scale
        if kind == "route":
            ax_lat.axvline(x, ymin=0.97, ymax=1.0, color="black", lw=0.8)
            continue
        if kind not in styles:
            continue
        color, ls = styles[kind]
        for ax in (ax_lat, ax_rss, ax_fd):
            ax.axvline(x, color=color, ls=ls, lw=1, alpha=0.8,
                       label=(kind.replace("_", " ") if ax is ax_lat and kind not in labelled else None))
        labelled.add(kind)
    for ax in (ax_lat, ax_rss, ax_fd):
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, duration_s / scale)
    ax_lat.legend(fontsize=7, loc="upper left", ncol=3)
    ax_lat.set_title(title + "\n(ticks at the top: route changes)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
