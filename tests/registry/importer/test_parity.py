"""The parity gate's verdict, as a pure function over arrays: its tolerance, ties, cosines, tokenizer ids, non-finite
outputs, and the report and manifest figures it gives."""

from __future__ import annotations

import numpy as np

from ortserve.bundle.kinds import CLASSIFIER, EMBEDDING, TOKEN_CLASSIFIER
from ortserve.prepare.importer.parity import LOGIT_TOLERANCE, MIN_COSINE, ParityReport, Run, judge, judge_run

TEXTS = ("good", "bad", "fine", "a long one")
REFERENCE = np.array([[2.0, -1.0], [-30.0, 40.0], [0.5, 0.49995], [0.1, 0.3]], np.float32)


def classify(*runs: np.ndarray, bundle_ids: list[list[int]] | None = None) -> ParityReport:
    ids = [[1, 2], [3], [4], [5, 6]]
    return judge(CLASSIFIER, TEXTS, REFERENCE, [Run(f"run {n}", r) for n, r in enumerate(runs)],
                 reference_ids=ids, bundle_ids=bundle_ids or ids, eval_name="eval.txt", eval_sha256="0" * 64,
                 long_texts=1, reference_name="transformers x")


def test_within_the_tolerance_relative_to_the_largest_logit_passes() -> None:
    nudged = REFERENCE.copy()
    nudged[0, 0] += 0.9 * LOGIT_TOLERANCE * 2.0  # relative to the text's largest |logit|, 2
    nudged[1, 1] -= 0.9 * LOGIT_TOLERANCE * 40.0
    report = classify(nudged)
    assert report.passed and report.refusals == ()
    (run,) = report.runs
    assert run.agree == 4 and run.max_relative_delta < LOGIT_TOLERANCE
    assert report.table()[-1] == "verdict: pass"


def test_past_the_tolerance_is_refused_naming_the_worst_text() -> None:
    moved = REFERENCE.copy()
    moved[3, 0] += 1.5 * LOGIT_TOLERANCE  # |logit| < 1 there: the bound is the tolerance itself
    (reason,) = classify(moved).refusals
    assert reason.startswith("run 0: 1 of 4 texts have a logit further than 0.0001 x max(1, |logit|)")
    assert "'a long one'" in reason


def test_a_tie_within_two_tolerances_agrees_either_way_and_is_counted() -> None:
    flipped = REFERENCE.copy()
    flipped[2] = [0.49995, 0.5]  # the third text's two logits, 5e-5 apart, swapped: both within the tolerance
    report = classify(flipped)
    assert report.passed
    assert (report.runs[0].agree, report.runs[0].ties) == (4, 1)


def test_a_changed_label_is_refused() -> None:
    flipped = REFERENCE.copy()
    flipped[3] = [0.3, 0.1]
    reasons = classify(flipped).refusals
    assert reasons[0] == "run 0: argmax differs from PyTorch's on 1 of 4 texts (first 'a long one')"


def test_other_token_ids_and_non_finite_outputs_are_refused() -> None:
    broken = REFERENCE.copy()
    broken[1, 0] = np.nan
    report = classify(REFERENCE, broken, bundle_ids=[[1, 2], [3], [4], [5]])
    assert report.refusals[0] == ("the bundle's tokenizer.json gives other token ids than the checkpoint's tokenizer "
                                  "on 1 of 4 texts (first 'a long one')")
    assert "run 1: 1 of 4 texts got non-finite outputs" in report.refusals
    entry = report.manifest_entry()
    assert entry["tokenizer_ids_identical"] == "3/4" and entry["passed"] is False
    assert entry["runs"]["run 1"]["non_finite"] == 1 and entry["eval"]["texts"] == 3


def test_embeddings_by_cosine() -> None:
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((3, 8)).astype(np.float32)
    close = reference + 1e-4 * rng.standard_normal((3, 8)).astype(np.float32)
    verdict = judge_run(EMBEDDING, reference, Run("alone", close))
    assert verdict.min_cosine is not None and verdict.min_cosine >= MIN_COSINE and verdict.below_cosine == 0
    turned = reference.copy()
    turned[1] = rng.standard_normal(8)
    verdict = judge_run(EMBEDDING, reference, Run("alone", turned))
    assert verdict.below_cosine == 1 and verdict.worst_text == 1


# -- a token classifier: the same rule for every token of every text ---------------------------------------

TOKEN_TEXTS = ("Ana à Lisboa", "東京", "🙂")
TOKEN_REFERENCE = (np.array([[3.0, -1.0, 0.0], [0.0, 2.0, 1.0], [0.5, 0.49995, 0.0]], np.float32),
                   np.array([[-40.0, 30.0, 1.0], [1.0, 0.0, 0.0]], np.float32),
                   np.array([[0.2, 0.1, 0.3]], np.float32))


def tokens(*runs: list[np.ndarray]) -> ParityReport:
    ids = [[1, 2, 3], [4, 5], [6]]
    return judge(TOKEN_CLASSIFIER, TOKEN_TEXTS, TOKEN_REFERENCE, [Run(f"run {n}", r) for n, r in enumerate(runs)],
                 reference_ids=ids, bundle_ids=ids, eval_name="eval.txt", eval_sha256="0" * 64, long_texts=0,
                 reference_name="transformers x")


def test_every_token_is_held_to_the_tolerance_relative_to_its_own_largest_logit() -> None:
    nudged = [r.copy() for r in TOKEN_REFERENCE]
    nudged[1][0, 1] += 0.9 * LOGIT_TOLERANCE * 40.0  # within: that token's largest |logit| is 40
    nudged[0][2] = [0.49995, 0.5, 0.0]  # a tie within two tolerances, swapped: either label agrees
    report = tokens(nudged)
    assert report.passed and report.kind is TOKEN_CLASSIFIER
    (run,) = report.runs
    assert (run.texts, run.tokens, run.agree, run.ties) == (3, 6, 6, 1)
    entry = report.manifest_entry()
    assert entry["rule"].startswith("every token (mask=1): argmax identical")
    assert entry["runs"]["run 0"]["argmax_agreement"] == "6/6 tokens" and entry["runs"]["run 0"]["tokens"] == 6
    moved = [r.copy() for r in TOKEN_REFERENCE]
    moved[1][1, 0] += 1.5 * LOGIT_TOLERANCE  # that token's largest |logit| is 1: the bound is the tolerance itself
    (reason,) = tokens(moved).refusals
    assert reason.startswith("run 0: 1 of 6 tokens have a logit further than 0.0001 x max(1, |logit|)")
    assert "in '東京'" in reason


def test_a_flipped_token_or_another_token_count_is_refused_naming_the_text() -> None:
    flipped = [r.copy() for r in TOKEN_REFERENCE]
    flipped[2][0] = [0.2, 0.4, 0.3]
    reasons = tokens(flipped).refusals
    assert reasons[0] == "run 0: argmax differs from PyTorch's on 1 of 6 tokens (first in '🙂')"
    short = [TOKEN_REFERENCE[0][:2], TOKEN_REFERENCE[1], TOKEN_REFERENCE[2]]  # a mask read one short
    report = tokens(short)
    assert report.refusals == ("run 0: 1 of 3 texts have another token count than PyTorch's (first 'Ana à Lisboa')",)
    assert report.runs[0].tokens == 3  # the other texts' tokens are still compared
    broken = [r.copy() for r in TOKEN_REFERENCE]
    broken[0][1, 1] = np.nan
    assert "run 0: 1 of 3 texts got non-finite outputs" in tokens(broken).refusals
