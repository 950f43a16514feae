"""Publish-time graph optimisation: a bundle in, an optimised bundle out (`registry optimize`, `publish --optimize`).

    fuse   ONNX Runtime's offline BERT fusion: each encoder block becomes EmbedLayerNormalization, Attention,
           SkipLayerNormalization and BiasGelu nodes; FP32, logits equal to the source's within float rounding
    int8   dynamic INT8 quantization (per-channel int8 weights in a 7-bit range, uint8 activations quantized per
           batch) of the matrix products and embeddings of the plain graph, for CPUs; ORT fuses the rest at load.
           7 bits: the same integer products on every x86 CPU (INT8_FORM), about 2x FP32 where it has VNNI or AMX
    fp16   fuse, then float weights and activations in FP16, the graph's inputs and `logits` kept int64 / float32
           (for GPUs: the wire stays as it was)
    bf16   the FP32 graph unchanged, run by OpenVINO in bf16 on CPUs with AVX-512 BF16 or AMX (the engine refuses
           the version elsewhere); the gate runs it as the server will (accuracy.OpenVinoSession)

    optimize_bundle(source, dest, "int8")
        validate the source bundle -> load its evaluation texts -> read heads / hidden off its graph
        -> run the level's steps -> check the wire signature -> the accuracy gate: both models on the same
        texts (accuracy.py), its table through `progress`, GateRefused unless it passes -> write model.onnx,
        tokenizer.json, references.jsonl (the source's FP32 answers to texts chosen from the gate's, references.py)
        and manifest.json (+ precision, optimization with the gate's report, references) into a temp dir beside
        `dest` -> validate that as a bundle -> rename it onto `dest`

A level is a tuple of steps (`STEPS`); the gate runs after the last step, before anything is written.
`onnx`, `onnxruntime.transformers` (which needs sympy for its shape inference) and `onnxruntime.quantization`
are imported inside the call, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ortserve.bundle import references
from ortserve.bundle.manifest import (
    LEVEL_PRECISION,
    MANIFEST_FILE,
    MODEL_FILE,
    OPTIMIZATION_LEVELS,
    REFERENCES_FILE,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
)
from ortserve.bundle.model_files import model_digest, model_size
from ortserve.bundle.outputs import cosines, min_cosine
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare import reference_choice
from ortserve.prepare.accuracy import (
    EvalSet,
    EvalSetError,
    GateReport,
    GateSettings,
    ModelRunError,
    load_eval_set,
    make_batches,
    open_session,
    run_gate,
    run_outputs,
)
from ortserve.prepare.model_writer import copy_model, model_data_entry, write_model
from ortserve.prepare.output import dest_problem, write_atomically

LEVELS = OPTIMIZATION_LEVELS
# Fused attention node types; a fusion that produced none of them matched no encoder block.
ATTENTION_OPS = ("Attention", "MultiHeadAttention")
# Node types the summary lists first: what the fusion makes, and what it replaces.
FUSED_OPS = ("Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu")
# What the int8 quantization makes of each matrix product with constant weights.
QUANTIZED_OPS = ("MatMulInteger",)
# The int8 level's form, recorded in the manifest. ORT multiplies uint8 activations by int8 weights with VNNI or AMX
# where the CPU has them (exact int32 sums) and with VPMADDUBSW elsewhere, whose int16 pair sums saturate for full
# 8-bit weights (255 x 127 x 2 > 32767) but never for 7-bit ones (255 x 64 x 2 <= 32767). 7-bit weights therefore
# give the same integer products on every x86 CPU; full 8-bit ones flipped 18 of 313 decisive texts of the tests'
# tiny model on an AVX2 CPU (docs/bundles.md). Measured, MiniLM: 2.05x FP32 with VNNI/AMX, 1.06x on AVX2.
INT8_FORM = {"weights": "int8, per output channel, 7-bit range", "activations": "uint8, per tensor, per batch",
             "exact_on": "every x86-64 CPU (AVX2, AVX-512, VNNI, AMX)"}
# Below this speed ratio over FP32 the gate's CPU gains nothing from int8, and `optimize` says so.
INT8_NO_FASTER = 1.2

Progress = Callable[[str], None]
DEFAULT_GATE = GateSettings()


TOKEN_CLASSIFIER_REFUSAL = ("a token classifier (onnx-token-classifier); the accuracy gate compares one label per "
                            "text, so it cannot judge an optimised copy's labels per token yet: publish it without "
                            "--optimize")
"""Why a token classifier is not optimised (`optimize_bundle`, and `publish --from-hf` before it imports one)."""
SPARSE_REFUSAL = ("a sparse embedding model (onnx-sparse-embedding); the accuracy gate judges labels or dense vectors, "
                  "so it cannot judge an optimised copy's vocabulary weights (which ones are kept) yet: publish it "
                  "without --optimize")
"""Why a sparse embedding model is not optimised (as TOKEN_CLASSIFIER_REFUSAL)."""


class OptimizeError(Exception):
    """The bundle cannot be optimised at that level (or must not be); the message says why, in one line."""


class GateRefused(OptimizeError):
    """The optimised model failed the accuracy gate; nothing was written. `report` has the measures."""

    def __init__(self, message: str, report: GateReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class AttentionShape:
    """What ORT's BERT fusion must be told; read off the graph, not guessed by ORT."""

    num_heads: int
    hidden_size: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class OptimizeResult:
    path: Path
    manifest: BundleManifest
    shape: AttentionShape
    ops_before: dict[str, int]  # node type -> count
    ops_after: dict[str, int]
    size_before: int  # bytes of model.onnx
    size_after: int
    seconds: float
    warnings: tuple[str, ...] = ()  # what ORT's fusion logged at WARNING or above (kept off stderr)
    gate: GateReport | None = None  # None when the caller turned the gate off

    def summary(self) -> dict[str, Any]:
        """The machine-readable form (`registry optimize --json`)."""
        return {
            "bundle": str(self.path),
            "level": self.manifest.optimization.level if self.manifest.optimization else None,
            "precision": self.manifest.precision,
            "num_heads": self.shape.num_heads,
            "hidden_size": self.shape.hidden_size,
            "ops_before": dict(sorted(self.ops_before.items())),
            "ops_after": dict(sorted(self.ops_after.items())),
            "model_bytes_before": self.size_before,
            "model_bytes_after": self.size_after,
            "seconds": round(self.seconds, 3),
            "optimization": self.manifest.optimization.to_dict() if self.manifest.optimization else None,
            "warnings": list(self.warnings),
            "gate": self.gate.to_dict() if self.gate else None,
        }


