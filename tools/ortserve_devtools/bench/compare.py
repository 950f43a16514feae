"""Side by side, in the same minutes: two arms measured in alternating rounds (ABBA), their ratio per round.

    scripts/dev bench serve --compare rest       # gRPC against REST (binary extension) on one server, at C=1 and C=32
    scripts/dev bench serve --compare tracing    # gRPC at C=32 on a server without tracing against one exporting every
                                       #   call's spans to an OTLP receiver in this process

A shared machine drifts by 10-20% within minutes; alternating the arms round by round and taking the median of
the per-round ratios keeps that drift out of the comparison.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import grpc
import numpy as np

from ortserve_devtools.bench import report
from ortserve_devtools.bench.v2client import (
    RestCall,
    V2Target,
    build_request,
    build_rest_request,
    channel_options,
    infer_method,
    parse_logits,
    parse_rest_logits,
    rest_infer_url,
)
from ortserve_devtools.loadgen import Call, LoadSpec, Payload, run_load
from ortserve_devtools.server_process import ServerProcess, free_port, start_until_ready

LEVELS = {"rest": (1, 32), "tracing": (32,)}


@dataclass
class Arm:
    name: str
    call: Call
    payloads: list[Payload]


class SpanSink:
    """An OTLP/gRPC trace receiver that counts what it is sent (the collector the traced server exports to)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        sink = self
        self.spans = 0
        self._lock = threading.Lock()

        class _Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                with sink._lock:
                    sink.spans += n
                return trace_service_pb2.ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Service(), self._server)
        self.endpoint = f"http://127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def close(self) -> None:
        self._server.stop(grace=None)


@contextlib.contextmanager
def _servers(bench: Any, variants: dict[str, list[str]]) -> Iterator[dict[str, ServerProcess]]:
    started: dict[str, ServerProcess] = {}
    try:
        for name, extra in variants.items():
            log = bench.args.cache_dir / "logs" / f"server-compare-{name}.log"
            bench.progress.say(f"starting ortserve ({name}; log {log})")
            started[name] = start_until_ready(
                ["--bundle", str(bench.ensure_bundle()), "--model-name", bench.args.model, *bench.server_args(),
                 *extra], model=bench.args.model, log_path=log)
        yield started
    finally:
        for server in started.values():
            server.stop()


async def run(bench: Any, what: str, rounds: int) -> dict[str, Any]:
    """`bench` is the cli's Bench (its settings, corpus and bundle); returns the report."""
    target: V2Target = bench.target
    grpc_payloads = [Payload(build_request(target, [t]), 1) for t in bench.corpus]
    sink = SpanSink() if what == "tracing" else None
    http_port = free_port()
    variants = ({"main": ["--http-port", str(http_port)]} if what == "rest" else
                {"plain": [], "traced": ["--otlp-endpoint", sink.endpoint, "--trace-sample-ratio", "1"]})
    try:
        with _servers(bench, variants) as servers:
            channels = {name: grpc.aio.insecure_channel(s.address, options=channel_options())
                        for name, s in servers.items()}
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            try:
                if what == "rest":
                    rest_target = replace(target, address=f"127.0.0.1:{http_port}")
                    rest = RestCall(session, rest_infer_url(rest_target))
                    rest_payloads = [_rest_payload(target, t) for t in bench.corpus]
                    await _same_answers(target, infer_method(channels["main"]), rest, bench.corpus[:4])
                    arms = [Arm("gRPC", infer_method(channels["main"]), grpc_payloads),
                            Arm("REST binary", rest, rest_payloads)]
                else:
                    arms = [Arm("tracing off", infer_method(channels["plain"]), grpc_payloads),
                            Arm("tracing on", infer_method(channels["traced"]), grpc_payloads)]
                runs = await _rounds(bench, arms, LEVELS[what], rounds)
            finally:
                await session.close()
                for channel in channels.values():
                    await channel.close()
    finally:
        if sink is not None:
            sink.close()
    result = {"compare": what, "arms": [a.name for a in arms], "rounds": rounds, "runs": runs,
              "summary": _summary(runs, [a.name for a in arms], LEVELS[what])}
    if sink is not None:
        result["spans_exported"] = sink.spans  # warm-up calls' included: 5 per call (server span and 4 steps)
    return result


