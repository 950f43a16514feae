"""What a shadow costs the stable version (issue 55): the MiniLM sentiment classifier as v1 on a registry, an equal
copy as v2, closed-loop callers saturating the server, in alternating rounds without a shadow and with v2 shadowing
10% of the calls (`registry route sentiment v1=100 --shadow v2=10`):

    scripts/dev bench shadow [--out DIR] [--seconds 15] [--rounds 3] [--callers 8] [--texts 1] [--percent 10]
                         [--frontend auto] [--json-out FILE]

Each round: texts/s, P50 and P99 of the live calls; with the shadow, what became of the copies (compared, dropped:
the lowest class gets what the engine leaves) and their agreement. Prints the CPU and the median of the rounds
side by side, and P99 with / without. Builds the bundle offline once (scripts/make_demo_bundle.py). Needs the bench
or dev extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from ortserve_devtools.bench.corpus import make_corpus
from ortserve_devtools.bench.machine import cpu_model, percentile
from ortserve_devtools.bench.report import write_json
from ortserve_devtools.bench.v2client import V2Target, build_request, channel_options, infer_method
from ortserve_devtools.checkout import ROOT
from ortserve_devtools.loadgen import LoadResult, LoadSpec, Payload, run_load
from ortserve_devtools.server_process import ServerProcess

MODEL = "sentiment"
BIN = Path(sys.executable).parent




def registry(store: str, *args: str) -> None:
    subprocess.run([str(BIN / "registry"), "--registry", store, *args], check=True, stdout=subprocess.DEVNULL)


def status(server: ServerProcess) -> dict[str, Any]:
    with grpc.insecure_channel(server.address) as channel:
        call = channel.unary_unary("/ortserve.admin.v1.Admin/Status", request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        return json.loads(call(b"", timeout=10))["models"].get(MODEL, {})


def wait_shadow(server: ServerProcess, want: dict[str, Any] | None) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        info = status(server)
        if info.get("shadow") == want and "v1" in info.get("routable", []):
            return
        time.sleep(0.2)
    raise SystemExit(f"bench_shadow: the server did not put shadow {want} in force")


def copies(server: ServerProcess) -> dict[str, Any]:
    for pair in status(server).get("shadow_figures", []):
        if pair["candidate"] == "v2":
            return pair
    return {"outcomes": {}, "judged": 0, "agreed": 0}


async def saturate(server: ServerProcess, texts: Sequence[str], *, callers: int, per_call: int,
                   seconds: float) -> LoadResult:
    target = V2Target(server.address, MODEL)
    payloads = [Payload(build_request(target, list(texts[i:i + per_call])), texts=per_call)
                for i in range(0, len(texts) - per_call + 1, per_call)]
    spec = LoadSpec(mode="closed", warmup_s=2.0, duration_s=seconds, concurrency=callers, timeout_s=None,
                    drain_s=60.0)
    async with grpc.aio.insecure_channel(server.address, options=channel_options()) as channel:
        return await run_load(spec, infer_method(channel), payloads)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/dev bench shadow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="bundle, store and logs (default: a temporary directory)")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of each")
    p.add_argument("--callers", type=int, default=8)
    p.add_argument("--texts", type=int, default=1, help="texts a call")
    p.add_argument("--percent", type=int, default=10, help="the shadow's share of the calls")
    p.add_argument("--frontend", default="auto")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-shadow-"))
    out.mkdir(parents=True, exist_ok=True)
    bundle = out / "minilm-sentiment"
    if not (bundle / "manifest.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_bundle.py"), str(bundle)], check=True,
                       stdout=subprocess.DEVNULL)
    copy = out / "minilm-sentiment-copy"  # the same graph in other bytes: another version, the same answers
    if not copy.is_dir():
        shutil.copytree(bundle, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["notes"] = f"{manifest.get('notes', '')} (a copy)"
        (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
    store_dir = out / "store"
    shutil.rmtree(store_dir, ignore_errors=True)
    store = f"file://{store_dir}"
    registry(store, "publish", "--model", MODEL, "--version", "v1", "--bundle", str(bundle), "--weight", "100")
    registry(store, "publish", "--model", MODEL, "--version", "v2", "--bundle", str(copy))
    texts = make_corpus(4096, seed=55)
    report: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(), "seconds": args.seconds,
                              "callers": args.callers, "texts_per_call": args.texts, "percent": args.percent,
                              "frontend": args.frontend, "rounds": []}
    print(f"CPU: {report['cpu']}, {report['cores']} cores; {args.callers} callers x {args.texts} text(s), "
          f"{args.seconds:g} s windows, shadow {args.percent}%")
    server = ServerProcess(["--registry", store, "--frontend", args.frontend], log_path=out / "server.log",
                           cwd=out)  # not this checkout: `-m` would import its source tree, which has no engine
    server.wait_ready(300, MODEL)
    try:
        wait_shadow(server, None)
        for n in range(args.rounds):
            for shadow in (False, True):
                if shadow:
                    registry(store, "route", MODEL, "v1=100", "--shadow", f"v2={args.percent}")
                    wait_shadow(server, {"version": "v2", "percent": args.percent})
                else:
                    registry(store, "route", MODEL, "v1=100")
                    wait_shadow(server, None)
                before = copies(server)["outcomes"]
                r = asyncio.run(saturate(server, texts, callers=args.callers, per_call=args.texts,
                                         seconds=args.seconds))
                time.sleep(1.0)  # the copies still queued get their answers or their drop
                after = copies(server)
                row = {"round": n, "shadow": shadow, "texts_per_s": round(r.ok_texts / r.window_s, 1),
                       "p50_ms": round(1000 * statistics.median(r.latencies_s), 2),
                       "p99_ms": round(1000 * percentile(r.latencies_s, 0.99), 2), "errors": dict(r.errors),
                       "copies": {k: after["outcomes"].get(k, 0) - before.get(k, 0) for k in after["outcomes"]}}
                report["rounds"].append(row)
                print(f"  round {n} {'shadow ' if shadow else 'alone  '} {row['texts_per_s']:8.1f} texts/s  P50 "
                      f"{row['p50_ms']:7.2f} ms  P99 {row['p99_ms']:7.2f} ms  copies {row['copies']}")
        report["agreement"] = {"judged": after["judged"], "agreed": after["agreed"]}
    finally:
        server.stop(30)
    med = {s: {k: statistics.median(r[k] for r in report["rounds"] if r["shadow"] == s)
               for k in ("texts_per_s", "p50_ms", "p99_ms")} for s in (False, True)}
    report["median"] = {"alone": med[False], "shadow": med[True],
                        "p99_ratio": round(med[True]["p99_ms"] / med[False]["p99_ms"], 3),
                        "texts_per_s_ratio": round(med[True]["texts_per_s"] / med[False]["texts_per_s"], 3)}
    m = report["median"]
    print(f"median of {args.rounds}: alone {med[False]['texts_per_s']:.1f} texts/s, P50 {med[False]['p50_ms']:.2f} "
          f"ms, P99 {med[False]['p99_ms']:.2f} ms; with the shadow {med[True]['texts_per_s']:.1f} texts/s, P50 "
          f"{med[True]['p50_ms']:.2f} ms, P99 {med[True]['p99_ms']:.2f} ms: P99 x{m['p99_ratio']}, texts/s "
          f"x{m['texts_per_s_ratio']}; agreement {report['agreement']['agreed']}/{report['agreement']['judged']}")
    if args.json_out:
        write_json(args.json_out, report)
    return 0

