"""`registry optimize` on an embedding bundle: the gate judges vectors by their cosine to the source's.

A text keeps its answer when its vector's cosine to the source's FP32 one reaches the floor the server holds the
version to at load (bundle/outputs.py: 0.999 at bf16, 0.99 at int8 and fp16, 0.9999 for FP32's fuse), and the gate
refuses unless the one-sided 95% Clopper-Pearson lower bound on the share of such texts reaches --min-agreement. The
references are chosen among the texts that kept the floor in every run, so the load-time check (service/verify.py)
passes on the machine that published. The tiny BERT embedding model at seed 7 keeps cosine >= 0.9996 at int8 on
all 1,669 built-in texts (measured; the floor is 0.99), so its pass does not hang on a CPU's rounding.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from ortserve_devtools.bert_bundle import build_tiny_embedding_bundle
from support.bf16 import require_bf16

from ortserve.bundle.manifest import load_manifest
from ortserve.bundle.outputs import MIN_COSINE, cosines, min_cosine
from ortserve.bundle.references import read_references
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare.accuracy import (
    BOUND_METHOD,
    GateSettings,
    VectorComparison,
    builtin_eval_set,
    compare_vectors,
    decisive_needed,
    make_batches,
    open_session,
    run_outputs,
    vector_refusals,
)
from ortserve.prepare.optimize import GateRefused, OptimizeResult, optimize_bundle
from ortserve.service.verify import judge, rule_for

CORPUS = len(builtin_eval_set().texts)
ONE_ROUND = GateSettings(speed_rounds=1)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_embedding_bundle(tmp_path_factory.mktemp("embedding-gate") / "source", seed=7).path


@pytest.fixture(scope="module")
def int8(source: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[OptimizeResult, list[str]]:
    lines: list[str] = []
    result = optimize_bundle(source, tmp_path_factory.mktemp("embedding-int8") / "int8", "int8", lines.append,
                             gate=ONE_ROUND)
    return result, lines


# -- the rule, with plain values ---------------------------------------------------------------------------


def test_cosines_count_a_broken_or_zero_vector_as_orthogonal() -> None:
    want = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    got = np.array([[2.0, 0.0], [1.0, -1.0], [np.nan, 0.0], [1.0, 0.0]])
    assert cosines(want, got).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_the_floor_is_the_load_time_checks_at_every_precision(source: Path) -> None:
    manifest = load_manifest(source)
    for precision, key in (("fp32", "fp32-cpu"), ("bf16", "bf16"), ("int8", "optimised"), ("fp16", "optimised")):
        assert min_cosine(precision) == MIN_COSINE[key]
        rule = rule_for(replace(manifest, precision=precision), "cpu")
        assert rule.min_cosine == min_cosine(precision), precision
    assert min_cosine("fp32", on_gpu=True) == MIN_COSINE["fp32-gpu"]


def test_compare_vectors_counts_the_texts_that_keep_the_floor() -> None:
    source = np.array([[1.0, 0.0]] * 400)
    candidate = source.copy()
    candidate[:3] = [0.9, 0.2]  # cosine 0.976: under 0.99
    candidate[3] = [np.inf, 0.0]
    c = compare_vectors(source, candidate, min_cosine=0.99)
    assert (c.texts, c.close, c.non_finite) == (400, 396, 1)
    assert c.worst_cosine == 0.0 and c.lower_bound(0.95) < c.agreement == 0.99
    reasons = vector_refusals(c, min_agreement=0.95)
    assert reasons == ("1 of 400 texts got non-finite vectors (NaN or infinity)",)
    refused = vector_refusals(c, min_agreement=0.99)[1]
    assert "396 of 400 texts kept cosine >= 0.99" in refused and BOUND_METHOD in refused


def test_too_few_texts_to_prove_the_threshold_are_refused_with_how_many_are_needed() -> None:
    c = VectorComparison(texts=100, close=100, min_cosine=0.99, worst_cosine=1.0, mean_cosine=1.0, max_abs_delta=0.0)
    (reason,) = vector_refusals(c, min_agreement=0.99)
    assert f"needs at least {decisive_needed(0.99, 0.95)} texts" in reason


# -- optimise, end to end -----------------------------------------------------------------------------------


def test_an_int8_embedding_bundle_records_the_cosine_gate(source: Path, int8: tuple[OptimizeResult, list[str]]
                                                         ) -> None:
    result, lines = int8
    manifest = validate_bundle(result.path)
    assert manifest.precision == "int8" and manifest.kind == "embedding"
    accuracy = json.loads((result.path / "manifest.json").read_text())["optimization"]["accuracy"]
    assert accuracy["min_cosine"] == 0.99 and accuracy["close"] == CORPUS and accuracy["passed"] is True
    assert accuracy["agreement_bound"]["lower"] >= 0.99 and accuracy["agreement_bound"]["method"] == BOUND_METHOD
    assert 0.99 <= accuracy["worst_cosine"] < 1.0  # int8 moved the vectors, within the floor
    assert accuracy["alone"]["close"] == CORPUS
    assert any(line.strip().startswith("texts with cosine >= 0.99 to the source") for line in lines)
    assert "verdict: pass" in lines


def test_the_int8_bundle_passes_the_load_time_check_on_its_references(int8: tuple[OptimizeResult, list[str]]
                                                                     ) -> None:
    """The references are the source's FP32 vectors; the int8 graph, run as the server runs it, keeps their floor."""
    result, _ = int8
    manifest = load_manifest(result.path)
    assert manifest.references is not None
    refs = read_references(result.path, manifest.references, manifest.columns)
    session = open_session(result.path / "model.onnx", 2)
    outputs = run_outputs(session, make_batches(result.path / "tokenizer.json", manifest.max_seq_len, refs.texts, 8),
                          len(refs.texts), "embedding")
    verdict = judge(refs, outputs, rule_for(manifest, "cpu"))
    assert verdict.result == "passed", verdict.reasons
    assert not any(refs.decisive)  # an embedding has no labels to be decisive about


def test_a_small_eval_set_is_refused_and_nothing_is_written(source: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "small"
    bundle.mkdir()
    for item in source.iterdir():
        (bundle / item.name).write_bytes(item.read_bytes())
    (bundle / "eval.txt").write_text("\n".join(builtin_eval_set().texts[:120]) + "\n")
    with pytest.raises(GateRefused, match=r"too few texts to prove --min-agreement 0.99.*needs at least 299 texts"):
        optimize_bundle(bundle, tmp_path / "out", "int8", gate=ONE_ROUND)
    assert not (tmp_path / "out").exists()


def test_a_bf16_embedding_bundle_is_held_to_cosine_0999(source: Path, tmp_path: Path) -> None:
    require_bf16()
    result = optimize_bundle(source, tmp_path / "bf16", "bf16", gate=ONE_ROUND)
    assert (result.path / "model.onnx").read_bytes() == (source / "model.onnx").read_bytes()
    accuracy = json.loads((result.path / "manifest.json").read_text())["optimization"]["accuracy"]
    assert accuracy["min_cosine"] == 0.999 and accuracy["passed"] is True and accuracy["close"] == CORPUS
    assert accuracy["worst_cosine"] < 1.0  # bf16 ran, not FP32 again
