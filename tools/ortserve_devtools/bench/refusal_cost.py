"""What a refused call costs the server: CPU per RESOURCE_EXHAUSTED answer, on one front end.

    scripts/dev bench refusal-cost --bundle demo-bundle --frontend native --calls 1000

Serves the bundle with one engine lane and max_queue_items 1, takes the engine with one large call (it runs alone
for seconds), queues one more call, then sends `--calls` one-text calls one after another: each finds the queue full
and is refused. The server's CPU over that window, less the one thread running the large call, divided by the
refusals, is the cost of a refusal; the caller-side round trip is reported too. Exit 1 when a call in the window was
not refused (the large call ended too soon: raise --blocker-texts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

import grpc

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve_devtools.bench.prom import sample_sum
from ortserve_devtools.bench.report import write_json
from ortserve_devtools.bench.server_cpu import thread_cpu_seconds
from ortserve_devtools.bench.v2client import text_request
from ortserve_devtools.server_process import ServerProcess, start_until_ready

MODEL = "m"


def request(texts: list[str]) -> pb.ModelInferRequest:
    return text_request(MODEL, texts)


def queue_depth(server: ServerProcess) -> float:
    return sample_sum(server.metrics_url, "ortserve_queue_depth{")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/dev bench refusal-cost", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--frontend", choices=("python", "native"), default="native")
    p.add_argument("--calls", type=int, default=1000, help="refused calls to send")
    p.add_argument("--blocker-texts", type=int, default=128, help="texts in the call that holds the engine")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)

    log = Path(tempfile.mkdtemp(prefix="ortserve-refusal-")) / "server.log"
    server = start_until_ready(["--bundle", str(args.bundle), "--model-name", MODEL, "--frontend", args.frontend,
                                "--engine-concurrency", "1", "--intra-op-threads", "1", "--max-queue-items", "1",
                                "--default-timeout-ms", "0"], model=MODEL, log_path=log)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            stub.ModelInfer(request(["warm up"]), timeout=60)
            long_text = " ".join(["a rather long sentence about the plot and the acting of this film"] * 12)
            blocker: Future = stub.ModelInfer.future(request([long_text] * args.blocker_texts), timeout=600)
            time.sleep(0.3)  # the large call is running alone
            queued: Future = stub.ModelInfer.future(request(["queued behind it"]), timeout=600)
            until = time.monotonic() + 30
            while queue_depth(server) < 1:
                if time.monotonic() > until:
                    print("refusal_cost: the second call never queued", file=sys.stderr)
                    return 1
                time.sleep(0.02)
            before, started = thread_cpu_seconds(server.pid), time.monotonic()
            latencies: list[float] = []
            codes: dict[str, int] = {}
            for _ in range(args.calls):
                sent = time.perf_counter()
                try:
                    stub.ModelInfer(request(["refuse me"]), timeout=30)
                    codes["OK"] = codes.get("OK", 0) + 1
                except grpc.RpcError as e:
                    codes[e.code().name] = codes.get(e.code().name, 0) + 1
                latencies.append(time.perf_counter() - sent)
            after, window_s = thread_cpu_seconds(server.pid), time.monotonic() - started
            still_running = not blocker.done()
            blocker.result()
            queued.result()
    finally:
        server.stop()
    deltas = {tid: (name, cpu - before.get(tid, (name, 0.0))[1]) for tid, (name, cpu) in after.items()}
    busiest = max(deltas, key=lambda tid: deltas[tid][1])
    rest = sum(cpu for tid, (_, cpu) in deltas.items() if tid != busiest)
    refused = codes.get("RESOURCE_EXHAUSTED", 0)
    result = {
        "frontend": args.frontend, "calls": args.calls, "codes": codes, "window_s": round(window_s, 3),
        "engine_thread": deltas[busiest][0], "engine_thread_cpu_s": round(deltas[busiest][1], 3),
        "server_cpu_s_without_engine": round(rest, 4),
        "server_cpu_us_per_refusal": round(rest / max(refused, 1) * 1e6, 1),
        "round_trip_ms_p50": round(statistics.median(latencies) * 1000, 3),
        "round_trip_ms_p99": round(sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000, 3),
        "blocker_outlasted_window": still_running,
    }
    print(json.dumps(result, indent=2))
    if args.json_out:
        write_json(args.json_out, result)
    if refused != args.calls or not still_running:
        print("refusal_cost: not every call in the window was refused; raise --blocker-texts", file=sys.stderr)
        return 1
    return 0