@dataclass
class _Pass:
    """The model on its way through a level's steps; owned by one `optimize_bundle` call."""

    source: Path  # the source model.onnx, for messages
    model: Any  # onnx.ModelProto; None once fused, and `fused` owns the graph (`graph` is whichever holds it)
    shape: AttentionShape
    level: str
    fused: Any = None  # onnxruntime.transformers.onnx_model.OnnxModel
    notes: list[str] = field(default_factory=list)

    @property
    def graph(self) -> Any:
        """The onnx.ModelProto as the last step left it."""
        return self.fused.model if self.fused is not None else self.model


def optimize_bundle(source: str | Path, dest: str | Path, level: str, progress: Progress | None = None, *,
                    gate: GateSettings | None = DEFAULT_GATE) -> OptimizeResult:
    """Writes the `level` optimisation of the bundle at `source` to `dest` (absent or an empty directory).

    `gate=None` skips the accuracy gate (and leaves the report out of the manifest). Raises GateRefused when the
    gate refuses, OptimizeError for anything else (BundleError for a broken source); on any failure `dest` is
    left as it was.
    """
    report = progress or (lambda _line: None)
    started = time.perf_counter()
    if level not in LEVELS:
        raise OptimizeError(f"unknown optimisation level {level!r} (choose from {', '.join(LEVELS)})")
    src, out = Path(source), Path(dest)
    if problem := dest_problem(out):
        raise OptimizeError(problem)
    manifest = validate_bundle(src)
    if manifest.per_token:
        raise OptimizeError(f"{src}: {TOKEN_CLASSIFIER_REFUSAL}")
    if manifest.spec.sparse:
        raise OptimizeError(f"{src}: {SPARSE_REFUSAL}")
    if manifest.pairs:
        raise OptimizeError(f"{src}: a classifier of pairs; the accuracy gate reads single texts, so it cannot judge "
                            "an optimised copy yet: publish it without --optimize")
    _check_not_optimised(src, manifest, level)
    evals = _eval_set(src, manifest) if gate is not None else None  # a bad eval file fails before minutes of work
    raw_manifest = json.loads((src / MANIFEST_FILE).read_bytes())  # every key the source had, unknown ones too
    model_path = src / MODEL_FILE
    source_sha = model_digest(src)
    size_before = model_size(src)
    external = manifest.model_data is not None  # the copy keeps its source's layout (model_writer.py)

    import onnx  # lazy: heavy, see module docstring

    # bf16 keeps the source's files, int8 quantizes from them: neither needs the weights read here, only the shapes.
    model = onnx.load(str(model_path), load_external_data=level not in FROM_FILES)
    ops_before = _op_counts(model)
    shape = read_attention_shape(model, where=str(model_path))
    report(f"read {model_path}: {sum(ops_before.values())} nodes, {shape.num_heads} heads x {shape.head_dim} "
           f"(hidden {shape.hidden_size}), sha256 {source_sha[:12]}")

    work = _Pass(source=model_path, model=model, shape=shape, level=level)
    with _missing_package_is_an_error(), _ort_logs_captured(work.notes):
        for step in STEPS[level]:
            try:
                report(step(work))
            except (OptimizeError, ImportError):
                raise
            except Exception as e:  # ORT's graph tooling raises anything (AssertionError, KeyError...) on odd graphs
                raise OptimizeError(f"{model_path}: {step.__name__.strip('_')} step failed in ONNX Runtime's "
                                    f"tooling ({type(e).__name__}: {_first_line(e)})") from e
    final = work.graph
    _check_wire(final, where=f"{level} graph", output=manifest.output_name)
    ops_after = _op_counts(final)
    with tempfile.TemporaryDirectory(prefix="ortserve-optimize-") as scratch:
        # A level without steps (bf16) keeps the source's files byte for byte: its model digest is the source's.
        candidate = src
        if STEPS[level]:
            candidate = Path(scratch)
            write_model(final, candidate, external=external)
        work.model = work.fused = final = None  # the written files hold it now

        optimization: dict[str, Any] = {"level": level, "source_sha256": source_sha, "tools": _tool_versions(level)}
        if level == "int8":
            optimization["quantization"] = dict(INT8_FORM)
        verdict = None
        if gate is not None and evals is not None:
            verdict = _run_gate(src, manifest, candidate / MODEL_FILE, evals, gate, level, report)
            optimization["accuracy"] = verdict.manifest_entry()
            if level == "int8" and verdict.speed is not None and verdict.speed.ratio < INT8_NO_FASTER:
                report(_no_faster(verdict, size_before, model_size(candidate)))
        refs = _reference_answers(src, manifest, verdict, source_sha, level)
        references_bytes = refs.set.encode()
        precision = LEVEL_PRECISION[level]
        new_manifest = {**raw_manifest, "precision": precision, "optimization": optimization,
                        "references": references.manifest_entry(references_bytes, refs.set, refs.outputs_from)}
        new_manifest.pop("model_data", None)
        if (model_data := model_data_entry(candidate)) is not None:
            new_manifest["model_data"] = model_data
        written = write_atomically(out, lambda tmp: _write_bundle(tmp, src, candidate, new_manifest,
                                                                  references_bytes))
    size_after = model_size(out)
    report(f"wrote {out} ({precision}, model.onnx {format_bytes(size_after)})")
    return OptimizeResult(path=out, manifest=written, shape=shape, ops_before=ops_before,
                          ops_after=ops_after, size_before=size_before, size_after=size_after,
                          seconds=time.perf_counter() - started, warnings=tuple(work.notes), gate=verdict)


