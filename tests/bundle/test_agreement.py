"""The per-kind judges of two versions' answers to the same call, with plain values."""

from __future__ import annotations

import numpy as np
import pytest

from ortserve.bundle import agreement
from ortserve.bundle.agreement import Agreement, Tally
from ortserve.prepare import accuracy


def test_a_classifier_agrees_on_its_decisive_rows_only() -> None:
    stable = np.array([[4.0, 0.0], [0.0, 4.0], [0.02, 0.0]])  # the third is a near tie: not judged
    same = agreement.labels(stable, stable.copy())
    assert (same.judged, same.agreed, same.distance) == (2, 2, 0.0)
    flipped = agreement.labels(stable, np.array([[0.0, 4.0], [0.0, 4.0], [0.0, 0.02]]))
    assert (flipped.judged, flipped.agreed) == (2, 1)
    assert flipped.distance > 0.9


def test_a_non_finite_answer_disagrees_and_is_as_far_as_can_be() -> None:
    got = agreement.labels(np.array([[4.0, 0.0]]), np.array([[np.nan, 0.0]]))
    assert (got.judged, got.agreed, got.distance) == (1, 0, 1.0)


def test_independent_labels_agree_on_the_same_set_past_one_half() -> None:
    stable = np.array([[3.0, -3.0, 3.0], [0.01, 3.0, -3.0]])  # row 2 has a label near 0.5: not decisive
    cand = np.array([[2.0, -1.0, 1.0], [-3.0, 3.0, -3.0]])
    got = agreement.labels(stable, cand, multi_label=True)
    assert (got.judged, got.agreed) == (1, 1)
    assert agreement.labels(stable, -cand, multi_label=True).agreed == 0


def test_the_gate_and_the_live_judge_share_one_margin_rule() -> None:
    assert accuracy.margins is agreement.margins and accuracy.softmax is agreement.softmax
    logits = np.array([[1.0, 0.0], [5.0, 5.0]])
    np.testing.assert_allclose(agreement.margins(logits), [np.tanh(0.5), 0.0])


def test_vectors_agree_by_cosine() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    got = agreement.vectors(a, np.array([[1.0, 0.01], [1.0, 0.0]]))
    assert (got.judged, got.agreed) == (2, 1)
    assert got.distance == pytest.approx(1.0)
    assert agreement.vectors(a, 3 * a).distance == pytest.approx(0.0)


def test_ranks_judge_the_call_by_top_k_and_score_order() -> None:
    stable = [0.9, 0.1, 0.5, 0.7, 0.2]
    same_order = agreement.ranks(stable, [s * 2 - 1 for s in stable])
    assert (same_order.judged, same_order.agreed, same_order.concordance) == (1, 1, 1.0)
    # The bottom two swap: the top 3 hold, one pair of ten is out of order.
    swapped = agreement.ranks(stable, [0.9, 0.2, 0.5, 0.7, 0.1])
    assert (swapped.agreed, swapped.concordance) == (1, 0.9)
    reversed_ = agreement.ranks(stable, [-s for s in stable])
    assert (reversed_.agreed, reversed_.concordance, reversed_.distance) == (0, 0.0, 1.0)
    assert agreement.ranks([1.0, 2.0], [1.0, float("inf")]).agreed == 0


def test_reranker_scores_come_from_the_one_logit_or_the_last_labels_lead() -> None:
    np.testing.assert_allclose(agreement.reranker_scores(np.array([[0.3], [0.1]])), [0.3, 0.1])
    np.testing.assert_allclose(agreement.reranker_scores(np.array([[1.0, 3.0], [0.0, -1.0]])), [2.0, -1.0])


def test_entities_agree_by_span_and_label() -> None:
    stable = [[(0, 4, "PER"), (10, 15, "LOC")], []]
    cand = [[(0, 4, "PER"), (10, 15, "ORG")], [(1, 2, "MISC")]]
    got = agreement.entities(stable, cand)
    # Judged: PER (agrees), LOC and ORG (each unmatched), MISC (unmatched).
    assert (got.judged, got.agreed) == (4, 1)
    assert got.distance == 1.0
    assert agreement.entities(stable, stable) == Agreement(judged=2, agreed=2, distance=0.0)


def test_tallies_add_across_calls_and_replicas() -> None:
    one = Tally().add(Agreement(3, 2, 0.5)).add(Agreement(1, 1, 0.0, concordance=0.5))
    assert (one.calls, one.judged, one.agreed, one.agreement, one.concordance) == (2, 4, 3, 0.75, 0.5)
    both = one + one
    assert (both.calls, both.judged, both.agreed, both.agreement) == (4, 8, 6, 0.75)
    assert Tally().agreement is None and Tally().concordance is None


def test_answers_of_two_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        agreement.labels(np.zeros((2, 3)), np.zeros((2, 2)))
    with pytest.raises(ValueError):
        agreement.ranks([1.0], [1.0, 2.0])


def test_each_kind_has_its_judge_and_a_call_is_judged_by_it() -> None:
    assert agreement.judge_of(labelled=True, reranker=False, per_token=False) == agreement.LABELS
    assert agreement.judge_of(labelled=False, reranker=False, per_token=False) == agreement.VECTORS
    assert agreement.judge_of(labelled=True, reranker=True, per_token=False) == agreement.RANKS
    assert agreement.judge_of(labelled=True, reranker=False, per_token=True) == agreement.ENTITIES
    logits = np.array([[4.0, 0.0], [0.0, 4.0]])
    assert agreement.judge_call(agreement.LABELS, logits, logits[:, ::-1]) == agreement.labels(logits, logits[:, ::-1])
    vectors = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert agreement.judge_call(agreement.VECTORS, vectors, vectors).agreed == 2
    scores = np.array([[0.1], [0.5], [0.9]])
    ranked = agreement.judge_call(agreement.RANKS, scores, scores[::-1])
    assert (ranked.judged, ranked.agreed, ranked.concordance) == (1, 1, 0.0)  # the same top 3, every pair reversed
    with pytest.raises(ValueError, match="no row judge"):
        agreement.judge_call(agreement.ENTITIES, logits, logits)


def test_answers_of_another_shape_disagree_on_every_row() -> None:
    other = agreement.judge_call(agreement.VECTORS, np.ones((3, 4)), np.ones((3, 2)))
    assert (other.judged, other.agreed, other.distance) == (3, 0, 1.0)
    ranked = agreement.judge_call(agreement.RANKS, np.ones((3, 1)), np.ones((3, 2)))
    assert (ranked.judged, ranked.agreed, ranked.concordance) == (1, 0, 0.0)


def test_a_tally_since_an_earlier_one_is_the_counts_in_between() -> None:
    earlier = Tally(calls=2, judged=5, agreed=4, concordance_sum=0.5, ranked_calls=1)
    now = earlier + Tally(calls=3, judged=6, agreed=6, concordance_sum=1.0, ranked_calls=1)
    assert now - earlier == Tally(calls=3, judged=6, agreed=6, concordance_sum=1.0, ranked_calls=1)
    assert earlier - now == Tally()  # a counter reset reads as nothing since
