"""Bulk jobs and interactive calls on one server (issue 45), on the MiniLM embedding model, the server's defaults:

    scripts/dev bench mixed [--out DIR] [--seconds 10] [--frontend auto] [--json-out FILE] [--only batch,mixed,logs]

1. batch clients (`batch`): C = 8 and 32 closed-loop callers x 32 texts a call with **no deadline** (as LangChain,
   the OpenAI SDK and plain HTTP clients call), over REST and over gRPC: texts/s, refusals, REST / gRPC;
2. interactive beside bulk (`mixed`): one-text calls, open loop at --rate a second, alone (idle P50/P99), then beside
   --bulk callers sending 2,048-text calls back to back (no deadline): the one-text calls' P50/P99 and P99 / idle
   P99, and the bulk texts/s;
3. what the request log costs (`logs`): one-text calls at C = 8 over gRPC (where a line per call costs most) with
   every call's line (request_log_sample 1) and with the default sample, in alternating rounds: texts/s and log
   bytes per call.

Builds the MiniLM embedding bundle offline once (scripts/make_demo_bundle.py --kind embedding). Prints the CPU and
a table; --json-out writes the figures. Needs the bench or dev extra.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from ortserve_devtools.bench import prom
from ortserve_devtools.bench.corpus import make_corpus
from ortserve_devtools.bench.machine import cpu_flags, cpu_model, percentile
from ortserve_devtools.bench.report import write_json
from ortserve_devtools.bench.v2client import (
    RestCall,
    V2Target,
    build_request,
    build_rest_request,
    channel_options,
    infer_method,
    rest_infer_url,
)
from ortserve_devtools.checkout import ROOT
from ortserve_devtools.loadgen import LoadResult, LoadSpec, Payload, run_load
from ortserve_devtools.server_process import ServerProcess

MODEL = "search"
BULK_TEXTS = 2048





def start(bundle: Path, out: Path, frontend: str, env: dict[str, str] | None = None) -> ServerProcess:
    server = ServerProcess(["--bundle", str(bundle), "--model-name", MODEL, "--frontend", frontend],
                           log_path=out / f"server-{len(list(out.glob('server-*.log')))}.log", env=env, http=True,
                           cwd=out)  # not this checkout: `-m` would import its source tree, which has no engine
    server.wait_ready(180, MODEL)
    return server


async def closed(server: ServerProcess, texts: Sequence[str], *, callers: int, per_call: int, seconds: float,
                 rest: bool) -> LoadResult:
    target = V2Target(server.address if not rest else f"127.0.0.1:{server.http_port}", MODEL,
                      output_name="EMBEDDING")
    chunks = [texts[i:i + per_call] for i in range(0, len(texts) - per_call + 1, per_call)]
    spec = LoadSpec(mode="closed", warmup_s=2.0, duration_s=seconds, concurrency=callers, timeout_s=None,
                    drain_s=120.0)
    if rest:
        bodies = [(build_rest_request(target, c), len(c)) for c in chunks]
        payloads = [Payload(body, texts=n, metadata=headers) for (body, headers), n in bodies]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            return await run_load(spec, RestCall(session, rest_infer_url(target)), payloads)
    payloads = [Payload(build_request(target, c), texts=len(c)) for c in chunks]
    async with grpc.aio.insecure_channel(server.address, options=channel_options()) as channel:
        return await run_load(spec, infer_method(channel), payloads)


async def mixed(server: ServerProcess, texts: Sequence[str], *, bulk: int, rate: float,
                seconds: float) -> tuple[LoadResult, LoadResult | None]:
    """One-text calls at `rate`/s open loop, beside `bulk` closed-loop callers of BULK_TEXTS texts (none: alone)."""
    target = V2Target(server.address, MODEL, output_name="EMBEDDING")
    one = [Payload(build_request(target, [t]), texts=1) for t in texts[:500]]
    big = [Payload(build_request(target, list(texts[i:i + BULK_TEXTS])), texts=BULK_TEXTS)
           for i in range(0, len(texts) - BULK_TEXTS + 1, BULK_TEXTS // 2)]
    async with grpc.aio.insecure_channel(server.address, options=channel_options(64 << 20)) as channel:
        call = infer_method(channel)
        interactive = run_load(LoadSpec(mode="open", warmup_s=4.0, duration_s=seconds, rate=rate, timeout_s=30.0,
                                        seed=1), call, one)
        if not bulk:
            return await interactive, None
        background = asyncio.ensure_future(run_load(
            LoadSpec(mode="closed", warmup_s=4.0, duration_s=seconds, concurrency=bulk, timeout_s=None,
                     drain_s=300.0), call, big))
        await asyncio.sleep(4.0)  # the interactive window opens after the same warm-up
        before = engine_texts(server)
        measured = await interactive
        ran = engine_texts(server) - before
        result = await background
        # A 2,048-text call outlasts a short window: the bulk rate is what the engine ran, less the one-text calls.
        result.ok_texts = int(ran - measured.ok - sum(measured.errors.values()))
        result.window_s = measured.window_s
        return measured, result


def engine_texts(server: ServerProcess) -> float:
    """Texts the engine has run (its batches' sizes, summed), from the server's metrics."""
    batches = prom.scrape(server.metrics_url, model=MODEL).histograms.get("batch_size")
    return batches.total if batches is not None else 0.0


def log_bytes(server: ServerProcess) -> int:
    return server.log_path.stat().st_size if server.log_path is not None else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/dev bench mixed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="bundle and logs (default: a temporary directory)")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--frontend", default="auto")
    p.add_argument("--bulk", type=int, default=2, help="bulk callers beside the one-text calls")
    p.add_argument("--rate", type=float, default=10.0, help="one-text calls a second")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the logging comparison")
    p.add_argument("--only", default="batch,mixed,logs")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    parts = set(args.only.split(","))
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-mixed-"))
    out.mkdir(parents=True, exist_ok=True)
    bundle = out / "minilm-embedding"
    if not (bundle / "manifest.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_bundle.py"), str(bundle), "--kind",
                        "embedding"], check=True, stdout=subprocess.DEVNULL)
    texts = make_corpus(8192, seed=45)
    report: dict[str, Any] = {"cpu": cpu_model(), "flags": ", ".join(cpu_flags()), "cores": os.cpu_count(),
                              "seconds": args.seconds, "frontend": args.frontend}
    print(f"CPU: {report['cpu']} ({report['flags']}), {report['cores']} cores; {args.seconds:g} s windows")

    if "batch" in parts:
        server = start(bundle, out, args.frontend)
        try:
            rows = {}
            for callers in (8, 32):
                for rest in (False, True):
                    r = asyncio.run(closed(server, texts, callers=callers, per_call=32, seconds=args.seconds,
                                           rest=rest))
                    rows[f"{'rest' if rest else 'grpc'} C={callers}"] = {
                        "texts_per_s": round(r.ok_texts / r.window_s, 1), "refused": sum(r.errors.values()),
                        "errors": dict(r.errors), "p99_ms": round(1000 * percentile(r.latencies_s, 0.99), 1)}
            report["batch"] = rows
        finally:
            server.stop(30)
        print("batch clients, 32 texts a call, no deadline:")
        for name, row in report["batch"].items():
            print(f"  {name:12s} {row['texts_per_s']:8.1f} texts/s  refused {row['refused']:6d}  "
                  f"P99 {row['p99_ms']:8.1f} ms")
        for callers in (8, 32):
            grpc_rate = report["batch"][f"grpc C={callers}"]["texts_per_s"]
            ratio = report["batch"][f"rest C={callers}"]["texts_per_s"] / grpc_rate if grpc_rate else float("nan")
            report["batch"][f"rest/grpc C={callers}"] = round(ratio, 3)
            print(f"  REST / gRPC at C={callers}: {ratio:.2f}")

    if "mixed" in parts:
        server = start(bundle, out, args.frontend)
        try:
            idle, _ = asyncio.run(mixed(server, texts, bulk=0, rate=args.rate, seconds=args.seconds))
            beside, bulk = asyncio.run(mixed(server, texts, bulk=args.bulk, rate=args.rate, seconds=args.seconds))
        finally:
            server.stop(30)
        idle_p99, busy_p99 = percentile(idle.latencies_s, 0.99), percentile(beside.latencies_s, 0.99)
        report["mixed"] = {
            "idle_p50_ms": round(1000 * statistics.median(idle.latencies_s), 2),
            "idle_p99_ms": round(1000 * idle_p99, 2),
            "beside_bulk_p50_ms": round(1000 * statistics.median(beside.latencies_s), 2),
            "beside_bulk_p99_ms": round(1000 * busy_p99, 2), "p99_over_idle": round(busy_p99 / idle_p99, 2),
            "one_text_errors": dict(beside.errors), "bulk_callers": args.bulk,
            "bulk_texts_per_s": round(bulk.ok_texts / bulk.window_s, 1) if bulk and bulk.window_s else 0.0,
            "bulk_errors": dict(bulk.errors) if bulk else {}}
        m = report["mixed"]
        print(f"one-text calls at {args.rate:g}/s: idle P50 {m['idle_p50_ms']} ms, P99 {m['idle_p99_ms']} ms; beside "
              f"{args.bulk} bulk callers of {BULK_TEXTS} texts: P50 {m['beside_bulk_p50_ms']} ms, P99 "
              f"{m['beside_bulk_p99_ms']} ms ({m['p99_over_idle']}x idle); bulk {m['bulk_texts_per_s']} texts/s")

    if "logs" in parts:
        runs: dict[str, list[dict[str, float]]] = {"every call": [], "default sample": []}
        for _ in range(args.rounds):
            for name, env in (("every call", {"ORTSERVE_REQUEST_LOG_SAMPLE": "1"}), ("default sample", {})):
                server = start(bundle, out, args.frontend, env=env)
                try:
                    before = log_bytes(server)
                    r = asyncio.run(closed(server, texts, callers=8, per_call=1, seconds=args.seconds, rest=False))
                    calls = r.ok + sum(r.errors.values())
                    runs[name].append({"texts_per_s": r.ok_texts / r.window_s,
                                       "log_bytes_per_call": (log_bytes(server) - before) / max(1, calls)})
                finally:
                    server.stop(30)
        report["logs"] = {name: {"texts_per_s": round(max(x["texts_per_s"] for x in rs), 1),
                                 "log_bytes_per_call": round(statistics.median(x["log_bytes_per_call"] for x in rs), 1)}
                          for name, rs in runs.items()}
        for name, row in report["logs"].items():
            print(f"request log, {name}: {row['texts_per_s']} texts/s (best of {args.rounds}), "
                  f"{row['log_bytes_per_call']} log bytes a call")
    if args.json_out:
        write_json(args.json_out, report)
    return 0

