"""The load-time rule over plain values: which bound each precision implies, and what `judge` finds."""

from __future__ import annotations

import numpy as np
import pytest

from ortserve.bundle.manifest import BundleManifest, Optimization
from ortserve.bundle.references import ReferenceSet
from ortserve.service.verify import Rule, judge, rule_for, skipped, unreadable, unverified

CLASSIFIER = BundleManifest(format="onnx-text-classifier", labels=("neg", "pos"), max_seq_len=32)
EMBEDDING = BundleManifest(format="onnx-text-embedding", labels=(), max_seq_len=32, dim=3)


def _optimised(level: str, precision: str, gate_delta: float | None) -> BundleManifest:
    accuracy = None if gate_delta is None else {"max_abs_delta_logit": gate_delta, "passed": True}
    return BundleManifest(format="onnx-text-classifier", labels=("neg", "pos"), max_seq_len=32, precision=precision,
                          optimization=Optimization(level=level, source_sha256="a" * 64, accuracy=accuracy))


REFS = ReferenceSet(texts=("sure no", "sure yes", "tie", "big"),
                    outputs=np.array([[2.0, -1.0], [-1.0, 2.0], [0.02, 0.0], [40.0, -40.0]], np.float32),
                    decisive=(True, True, False, True))


def test_each_precision_has_its_rule() -> None:
    fp32 = rule_for(CLASSIFIER, "cpu")
    assert fp32.bound(np.array([0.5, -0.2])) == pytest.approx(1e-3)  # |logit| below 1 counts as 1
    assert fp32.bound(np.array([40.0, -40.0])) == pytest.approx(0.04)
    assert rule_for(CLASSIFIER, "cuda:0").bound(np.array([1.0])) == pytest.approx(2e-2)  # TF32 on the GPU
    int8 = rule_for(_optimised("int8", "int8", 0.2), "cpu")
    assert int8.bound(np.array([2.0, -1.0])) == pytest.approx(1.5 * 0.2 + 0.01 * 2.0)
    fp16 = rule_for(_optimised("fp16", "fp16", 0.01), "cuda")
    assert fp16.bound(np.array([1.0])) == pytest.approx(0.015 + 0.05)
    no_gate = rule_for(_optimised("int8", "int8", None), "cpu")
    assert no_gate.bound(np.array([1.0])) == float("inf") and "no gate recorded" in no_gate.describe()
    assert rule_for(EMBEDDING, "cpu").min_cosine == 0.9999 and rule_for(EMBEDDING, "cuda").min_cosine == 0.999
    assert rule_for(CLASSIFIER, "cpu").describe() == (
        "fp32 on cpu: |delta| <= 0.001 x max(1, |logit|); decisive labels kept")


def test_the_same_answers_pass_with_their_figures() -> None:
    near = REFS.outputs + np.float32(1e-4)
    verdict = judge(REFS, near, rule_for(CLASSIFIER, "cpu"))
    assert verdict.result == "passed" and not verdict.failed and verdict.reasons == ()
    assert verdict.figures["max_abs_delta"] == pytest.approx(1e-4, rel=1e-2)
    assert verdict.figures["decisive_agreement"] == "3/3"
    assert verdict.line().startswith("outputs match 4 reference texts (max_abs_delta 0.0001")
    assert verdict.timed(0.25).to_dict()["took_s"] == 0.25


def test_a_delta_past_the_bound_fails_naming_the_worst_text() -> None:
    moved = REFS.outputs.copy()
    moved[3, 0] += 0.05  # bound there is 0.04
    moved[0, 1] += 0.0015  # bound there is 0.002
    verdict = judge(REFS, moved, rule_for(CLASSIFIER, "cpu"))
    assert verdict.failed
    (reason,) = verdict.reasons
    assert reason == "1 of 4 texts past the bound (worst |delta| 0.05 > 0.04, 'big')"
    assert verdict.line() == (f"outputs differ from the bundle's reference answers: {reason} [fp32 on cpu: |delta| "
                              "<= 0.001 x max(1, |logit|); decisive labels kept]")


def test_a_flipped_decisive_label_fails_but_a_flipped_tie_does_not() -> None:
    rule = rule_for(_optimised("int8", "int8", None), "cpu")  # no bound: labels alone decide
    tie_flipped = REFS.outputs.copy()
    tie_flipped[2] = [0.0, 0.03]
    assert judge(REFS, tie_flipped, rule).result == "passed"
    flipped = tie_flipped.copy()
    flipped[1] = [2.0, -1.0]
    verdict = judge(REFS, flipped, rule)
    assert verdict.reasons == ("1 of 3 decisive texts changed label (first 'sure yes')",)
    assert verdict.figures["decisive_agreement"] == "2/3"


def test_non_finite_and_misshapen_answers_fail() -> None:
    broken = REFS.outputs.copy()
    broken[2, 0] = np.nan
    verdict = judge(REFS, broken, rule_for(CLASSIFIER, "cpu"))
    assert verdict.failed and verdict.reasons[0] == "1 of 4 texts got non-finite outputs, first 'tie'"
    wrong = judge(REFS, np.zeros((4, 3), np.float32), rule_for(CLASSIFIER, "cpu"))
    assert wrong.reasons == ("the version answers shape [4, 3], its references [4, 2]",)


def test_embeddings_by_cosine() -> None:
    vectors = np.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]], np.float32)
    refs = ReferenceSet(texts=("a", "b"), outputs=vectors, decisive=(False, False))
    rule = rule_for(EMBEDDING, "cpu")
    assert judge(refs, vectors * 1.00001, rule).result == "passed"
    turned = vectors.copy()
    turned[1] = [0.0, 0.8, 0.6]  # cosine 0.96
    verdict = judge(refs, turned, rule)
    assert verdict.reasons == ("1 of 2 texts below cosine 0.9999 (worst 0.960000, 'b')",)
    assert verdict.figures["min_cosine"] == pytest.approx(0.96)


def test_the_other_results() -> None:
    assert unverified("the bundle carries no reference answers").line() == (
        "outputs unverified: the bundle carries no reference answers")
    assert skipped().to_dict() == {"result": "skipped", "rule": "--verify-outputs off"}
    bad = unreadable("references.jsonl: missing")
    assert bad.failed and "references.jsonl: missing" in bad.line()
    assert Rule(name="x").bound(np.array([1.0])) == float("inf")


def test_a_bounded_rule_checks_the_labels_its_bound_cannot_flip() -> None:
    # int8, gate recorded 0.2: bound 0.3 + 0.01 x max(1, |logit|). "sure no" leads by 3 (> 2 bounds): checked;
    # a decisive text leading by 0.5 (< 2 bounds) may legitimately flip within the bound: not label-checked.
    refs = ReferenceSet(texts=("sure no", "close"), outputs=np.array([[2.0, -1.0], [0.5, 0.0]], np.float32),
                        decisive=(True, True))
    rule = rule_for(_optimised("int8", "int8", 0.2), "cpu")
    within = np.array([[1.8, -0.8], [0.3, 0.2]], np.float32)  # "close" flipped by 0.2 + 0.2 < its bound each way
    verdict = judge(refs, within, rule)
    assert verdict.result == "passed" and verdict.figures["decisive_agreement"] == "1/1"
    beyond = np.array([[-1.0, 2.0], [0.5, 0.0]], np.float32)
    verdict = judge(refs, beyond, rule)
    assert verdict.failed and len(verdict.reasons) == 2  # past the bound, and a decisive label changed
    assert verdict.reasons[1] == "1 of 1 decisive texts changed label (first 'sure no')"
