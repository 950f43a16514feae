"""The GPU check's measurements (scripts/gpu_check builds first, then runs this): models, engine alone, served
over gRPC, a batch-size sweep and an out-of-memory drill, each stage appended to one JSON file as it finishes, so
a run cut short still leaves what it measured. The last lines printed are the summary table.

    python3 -m ortserve_devtools.gpu.check --out DIR [--stages models,engine,served,sweep,oom] [--budget-s 330]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ortserve_devtools.server_process import ServerProcess

from ortserve_devtools.checkout import ROOT as _ROOT

STAGES = ("models", "engine", "served", "sweep", "oom", "budget")
BATCH = 16
SEQ = 128
LADDER_ROWS = (1, 2, 4, 8, 16, 32, 64)
LADDER_TOKENS = (16, 32, 64, 128)
MODELS = {
    # name: build_tiny_bundle arguments (seeded weights, the graph of a real HF export)
    "bert-base": dict(vocab_size=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_position=512),
    "minilm-l6": dict(vocab_size=30522, hidden=384, layers=6, heads=12, intermediate=1536, max_position=512),
}
# Children start fresh: this process holds a CUDA context and gRPC threads, neither of which survives a fork.
_SPAWN = multiprocessing.get_context("spawn")
REHEARSAL = False  # --rehearse: tiny models, short windows, on whatever device there is
TARGET_P99_MS = 10.0
TARGET_MEMORY_MB = 1600.0
TARGET_SERVED_OVER_ENGINE = 0.9


class Results:
    """Every stage's record, rewritten to DIR/gpu_check.json after each one."""

    def __init__(self, out: Path) -> None:
        self.path = out / "gpu_check.json"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.path.write_text(json.dumps(self.data, indent=1, sort_keys=True, default=str))


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def texts(n: int, seed: int = 0) -> list[str]:
    """Texts long enough to fill SEQ tokens (truncated there), as a batch at that length would be."""
    from ortserve_devtools.bench.corpus import make_corpus

    return make_corpus(n, seed=seed, min_words=150, max_words=150, median_words=150)


def smi(query: str) -> list[str]:
    try:
        done = subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"nvidia-smi failed: {e}"]
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def gpu_used_mb() -> float:
    """Used memory of the whole GPU (cudaMemGetInfo), MB: deltas of it are what a load or a server took. A
    rehearsal on a machine without CUDA reads this process's resident memory instead."""
    from ortserve.engine_ext import EngineError, cuda_memory_info
    from ortserve.service.device_memory import resident_bytes

    try:
        free, total = cuda_memory_info(0)
    except EngineError:
        if not REHEARSAL:
            raise
        return resident_bytes() / 2**20
    return (total - free) / 2**20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def latency_record(lat_s: list[float], texts_done: int, window_s: float) -> dict[str, Any]:
    return {
        "calls": len(lat_s),
        "p50_ms": round(pct(lat_s, 50) * 1e3, 3),
        "p99_ms": round(pct(lat_s, 99) * 1e3, 3),
        "mean_ms": round(statistics.fmean(lat_s) * 1e3, 3),
        "texts_per_s": round(texts_done / window_s, 1),
    }


# ---- models -----------------------------------------------------------------------------------------------------


def build_models(models_dir: Path, shapes: dict[str, dict[str, int]]) -> dict[str, Any]:
    """fp32 bundles from seeded weights, and their fp16 (fused) bundles. Run in a child process: it uses the
    onnxruntime Python package's optimizer, which the measuring process keeps out of its address space."""
    from ortserve.prepare.optimize import optimize_bundle
    from ortserve_devtools.bert_bundle import build_tiny_bundle

    made: dict[str, Any] = {}
    for name, shape in shapes.items():
        fp32 = models_dir / f"{name}-fp32"
        fp16 = models_dir / f"{name}-fp16"
        started = time.perf_counter()
        if not (fp32 / "model.onnx").exists():
            build_tiny_bundle(fp32, max_seq_len=SEQ, **shape)
        built = time.perf_counter()
        if not (fp16 / "model.onnx").exists():
            optimize_bundle(fp32, fp16, "fp16", gate=None)  # the check compares FP16 with FP32 logits itself
        made[name] = {
            "fp32_mb": round((fp32 / "model.onnx").stat().st_size / 2**20, 1),
            "fp16_mb": round((fp16 / "model.onnx").stat().st_size / 2**20, 1),
            "build_s": round(built - started, 1),
            "fp16_s": round(time.perf_counter() - built, 1),
        }
        log(f"model {name}: {made[name]}")
    return made


