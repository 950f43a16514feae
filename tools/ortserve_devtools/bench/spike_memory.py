"""Memory after a spike, and what a maximal legal call costs: issue 23's bound on work and memory per call.

    scripts/dev bench spike-memory --bundle demo-bundle --frontend native --calls 200

Serves the bundle, then sends `--calls` ordinary calls (one short text), `--calls` maximal legal calls
(max_texts_per_request texts, each long enough to fill max_seq_len tokens) and `--calls` ordinary calls again,
recording the server's RSS after each phase, and the server CPU and the engine time (from the server's metrics) per
maximal call. Holds (exit 1 otherwise): RSS after the maximal calls and after the ordinary ones that follow stays
within --bound (15%) of the RSS after the first ordinary ones.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import grpc
import psutil

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve_devtools.bench.prom import sample_sum
from ortserve_devtools.bench.report import write_json
from ortserve_devtools.bench.v2client import text_request
from ortserve_devtools.server_process import ServerProcess, start_until_ready

MODEL = "m"
MAX_TEXTS = 128


def request(texts: list[str]) -> pb.ModelInferRequest:
    return text_request(MODEL, texts)


def engine_seconds(server: ServerProcess) -> float:
    return sample_sum(server.metrics_url, "ortserve_engine_duration_seconds_sum")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/dev bench spike-memory", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--frontend", choices=("python", "native"), default="native")
    p.add_argument("--calls", type=int, default=200, help="calls per phase")
    p.add_argument("--bound", type=float, default=0.15, help="allowed RSS growth over the ordinary phase")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)

    log = Path(tempfile.mkdtemp(prefix="ortserve-spike-")) / "server.log"
    server = start_until_ready(["--bundle", str(args.bundle), "--model-name", MODEL, "--frontend", args.frontend,
                                "--max-texts-per-request", str(MAX_TEXTS)], model=MODEL, log_path=log)
    proc = psutil.Process(server.pid)
    # A review long enough for max_seq_len tokens whatever the model (the excess is never tokenized).
    long_text = " ".join(["the plot was thin but the acting and the music carried the whole film"] * 40)
    phases: dict[str, dict[str, float]] = {}
    try:
        with grpc.insecure_channel(server.address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)

            def phase(name: str, texts: list[str]) -> None:
                cpu0, engine0, started = proc.cpu_times(), engine_seconds(server), time.monotonic()
                for _ in range(args.calls):
                    stub.ModelInfer(request(texts), timeout=300)
                cpu1, engine1 = proc.cpu_times(), engine_seconds(server)
                phases[name] = {
                    "rss_mib": round(proc.memory_info().rss / 2**20, 1),
                    "wall_s": round(time.monotonic() - started, 2),
                    "server_cpu_s_per_call": round((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / args.calls, 4),
                    "engine_s_per_call": round((engine1 - engine0) / args.calls, 4),
                }
                print(f"{name:>10}: {phases[name]}", flush=True)

            phase("ordinary", ["a short review"])
            phase("maximal", [long_text] * MAX_TEXTS)
            phase("after", ["a short review"])
    finally:
        server.stop()
    base = phases["ordinary"]["rss_mib"]
    result = {"frontend": args.frontend, "calls": args.calls, "phases": phases,
              "maximal_over_ordinary": round(phases["maximal"]["rss_mib"] / base, 3),
              "after_over_ordinary": round(phases["after"]["rss_mib"] / base, 3)}
    print(json.dumps(result, indent=2))
    if args.json_out:
        write_json(args.json_out, result)
    return 0 if max(result["maximal_over_ordinary"], result["after_over_ordinary"]) <= 1 + args.bound else 1