@dataclass(frozen=True)
class _References:
    set: references.ReferenceSet
    outputs_from: str


def _reference_answers(src: Path, manifest: BundleManifest, verdict: GateReport | None, source_sha: str,
                       level: str) -> _References:
    """The optimised bundle's reference answers: the source's FP32 outputs (the gate's, when it ran). A classifier's
    texts are chosen where both models are sure of the same label, an embedding model's where every candidate run
    kept the cosine floor of the level's precision, so that only a fault can fail the check on another machine."""
    import onnxruntime

    candidates: list[np.ndarray] = []
    if verdict is not None and verdict.source_outputs is not None:
        evals, source = verdict.evals, verdict.source_outputs
        candidates = [c for c in (verdict.optimized_outputs, verdict.optimized_alone_outputs) if c is not None]
    else:  # no gate: the source alone, on its evaluation texts
        evals = _eval_set(src, manifest)
        batches = make_batches(src / TOKENIZER_FILE, manifest.max_seq_len, evals.texts, 16)
        source = run_outputs(open_session(src / MODEL_FILE, 2), batches, len(evals.texts), manifest.output_name)
    classifier = manifest.spec.labelled  # token classifiers are refused before (not optimisable)
    eligible = None
    if not classifier:
        floor = min_cosine(LEVEL_PRECISION[level])
        eligible = np.logical_and.reduce([cosines(source, c) >= floor for c in candidates] or
                                         [np.ones(len(evals.texts), dtype=bool)])
    chosen = reference_choice.build(evals.texts, references.token_counts(src / TOKENIZER_FILE, evals.texts),
                                    np.asarray(source), max_seq_len=manifest.max_seq_len, classifier=classifier,
                                    candidates=candidates if classifier else (), eligible=eligible)
    return _References(chosen, f"the source bundle's model.onnx (sha256 {source_sha[:12]}) in FP32, ONNX Runtime "
                               f"{onnxruntime.__version__} on the CPU, {evals.name}")


