"""`registry optimize --optimize bf16` on a CPU with bf16: the FP32 graph unchanged, judged as OpenVINO runs it in bf16.

A bf16 bundle is its source's model.onnx byte for byte, marked precision bf16 (the engine then runs it on OpenVINO),
with the gate's report recording bf16's own differences from the source (not zero: the gate ran bf16, not ONNX
Runtime again), the OpenVINO release it ran on, and the bounds the load-time check derives its rule from. Through
the CLI the gate's table is printed, and `publish --optimize bf16` records the same provenance in the registry.
The tiny BERT at seed 7 (as the int8 tests use it) is decisive on all 1,669 built-in texts, so the default 0.99 bound
is proven without a custom eval set. CPUs without bf16 skip this (tests/support/bf16.py); the refusal there is tested
on every machine in test_bf16_every_cpu.py.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.bf16 import require_bf16

from ortserve.bundle.manifest import load_manifest
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare.accuracy import GateSettings, builtin_eval_set
from ortserve.prepare.optimize import OptimizeResult, optimize_bundle
from ortserve.service.verify import GATE_FACTOR, SLACK, Rule, rule_for

Cli = Callable[..., subprocess.CompletedProcess[str]]
TOOLS = {"onnxruntime": ort.__version__, "onnx": onnx.__version__, "openvino": version("openvino")}
CORPUS = len(builtin_eval_set().texts)
# What separates the gate having run bf16 from it having run FP32 twice: FP32's rounding is ~1e-6 on these logits,
# bf16's (8 significant bits) about 1e-2.
ABOVE_FP32_ROUNDING = 1e-3


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_bf16()
    return build_tiny_bundle(tmp_path_factory.mktemp("bf16-gate") / "source", seed=7).path


@pytest.fixture(scope="module")
def optimized(source: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[OptimizeResult, list[str]]:
    """The bf16 bundle and the lines optimize printed; one timing round (the speed is not looked at here)."""
    lines: list[str] = []
    result = optimize_bundle(source, tmp_path_factory.mktemp("bf16-out") / "bf16", "bf16", lines.append,
                             gate=GateSettings(speed_rounds=1))
    return result, lines


def test_a_bf16_bundle_is_the_fp32_graph_marked_bf16(source: Path, optimized: tuple[OptimizeResult, list[str]]) -> None:
    result, _ = optimized
    bundle = result.path
    for name in ("model.onnx", "tokenizer.json"):
        assert (bundle / name).read_bytes() == (source / name).read_bytes(), name
    assert sorted(p.name for p in bundle.iterdir()) == ["manifest.json", "model.onnx", "references.jsonl",
                                                       "tokenizer.json"]
    assert result.ops_after == result.ops_before and result.size_after == result.size_before

    before = json.loads((source / "manifest.json").read_text())
    after = json.loads((bundle / "manifest.json").read_text())
    assert {k: after[k] for k in ("format", "labels", "max_seq_len", "notes")} == {
        k: before[k] for k in ("format", "labels", "max_seq_len", "notes")}
    assert after["precision"] == "bf16"
    optimization = after["optimization"]
    assert {k: v for k, v in optimization.items() if k != "accuracy"} == {
        "level": "bf16", "source_sha256": _sha256(source / "model.onnx"), "tools": TOOLS}  # no quantization form
    # The references are the source's FP32 answers, as for every level: the check compares bf16 with them.
    assert after["references"]["outputs_from"].startswith(f"the source bundle's model.onnx (sha256 "
                                                         f"{_sha256(source / 'model.onnx')[:12]}) in FP32")
    assert after["references"]["sha256"] == _sha256(bundle / "references.jsonl")

    manifest = validate_bundle(bundle)
    assert manifest == load_manifest(bundle) and manifest.precision == "bf16"
    assert manifest.optimization is not None and manifest.optimization.level == "bf16"
    assert dict(manifest.optimization.tools)["openvino"] == TOOLS["openvino"]


def test_the_gate_measured_bf16_and_recorded_its_bounds(optimized: tuple[OptimizeResult, list[str]]) -> None:
    result, _ = optimized
    accuracy = json.loads((result.path / "manifest.json").read_text())["optimization"]["accuracy"]
    assert accuracy["passed"] is True and accuracy["accepted_loss"] is False
    assert accuracy["eval"] == {"source": "built-in corpus", "sha256": builtin_eval_set().sha256, "texts": CORPUS,
                                "labelled": False}
    bound = accuracy["decisive_agreement_bound"]
    assert accuracy["decisive"] >= bound["decisive_needed"] == 299
    assert bound["lower"] >= accuracy["min_agreement"] == 0.99
    assert (bound["method"], bound["one_sided"], bound["confidence"]) == ("Clopper-Pearson", True, 0.95)
    assert accuracy["decisive_agreement"] >= 0.99 and accuracy["alone"]["decisive_agreement_lower_bound"] >= 0.99
    # Not zero and above FP32's rounding: the candidate ran in bf16 on OpenVINO (ONNX Runtime would give the source's
    # logits to ~1e-6); and within what bf16's 8 bits allow on logits of this size (|logit| <= 3).
    for key in ("max_abs_delta_logit", "batch_spread_logit"):
        assert ABOVE_FP32_ROUNDING < accuracy[key] < 0.15, (key, accuracy[key])
    assert ABOVE_FP32_ROUNDING < accuracy["alone"]["max_abs_delta_logit"] < 0.15
    assert accuracy["cpu"]["bf16"] is True  # the CPU the gate measured on says it computes bf16
    assert "speed" not in accuracy  # this machine's timing would make every re-publish different bytes

    # The load-time check's rule is built from the gate's bound: 1.5 x its worst |delta| + 2% of the logit.
    manifest = load_manifest(result.path)
    assert manifest.optimization is not None
    assert manifest.optimization.gate_max_abs_delta == accuracy["max_abs_delta_logit"]
    assert rule_for(manifest, "cpu") == Rule(name="bf16 on cpu", gate_delta=GATE_FACTOR * accuracy[
        "max_abs_delta_logit"], relative=SLACK["bf16"])
    assert SLACK["bf16"] == 0.02


def test_optimize_reports_the_bf16_gate_as_it_runs(optimized: tuple[OptimizeResult, list[str]]) -> None:
    _, lines = optimized
    assert lines[0].startswith("read ") and "2 heads x 16 (hidden 32)" in lines[0]
    assert lines[1] == f"gate: {CORPUS} texts from built-in corpus, {-(-CORPUS // 16)} length-sorted batches of <= 16"
    assert lines[2].startswith("gate: source logits") and lines[3].startswith("gate: bf16 logits (")
    assert f"accuracy gate: bf16 against its source on {CORPUS} texts from built-in corpus" in lines
    assert "verdict: pass" in lines and lines[-1].startswith("wrote ") and "(bf16, model.onnx " in lines[-1]


def _gate_table(stdout: str) -> dict[str, str]:
    """The gate table's rows (label -> the rest), between its heading and the verdict."""
    lines = stdout.splitlines()
    start = lines.index(f"accuracy gate: bf16 against its source on {CORPUS} texts from built-in corpus")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("verdict: "))
    rows = [line.strip() for line in lines[start + 2:end]]
    return {row.split("  ")[0]: row.split("  ", 1)[1].strip() for row in rows}


