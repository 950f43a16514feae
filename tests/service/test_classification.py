"""The classification extension's top-k, as a pure function: its rules, and the C++ copy byte for byte the same."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import classification_top_k
from ortserve.service.classification import format_score, softmax, top_k

LABELS = ("negative", "neutral", "positive", "mixed")


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
        expected = np.exp(row.astype(np.float64) - row.max())
        expected /= expected.sum()
        for index, score in shown.items():
            assert score == pytest.approx(expected[index], abs=5e-7)
        assert sum(shown.values()) == pytest.approx(1.0, abs=4 * 5e-7)  # six decimals each
    assert math.fsum(softmax([1000.0, 999.0, -1000.0])) == pytest.approx(1.0)  # no overflow: exp(x - max)


def test_scores_print_like_triton() -> None:
    assert format_score(1.0) == "1.000000" and format_score(-0.0) == "-0.000000"
    assert format_score(0.0078125) == "0.007812"  # an exact tie rounds to even, as printf does
    assert format_score(float("inf")) == "inf" and format_score(float("-nan")) == "nan"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k must be >= 1"):
        top_k(np.zeros((1, 4), np.float32), 0, LABELS)
    with pytest.raises(ValueError, match="do not fit 3 labels"):
        top_k(np.zeros((1, 4), np.float32), 1, LABELS[:3])
    with pytest.raises(ValueError, match="k must be >= 1"):
        classification_top_k(np.zeros((1, 4), np.float32), list(LABELS), 0)
    with pytest.raises(ValueError, match="4 columns but there are 3 labels"):
        classification_top_k(np.zeros((1, 4), np.float32), list(LABELS[:3]), 1)


# ---- the C++ copy (the native front end's) gives the same bytes -------------------------------------------

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 0.0078125, 1e-7, -1e-7, 5e-7, 1e-45, 3.4e38, -3.4e38, math.inf, -math.inf,
            math.nan, 88.7, -103.9]
_FLOAT = st.one_of(st.floats(width=32, allow_nan=True, allow_infinity=True),
                   st.floats(min_value=-30, max_value=30, width=32), st.sampled_from(_SPECIAL))
_LABEL = st.text(min_size=1, max_size=6)


@st.composite
def _case(draw: st.DrawFn) -> tuple[np.ndarray, list[str], int, bool]:
    columns = draw(st.integers(1, 7))
    rows = draw(st.integers(1, 4))
    values = draw(st.lists(_FLOAT, min_size=rows * columns, max_size=rows * columns))
    if draw(st.booleans()):  # ties: values drawn from a few
        pool = values[:2]
        values = [draw(st.sampled_from(pool)) for _ in values]
    labels = draw(st.lists(_LABEL, min_size=columns, max_size=columns, unique=True))
    return (np.array(values, np.float32).reshape(rows, columns), labels, draw(st.integers(1, 9)),
            draw(st.booleans()))


@given(case=_case())
@settings(max_examples=2000, deadline=None)
def test_native_top_k_equals_python(case: tuple[np.ndarray, list[str], int, bool]) -> None:
    scores, labels, k, probabilities = case
    expected = top_k(scores, k, labels, probabilities=probabilities)
    assert classification_top_k(scores, labels, k, probabilities) == expected


def test_native_top_k_on_model_sized_rows() -> None:
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((64, 1000)) * 4).astype(np.float32)
    labels = [f"class {i}: é" for i in range(1000)]
    for probabilities in (False, True):
        assert classification_top_k(scores, labels, 5, probabilities) == top_k(scores, 5, labels,
                                                                                probabilities=probabilities)
