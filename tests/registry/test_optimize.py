"""Publish-time optimisation: fused, int8 and fp16 bundles of the tiny BERT, run through real ONNX Runtime on the CPU.

The fused graph must give the source's logits; the int8 and fp16 ones keep the wire (int64 ids in, float32 logits
out) and run on ORT's CPU provider (fp16 computed in float32 from the fp16-rounded weights), so they are compared
within a loose tolerance. Every refusal is one line, exit 1, and leaves nothing behind. The accuracy gate itself
(thresholds, damaged models, evaluation files) is tested in test_accuracy.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from ortserve_devtools.bert_bundle import build_tiny_bundle as build_bert_bundle
from tokenizers import Tokenizer

from ortserve.bundle.manifest import BundleError, BundleManifest, Optimization, load_manifest, parse_manifest
from ortserve.prepare.accuracy import GateSettings, builtin_eval_set
from ortserve.prepare.optimize import (
    INT8_FORM,
    LEVELS,
    AttentionShape,
    OptimizeError,
    optimize_bundle,
    read_attention_shape,
)
from ortserve.registry.artifacts import ArtifactCache
from ortserve.registry.records import ArtifactRef, VersionRecord

Cli = Callable[..., subprocess.CompletedProcess[str]]
REPO = Path(__file__).resolve().parents[2]
TEXTS = (
    "I love this, it is wonderful",
    "ok",
    "The service was slow, but the food was great and the prices were fair.",
    "This is awful and I hate it!!",
)
# name -> build_tiny_bundle keywords; "wide" proves heads and hidden are read off the graph, not assumed.
SHAPES = {"tiny": {"hidden": 32, "heads": 2}, "wide": {"hidden": 64, "heads": 4, "intermediate": 128}}
# The fixtures' gate: every check, one timing round (the speed is not what these tests look at).
QUICK_GATE = GateSettings(speed_rounds=1)
TOOLS = {"onnxruntime": ort.__version__, "onnx": onnx.__version__}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ops(bundle: Path) -> Counter[str]:
    return Counter(node.op_type for node in onnx.load(str(bundle / "model.onnx")).graph.node)


def _logits(bundle: Path, texts: tuple[str, ...] = TEXTS) -> np.ndarray:
    """One padded batch, the way the server runs it (pad id 0, mask 0 past each text)."""
    encodings = Tokenizer.from_file(str(bundle / "tokenizer.json")).encode_batch(list(texts))
    seq = max(len(e.ids) for e in encodings)
    feed = {name: np.zeros((len(encodings), seq), dtype=np.int64)
            for name in ("input_ids", "attention_mask", "token_type_ids")}
    for row, e in enumerate(encodings):
        feed["input_ids"][row, : len(e.ids)] = e.ids
        feed["attention_mask"][row, : len(e.ids)] = 1
        feed["token_type_ids"][row, : len(e.ids)] = e.type_ids
    assert len({len(e.ids) for e in encodings}) > 1  # the batch really is padded
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], feed)
    return logits


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    out = {name: root / name for name in SHAPES}
    for name, kwargs in SHAPES.items():
        build_bert_bundle(out[name], seed=7, **kwargs)
    return out


# The levels that rewrite the graph; bf16 keeps it and gates only on a CPU with bf16 (tests/registry/test_bf16_gate.py).
GRAPH_LEVELS = tuple(level for level in LEVELS if level != "bf16")


@pytest.fixture(scope="module")
def optimized(sources: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(shape, level) -> the optimised bundle; read-only by convention."""
    root = tmp_path_factory.mktemp("optimized")
    out = {}
    for name, source in sources.items():
        for level in GRAPH_LEVELS:
            out[name, level] = optimize_bundle(source, root / f"{name}-{level}", level, gate=QUICK_GATE).path
    return out


# -- fuse -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_fused_bundle_gives_the_same_logits(sources: dict[str, Path], optimized: dict, name: str) -> None:
    fused = optimized[name, "fuse"]
    ops = _ops(fused)
    assert {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu"} <= set(ops)
    assert ops["Attention"] == 2  # one per layer: every block matched
    assert "Softmax" not in ops and "LayerNormalization" not in ops

    expected, actual = _logits(sources[name]), _logits(fused)
    assert actual.dtype == np.float32
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4)
    assert np.ptp(expected[:, 1] - expected[:, 0]) > 0.05  # texts differ enough for the check to mean something


