"""One load process of the soak: a KServe V2 client driven by ortserve_devtools.loadgen, commanded over stdin/stdout.

    python -m ortserve_devtools.soak.client --address 127.0.0.1:PORT --model M --index 0   (tools/ on PYTHONPATH)

Protocol: the process prints {"ready": true} once its channel answers ModelReady, then reads one JSON command per
line on stdin and answers each with one JSON line on stdout:
  {"cmd": "closed", "concurrency": C, "warmup_s": W, "duration_s": S, "timeout_s": T}
      a closed loop (saturation): loadgen's callers back off on RESOURCE_EXHAUSTED as a real client does
  {"cmd": "open", "rate": R, "duration_s": S, "timeout_s": T, "start_at": MONOTONIC, "out": PATH,
   "max_outstanding": N}
      Poisson arrivals at R calls/s from CLOCK_MONOTONIC time `start_at` (shared by every process on the host);
      every call is recorded (end time, latency, final status, refusals, answering version) into PATH (.npz)
  {"cmd": "exit"}

A call refused with RESOURCE_EXHAUSTED is retried after the server's `grpc-retry-pushback-ms` (or a jittered
backoff, as gRPC's retry policy) while its deadline allows: it counts as refused-and-retried, and as failed only
when no attempt succeeds in time. Every other non-OK status is a failed call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
from array import array
from typing import Any

import grpc
import numpy as np

from ortserve.proto import grpc_service_pb2 as pb
from ortserve_devtools.bench.corpus import make_corpus
from ortserve_devtools.bench.v2client import V2Target, build_request, channel_options, infer_method, model_ready
from ortserve_devtools.loadgen import LoadResult, LoadSpec, Payload, pushback_s, run_load

_RETRY_BACKOFF_START_S = 0.010
_RETRY_BACKOFF_MAX_S = 0.5


class CallLog:
    """Every call of an open-loop run, in columns; codes and versions as small integers into their lists."""

    def __init__(self) -> None:
        self.end = array("d")
        self.latency = array("d")
        self.code = array("h")
        self.refusals = array("H")
        self.version = array("h")
        self.codes: list[str] = ["OK"]
        self.versions: list[str] = []
        self.samples: dict[str, str] = {}
        """One message per failing status code."""

    def add(self, started: float, code: str, refusals: int, version: str | None, details: str = "") -> None:
        ended = time.monotonic()
        if code not in self.codes:
            self.codes.append(code)
        if code != "OK":
            self.samples.setdefault(code, details)
        if version is None:
            version_index = -1
        else:
            if version not in self.versions:
                self.versions.append(version)
            version_index = self.versions.index(version)
        self.end.append(ended)
        self.latency.append(ended - started)
        self.code.append(self.codes.index(code))
        self.refusals.append(min(refusals, 65535))
        self.version.append(version_index)

    def save(self, path: str) -> None:
        np.savez(path, end=np.frombuffer(self.end, dtype=np.float64), latency=np.frombuffer(self.latency),
                 code=np.frombuffer(self.code, dtype=np.int16), refusals=np.frombuffer(self.refusals, dtype=np.uint16),
                 version=np.frombuffer(self.version, dtype=np.int16))


def recording_call(method: grpc.aio.UnaryUnaryMultiCallable, log: CallLog, seed: int) -> Any:
    """A loadgen `call` that retries refusals within the deadline and records each call's outcome in `log`."""
    rng = random.Random(seed)

    async def call(body: bytes, timeout: float) -> bytes:
        started = time.monotonic()
        deadline = started + timeout
        refusals = 0
        backoff = _RETRY_BACKOFF_START_S
        while True:
            try:
                reply = await method(body, timeout=max(0.001, deadline - time.monotonic()))
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    refusals += 1
                    wait = max(pushback_s(e), rng.uniform(0, backoff))
                    backoff = min(backoff * 2, _RETRY_BACKOFF_MAX_S)
                    if time.monotonic() + wait < deadline:
                        await asyncio.sleep(wait)
                        continue
                log.add(started, e.code().name, refusals, None, e.details() or "")
                raise
            except Exception as e:
                log.add(started, f"CLIENT_{type(e).__name__}", refusals, None, str(e))
                raise
            version = pb.ModelInferResponse.FromString(reply).model_version
            log.add(started, "OK", refusals, version)
            return reply

    return call