def _no_faster(verdict: GateReport, size_before: int, size_after: int) -> str:
    """One line: int8 gains no speed on this CPU, and what it still gains."""
    assert verdict.speed is not None
    cpu = verdict.cpu.describe() if verdict.cpu is not None else "this CPU"
    return (f"note: int8 runs {verdict.speed.ratio:.2f}x FP32 on {cpu}: no faster without VNNI or AMX (about 2x "
            f"where the CPU has them); the model is {size_before / max(1, size_after):.1f}x smaller")


def _eval_set(src: Path, manifest: BundleManifest) -> EvalSet:
    try:
        return load_eval_set(src, manifest.labels)
    except EvalSetError as e:
        raise OptimizeError(f"{src}: evaluation texts: {e}") from None


def _run_gate(src: Path, manifest: BundleManifest, candidate: Path, evals: EvalSet, gate: GateSettings,
              level: str, report: Progress) -> GateReport:
    """Runs the gate and prints its table either way; raises GateRefused unless it passes (or loss is accepted)."""
    try:
        precision = LEVEL_PRECISION[level]
        verdict = run_gate(src / MODEL_FILE, candidate, src / TOKENIZER_FILE, manifest.max_seq_len, evals, gate,
                           level=level, precision=precision, progress=report, kind=manifest.spec)
    except ModelRunError as e:
        raise OptimizeError(f"{src}: gate step failed: {e}") from e
    for line in verdict.table():
        report(line)
    if verdict.refusals and not gate.accept_accuracy_loss:
        raise GateRefused(f"{src}: the {level} model failed the accuracy gate: {'; '.join(verdict.refusals)}; "
                          f"nothing written (--accept-accuracy-loss writes it anyway)", verdict)
    return verdict