@pytest.mark.parametrize(("name", "heads", "hidden"), [("tiny", 2, 32), ("wide", 4, 64)])
def test_heads_and_hidden_are_read_off_the_graph(sources: dict[str, Path], name: str, heads: int,
                                                 hidden: int) -> None:
    model = onnx.load(str(sources[name] / "model.onnx"))
    assert read_attention_shape(model) == AttentionShape(num_heads=heads, hidden_size=hidden)


def test_heads_from_a_concat_shape_as_torch_exports_it() -> None:
    """torch.onnx with dynamic axes builds the Reshape's shape as Concat(batch, seq, heads, head_dim)."""
    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["emb"]),
        helper.make_node("Shape", ["emb"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"]),
        helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        helper.make_node("Unsqueeze", ["seq", "axis0"], ["seq1"]),
        helper.make_node("Constant", [], ["heads"], value=numpy_helper.from_array(np.array([6], np.int64))),
        helper.make_node("Concat", ["batch1", "seq1", "heads", "dim"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["emb", "new_shape"], ["split"]),
    ]
    inits = [numpy_helper.from_array(np.zeros((10, 48), np.float32), "word"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([8], np.int64), "dim")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
                              [helper.make_tensor_value_info("split", TensorProto.FLOAT, None)], inits)
    assert read_attention_shape(helper.make_model(graph)) == AttentionShape(num_heads=6, hidden_size=48)


def test_fused_manifest_keeps_the_source_and_records_provenance(sources: dict[str, Path], optimized: dict) -> None:
    source, fused = sources["tiny"], optimized["tiny", "fuse"]
    before = json.loads((source / "manifest.json").read_text())
    after = json.loads((fused / "manifest.json").read_text())
    source_refs, fused_refs = before.pop("references"), after.pop("references")
    assert {k: after[k] for k in before} == before
    # The reference answers are the source's FP32 logits on texts both models are sure of: for a fused graph, which
    # gives the same logits, the same texts and values as the source's own, now said to come from the source.
    assert fused_refs["sha256"] == source_refs["sha256"] == _sha256(fused / "references.jsonl")
    assert fused_refs["outputs_from"].startswith(f"the source bundle's model.onnx (sha256 "
                                                 f"{_sha256(source / 'model.onnx')[:12]}) in FP32")
    assert after["precision"] == "fp32"
    accuracy = after["optimization"].pop("accuracy")
    assert accuracy["cpu"]["int8_isa"] in ("amx", "avx512-vnni", "avx-vnni", "avx512", "avx2", "other")
    assert after["optimization"] == {"level": "fuse", "source_sha256": _sha256(source / "model.onnx"),
                                     "tools": TOOLS}
    assert accuracy["passed"] is True and accuracy["eval"]["source"] == "built-in corpus"
    assert accuracy["agreement"] == 1.0 and accuracy["max_abs_delta_logit"] < 1e-4
    assert "speed" not in accuracy  # this machine's timing would make every re-publish different bytes
    assert (fused / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    assert sorted(p.name for p in fused.iterdir()) == ["manifest.json", "model.onnx", "references.jsonl",
                                                       "tokenizer.json"]

    manifest = load_manifest(fused)
    assert manifest.precision == "fp32" and manifest.labels == ("negative", "positive")
    assert manifest.optimization == Optimization(level="fuse", source_sha256=_sha256(source / "model.onnx"),
                                                 tools=(("onnx", onnx.__version__),
                                                        ("onnxruntime", ort.__version__)), accuracy=accuracy)
    plain = load_manifest(source)
    assert plain.precision == "fp32" and plain.optimization is None
    assert plain.provenance() == {"references": source_refs}


@pytest.mark.parametrize("level", GRAPH_LEVELS)
def test_optimising_is_deterministic(sources: dict[str, Path], optimized: dict, tmp_path: Path, level: str) -> None:
    # Same source, same tools -> same bytes (the gate's report included), so `publish --optimize` twice is an
    # idempotent no-op; the default gate here, the fixture's quicker one there: timing is not in the bytes.
    again = optimize_bundle(sources["tiny"], tmp_path / "again", level).path
    for name in ("model.onnx", "tokenizer.json", "references.jsonl", "manifest.json"):
        assert (again / name).read_bytes() == (optimized["tiny", level] / name).read_bytes(), name


# -- fp16 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_fp16_bundle_keeps_the_wire_and_halves_the_weights(sources: dict[str, Path], optimized: dict,
                                                           name: str) -> None:
    half, fused = optimized[name, "fp16"], optimized[name, "fuse"]
    model = onnx.load(str(half / "model.onnx"))
    inits = {t.name: t for t in model.graph.initializer}
    weights = [inits[n.input[1]] for n in model.graph.node
               if n.op_type in ("Attention", "MatMul") and n.input[1] in inits]
    assert len(weights) >= 2 * 4  # per layer: fused QKV + output + 2 feed-forward
    assert all(t.data_type == TensorProto.FLOAT16 for t in weights)
    graph_inputs = [vi for vi in model.graph.input if vi.name not in inits]
    assert {vi.name for vi in graph_inputs} == {"input_ids", "attention_mask", "token_type_ids"}
    assert all(vi.type.tensor_type.elem_type == TensorProto.INT64 for vi in graph_inputs)
    (output,) = model.graph.output
    assert output.name == "logits" and output.type.tensor_type.elem_type == TensorProto.FLOAT
    assert (half / "model.onnx").stat().st_size < 0.6 * (fused / "model.onnx").stat().st_size

    manifest = json.loads((half / "manifest.json").read_text())
    assert manifest["precision"] == "fp16" and manifest["optimization"]["level"] == "fp16"
    assert manifest["optimization"]["source_sha256"] == _sha256(sources[name] / "model.onnx")

    # ORT's CPU provider accepts the graph: it casts the fp16 weights back and computes in float32.
    logits = _logits(half)
    assert logits.dtype == np.float32
    np.testing.assert_allclose(logits, _logits(sources[name]), rtol=0, atol=2e-2)


# -- int8 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_int8_bundle_quantizes_every_weight_product_and_keeps_the_wire(sources: dict[str, Path], optimized: dict,
                                                                        name: str) -> None:
    source, quantized = sources[name], optimized[name, "int8"]
    model = onnx.load(str(quantized / "model.onnx"))
    ops = Counter(node.op_type for node in model.graph.node)
    # Per layer Q, K, V, attention output, two feed-forward products; plus the head. The embedding tables too.
    assert ops["MatMulInteger"] == 2 * 6 + 1
    assert ops["MatMul"] == 2 * 2  # what is left in float: the attention's two activation-by-activation products
    assert ops["DequantizeLinear"] == 3 and "Attention" not in ops  # plain graph: ORT fuses at session load
    inits = {t.name: t for t in model.graph.initializer}
    weights = [inits[n.input[1]] for n in model.graph.node if n.op_type == "MatMulInteger"]
    assert all(t.data_type == TensorProto.INT8 for t in weights)
    # 7-bit: |w| <= 64, so VPMADDUBSW's int16 pair sums (255 x 64 x 2) cannot saturate on CPUs without VNNI.
    assert max(int(np.abs(numpy_helper.to_array(t).astype(np.int32)).max()) for t in weights) <= 64
    scales = [inits[n.input[1]] for n in model.graph.node if n.op_type == "Mul" and n.input[1] in inits
              and n.input[1].endswith("_scale")]
    assert scales and all(len(t.dims) == 1 and t.dims[0] > 1 for t in scales[:1])  # per output channel
    graph_inputs = [vi for vi in model.graph.input if vi.name not in inits]
    assert all(vi.type.tensor_type.elem_type == TensorProto.INT64 for vi in graph_inputs)
    (output,) = model.graph.output
    assert output.name == "logits" and output.type.tensor_type.elem_type == TensorProto.FLOAT
    assert (quantized / "model.onnx").stat().st_size < 0.6 * (source / "model.onnx").stat().st_size

    manifest = json.loads((quantized / "manifest.json").read_text())
    assert manifest["precision"] == "int8"
    assert {k: manifest["optimization"][k] for k in ("level", "source_sha256", "tools")} == {
        "level": "int8", "source_sha256": _sha256(source / "model.onnx"), "tools": TOOLS}
    assert manifest["optimization"]["accuracy"]["passed"] is True
    assert manifest["optimization"]["quantization"] == INT8_FORM
    assert load_manifest(quantized).precision == "int8"
    assert load_manifest(quantized).optimization.quantization == INT8_FORM  # type: ignore[union-attr]

    # Within what the gate itself recorded against the source (on other texts: the same order of error).
    logits = _logits(quantized)
    assert logits.dtype == np.float32
    gate_max = load_manifest(quantized).optimization.gate_max_abs_delta  # type: ignore[union-attr]
    assert gate_max is not None and gate_max < 1.0
    np.testing.assert_allclose(logits, _logits(source), rtol=0, atol=2 * gate_max)


# -- the manifest and record fields ---------------------------------------------------------------------

GOOD = {"format": "onnx-text-classifier", "labels": ["a", "b"], "max_seq_len": 32}
OPT = {"level": "fp16", "source_sha256": "a" * 64, "tools": {"onnxruntime": "1.32.0"}}


@pytest.mark.parametrize(("extra", "pattern"), [
    ({"precision": "int4"}, "precision must be one of fp32, fp16, int8, bf16, got 'int4'"),
    ({"precision": "fp16", "optimization": {**OPT, "level": "int4"}},
     "optimization.level must be one of fuse, int8, fp16, bf16"),
    ({"precision": "fp16", "optimization": {**OPT, "accuracy": [1]}}, "optimization.accuracy must be an object"),
    ({"precision": "fp32", "optimization": {**OPT, "level": "int8"}},
     "precision 'fp32' contradicts optimization.level 'int8'"),
    ({"precision": "fp16", "optimization": {**OPT, "source_sha256": "xyz"}}, "optimization.source_sha256"),
    ({"precision": "fp16", "optimization": {**OPT, "tools": {"onnx": 1}}}, "optimization.tools"),
    ({"precision": "fp16", "optimization": "fp16"}, "optimization must be an object"),
    ({"precision": "fp32", "optimization": OPT}, "precision 'fp32' contradicts optimization.level 'fp16'"),
])
def test_bad_provenance_fields_are_bundle_errors(extra: dict, pattern: str) -> None:
    with pytest.raises(BundleError, match=pattern):
        parse_manifest({**GOOD, **extra})


def test_provenance_fields_round_trip_through_the_version_record() -> None:
    manifest = parse_manifest({**GOOD, "precision": "fp16", "optimization": {**OPT, "future": "ignored"}})
    assert manifest.precision == "fp16" and manifest.optimization is not None
    record = VersionRecord(model="m", version="v1", manifest=manifest, created_at="t", created_by="me",
                           artifact=ArtifactRef(uri="file:///x.tar", sha256="b" * 64, size=1))
    doc = json.loads(record.to_json())
    assert doc["precision"] == "fp16" and doc["optimization"] == OPT
    assert VersionRecord.from_json(record.to_json()) == record

    # The gate's report travels with the record as it was written; a reader needs none of its keys.
    report = {"decisive_agreement": 0.9968, "passed": True, "eval": {"source": "built-in corpus"}}
    manifest = parse_manifest({**GOOD, "precision": "int8", "optimization": {**OPT, "level": "int8",
                                                                          "accuracy": report}})
    record = VersionRecord(model="m", version="v2", manifest=manifest, created_at="t", created_by="me",
                           artifact=ArtifactRef(uri="file:///x.tar", sha256="b" * 64, size=1))
    assert json.loads(record.to_json())["optimization"]["accuracy"] == report
    assert VersionRecord.from_json(record.to_json()) == record
    assert hash(record.manifest) == hash(VersionRecord.from_json(record.to_json()).manifest)
    plain = VersionRecord(model="m", version="v1", manifest=BundleManifest("onnx-text-classifier", ("a",), 32),
                          created_at="t", created_by="me", artifact=record.artifact)
    assert "precision" not in json.loads(plain.to_json())  # old records keep their shape
    assert VersionRecord.from_json(plain.to_json()).manifest.precision == "fp32"


# -- refusals -------------------------------------------------------------------------------------------


def _matmul_bundle(dest: Path, like: Path) -> Path:
    """A valid bundle whose graph is a single MatMul over the mask: nothing BERT-like to fuse."""
    shutil.copytree(like, dest)
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", 8])
              for name in ("input_ids", "attention_mask")]
    nodes = [helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["mask", "w"], ["logits"])]
    graph = helper.make_graph(nodes, "matmul", inputs, [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                                                      ["batch", 2])],
                              [numpy_helper.from_array(np.ones((8, 2), np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(dest / "model.onnx"))
    return dest


def _unfusable_bundle(dest: Path, like: Path) -> Path:
    """Heads and hidden are readable, but LogSoftmax in place of Softmax keeps ORT's attention fusion off."""
    shutil.copytree(like, dest)
    model = onnx.load(str(dest / "model.onnx"))
    for node in model.graph.node:
        if node.op_type == "Softmax":
            node.op_type = "LogSoftmax"
    onnx.save(model, str(dest / "model.onnx"))
    return dest


def _one_line_refusal(result: subprocess.CompletedProcess[str], code: int, pattern: str) -> str:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("registry: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


def _foreign_op_bundle(dest: Path, like: Path) -> Path:
    """Each LayerNormalization moved to a domain neither ONNX nor ORT knows: no types downstream of it."""
    shutil.copytree(like, dest)
    model = onnx.load(str(dest / "model.onnx"))
    for node in model.graph.node:
        if node.op_type == "LayerNormalization":
            node.domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(model, str(dest / "model.onnx"))
    return dest


@pytest.mark.parametrize(("make", "levels", "pattern"), [
    (_matmul_bundle, LEVELS,
     "not a BERT-family encoder: expected one word-embedding Gather over input_ids, found none"),
    # int8 quantizes the plain graph: the fusion's pattern does not matter to it.
    (_unfusable_bundle, ("fuse", "fp16"), "matched no attention block .*optimising it would buy nothing"),
    (_foreign_op_bundle, ("int8",),
     r"model.onnx: quantize step failed in ONNX Runtime's tooling \(RuntimeError: Unable to find data type"),
])
def test_graphs_that_cannot_be_optimised_are_refused(cli: Cli, sources: dict[str, Path], tmp_path: Path,
                                                     make: Callable[[Path, Path], Path], levels: tuple[str, ...],
                                                     pattern: str) -> None:
    source = make(tmp_path / "source", sources["tiny"])
    for level in levels:
        result = cli("optimize", "--bundle", str(source), "--out", str(tmp_path / "out"), "--optimize", level,
                     cwd=tmp_path)
        _one_line_refusal(result, 1, pattern)
        assert not (tmp_path / "out").exists() and _leftovers(tmp_path) == []


def test_refusals(cli: Cli, sources: dict[str, Path], optimized: dict, tmp_path: Path) -> None:
    tiny = str(sources["tiny"])
    result = cli("optimize", "--bundle", tiny, "--out", str(tmp_path / "o"), "--optimize", "int4", cwd=tmp_path)
    _one_line_refusal(result, 2, r"invalid choice: 'int4' \(choose from '?fuse'?, '?int8'?, '?fp16'?, '?bf16'?\)")

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    result = cli("optimize", "--bundle", tiny, "--out", str(busy), "--optimize", "fuse", cwd=tmp_path)
    _one_line_refusal(result, 1, "busy: not empty")
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]

    fused = str(optimized["tiny", "fuse"])
    result = cli("optimize", "--bundle", fused, "--out", str(tmp_path / "o"), "--optimize", "fp16", cwd=tmp_path)
    _one_line_refusal(result, 1, r"already optimised at level 'fuse'; optimise its source bundle .* at 'fp16'")
    result = cli("optimize", "--bundle", fused, "--out", str(tmp_path / "o"), "--optimize", "fuse", cwd=tmp_path)
    _one_line_refusal(result, 1, r"already optimised at level 'fuse'; publish it as it is")

    result = cli("optimize", "--bundle", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--optimize", "fuse",
                 cwd=tmp_path)
    _one_line_refusal(result, 1, "nope: not a directory")
    assert not (tmp_path / "o").exists() and _leftovers(tmp_path) == []


def test_an_empty_dest_directory_is_fine(sources: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = optimize_bundle(sources["tiny"], tmp_path / "empty", "fuse")
    assert load_manifest(result.path).optimization is not None
    with pytest.raises(OptimizeError, match="unknown optimisation level 'int4'"):
        optimize_bundle(sources["tiny"], tmp_path / "other", "int4")


def test_a_missing_sympy_is_named(sources: dict[str, Path], tmp_path: Path) -> None:
    # ORT's fusion needs sympy (its symbolic shape inference); None in sys.modules makes `import sympy` fail.
    code = ("import sys; sys.modules['sympy'] = None; from ortserve.registry.cli import main; "
            f"sys.exit(main(['optimize', '--bundle', {str(sources['tiny'])!r}, '--out', {str(tmp_path / 'o')!r}, "
            "'--optimize', 'fuse']))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    _one_line_refusal(result, 1, r"optimising needs the Python package 'sympy', which is not installed")
    assert not (tmp_path / "o").exists() and _leftovers(tmp_path) == []


# -- the CLI --------------------------------------------------------------------------------------------


def test_cli_optimize_reports_each_step_and_a_summary(cli: Cli, sources: dict[str, Path], tmp_path: Path) -> None:
    result = cli("optimize", "--bundle", str(sources["wide"]), "--out", str(tmp_path / "fp16"), "--optimize", "fp16",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # ORT's fusion warnings stay off stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("read ") and "4 heads x 16 (hidden 64)" in lines[0]
    assert lines[1].startswith("fused: Attention x 2")
    assert lines[2].startswith("converted to fp16")
    corpus = len(builtin_eval_set().texts)
    assert lines[3] == f"gate: {corpus} texts from built-in corpus, {-(-corpus // 16)} length-sorted batches of <= 16"
    assert lines[4].startswith("gate: source logits") and lines[5].startswith("gate: fp16 logits")
    assert lines[6].startswith("gate: fp16 logits one text at a time")
    assert lines[7].startswith("gate: timed both models")
    assert lines[8] == f"accuracy gate: fp16 against its source on {corpus} texts from built-in corpus"
    assert "verdict: pass" in lines and lines[-2].startswith("wrote ")
    assert "level fp16, precision fp16" in lines[-1] and "Attention x 0 -> 2" in lines[-1]
    assert "SkipLayerNormalization x 0 -> 4" in lines[-1] and "model.onnx" in lines[-1] and "KiB" in lines[-1]

    result = cli("optimize", "--bundle", str(sources["tiny"]), "--out", str(tmp_path / "fuse"), "--optimize", "fuse",
                 "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["level"] == "fuse" and summary["precision"] == "fp32"
    assert summary["num_heads"] == 2 and summary["hidden_size"] == 32
    assert summary["ops_before"]["Softmax"] == 2 and summary["ops_after"]["Attention"] == 2
    assert summary["model_bytes_after"] == (tmp_path / "fuse" / "model.onnx").stat().st_size
    assert summary["optimization"]["source_sha256"] == _sha256(sources["tiny"] / "model.onnx")
    gate = summary["gate"]
    assert gate["level"] == "fuse" and gate["passed"] is True and gate["refusals"] == []
    assert gate["speed"]["texts"] == corpus and gate["speed"]["source_texts_per_s"] > 0
    assert summary["optimization"]["accuracy"] == {k: gate[k] for k in summary["optimization"]["accuracy"]}

    result = cli("optimize", "--bundle", str(sources["tiny"]), "--out", str(tmp_path / "int8"), "--optimize", "int8",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "quantized to int8: MatMulInteger x 13" in result.stdout
    assert "level int8, precision int8; MatMulInteger x 0 -> 13" in result.stdout.splitlines()[-1]


def test_publish_optimize_records_the_provenance(cli: Cli, sources: dict[str, Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    scratch = tmp_path / "scratch"  # TMPDIR: where publish --optimize writes, and must clean up
    scratch.mkdir()
    env = {"TMPDIR": str(scratch)}
    args = ("--registry", store.as_uri(), "publish", "--model", "m", "--version", "v2", "--bundle",
            str(sources["tiny"]), "--optimize", "fuse", "--weight", "100")
    result = cli(*args, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "fused: Attention x 2" in result.stdout and "published m/v2" in result.stdout
    assert not list(scratch.glob("registry-optimize-*"))

    assert "accuracy gate: fuse against its source" in result.stdout and "verdict: pass" in result.stdout
    doc = json.loads(cli("--registry", store.as_uri(), "show", "m", "--json", cwd=tmp_path).stdout)
    v2 = doc["versions"]["v2"]
    source_sha = _sha256(sources["tiny"] / "model.onnx")
    assert v2["precision"] == "fp32"
    assert {k: v for k, v in v2["optimization"].items() if k != "accuracy"} == {
        "level": "fuse", "source_sha256": source_sha, "tools": TOOLS}
    assert v2["optimization"]["accuracy"]["passed"] is True
    table = cli("--registry", store.as_uri(), "show", "m", cwd=tmp_path).stdout
    assert "OPTIMIZED" in table and f"fuse (fp32, from {source_sha[:12]})" in table
    listing = json.loads(cli("--registry", store.as_uri(), "list", "--json", cwd=tmp_path).stdout)
    assert listing == [{"model": "m", "versions": ["v2"], "routing": {"v2": 100},
                        "optimized": {"v2": {"precision": "fp32", "optimization": v2["optimization"],
                                             "references": v2["references"]}}}]
    assert "v2[fuse]" in cli("--registry", store.as_uri(), "list", cwd=tmp_path).stdout

    # What was published is the fused bundle, and doing it again is the usual idempotent no-op.
    ref = ArtifactRef.from_dict(v2["artifact"])
    fetched = ArtifactCache(tmp_path / "cache").fetch(ref)
    assert _ops(fetched)["Attention"] == 2
    result = cli(*args[:-2], cwd=tmp_path, env=env)
    assert result.returncode == 0 and "already published" in result.stdout, result.stderr
    assert not list(scratch.glob("registry-optimize-*"))

    # The same source and level under another version name: the very same artifact (same sha256).
    result = cli("--registry", store.as_uri(), "publish", "--model", "m", "--version", "v3", "--bundle",
                 str(sources["tiny"]), "--optimize", "fuse", "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    published = json.loads(result.stdout)
    assert published["sha256"] == v2["artifact"]["sha256"] and published["already_published"] is False
    assert published["optimize"]["gate"]["passed"] is True and published["routing"] == {"v2": 100}


def test_int8_says_in_one_line_when_it_is_no_faster(sources: dict[str, Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU without VNNI or AMX the gate measures int8 at about FP32's speed: optimize says so, and what the
    model still gains. (The timing is replaced by that CPU's figure; the gate's other checks run for real.)"""
    from ortserve.bundle.cpu import cpu_info
    from ortserve.prepare import accuracy

    def as_on_avx2(*_args: object, **kwargs: Any) -> accuracy.Speed:
        return accuracy.Speed(texts=334, batch_size=16, threads=2, rounds=1, source_texts_per_s=92.0,
                              optimized_texts_per_s=97.5)

    monkeypatch.setattr(accuracy, "measure_speed", as_on_avx2)
    lines: list[str] = []
    result = optimize_bundle(sources["tiny"], tmp_path / "int8", "int8", lines.append)
    (note,) = [line for line in lines if line.startswith("note:")]
    smaller = (sources["tiny"] / "model.onnx").stat().st_size / result.size_after
    assert note == (f"note: int8 runs 1.06x FP32 on {cpu_info().describe()}: no faster without VNNI or AMX (about 2x "
                    f"where the CPU has them); the model is {smaller:.1f}x smaller")
    monkeypatch.undo()
    lines.clear()
    optimize_bundle(sources["tiny"], tmp_path / "fuse", "fuse", lines.append, gate=QUICK_GATE)
    assert not [line for line in lines if line.startswith("note:")]  # said of int8 only
