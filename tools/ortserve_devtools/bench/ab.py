"""Before and after a change, in the same minutes: bench serve from two checkouts, alternately, per cell and round.

    scripts/dev bench ab /tmp/before /tmp/after --rounds 2
    scripts/dev bench ab /tmp/before /tmp/after --rounds 4 --cells native:1 --json-out ab.json

Each checkout runs its own scripts/bench with its own .venv (a clean clone of each commit, `scripts/bootstrap dev`
in each, or a copy of one venv with the checkout `pip install`ed into it), so each side serves its own engine. Cells
are front end:concurrency; the order of the two sides flips every round, so neither always runs first. Prints each
run and, per cell, every round's ratio after/before and the ratio of the bests (the rule docs/benchmarks.md quotes:
on a shared VM a lone-call cell swings up to 15% from round to round, and a slower side shows in every round).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_CELLS = "native:1,native:32,python:1,python:32"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/dev bench ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="checkout A (with its .venv)")
    parser.add_argument("after", type=Path, help="checkout B (with its .venv)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per cell (default 2)")
    parser.add_argument("--cells", default=DEFAULT_CELLS, help=f"front end:concurrency, comma-separated "
                        f"(default {DEFAULT_CELLS})")
    parser.add_argument("--duration", type=float, default=12, help="seconds measured per run (default 12)")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of warm-up per run (default 3)")
    parser.add_argument("--json-out", type=Path, help="write every run's texts/s here")
    args = parser.parse_args(argv)
    for side in (args.before, args.after):
        if not (side / ".venv" / "bin" / "python").is_file() or not (side / "scripts" / "bench").is_file():
            parser.error(f"{side} is not a checkout with a .venv (scripts/bootstrap dev in it)")
    return args


def cells_of(spec: str) -> list[tuple[str, int]]:
    cells = []
    for cell in spec.split(","):
        frontend, _, concurrency = cell.partition(":")
        if frontend not in ("native", "python") or not concurrency.isdigit():
            sys.exit(f"bench_ab: a cell is native:N or python:N, got {cell!r}")
        cells.append((frontend, int(concurrency)))
    return cells


def run(side: Path, frontend: str, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        command = [str(side / ".venv" / "bin" / "python"), str(side / "scripts" / "bench"), "--frontend", frontend,
                   "--concurrency", str(concurrency), "--duration", str(args.duration), "--warmup", str(args.warmup),
                   "--no-limit", "--json-out", str(out)]
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"bench_ab: {side} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return dict(json.loads(out.read_text())["runs"][0])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sides = {"before": args.before, "after": args.after}
    results: dict[str, dict[str, list[float]]] = {}
    for round_ in range(args.rounds):
        for frontend, concurrency in cells_of(args.cells):
            cell = f"{frontend}:{concurrency}"
            order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
            for name in order:
                measured = run(sides[name], frontend, concurrency, args)
                results.setdefault(cell, {}).setdefault(name, []).append(measured["texts_per_s"])
                print(f"round {round_} {cell} {name}: {measured['texts_per_s']:.1f} texts/s, "
                      f"P50 {measured['latency_ms'].get('p50', float('nan')):.2f} ms, "
                      f"errors {measured.get('errors') or 0}", flush=True)
    print()
    for cell, arms in results.items():
        before, after = arms["before"], arms["after"]
        rounds = ", ".join(f"{b / a:.2f}" for a, b in zip(before, after, strict=True))
        print(f"{cell}: best after/before {max(after) / max(before):.3f} (per round {rounds}); before "
              f"{', '.join(f'{v:.1f}' for v in before)}; after {', '.join(f'{v:.1f}' for v in after)} texts/s")
    if args.json_out:
        args.json_out.write_text(json.dumps({"before": str(args.before), "after": str(args.after),
                                             "results": results}, indent=2) + "\n")
    return 0