# -- the steps ------------------------------------------------------------------------------------------
# Each takes the pass, changes it, and returns its progress line.


def _fuse(work: _Pass) -> str:
    from onnxruntime.transformers.optimizer import optimize_model  # lazy, see module docstring

    t0 = time.perf_counter()
    # opt_level=0: ORT's graph fusion only; a session-level pass would bake in this machine's CPU kernels.
    # use_gpu marks the target; at opt_level 0 ORT's fusion is the same either way.
    work.fused = optimize_model(work.model, model_type="bert", num_heads=work.shape.num_heads,
                                hidden_size=work.shape.hidden_size, opt_level=0, use_gpu=work.level == "fp16")
    work.model = None  # fused in place; the wrapper holds the graph now
    ops = _op_counts(work.fused.model)
    if not any(ops.get(op) for op in ATTENTION_OPS):
        fused = ", ".join(f"{op} x {ops[op]}" for op in FUSED_OPS if ops.get(op)) or "nothing"
        raise OptimizeError(f"{work.source}: ONNX Runtime's BERT fusion matched no attention block "
                            f"({work.shape.num_heads} heads, hidden {work.shape.hidden_size}; it fused {fused}): the "
                            f"graph does not follow the BERT export pattern, so optimising it would buy nothing")
    fused = ", ".join(f"{op} x {ops[op]}" for op in FUSED_OPS if ops.get(op))
    return f"fused: {fused} ({time.perf_counter() - t0:.1f}s)"


def _to_fp16(work: _Pass) -> str:
    t0 = time.perf_counter()
    work.fused.convert_float_to_float16(keep_io_types=True)
    import onnx

    halves = sum(1 for t in work.fused.model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16)
    if not halves:
        raise OptimizeError(f"{work.source}: the fp16 conversion left no float16 weights")
    return f"converted to fp16: {halves} float16 weights, inputs and logits kept ({time.perf_counter() - t0:.1f}s)"


def _quantize(work: _Pass) -> str:
    from onnxruntime.quantization import QuantType, quantize_dynamic  # lazy, see module docstring

    t0 = time.perf_counter()
    # quantize_dynamic writes only to a path; the file lives as long as this call. It reads the source's file (int8
    # is the level's one step), which a model past 2 GiB must be read from, weights beside it (model_writer.py).
    with tempfile.TemporaryDirectory(prefix="ortserve-int8-") as tmp:
        out = Path(tmp) / MODEL_FILE
        # Per-channel: per-tensor scales dropped the MiniLM demo's decisive agreement from 0.99 to 0.95 (600 texts).
        # reduce_range: 7-bit weights, exact on every x86 CPU (INT8_FORM).
        quantize_dynamic(work.source, out, per_channel=True, weight_type=QuantType.QInt8, reduce_range=True,
                         use_external_data_format=True)
        import onnx

        work.model, work.fused = onnx.load(str(out)), None
    ops = _op_counts(work.model)
    products = ops.get("MatMulInteger", 0)
    if not products:
        raise OptimizeError(f"{work.source}: the int8 quantization converted no MatMul with constant weights")
    tables = ops.get("DequantizeLinear", 0)
    return (f"quantized to int8: MatMulInteger x {products}, int8 embedding tables x {tables}, per-channel "
            f"7-bit weights ({time.perf_counter() - t0:.1f}s)")


FROM_FILES = ("int8", "bf16")
"""Levels that read the source model from its files (bf16 copies them, int8 quantizes from them), not the weights
loaded into the pass."""

