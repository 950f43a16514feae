"""entity_head's pure parts: the synthetic sentences, BIO spans and the numpy softmax regression (no MiniLM)."""

from __future__ import annotations

import numpy as np
import pytest
from ortserve_devtools import entity_head as eh


def test_sentences_are_deterministic_and_spans_point_at_the_entities() -> None:
    first, again = eh.labelled_sentences("train", 50), eh.labelled_sentences("train", 50)
    assert first == again and first != eh.labelled_sentences("train", 50, seed=1)
    places = set(eh.TRAIN_PLACES)
    for sentence in first:
        for start, end, kind in sentence.entities:
            value = sentence.text[start:end]
            if kind == "LOC":
                assert value in places
            else:
                assert value.split()[0] in eh.TRAIN_FIRST_NAMES


def test_held_out_split_shares_no_name_place_or_template_with_training() -> None:
    assert not set(eh.HELD_OUT_FIRST_NAMES) & set(eh.TRAIN_FIRST_NAMES)
    assert not set(eh.HELD_OUT_SURNAMES) & set(eh.TRAIN_SURNAMES)
    assert not set(eh.HELD_OUT_PLACES) & set(eh.TRAIN_PLACES)
    assert not set(eh.HELD_OUT_TEMPLATES) & set(eh.TRAIN_TEMPLATES)
    held_out = eh.labelled_sentences("held-out", 40)
    assert all(s.text[a:b] in eh.HELD_OUT_PLACES for s in held_out for a, b, kind in s.entities if kind == "LOC")
    with pytest.raises(ValueError, match="split must be"):
        eh.labelled_sentences("test", 1)


@pytest.mark.parametrize(("tags", "spans"), [
    (["O", "B-PER", "I-PER", "O", "B-LOC"], {(1, 3, "PER"), (4, 5, "LOC")}),
    (["B-PER", "B-PER", "I-LOC"], {(0, 1, "PER"), (1, 2, "PER"), (2, 3, "LOC")}),  # I- of another type starts one
    (["O", "I-LOC", "I-LOC"], {(1, 3, "LOC")}),
    (["O", "O"], set()),
])
def test_entity_spans(tags: list[str], spans: set[tuple[int, int, str]]) -> None:
    assert eh.entity_spans([eh.ENTITY_LABELS.index(t) for t in tags]) == spans


def test_with_previous_shifts_within_each_text() -> None:
    states = np.arange(10, dtype=np.float32).reshape(5, 2)
    out = eh.with_previous(states, [3, 2])
    np.testing.assert_array_equal(out[:, :2], states)
    np.testing.assert_array_equal(out[:, 2:], [[0, 0], [0, 1], [2, 3], [0, 0], [6, 7]])


def test_softmax_regression_separates_and_folds_the_standardisation() -> None:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, 8)) * 4 + 10  # far from the origin, so the folded mean matters
    y = rng.integers(3, size=300)
    x = (centres[y] + rng.standard_normal((300, 8))).astype(np.float32)
    head, loss = eh.fit_softmax_regression(x, y, 3, steps=200)
    assert head.weight.shape == (3, 8) and head.bias.shape == (3,)
    assert ((x @ head.weight.T + head.bias).argmax(axis=1) == y).mean() > 0.99 and loss < 0.2
    again, _ = eh.fit_softmax_regression(x, y, 3, steps=200)
    np.testing.assert_array_equal(head.weight, again.weight)