def _rest_payload(target: V2Target, text: str) -> Payload:
    body, headers = build_rest_request(target, [text])
    return Payload(body, 1, headers)


async def _same_answers(target: V2Target, grpc_call: Call, rest: RestCall, texts: Sequence[str]) -> None:
    """Both transports answer the same texts alike before either is timed."""
    over_grpc = parse_logits(target, await grpc_call(build_request(target, list(texts)), timeout=30.0))
    body, headers = build_rest_request(target, list(texts))
    reply = await rest(body, timeout=30.0, metadata=headers)
    over_rest = parse_rest_logits(target, reply, rest.last_header_length)
    if not np.array_equal(over_grpc, over_rest):
        raise RuntimeError(f"REST and gRPC answered differently: {over_rest} against {over_grpc}")


async def _rounds(bench: Any, arms: list[Arm], levels: Sequence[int], rounds: int) -> list[dict[str, Any]]:
    args = bench.args
    runs = []
    for r in range(rounds):
        for concurrency in levels:
            for arm in arms if r % 2 == 0 else arms[::-1]:
                spec = LoadSpec(mode="closed", warmup_s=args.warmup, duration_s=args.duration,
                                concurrency=concurrency, timeout_s=args.timeout, seed=args.seed + r)
                bench.progress.say(f"round {r + 1}/{rounds}: {arm.name} at C={concurrency}")
                result = await run_load(spec, arm.call, arm.payloads)
                record = report.run_record(arm.name, result, mode="closed", concurrency=concurrency,
                                           texts_per_request=1, series=arm.name, point=f"C={concurrency}")
                record["round"] = r
                bench.progress.say(f"  -> {record['texts_per_s']:.1f} texts/s, P50 "
                                   f"{record['latency_ms'].get('p50', float('nan')):.2f} ms")
                runs.append(record)
                await asyncio.sleep(0.5)  # the last calls' replies and logs settle before the next arm
    return runs


def _summary(runs: list[dict[str, Any]], arms: list[str], levels: Sequence[int]) -> list[dict[str, Any]]:
    """Per concurrency: each arm's median texts/s and P50, and the median of the per-round ratios B/A."""
    a, b = arms
    out = []
    for concurrency in levels:
        at = [r for r in runs if r["concurrency"] == concurrency]
        per_round = {}
        for r in at:
            per_round.setdefault(r["round"], {})[r["series"]] = r
        ratios = [pair[b]["texts_per_s"] / pair[a]["texts_per_s"] for pair in per_round.values()
                  if a in pair and b in pair and pair[a]["texts_per_s"] > 0]
        row: dict[str, Any] = {"concurrency": concurrency, "ratio": statistics.median(ratios) if ratios else None,
                               "ratios": ratios}
        for name in arms:
            mine = [r for r in at if r["series"] == name]
            row[name] = {"texts_per_s": statistics.median(r["texts_per_s"] for r in mine),
                         "p50_ms": statistics.median(r["latency_ms"].get("p50", float("nan")) for r in mine),
                         "errors": sum(sum(r["errors"].values()) for r in mine)}
        out.append(row)
    return out


def print_summary(result: dict[str, Any], cpu: str) -> None:
    a, b = result["arms"]
    print(f"{b} against {a}, {result['rounds']} alternating rounds, on {cpu}")
    print(f"{'C':>4}  {a + ' texts/s':>18}  {b + ' texts/s':>18}  {a + ' P50':>14}  {b + ' P50':>14}  ratio "
          "(median, per round)")
    for row in result["summary"]:
        ratios = ", ".join(f"{x:.3f}" for x in row["ratios"])
        print(f"{row['concurrency']:>4}  {row[a]['texts_per_s']:>18.1f}  {row[b]['texts_per_s']:>18.1f}  "
              f"{row[a]['p50_ms']:>11.2f} ms  {row[b]['p50_ms']:>11.2f} ms  {row['ratio']:.3f} ({ratios})")
        if row[a]["errors"] or row[b]["errors"]:
            print(f"      errors: {a} {row[a]['errors']}, {b} {row[b]['errors']}")
    if "spans_exported" in result:
        print(f"spans exported to the OTLP receiver: {result['spans_exported']} (5 per traced call, warm-up included)")