# ---- engine alone -----------------------------------------------------------------------------------------------


def engine_options(*, cuda_graphs: bool, oom_fallback: str = "off", limit_mb: int = 0, buckets: str = "on") -> Any:
    from ortserve.service.config import Settings
    from ortserve.service.instance import instance_options

    return instance_options(Settings(device="cuda", intra_op_threads=1, cuda_graphs=cuda_graphs,
                                     shape_buckets=buckets, bucket_rows=LADDER_ROWS, bucket_tokens=LADDER_TOKENS,
                                     gpu_oom_fallback=oom_fallback, gpu_memory_limit_mb=limit_mb))


def time_runs(run: Callable[[], Any], *, seconds: float, min_calls: int = 30) -> list[float]:
    lat: list[float] = []
    until = time.perf_counter() + seconds
    while time.perf_counter() < until or len(lat) < min_calls:
        t0 = time.perf_counter()
        run()
        lat.append(time.perf_counter() - t0)
    return lat


def engine_alone(bundle: Path, *, cuda_graphs: bool, seconds: float, batches: tuple[int, ...] = (BATCH,),
                 reference: Any = None) -> dict[str, Any]:
    import numpy as np

    from ortserve.service.instance import ModelInstance

    before = gpu_used_mb()
    started = time.perf_counter()
    classifier = ModelInstance.load(bundle, engine_options(cuda_graphs=cuda_graphs))
    loaded = time.perf_counter()
    classifier.warm_up()
    warmed = time.perf_counter()
    record: dict[str, Any] = {
        "device": classifier.engine.device, "cuda_graphs": classifier.engine.cuda_graphs,
        "cuda_graphs_refused": classifier.engine.cuda_graphs_refused, "load_s": round(loaded - started, 2),
        "warm_up_s": round(warmed - loaded, 2), "warm_shapes": len(classifier.ladder.shapes()),
        "memory_after_warm_up_mb": round(gpu_used_mb() - before, 1),
    }
    corpus = classifier.tokenize(texts(max(batches)))
    record["tokens_per_text"] = int(np.mean([len(ids) for ids in corpus]))
    peak = 0.0
    for batch in batches:
        ids = corpus[:batch]
        lat = time_runs(lambda ids=ids: classifier.run(ids), seconds=seconds)
        record[f"b{batch}"] = latency_record(lat, batch * len(lat), sum(lat))
        peak = max(peak, gpu_used_mb() - before)
    record["peak_memory_mb"] = round(peak, 1)
    logits = classifier.run(corpus[:BATCH])
    record["finite"] = bool(np.isfinite(logits).all())
    if reference is not None:
        record["max_abs_logit_delta_vs_fp32"] = float(np.abs(logits - reference).max())
    record["logits"] = logits.tolist()
    classifier.close()
    return record


# ---- served over gRPC -------------------------------------------------------------------------------------------


SERVE_FLAGS = ("--model-name", "m", "--device", "cuda", "--frontend", "python", "--intra-op-threads", "1",
               "--max-batch-size", "64", "--max-batch-tokens", "8192",
               # warn: a GPU's figures against the reference answers are recorded (outputs_check), not fatal
               "--verify-outputs", "warn")


