"""One model served at fp32, bf16 and int8, side by side in the same minutes (issue 46):

    scripts/dev bench precisions [--rounds 2] [--duration 20] [--concurrency 8] [--texts-per-request 32]
                             [--frontends native,python] [--json-out FILE]

The MiniLM demo classifier (scripts/dev bench serve's bundle, built once into --cache-dir) and its int8 and bf16 copies
(`registry optimize`, each with its accuracy gate; int8 written with --accept-accuracy-loss where the gate refuses
it, as the demo does, so that its speed can still be shown). Each round serves every (front end, precision) in turn
with `scripts/bench` (closed loop, C callers x N texts a call, no engine-alone limit), so a busy neighbour slows every
arm alike; the table keeps each arm's best round and its ratio to fp32 on the same front end. On a CPU without bf16
the bf16 arm is left out with OpenVINO's reason. Prints the CPU; --json-out writes every round.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ortserve_devtools.bench.machine import cpu_flags, cpu_model
from ortserve_devtools.bench.options import minilm_demo_bundle
from ortserve_devtools.bench.report import write_json
from ortserve_devtools.checkout import ROOT

VENV_BIN = ROOT / ".venv" / "bin"
PRECISIONS = ("fp32", "bf16", "int8")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/dev bench precisions", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="passes over every arm (best kept)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load per arm and round")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--texts-per-request", type=int, default=32)
    p.add_argument("--frontends", default="native,python")
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "ortserve-bench")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="passed to every server (e.g. --server-arg=--max-padding-ratio=1.2)")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="the arms, of fp32,bf16,int8")
    p.add_argument("--json-out", type=Path)
    return p.parse_args(argv)


def cpu_line() -> str:
    return f"{cpu_model()}, {os.cpu_count()} CPUs ({' '.join(cpu_flags())})"


def bundles(cache: Path) -> dict[str, Path]:
    """fp32 (scripts/dev bench serve's demo bundle), int8 and bf16 copies of it, made once."""
    fp32 = minilm_demo_bundle(cache, lambda line: print(line, file=sys.stderr, flush=True))
    out = {"fp32": fp32}
    for level in ("int8", "bf16"):
        dest = cache / f"minilm-demo-{level}"
        if not (dest / "manifest.json").is_file():
            done = subprocess.run([str(VENV_BIN / "registry"), "optimize", "--bundle", str(fp32), "--out", str(dest),
                                   "--optimize", level, "--accept-accuracy-loss"], capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{level}: left out: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
                continue
        out[level] = dest
    return out


def serve_once(bundle: Path, frontend: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-precisions-") as tmp:
        report = Path(tmp) / "run.json"
        command = [sys.executable, str(ROOT / "scripts" / "bench"), "--bundle", str(bundle), "--frontend", frontend,
                   "--no-limit", "--concurrency", str(args.concurrency), "--texts-per-request",
                   str(args.texts_per_request), "--duration", str(args.duration), "--warmup", str(args.warmup),
                   "--cache-dir", str(args.cache_dir), "--json-out", str(report),
                   *(f"--server-arg={arg}" for arg in args.server_arg)]
        # cwd: not the checkout, whose ortserve/ would shadow the installed package in the server it starts.
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            raise SystemExit(f"scripts/bench failed ({bundle.name}, {frontend}): {done.stderr.strip()[-800:]}")
        run = json.loads(report.read_text())["runs"][-1]
    return {"texts_per_s": run["texts_per_s"], "p50_ms": run["latency_ms"].get("p50"),
            "p99_ms": run["latency_ms"].get("p99"), "errors": run.get("errors", {}),
            "batch_texts": run.get("server", {}).get("mean_batch_texts"),
            "engine_ms": run.get("server", {}).get("mean_engine_ms")}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cpu = cpu_line()
    print(f"CPU: {cpu}; load average {os.getloadavg()[0]:.1f}")
    arms = bundles(args.cache_dir)
    frontends = [f for f in args.frontends.split(",") if f]
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for frontend in frontends:
            for precision in (p for p in args.precisions.split(",") if p in arms):
                result = serve_once(arms[precision], frontend, args)
                rounds.append({"round": r, "frontend": frontend, "precision": precision, **result})
                print(f"round {r + 1} {frontend:6} {precision}: {result['texts_per_s']:.0f} texts/s, "
                      f"p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, batches of "
                      f"{result['batch_texts'] or 0:.1f} ({result['engine_ms'] or 0:.1f} ms), "
                      f"errors {result['errors']}",
                      flush=True)
    print(f"\n| front end | precision | texts/s (best of {args.rounds}) | vs fp32 | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rounds:
        key = (row["frontend"], row["precision"])
        if key not in best or row["texts_per_s"] > best[key]["texts_per_s"]:
            best[key] = row
    for frontend in frontends:
        base = best[(frontend, "fp32")]["texts_per_s"]
        for precision in (p for p in PRECISIONS if (frontend, p) in best):
            row = best[(frontend, precision)]
            print(f"| {frontend} | {precision} | {row['texts_per_s']:.0f} | {row['texts_per_s'] / base:.2f}x | "
                  f"{row['p50_ms']:.0f} | {row['p99_ms']:.0f} |")
    print(f"\n{args.concurrency} callers x {args.texts_per_request} texts, {args.duration:g} s per arm and round; "
          f"CPU: {cpu}; load average after {os.getloadavg()[0]:.1f}")
    if args.json_out:
        write_json(args.json_out, {"cpu": cpu, "rounds": rounds})
    return 0