def summary(result: LoadResult) -> dict[str, Any]:
    lat = sorted(result.latencies_s)

    def pct(q: float) -> float | None:
        return round(1000 * lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None

    return {"window_s": result.window_s, "ok": result.ok, "ok_texts": result.ok_texts,
            "errors": dict(result.errors), "error_samples": result.error_samples,
            "sent_in_window": result.sent_in_window, "skipped": result.skipped, "max_lag_s": result.max_lag_s,
            "cancelled_at_drain": result.cancelled_at_drain, "client_cpu_s": result.client_cpu_s,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99)}


async def serve_commands(args: argparse.Namespace) -> None:
    target = V2Target(address=args.address, model=args.model)
    texts = make_corpus(args.corpus_size, seed=args.seed)
    n = args.texts_per_request
    payloads = [Payload(build_request(target, texts[i : i + n]), n) for i in range(0, len(texts) - n + 1, n)]
    loop = asyncio.get_running_loop()
    async with grpc.aio.insecure_channel(args.address, options=channel_options()) as channel:
        deadline = time.monotonic() + args.ready_timeout_s
        while True:
            try:
                if await model_ready(channel, target, timeout=2.0):
                    break
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"soak client {args.index}: model {args.model!r} not ready at {args.address}")
            await asyncio.sleep(0.1)
        method = infer_method(channel)
        _answer({"ready": True})
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            cmd = json.loads(line)
            if cmd["cmd"] == "exit":
                return
            if cmd["cmd"] == "closed":
                spec = LoadSpec(mode="closed", concurrency=int(cmd["concurrency"]), warmup_s=float(cmd["warmup_s"]),
                                duration_s=float(cmd["duration_s"]), timeout_s=float(cmd["timeout_s"]),
                                drain_s=float(cmd["timeout_s"]) + 2, seed=args.index)
                result = await run_load(spec, method, payloads)
                _answer(summary(result))
            elif cmd["cmd"] == "open":
                log = CallLog()
                spec = LoadSpec(mode="open", rate=float(cmd["rate"]), warmup_s=0.0,
                                duration_s=float(cmd["duration_s"]), timeout_s=float(cmd["timeout_s"]),
                                drain_s=float(cmd["timeout_s"]) + 2,
                                max_outstanding=int(cmd.get("max_outstanding", args.max_outstanding)),
                                seed=args.index)
                wait = float(cmd["start_at"]) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                run = asyncio.create_task(run_load(spec, recording_call(method, log, args.index), payloads))
                # SIGUSR1 ends the run early (the soak's server died): the calls so far are still saved.
                loop.add_signal_handler(signal.SIGUSR1, run.cancel)
                try:
                    done = summary(await run)
                except asyncio.CancelledError:
                    done = {**summary(LoadResult()), "aborted": True}
                finally:
                    loop.remove_signal_handler(signal.SIGUSR1)
                log.save(cmd["out"])
                _answer({**done, "codes": log.codes, "versions": log.versions, "failure_samples": log.samples,
                         "recorded": len(log.end)})
            else:
                raise SystemExit(f"soak client {args.index}: unknown command {cmd!r}")


def _answer(doc: dict[str, Any]) -> None:
    print(json.dumps(doc), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one load process of scripts/dev soak (commands on stdin)")
    p.add_argument("--address", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--index", type=int, default=0, help="this process's number: seeds its corpus and arrivals")
    p.add_argument("--texts-per-request", type=int, default=1)
    p.add_argument("--corpus-size", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-outstanding", type=int, default=512)
    p.add_argument("--ready-timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    args.seed = args.seed * 100 + args.index
    try:
        import uvloop

        uvloop.run(serve_commands(args))
    except ImportError:
        asyncio.run(serve_commands(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