STEPS: dict[str, tuple[Callable[[_Pass], str], ...]] = {
    "fuse": (_fuse,),
    # Plain, not fused first: MiniLM demo, 2 cores, batches of 16: 1.85-2.02x the FP32 source, fused first 1.67-1.73x.
    "int8": (_quantize,),
    "fp16": (_fuse, _to_fp16),
    "bf16": (),  # the precision is the runtime's: the graph stays FP32
}


# -- reading the graph ----------------------------------------------------------------------------------


def read_attention_shape(model: Any, *, where: str = MODEL_FILE) -> AttentionShape:
    """num_heads from the attention's Reshape to [0, 0, heads, head_dim], hidden from the word embedding's width.

    Both exported forms of that Reshape are read: a constant shape, and a Concat whose last two parts
    are constants (torch.onnx's `view(*x.size()[:-1], heads, head_dim)` with dynamic axes). heads may be -1
    (transformers' `view(*input_shape, -1, head_dim)`, as `registry import` exports it): hidden / head_dim then.
    """
    from onnx import numpy_helper

    graph = model.graph
    tensors = {t.name: t for t in graph.initializer}
    tensors.update({node.output[0]: attr.t for node in graph.node if node.op_type == "Constant"
                    for attr in node.attribute if attr.name == "value"})
    # Only shape-sized constants are decoded: the weights' dims are enough, and BERT-base has 110M of them.
    constants = {name: numpy_helper.to_array(t) for name, t in tensors.items() if math.prod(t.dims) <= 8}
    producers = {out: node for node in graph.node for out in node.output}

    widths = {int(tensors[n.input[0]].dims[1]) for n in graph.node
              if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] == "input_ids"
              and n.input[0] in tensors and len(tensors[n.input[0]].dims) == 2}
    if len(widths) != 1:
        found = "none" if not widths else ", ".join(map(str, sorted(widths)))
        raise OptimizeError(f"{where}: not a BERT-family encoder: expected one word-embedding Gather over input_ids, "
                            f"found {found}")
    (hidden,) = widths

    heads: set[tuple[int, int]] = set()
    for node in graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        dims = _reshape_heads(node.input[1], constants, producers, hidden)
        if dims is not None and dims[0] * dims[1] == hidden:
            heads.add(dims)
    if len(heads) != 1:
        found = "none" if not heads else ", ".join(f"{h} x {d}" for h, d in sorted(heads))
        raise OptimizeError(f"{where}: not a BERT-family encoder: expected the attention's Reshape to "
                            f"[0, 0, heads, head_dim] with heads x head_dim = hidden {hidden}, found {found}")
    ((num_heads, _dim),) = heads
    return AttentionShape(num_heads=num_heads, hidden_size=hidden)


def _reshape_heads(shape_name: str, constants: dict[str, Any], producers: dict[str, Any],
                   hidden: int) -> tuple[int, int] | None:
    if shape_name in constants:
        shape = constants[shape_name].reshape(-1).tolist()
        if len(shape) == 4 and shape[0] == 0 and shape[1] == 0:
            return _heads(int(shape[2]), int(shape[3]), hidden)
        return None
    concat = producers.get(shape_name)
    if concat is None or concat.op_type != "Concat" or len(concat.input) != 4:
        return None
    parts = [constants.get(name) for name in concat.input[2:]]
    if any(p is None or p.size != 1 for p in parts):
        return None
    head_count, head_dim = (int(p.reshape(-1)[0]) for p in parts)  # type: ignore[union-attr]
    return _heads(head_count, head_dim, hidden)


def _heads(head_count: int, head_dim: int, hidden: int) -> tuple[int, int] | None:
    """(heads, head_dim) of a [.., .., head_count, head_dim] reshape; head_count -1 is hidden / head_dim."""
    if head_count == -1 and head_dim > 0 and hidden % head_dim == 0:
        head_count = hidden // head_dim
    return (head_count, head_dim) if head_count > 0 and head_dim > 0 else None


