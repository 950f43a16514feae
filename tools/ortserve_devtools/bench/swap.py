"""Hot-reload benchmark: how fast a registry change reaches traffic, and what a swap does to P99.

    scripts/dev bench swap                      # MiniLM demo bundle (falls back to --tiny if unavailable)
    scripts/dev bench swap --tiny --swaps 4     # quick run on a tiny random BERT
    scripts/dev bench swap --backends file --json-out swap.json

For each registry backend (the file store; the Consul stand-in, tools/ortserve_devtools/consul_standin.py, as
its own process) it starts `ortserve serve --registry URL` as a real process, keeps a closed-loop
load of --concurrency ModelInfer calls in flight, and then, with quiet gaps in between:

  route-only swaps   `registry route M vX=100` between two already-loaded versions (CLI subprocess)
  publish swaps      `registry publish ... --weight 100` of a new version (fetch, verify, load, warm up)

Propagation = time from the CLI process returning to the first reply answered by the new version
(the registry write is complete when the CLI returns); that includes one call's latency under the
load. `route->swap` is the part until the server's `version_swapped` log line (same host clock;
negative when the server swapped before the CLI process had exited). Publish swaps also report the
server's own load time (its `version_loaded` line) and how long the CLI itself ran. Latency: P99 of
calls overlapping a swap window (CLI start -> 1 s after the first new-version reply) against P99 of
calls inside the quiet gaps, same load, same process (target <= 1.5x). On a small box the CLI's own
start-up competes for the cores, so two more windows split that out: "CLI only" (a `registry show`
that changes nothing) and "after CLI" (CLI returned -> 1 s after the first new-version reply: the
swap as the server sees it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortserve_devtools.bench.report import write_json
from ortserve_devtools.checkout import ROOT as _ROOT
from ortserve_devtools.consul_standin import StandinProcess
from ortserve_devtools.server_process import ServerProcess, start_until_ready
from ortserve_devtools.steady_load import SteadyLoad

MODEL = "sentiment"
TEXTS = ["the film was a delight from start to finish", "dull, slow and far too long"]


def progress(line: str) -> None:
    print(f"[bench_swap {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# ---- bundles ------------------------------------------------------------------------------------------


def build_bundles(workdir: Path, *, tiny: bool, count: int) -> tuple[str, list[Path]]:
    """`count` bundles with distinct bytes (tiny: seeds; MiniLM: the demo bundle with distinct notes)."""
    from ortserve_devtools.bert_bundle import build_minilm_bundle, build_tiny_bundle

    if not tiny:
        try:
            base = build_minilm_bundle(workdir / "bundle-0").path
        except Exception as e:  # the demo checkpoint package is an optional extra
            progress(f"MiniLM demo bundle unavailable ({type(e).__name__}: {e}); using --tiny")
            tiny = True
        else:
            out = [base]
            for i in range(1, count):
                # Same weights, different manifest notes: a distinct artifact, as a retrained model would be.
                copy = workdir / f"bundle-{i}"
                shutil.copytree(base, copy)
                manifest = json.loads((copy / "manifest.json").read_text())
                manifest["notes"] = f"{manifest.get('notes', '')} (bench copy {i})"
                (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
                out.append(copy)
            return "minilm", out
    return "tiny", [build_tiny_bundle(workdir / f"bundle-{i}", seed=100 + i).path for i in range(count)]


# ---- registry and server processes -------------------------------------------------------------------


@dataclass
class Backend:
    name: str
    url: str
    artifacts: Path
    standin: StandinProcess | None = None

    def registry(self, *args: str) -> float:
        """Runs the `registry` CLI; returns the monotonic time at which it returned."""
        cmd = [sys.executable, "-m", "ortserve.registry.cli", "--registry", self.url,
               "--artifacts", self.artifacts.as_uri(), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=_ROOT,
                              env={**os.environ, "PYTHONPATH": str(_ROOT)})
        returned = time.monotonic()
        if done.returncode != 0:
            raise RuntimeError(f"registry {' '.join(args)}: {done.stderr.strip()}")
        return returned

    def close(self) -> None:
        if self.standin is not None:
            self.standin.stop()


def open_backend(name: str, workdir: Path) -> Backend:
    root = workdir / name
    root.mkdir()
    if name == "file":
        return Backend(name, (root / "store").as_uri(), root / "artifacts")
    standin = StandinProcess(root / "consul-kv.json", env={**os.environ, "PYTHONPATH": str(_ROOT)}).start()
    return Backend(name, f"consul://{standin.address}?prefix=bench-{uuid.uuid4().hex[:8]}/", root / "artifacts",
                   standin)


def start_server(backend: Backend, workdir: Path, extra: list[str]) -> ServerProcess:
    """`ortserve serve --registry URL` (the tools' launcher), once MODEL is ready."""
    return start_until_ready(["--registry", backend.url, "--artifacts", backend.artifacts.as_uri(),
                              "--artifact-cache", str(workdir / f"cache-{backend.name}"), *extra],
                             model=MODEL, log_path=workdir / f"server-{backend.name}.log", timeout=180.0, cwd=_ROOT)


# ---- one backend's run ----------------------------------------------------------------------------------


@dataclass
class BackendResult:
    backend: str
    route_propagation_s: list[float] = field(default_factory=list)
    publish_to_first_reply_s: list[float] = field(default_factory=list)
    publish_load_s: list[float] = field(default_factory=list)
    publish_verify_s: list[float] = field(default_factory=list)
    """Of the server's load, the check of the version's answers to its bundle's reference texts."""
    publish_cli_s: list[float] = field(default_factory=list)
    """How long `registry publish` itself ran (validate, pack, hash, upload, write)."""
    steady_p99_ms: float = 0.0
    route_swap_p99_ms: float = 0.0
    route_swap_server_p99_ms: float = 0.0
    """Calls overlapping [CLI returned, first new reply + 1 s]: the swap without the CLI's own CPU use."""
    control_p99_ms: float = 0.0
    """Calls overlapping a `registry show` run (no change): the CLI's CPU use alone."""
    route_to_swap_s: list[float] = field(default_factory=list)
    """CLI returned -> the server's version_swapped log line (same host, wall clock)."""
    publish_swap_p99_ms: float = 0.0
    calls: int = 0
    failed_calls: int = 0


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def run_backend(name: str, bundles: list[Path], args: argparse.Namespace, workdir: Path) -> BackendResult:
    backend = open_backend(name, workdir)
    result = BackendResult(name)
    server: ServerProcess | None = None
    load: SteadyLoad | None = None
    try:
        backend.registry("publish", "--model", MODEL, "--version", "v0", "--bundle", str(bundles[0]), "--weight", "100")
        backend.registry("publish", "--model", MODEL, "--version", "v1", "--bundle", str(bundles[1]))
        frontend = ["--frontend", args.frontend] if args.frontend else []
        server = start_server(backend, workdir, ["--max-loaded-versions", "2", *frontend, *args.server_arg])
        progress(f"{name}: server ready on port {server.port}; load: {args.concurrency} calls in flight")
        load = SteadyLoad(server.address, MODEL, texts=TEXTS, concurrency=args.concurrency, timeout_s=30,
                          tag="swap").start()
        time.sleep(args.gap_s)  # warm-up
        quiet: list[tuple[float, float]] = []
        route_windows: list[tuple[float, float]] = []
        publish_windows: list[tuple[float, float]] = []
        control_windows: list[tuple[float, float]] = []
        route_server_windows: list[tuple[float, float]] = []
        current, other = "v0", "v1"
        for _ in range(args.swaps):
            q0 = time.monotonic()
            time.sleep(args.gap_s)
            quiet.append((q0, time.monotonic()))
            # Control: a registry CLI run that changes nothing, to separate the CLI's own CPU use on a
            # small box from what the swap costs the server.
            c0 = time.monotonic()
            shown = backend.registry("show", MODEL)
            control_windows.append((c0, shown + 1.0))
            time.sleep(1.0)
            began = time.monotonic()
            returned_wall = time.time()
            returned = backend.registry("route", MODEL, f"{other}=100")
            returned_wall += time.monotonic() - began
            first = load.first_reply_from(other, after=returned, timeout=120)
            result.route_propagation_s.append(first - returned)
            swapped = [parse_ts(e["timestamp"]) for e in server.events() if e.get("event") == "version_swapped"
                       and (e.get("weights") or {}).get(other) == 100 and parse_ts(e["timestamp"]) > returned_wall - 5]
            if swapped:
                result.route_to_swap_s.append(swapped[-1] - returned_wall)  # < 0: swapped before the CLI exited
            route_windows.append((began, first + 1.0))
            route_server_windows.append((returned, first + 1.0))
            progress(f"{name}: route {current}->{other}: first {other} reply {1000 * (first - returned):.0f} ms "
                     f"after `registry route` returned"
                     + (f" (table swapped after {1000 * result.route_to_swap_s[-1]:.0f} ms)" if swapped else ""))
            current, other = other, current
            time.sleep(1.0)
        for i in range(args.publishes):
            q0 = time.monotonic()
            time.sleep(args.gap_s)
            quiet.append((q0, time.monotonic()))
            version = f"p{i}"
            bundle = bundles[2 + i % (len(bundles) - 2)]
            began = time.monotonic()
            returned = backend.registry("publish", "--model", MODEL, "--version", version, "--bundle", str(bundle),
                                        "--weight", "100")
            first = load.first_reply_from(version, after=returned, timeout=120)
            loaded = [e for e in server.events() if e.get("event") == "version_loaded" and e.get("version") == version]
            result.publish_to_first_reply_s.append(first - returned)
            result.publish_cli_s.append(returned - began)
            result.publish_load_s.append(float(loaded[-1]["load_s"]) if loaded else float("nan"))
            result.publish_verify_s.append(float(loaded[-1].get("verify_s", "nan")) if loaded else float("nan"))
            publish_windows.append((began, first + 1.0))
            progress(f"{name}: publish {version} --weight 100: first reply {1000 * (first - returned):.0f} ms after "
                     f"the CLI returned (the CLI ran {1000 * (returned - began):.0f} ms; "
                     f"server load {result.publish_load_s[-1] * 1000:.0f} ms, of which the outputs check "
                     f"{result.publish_verify_s[-1] * 1000:.0f} ms)")
            time.sleep(1.0)
        load.stop()
        calls = list(load.outcomes)
        result.calls = len(calls)
        result.failed_calls = sum(not c.ok for c in calls)

        def overlapping(windows: list[tuple[float, float]]) -> list[float]:
            return [1000 * (c.ended - c.started) for c in calls
                    if c.ok and any(c.started < w1 and c.ended > w0 for w0, w1 in windows)]

        def inside(windows: list[tuple[float, float]]) -> list[float]:
            return [1000 * (c.ended - c.started) for c in calls
                    if c.ok and any(c.started >= w0 and c.ended <= w1 for w0, w1 in windows)]

        result.steady_p99_ms = p99(inside(quiet))
        result.route_swap_p99_ms = p99(overlapping(route_windows))
        result.route_swap_server_p99_ms = p99(overlapping(route_server_windows))
        result.control_p99_ms = p99(overlapping(control_windows))
        result.publish_swap_p99_ms = p99(overlapping(publish_windows))
        return result
    finally:
        if load is not None:
            load.stop()
        if server is not None:
            server.stop()
        backend.close()


# ---- report -----------------------------------------------------------------------------------------------


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b and a == a else None


def parse_ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def summarize(r: BackendResult) -> dict[str, Any]:
    def stats(xs: list[float]) -> dict[str, float]:
        return {"median_ms": round(1000 * statistics.median(xs), 1), "max_ms": round(1000 * max(xs), 1)} if xs else {}

    return {
        "route_propagation": stats(r.route_propagation_s),
        "publish_to_first_reply": stats(r.publish_to_first_reply_s),
        "publish_server_load": stats([x for x in r.publish_load_s if x == x]),
        "publish_outputs_check": stats([x for x in r.publish_verify_s if x == x]),
        "publish_cli": stats(r.publish_cli_s),
        "route_to_table_swap": stats(r.route_to_swap_s),
        "steady_p99_ms": round(r.steady_p99_ms, 2),
        "control_cli_p99_ms": round(r.control_p99_ms, 2),
        "control_cli_p99_ratio": ratio(r.control_p99_ms, r.steady_p99_ms),
        "route_swap_after_cli_p99_ms": round(r.route_swap_server_p99_ms, 2),
        "route_swap_after_cli_p99_ratio": ratio(r.route_swap_server_p99_ms, r.steady_p99_ms),
        "route_swap_p99_ms": round(r.route_swap_p99_ms, 2),
        "route_swap_p99_ratio": ratio(r.route_swap_p99_ms, r.steady_p99_ms),
        "publish_swap_p99_ms": round(r.publish_swap_p99_ms, 2),
        "publish_swap_p99_ratio": ratio(r.publish_swap_p99_ms, r.steady_p99_ms),
        "calls": r.calls,
        "failed_calls": r.failed_calls,
    }


def print_table(summaries: dict[str, dict[str, Any]]) -> None:
    def mm(d: dict[str, float]) -> str:
        return f"{d.get('median_ms', '-')}/{d.get('max_ms', '-')}"

    rows = [("backend", "route->swap ms", "route->reply ms", "publish->reply ms", "load ms", "outputs check ms",
             "publish CLI ms",
             "steady P99", "P99 CLI only (x)", "P99 route swap (x)", "P99 after CLI (x)", "P99 publish (x)",
             "calls", "failed")]
    for name, s in summaries.items():
        rows.append((name, mm(s["route_to_table_swap"]), mm(s["route_propagation"]), mm(s["publish_to_first_reply"]),
                     mm(s["publish_server_load"]), mm(s["publish_outputs_check"]), mm(s["publish_cli"]),
                     f"{s['steady_p99_ms']} ms",
                     f"{s['control_cli_p99_ms']} ({s['control_cli_p99_ratio']})",
                     f"{s['route_swap_p99_ms']} ({s['route_swap_p99_ratio']})",
                     f"{s['route_swap_after_cli_p99_ms']} ({s['route_swap_after_cli_p99_ratio']})",
                     f"{s['publish_swap_p99_ms']} ({s['publish_swap_p99_ratio']})", str(s["calls"]),
                     str(s["failed_calls"])))
    print("(median/max; P99 in ms, ratio to steady state in parentheses)")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/dev bench swap", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny random-weight BERT (quick) instead of the MiniLM demo")
    p.add_argument("--backends", default="file,standin", help="comma list of: file, standin (default both)")
    p.add_argument("--swaps", type=int, default=6, help="route-only swaps per backend (default 6)")
    p.add_argument("--publishes", type=int, default=3, help="publish+load swaps per backend (default 3)")
    p.add_argument("--concurrency", type=int, default=8, help="calls kept in flight (default 8)")
    p.add_argument("--gap-s", type=float, default=2.0, help="quiet seconds before each swap (default 2)")
    p.add_argument("--frontend", choices=("python", "native"),
                   help="the server's front end (default: the server's own, auto), as bench serve --frontend")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="extra `ortserve serve` argument (repeatable), e.g. --server-arg=--intra-op-threads=2")
    p.add_argument("--json-out", type=Path, help="write the results here as JSON")
    p.add_argument("--keep", action="store_true", help="keep the work directory (server logs)")
    args = p.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - {"file", "standin"})
    if unknown or not backends or args.swaps < 1 or args.publishes < 0 or args.concurrency < 1:
        p.error(f"bad arguments (unknown backends {unknown})" if unknown else "need --swaps >= 1, --concurrency >= 1")

    workdir = Path(tempfile.mkdtemp(prefix="bench-swap-"))
    try:
        kind, bundles = build_bundles(workdir, tiny=args.tiny, count=2 + max(1, args.publishes))
        progress(f"bundles: {kind} x{len(bundles)} in {workdir}")
        summaries = {}
        for name in backends:
            summaries[name] = summarize(run_backend(name, bundles, args, workdir))
        print_table(summaries)
        if args.json_out:
            doc = {"bundle": kind, "frontend": args.frontend or "auto", "concurrency": args.concurrency,
                   "swaps": args.swaps, "publishes": args.publishes, "cpus": os.cpu_count(), "results": summaries}
            write_json(args.json_out, doc)
            progress(f"wrote {args.json_out}")
        return 0 if all(s["failed_calls"] == 0 for s in summaries.values()) else 1
    finally:
        if args.keep:
            progress(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

