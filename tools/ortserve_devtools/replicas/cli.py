"""The `scripts/dev replicas` command: measure, print P50 / P99 / max per backend, optionally write JSON."""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ortserve_devtools.bench.machine import cpu_model
from ortserve_devtools.bench.options import HelpWithDefaults
from ortserve_devtools.bench.report import write_json
from ortserve_devtools.replicas.convergence import Change, measure

BACKENDS = ("file", "standin")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/dev replicas", formatter_class=HelpWithDefaults,
                                description="Replicas on one registry: the time from a route's store write to the "
                                            "last replica's swap (server logs), over many changes.")
    p.add_argument("--backends", default=",".join(BACKENDS),
                   help="comma-separated: file (embedded store) and/or standin (the Consul stand-in)")
    p.add_argument("--replicas", type=int, default=3, help="servers watching the registry")
    p.add_argument("--changes", type=int, default=50, help="route changes per backend")
    p.add_argument("--json-out", type=Path, help="write every change's times here")
    p.add_argument("--workdir", type=Path, help="keep registries and server logs here (default: a temp dir, removed)")
    args = p.parse_args(argv)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in args.backends if b not in BACKENDS]
    if bad or not args.backends:
        p.error(f"--backends: unknown {bad or 'empty'}; choose from {', '.join(BACKENDS)}")
    if not 1 <= args.replicas <= 16:
        p.error(f"--replicas {args.replicas}: expected 1..16")
    if not 2 <= args.changes <= 10_000:
        p.error(f"--changes {args.changes}: expected 2..10000")
    return args


def summary(changes: list[Change]) -> dict[str, float]:
    last = sorted(c.last_s * 1000 for c in changes)
    cuts = statistics.quantiles(last, n=100, method="inclusive")
    return {"p50_ms": round(statistics.median(last), 1), "p99_ms": round(cuts[98], 1), "max_ms": round(last[-1], 1),
            "first_replica_p50_ms": round(statistics.median(c.first_s * 1000 for c in changes), 1),
            "write_p50_ms": round(statistics.median(c.write_s * 1000 for c in changes), 1)}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[replicas {time.monotonic() - started:6.1f}s] {line}", file=sys.stderr, flush=True)

    root = args.workdir or Path(tempfile.mkdtemp(prefix="ortserve-replicas-"))
    report: dict[str, object] = {"cpu": cpu_model(), "cores": len(__import__("os").sched_getaffinity(0)),
                                 "replicas": args.replicas, "changes": args.changes, "backends": {}}
    try:
        for backend in args.backends:
            changes = measure(backend, root / backend, replicas=args.replicas, changes=args.changes,
                              progress=progress)
            stats = summary(changes)
            report["backends"][backend] = {**stats, "changes": [  # type: ignore[index]
                {"weights": c.weights, "write_ms": round(c.write_s * 1000, 2),
                 "swapped_ms": [round((s - c.wrote_at) * 1000, 2) for s in c.swapped_at]} for c in changes]}
            print(f"{backend}: store write -> last of {args.replicas} replicas swapped, {len(changes)} changes: "
                  f"P50 {stats['p50_ms']} ms, P99 {stats['p99_ms']} ms, max {stats['max_ms']} ms "
                  f"(first replica P50 {stats['first_replica_p50_ms']} ms; the write itself P50 "
                  f"{stats['write_p50_ms']} ms)", flush=True)
    except RuntimeError as e:
        print(f"scripts/dev replicas: FAILED: {e} (logs in {root})", file=sys.stderr)
        return 1
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"on {report['cpu']}, {report['cores']} cores; {time.monotonic() - started:.0f} s in all", flush=True)
    if args.json_out:
        write_json(args.json_out, report)
        print(f"wrote {args.json_out}", flush=True)
    return 0