def _op_counts(model: Any) -> dict[str, int]:
    return dict(Counter(node.op_type for node in model.graph.node))


# -- checks ---------------------------------------------------------------------------------------------


def _check_not_optimised(src: Path, manifest: BundleManifest, level: str) -> None:
    done = manifest.optimization
    if done is not None and done.level == level:
        raise OptimizeError(f"{src}: already optimised at level {level!r}; publish it as it is")
    if done is not None:
        raise OptimizeError(f"{src}: already optimised at level {done.level!r}; optimise its source bundle "
                            f"(model.onnx sha256 {done.source_sha256[:12]}) at {level!r} instead: "
                            f"re-fusing a fused graph is meaningless")
    if manifest.precision != "fp32":
        raise OptimizeError(f"{src}: precision is {manifest.precision}; optimisation starts from an fp32 graph")


def _check_wire(model: Any, *, where: str, output: str) -> None:
    """The server feeds int64 ids and reads float32 `output` (logits or vectors) whatever the graph computes in."""
    import onnx

    initializers = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        if vi.type.tensor_type.elem_type != onnx.TensorProto.INT64:
            raise OptimizeError(f"{where}: input {vi.name!r} is no longer int64")
    outputs = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.output}
    if outputs.get(output) != onnx.TensorProto.FLOAT:
        raise OptimizeError(f"{where}: output {output!r} is no longer float32")


# -- writing --------------------------------------------------------------------------------------------


def _write_bundle(tmp: Path, src: Path, model_dir: Path, manifest: dict[str, Any],
                  references_bytes: bytes) -> BundleManifest:
    copy_model(model_dir, tmp)
    shutil.copyfile(src / TOKENIZER_FILE, tmp / TOKENIZER_FILE)
    (tmp / REFERENCES_FILE).write_bytes(references_bytes)
    (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    try:
        return validate_bundle(tmp)
    except BundleError as e:  # a bug here, not in the source: say which step produced it
        raise OptimizeError(f"the {manifest['optimization']['level']} bundle failed validation: {e}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


def _tool_versions(level: str) -> dict[str, str]:
    import onnx
    import onnxruntime

    tools = {"onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__}
    if LEVEL_PRECISION[level] == "bf16":
        from importlib.metadata import PackageNotFoundError, version

        try:
            tools["openvino"] = version("openvino")  # the runtime the gate ran it on
        except PackageNotFoundError:
            raise OptimizeError("the bf16 level runs on OpenVINO, which is not installed: pip install openvino") \
                from None
    return tools


def format_bytes(size: int) -> str:
    """1.2 MiB / 146 KiB: model sizes in progress lines and summaries."""
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"


@contextmanager
def _missing_package_is_an_error() -> Iterator[None]:
    try:
        yield
    except ImportError as e:
        name = _missing_module(e)
        what = (f"the Python package {name!r}, which is not installed here (pip install {name})" if name
                else f"a Python package that is not installed here ({_first_line(e)})")
        raise OptimizeError(f"optimising needs {what}") from None


def _missing_module(e: BaseException) -> str | None:
    # ORT re-raises sympy's ModuleNotFoundError as a plain ImportError; the name is further down the chain.
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, ImportError) and seen.name:
            return seen.name.split(".")[0]
        seen = seen.__cause__ or seen.__context__
    return None


@contextmanager
def _ort_logs_captured(sink: list[str]) -> Iterator[None]:
    """ORT's fusion warns through `logging` ("Model producer not matched", ...): with no handler configured
    (the CLI) Python would print that to stderr; collect it in `sink` instead. Configured handlers still get it."""

    class _Sink(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            sink.append(record.getMessage().splitlines()[0][:300])

    handler = _Sink(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