def start_server(bundle: Path, log_path: Path, *flags: str) -> ServerProcess:
    """`ortserve serve` on the GPU in a child process (the tools' launcher, ortserve_devtools.server_process), its
    log in `log_path`; `wait_served` until it serves, `stop()` at the end."""
    from ortserve_devtools.server_process import ServerProcess

    return ServerProcess(["--bundle", str(bundle), *SERVE_FLAGS, *flags], log_path=log_path, cwd=_ROOT)


def wait_served(server: ServerProcess, timeout_s: float = 180.0) -> None:
    """Until model m is ready; a `version_failed` line ends the wait at once (RuntimeError, as every failure)."""
    server.wait_ready(timeout_s, "m", give_up_on="version_failed")


def outputs_check(server: ServerProcess) -> dict[str, Any]:
    """The version's load-time check against its bundle's reference answers, as `ortserve status` shows it."""
    status = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--json", "--address",
                             server.address], capture_output=True, text=True, timeout=30, cwd=_ROOT)
    if status.returncode != 0:
        return {"error": status.stderr.strip()[:400]}
    versions = json.loads(status.stdout)["models"]["m"]["versions"]
    return dict(next(iter(versions.values())).get("verify", {}))


def _caller(address: str, payload: bytes, callers: int, seconds: float) -> tuple[list[float], int]:
    """Closed loop in one process: `callers` callers of the tools' load generator (ortserve_devtools.loadgen), each
    sending `payload` back to back for `seconds`; (latencies of the calls answered OK, calls that failed)."""
    import asyncio

    import grpc

    from ortserve_devtools.loadgen import LoadSpec, Payload, run_load

    async def run() -> tuple[list[float], int]:
        spec = LoadSpec(mode="closed", concurrency=callers, warmup_s=0.0, duration_s=seconds, timeout_s=10.0,
                        drain_s=10.0)
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            result = await run_load(spec, call, [Payload(payload, 1)])
        return list(result.latencies_s), sum(result.errors.values())

    return asyncio.run(run())