def test_the_cli_prints_the_bf16_gate_table_and_a_summary(cli: Cli, source: Path, tmp_path: Path) -> None:
    result = cli("optimize", "--bundle", str(source), "--out", str(tmp_path / "bf16"), "--optimize", "bf16",
                 cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.strip().splitlines()
    assert "SOURCE -> BF16" in result.stdout and "verdict: pass" in lines
    table = _gate_table(result.stdout)
    assert table["argmax agreement, decisive (margin >= 0.1)"].startswith(f"1.0000 ({CORPUS}/{CORPUS})")
    assert table["its lower bound (one-sided 95%, Clopper-Pearson)"].split()[-2:] == [">=", "0.99"]
    assert "texts/s, engine alone (2 threads, batches of 16)" in table and "CPU" in table
    assert table["timed as"] == "one session, batch after batch (served under load: scripts/bench)"
    assert "AVX-512 BF16" in table["CPU"] or "AMX-BF16" in table["CPU"]
    assert lines[-1].startswith(f"optimised {source} -> {tmp_path / 'bf16'}: level bf16, precision bf16; nodes ")
    assert load_manifest(tmp_path / "bf16").precision == "bf16"


def test_publish_optimize_bf16_records_the_runtime(cli: Cli, source: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = cli("--registry", store.as_uri(), "publish", "--model", "m", "--version", "v1-bf16", "--bundle",
                 str(source), "--optimize", "bf16", "--weight", "100", "--json", cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    published = json.loads(result.stdout)
    assert published["optimize"]["gate"]["passed"] is True and published["optimize"]["precision"] == "bf16"

    shown: dict[str, Any] = json.loads(cli("--registry", store.as_uri(), "show", "m", "--json",
                                           cwd=tmp_path).stdout)["versions"]["v1-bf16"]
    assert shown["precision"] == "bf16"
    assert {k: v for k, v in shown["optimization"].items() if k != "accuracy"} == {
        "level": "bf16", "source_sha256": _sha256(source / "model.onnx"), "tools": TOOLS}
    assert "v1-bf16[bf16]" in cli("--registry", store.as_uri(), "list", cwd=tmp_path).stdout
    table = cli("--registry", store.as_uri(), "show", "m", cwd=tmp_path).stdout
    assert f"bf16 (bf16, from {_sha256(source / 'model.onnx')[:12]})" in table
