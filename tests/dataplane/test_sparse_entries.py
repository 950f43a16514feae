"""The wire rules' sparse embedding entries (sparse_entries.h, `engine_ext.sparse_entries`): each row's weights above
the threshold, at most top_k of them, the largest (a tie to the lower column), ascending columns within a row; held
to a numpy statement of the same rule on random SPLADE-like rows, and to its edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from ortserve import engine_ext


def _reference(values: np.ndarray, top_k: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    pairs, weights = [], []
    for r, row in enumerate(values):
        kept = [c for c in range(row.size) if float(row[c]) > threshold]
        if top_k and len(kept) > top_k:
            kept = sorted(sorted(kept, key=lambda c: (-float(row[c]), c))[:top_k])
        pairs += [(r, c) for c in kept]
        weights += [row[c] for c in kept]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2), np.array(weights, dtype=np.float32)


def _splade_rows(rows: int, columns: int, seed: int) -> np.ndarray:
    """log1p(relu(x)) of mostly negative x: a few non-zeros per row, as a SPLADE model's are; some weights repeated."""
    rng = np.random.default_rng(seed)
    values = np.log1p(np.maximum(rng.normal(-1.5, 1.0, (rows, columns)), 0)).astype(np.float32)
    values[:, 7] = values[:, 3] = values.max(axis=1)  # ties at the top
    return values


@pytest.mark.parametrize(("top_k", "threshold"), [(0, 0.0), (1, 0.0), (5, 0.0), (0, 0.3), (8, 0.2), (10_000, 0.0)])
def test_entries_are_the_rule(top_k: int, threshold: float) -> None:
    values = _splade_rows(6, 300, seed=top_k + int(threshold * 10))
    pairs, weights = engine_ext.sparse_entries(values, top_k=top_k, threshold=threshold)
    expected_pairs, expected_weights = _reference(values, top_k, threshold)
    assert pairs.dtype == np.int64 and weights.dtype == np.float32
    np.testing.assert_array_equal(pairs, expected_pairs)
    np.testing.assert_array_equal(weights, expected_weights)  # copied, not recomputed: bit-equal
    per_row = np.bincount(pairs[:, 0], minlength=6)
    assert per_row.max() <= (top_k or 300) and (weights > threshold).all()


def test_defaults_keep_every_non_zero() -> None:
    values = _splade_rows(3, 50, seed=1)
    pairs, weights = engine_ext.sparse_entries(values)
    dense = np.zeros_like(values)
    dense[pairs[:, 0], pairs[:, 1]] = weights
    np.testing.assert_array_equal(dense, values)


def test_a_tie_goes_to_the_lower_column() -> None:
    values = np.array([[0.0, 0.5, 0.9, 0.5, 0.9]], dtype=np.float32)
    pairs, weights = engine_ext.sparse_entries(values, top_k=3)
    assert pairs.tolist() == [[0, 1], [0, 2], [0, 4]] and weights.tolist() == pytest.approx([0.5, 0.9, 0.9])


def test_rows_without_entries() -> None:
    values = np.array([[0.0, 0.0], [0.0, 0.25], [0.1, 0.0]], dtype=np.float32)
    pairs, weights = engine_ext.sparse_entries(values, threshold=0.2)
    assert pairs.shape == (1, 2) and pairs.tolist() == [[1, 1]] and weights.shape == (1,)
    empty_pairs, empty_weights = engine_ext.sparse_entries(np.zeros((0, 4), dtype=np.float32))
    assert empty_pairs.shape == (0, 2) and empty_weights.shape == (0,)


@pytest.mark.parametrize(("top_k", "threshold", "message"), [
    (-1, 0.0, "top_k must be >= 0"), (0, -0.5, "threshold must be finite and >= 0"),
    (0, float("nan"), "threshold must be finite"), (0, float("inf"), "threshold must be finite")])
def test_bad_bounds_are_refused(top_k: int, threshold: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        engine_ext.sparse_entries(np.ones((1, 3), dtype=np.float32), top_k=top_k, threshold=threshold)
