"""The classification extension's top-k (classification.h, the one implementation both front ends use): its rules
on hand-made scores, and on any scores against the rules restated here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import classification_top_k

LABELS = ["negative", "neutral", "positive", "mixed"]


def top_k(scores: np.ndarray, k: int, labels: list[str], probabilities: bool = False,
          multi_label: bool = False) -> list[list[bytes]]:
    return classification_top_k(np.asarray(scores, np.float32), labels, k, probabilities, multi_label)


def _parse(entry: bytes) -> tuple[float, int, str]:
    score, index, label = entry.decode().split(":", 2)
    return float(score), int(index), label


def test_best_first_with_index_and_label() -> None:
    scores = np.array([[0.5, -1.0, 2.25, 1.0], [3.0, 2.0, 1.0, 0.0]], np.float32)
    assert top_k(scores, 2, LABELS) == [[b"2.250000:2:positive", b"1.000000:3:mixed"],
                                        [b"3.000000:0:negative", b"2.000000:1:neutral"]]


def test_k_larger_than_the_labels_is_clamped() -> None:
    rows = top_k(np.array([[0.1, 0.4, 0.3, 0.2]], np.float32), 50, LABELS)
    assert [_parse(e)[1] for e in rows[0]] == [1, 2, 3, 0]


def test_ties_go_to_the_lower_index_and_nan_last() -> None:
    scores = np.array([[1.0, np.nan, 1.0, -0.0], [0.0, -0.0, np.nan, np.nan]], np.float32)
    assert [[_parse(e)[1] for e in row] for row in top_k(scores, 4, LABELS)] == [[0, 2, 3, 1], [0, 1, 2, 3]]


def test_probabilities_are_the_softmax_and_sum_to_one() -> None:
    logits = np.array([[2.0, 1.0, 0.1, -3.0], [1000.0, 999.0, -1000.0, 0.0]], np.float32)
    for row, entries in zip(logits, top_k(logits, 4, LABELS, probabilities=True), strict=True):
        shown = {index: score for score, index, _ in map(_parse, entries)}
        expected = np.exp(row.astype(np.float64) - row.max())  # no overflow at 1000: exp(x - max)
        expected /= expected.sum()
        for index, score in shown.items():
            assert score == pytest.approx(expected[index], abs=5e-7)
        assert sum(shown.values()) == pytest.approx(1.0, abs=4 * 5e-7)  # six decimals each


def test_multi_label_probabilities_are_a_sigmoid_per_label() -> None:
    logits = np.array([[2.0, 1.0, -0.5, -3.0], [800.0, -800.0, 0.0, 10.0]], np.float32)
    for row, entries in zip(logits, top_k(logits, 4, LABELS, probabilities=True, multi_label=True), strict=True):
        assert [index for _, index, _ in map(_parse, entries)] == list(np.argsort(-row, kind="stable"))
        for score, index, _ in map(_parse, entries):  # each label on its own: they need not sum to one
            assert score == pytest.approx(_sigmoid(float(row[index])), abs=5e-7)
    assert top_k(logits, 1, LABELS, multi_label=True) == top_k(logits, 1, LABELS)  # logits are logits either way


def test_scores_print_like_triton() -> None:
    row = np.array([[1.0, -0.0, 0.0078125, np.inf, np.nan]], np.float32)
    printed = {_parse(e)[1]: e.decode().split(":")[0] for e in top_k(row, 5, ["a", "b", "c", "d", "e"])[0]}
    assert printed == {0: "1.000000", 1: "-0.000000", 2: "0.007812", 3: "inf", 4: "nan"}  # ties round to even


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be >= 1"):
        classification_top_k(np.zeros((1, 4), np.float32), LABELS, 0)
    with pytest.raises(ValueError, match="4 columns but there are 3 labels"):
        classification_top_k(np.zeros((1, 4), np.float32), LABELS[:3], 1)


# ---- any scores, against the rules restated --------------------------------------------------------------

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 0.0078125, 1e-7, -1e-7, 5e-7, 1e-45, 3.4e38, -3.4e38, math.inf, -math.inf,
            math.nan, 88.7, -103.9, 745.2, -745.2]
_FLOAT = st.one_of(st.floats(width=32, allow_nan=True, allow_infinity=True),
                   st.floats(min_value=-30, max_value=30, width=32), st.sampled_from(_SPECIAL))
_LABEL = st.text(min_size=1, max_size=6)


@st.composite
def _case(draw: st.DrawFn) -> tuple[np.ndarray, list[str], int, bool, bool]:
    columns = draw(st.integers(1, 7))
    rows = draw(st.integers(1, 4))
    values = draw(st.lists(_FLOAT, min_size=rows * columns, max_size=rows * columns))
    if draw(st.booleans()):  # ties: values drawn from a few
        pool = values[:2]
        values = [draw(st.sampled_from(pool)) for _ in values]
    labels = draw(st.lists(_LABEL, min_size=columns, max_size=columns, unique=True))
    return (np.array(values, np.float32).reshape(rows, columns), labels, draw(st.integers(1, 9)),
            draw(st.booleans()), draw(st.booleans()))


def _sigmoid(x: float) -> float:
    if math.isnan(x):
        return x
    try:
        return 1.0 / (1.0 + math.exp(-x))
    except OverflowError:  # exp(-x) past the double range: C's std::exp gives inf, and 1 / inf is 0
        return 0.0


def _shown(row: list[float], probabilities: bool, multi_label: bool) -> list[float]:
    if not probabilities:
        return row
    if multi_label:
        return [_sigmoid(v) for v in row]
    top = max((v for v in row if v == v), default=math.nan)
    exps = [math.exp(v - top) if v == v and top == top and not (math.isinf(top) and v == top) else math.nan
            for v in row]
    total = math.fsum(e for e in exps if e == e)
    return [e / total if e == e and total else math.nan for e in exps]


@given(case=_case())
@settings(max_examples=2000, deadline=None)
def test_top_k_follows_its_rules(case: tuple[np.ndarray, list[str], int, bool, bool]) -> None:
    """Rank by the raw score (higher first, ties by lower index, NaN last); min(k, labels) entries; each the score
    shown (the logit, or its softmax probability, or for a multi-label classifier its sigmoid) with six decimals,
    the column and its label."""
    scores, labels, k, probabilities, multi_label = case
    got = top_k(scores, k, labels, probabilities, multi_label)
    for row, entries in zip(scores.tolist(), got, strict=True):
        order = sorted(range(len(row)), key=lambda i: (math.isnan(row[i]), -row[i] if row[i] == row[i] else 0.0, i))
        assert [(index, label) for _, index, label in map(_parse, entries)] == [
            (i, labels[i]) for i in order[:min(k, len(labels))]]
        shown = _shown(row, probabilities, multi_label)
        for score, index, _ in map(_parse, entries):
            want = shown[index]
            if math.isnan(want) or math.isnan(score):
                continue  # inf - inf and friends: the order above is what is promised
            assert score == pytest.approx(want, abs=5e-7, rel=1e-6) or math.isinf(want)