def load(address: str, batch_texts: list[str], *, callers: int, processes: int, seconds: float) -> dict[str, Any]:
    from ortserve_devtools.bench.v2client import V2Target, build_request

    payload = build_request(V2Target(address=address, model="m", raw_input=True), batch_texts)
    _caller(address, payload, 1, 0.5)  # connection and first calls out of the window
    started = time.perf_counter()
    with ProcessPoolExecutor(processes, mp_context=_SPAWN) as pool:
        parts = list(pool.map(_caller, [address] * processes, [payload] * processes,
                              [callers // processes] * processes, [seconds] * processes))
    window = time.perf_counter() - started
    lat = [x for part, _ in parts for x in part]
    record = latency_record(lat, len(lat) * len(batch_texts), min(window, seconds))
    record["errors"] = sum(errors for _, errors in parts)
    record["callers"] = callers
    record["texts_per_call"] = len(batch_texts)
    return record


def served(bundle: Path, out: Path, name: str, *, seconds: float, flags: tuple[str, ...],
           concurrent: tuple[int, ...] = ()) -> dict[str, Any]:
    before = gpu_used_mb()
    server = start_server(bundle, out / f"server-{name}.log", *flags)
    try:
        started = time.perf_counter()
        wait_served(server)
        record: dict[str, Any] = {"ready_s": round(time.perf_counter() - started, 1),
                                  "server_memory_after_warm_up_mb": round(gpu_used_mb() - before, 1),
                                  "outputs_check": outputs_check(server)}
        address = server.address
        corpus = texts(BATCH, seed=1)
        record["c1_b16"] = load(address, corpus, callers=1, processes=1, seconds=seconds)
        record["c16_b1"] = load(address, corpus[:1], callers=16, processes=4, seconds=seconds)
        if concurrent:
            for callers in concurrent:
                record[f"c{callers}_b16"] = load(address, corpus, callers=callers, processes=min(callers, 4),
                                                 seconds=seconds)
        record["server_peak_memory_mb"] = round(gpu_used_mb() - before, 1)
        record["metrics_batches"] = [line for line in server.scrape().splitlines()
                                     if line.startswith(("ortserve_batch_size_sum", "ortserve_batch_size_count"))]
        return record
    finally:
        server.stop()


# ---- out-of-memory drill ----------------------------------------------------------------------------------------


def loaded_device(server: ServerProcess) -> str:
    loaded = server.events("version_loaded")
    return str(loaded[0].get("device")) if loaded else "?"


def budget_drill(bundle: Path, out: Path) -> dict[str, Any]:
    """memory_budget_mb below what the version takes: its load must fail with the reason, nothing served."""
    server = start_server(bundle, out / "server-budget.log", "--memory-budget-mb", "600")
    try:
        try:
            wait_served(server, timeout_s=90)
            return {"refused": False, "device": loaded_device(server)}
        except RuntimeError:
            pass
        failed = server.events("version_failed")
        return {"refused": bool(failed), "error": failed[0].get("error") if failed else server.tail(3)}
    finally:
        server.stop()


def oom_drill(bundle: Path, out: Path) -> dict[str, Any]:
    """A version whose GPU arena is capped gets a request far larger than the cap: the answer must still come
    back (from the CPU session) and ortserve_gpu_fallback_total must move. Caps are tried smallest first, since
    whether ORT's arena counts the weights decides which one loads."""
    import grpc
    import numpy as np

    from ortserve_devtools.bench.v2client import V2Target, build_request, parse_logits

    attempts: list[dict[str, Any]] = []
    # A rehearsal caps the CPU arena instead: the same failure (ORT's BFCArena over its cap), the same fallback.
    cap_flag = "--cpu-arena-limit-mb" if REHEARSAL else "--gpu-memory-limit-mb"
    for cap in (24, 48, 96, 192):
        server = start_server(bundle, out / f"server-oom-{cap}.log", cap_flag, str(cap),
                        "--gpu-oom-fallback", "lazy", "--shape-buckets", "off", "--gpu-fallback-cooldown-s", "5",
                        "--max-texts-per-request", "256", "--max-message-bytes", str(64 * 2**20),
                        # one engine run for the whole call: the oversized batch is the point
                        "--max-batch-size", "256", "--max-batch-tokens", str(256 * 128))
        attempt: dict[str, Any] = {"gpu_memory_limit_mb": cap}
        attempts.append(attempt)
        try:
            try:
                wait_served(server, timeout_s=90)
            except RuntimeError as e:
                attempt["loaded"] = False
                attempt["why"] = str(e)[-400:]
                continue
            attempt["loaded"] = True
            attempt["device"] = loaded_device(server)
            target = V2Target(address=server.address, model="m", raw_input=True)
            with grpc.insecure_channel(target.address, options=[("grpc.max_receive_message_length", 64 * 2**20),
                                                                ("grpc.max_send_message_length", 64 * 2**20)]) as ch:
                call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer")
                t0 = time.perf_counter()
                try:
                    reply = call(build_request(target, texts(256, seed=2)), timeout=120)
                    logits = parse_logits(target, reply)
                    attempt["answered"] = list(logits.shape)
                    attempt["finite"] = bool(np.isfinite(logits).all())
                except grpc.RpcError as e:
                    attempt["answered"] = False
                    attempt["status"] = f"{e.code().name}: {e.details()}"[:400]
                attempt["call_s"] = round(time.perf_counter() - t0, 2)
            time.sleep(1.5)  # the server logs fallbacks once a second
            attempt["metrics"] = [line for line in server.scrape().splitlines()
                                  if line.startswith(("ortserve_gpu_fallback_total", "ortserve_gpu_oom_total"))]
            attempt["log_events"] = [json.dumps(e)[:600] for e in server.events("gpu_oom_fallback")]
            moved = any(line.split()[-1] not in ("0.0", "0") for line in attempt["metrics"]
                        if line.startswith("ortserve_gpu_fallback_total"))
            attempt["counter_moved"] = moved
            if attempt.get("answered") and moved:
                break
        finally:
            server.stop()
    return {"attempts": attempts, "passed": any(a.get("answered") and a.get("counter_moved") for a in attempts)}


# ---- the run ----------------------------------------------------------------------------------------------------


def summary(data: dict[str, Any]) -> list[str]:
    lines = ["", "GPU check summary (batch 16 x seq 128; ms; MB; texts/s)"]
    head = f"{'what':34} {'p50':>8} {'p99':>8} {'texts/s':>9} {'memory':>8}  notes"
    lines += [head, "-" * len(head)]
    for key, rec in data.get("engine", {}).items():
        if not isinstance(rec, dict) or "b16" not in rec:
            lines.append(f"engine {key:27} {str(rec)[:80]}")
            continue
        b = rec["b16"]
        note = f"graphs={rec['cuda_graphs']}" + (f" refused: {rec['cuda_graphs_refused'][:60]}"
                                                 if rec.get("cuda_graphs_refused") else "")
        lines.append(f"engine {key:27} {b['p50_ms']:8.2f} {b['p99_ms']:8.2f} {b['texts_per_s']:9.0f} "
                     f"{rec['peak_memory_mb']:8.0f}  {note}")
    for key, rec in data.get("served", {}).items():
        if not isinstance(rec, dict) or "c1_b16" not in rec:
            lines.append(f"served {key:27} {str(rec)[:80]}")
            continue
        for mode in [m for m in rec if m.startswith("c") and isinstance(rec[m], dict)]:
            r = rec[mode]
            engine = data.get("engine", {}).get(key, {}).get("b16", {}).get("texts_per_s")
            ratio = f" served/engine {r['texts_per_s'] / engine:.2f}" if engine else ""
            lines.append(f"served {key + ' ' + mode:27} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
                         f"{r['texts_per_s']:9.0f} {rec['server_peak_memory_mb']:8.0f}  errors={r['errors']}{ratio}")
    sweep = data.get("sweep", {})
    for key, rec in sweep.items():
        if isinstance(rec, dict):
            cells = " ".join(f"b{b}:{rec[f'b{b}']['texts_per_s']:.0f}" for b in LADDER_ROWS if f"b{b}" in rec)
            lines.append(f"sweep {key:28} {cells}")
    if isinstance(data.get("oom"), dict) and "attempts" in data["oom"]:
        lines.append(f"oom drill passed={data['oom'].get('passed')} "
                     + "; ".join(f"cap {a['gpu_memory_limit_mb']}: loaded={a.get('loaded')} "
                                 f"device={a.get('device')} answered={a.get('answered')} moved={a.get('counter_moved')}"
                                 for a in data["oom"].get("attempts", [])))
    if isinstance(data.get("budget"), dict):
        lines.append(f"memory budget drill: {data['budget']}"[:300])
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--models-dir", type=Path, default=Path(tempfile.gettempdir()) / "ortserve-gpu-models")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each timed window")
    parser.add_argument("--budget-s", type=float, default=330.0, help="stop starting stages past this")
    parser.add_argument("--rehearse", action="store_true",
                        help="tiny models and short windows: run every stage here, without a GPU, before a device run")
    args = parser.parse_args(argv)
    if args.rehearse:
        global REHEARSAL
        REHEARSAL = True
        MODELS.update({name: dict(vocab_size=512, hidden=32, layers=2, heads=2, intermediate=64, max_position=512)
                       for name in MODELS})
        args.seconds = min(args.seconds, 0.5)
    args.out.mkdir(parents=True, exist_ok=True)
    args.models_dir.mkdir(parents=True, exist_ok=True)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    results = Results(args.out)
    t_start = time.monotonic()

    def left() -> float:
        return args.budget_s - (time.monotonic() - t_start)

    def stage(name: str, work: Callable[[], Any]) -> Any:
        if left() <= 0:
            log(f"skipped {name}: budget spent")
            return None
        log(f"stage {name}")
        try:
            return work()
        except Exception as e:
            log(f"{name} failed: {e!r}")
            return {"error": repr(e), "trace": traceback.format_exc()[-1500:]}

    from ortserve.engine_ext import library_path, ort_version

    results.put("env", {
        "gpu": smi("gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.max.sm"),
        "ort": ort_version(), "ort_library": library_path(), "python": sys.version.split()[0],
        "nproc": os.cpu_count(),
    })
    used0 = smi("gpu=memory.used")
    gpu_used_mb()  # this process's CUDA context now, so later deltas are what each load or server took
    results.put("cuda_context_mb", {"smi_before": used0, "smi_after": smi("gpu=memory.used")})
    bundles = {f"{name}-{precision}": args.models_dir / f"{name}-{precision}"
               for name in MODELS for precision in ("fp32", "fp16")}

    if "models" in stages:
        results.put("models", stage("models", lambda: _in_child(build_models, args.models_dir, MODELS)))

    engine: dict[str, Any] = results.data.get("engine", {})
    if "engine" in stages:
        reference: dict[str, Any] = {}
        for key, bundle_key, graphs in (("bert-base-fp32", "bert-base-fp32", False),
                                        ("bert-base-fp16", "bert-base-fp16", False),
                                        ("bert-base-fp16-graphs", "bert-base-fp16", True),
                                        ("minilm-l6-fp32", "minilm-l6-fp32", False),
                                        ("minilm-l6-fp16-graphs", "minilm-l6-fp16", True)):
            ref = reference.get(key.split("-fp")[0])
            rec = stage(f"engine {key}", lambda b=bundles[bundle_key], g=graphs, r=ref: engine_alone(
                b, cuda_graphs=g, seconds=args.seconds, reference=r))
            if isinstance(rec, dict) and "logits" in rec:
                import numpy as np

                logits = np.asarray(rec.pop("logits"), dtype=np.float32)
                reference.setdefault(key.split("-fp")[0], logits)
            engine[key] = rec
            results.put("engine", engine)

    if "served" in stages:
        served_runs: dict[str, Any] = results.data.get("served", {})
        for key, bundle_key, flags, concurrent in (
            ("bert-base-fp16-graphs", "bert-base-fp16", ("--cuda-graphs",), (4, 8)),
            ("bert-base-fp16", "bert-base-fp16", (), ()),
            ("bert-base-fp32", "bert-base-fp32", (), ()),
            ("minilm-l6-fp16-graphs", "minilm-l6-fp16", ("--cuda-graphs",), ()),
        ):
            served_runs[key] = stage(
                f"served {key}", lambda b=bundles[bundle_key], k=key, f=flags, c=concurrent: served(
                    b, args.out, k, seconds=args.seconds, flags=f, concurrent=c))
            results.put("served", served_runs)

    if "sweep" in stages:
        sweep: dict[str, Any] = {}
        for key, bundle_key, graphs in (("bert-base-fp16-graphs", "bert-base-fp16", True),
                                        ("bert-base-fp32", "bert-base-fp32", False)):
            sweep[key] = stage(f"sweep {key}", lambda b=bundles[bundle_key], g=graphs: engine_alone(
                b, cuda_graphs=g, seconds=max(1.0, args.seconds / 4), batches=LADDER_ROWS))
            if isinstance(sweep[key], dict):
                sweep[key].pop("logits", None)
            results.put("sweep", sweep)

    if "oom" in stages:
        results.put("oom", stage("oom", lambda: oom_drill(bundles["minilm-l6-fp32"], args.out)))

    if "budget" in stages:
        results.put("budget", stage("budget", lambda: budget_drill(bundles["bert-base-fp32"], args.out)))

    results.put("elapsed_s", round(time.monotonic() - t_start, 1))
    for line in summary(results.data):
        print(line, flush=True)
    return 0


def _in_child(fn: Callable[..., Any], *args: Any) -> Any:
    with ProcessPoolExecutor(1, mp_context=_SPAWN) as pool:
        return pool.submit(fn, *args).result()



if __name__ == "__main__":  # scripts/gpu_check runs it as python3 -m ortserve_devtools.gpu.check
    sys.exit(main())
