"""The wire rules' sparse embedding entries (sparse_entries.h, `engine_ext.sparse_entries`): each row's weights above
the threshold, at most top_k of them, the largest (a tie to the lower column), ascending columns within a row; held
to a numpy statement of the same rule on random SPLADE-like rows, and to its edge cases."""

from __future__ import annotations

import re

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


# ---- the wire rules around it: decode, check and encode a sparse embedding model's call ---------------------------

TEXTS = [("TEXT", "BYTES", [2], True, [b"a", b"b"])]


def _decode(**params: object) -> object:
    wire = {name: None if value is None else ("double_param" if isinstance(value, float) else
                                                "string_param" if isinstance(value, str) else "int64_param", value)
            for name, value in params.items()}
    return engine_ext.decode_call(TEXTS, [], [], None, None, 8, **wire)


SPARSE = engine_ext.VersionOutput("sparse-embedding", engine_ext.SPARSE_INDICES_OUTPUT,
                                  also=[engine_ext.SPARSE_VALUES_OUTPUT, engine_ext.SPARSE_COUNTS_OUTPUT], sparse=True)
DENSE = engine_ext.VersionOutput("embedding", engine_ext.EMBEDDING_OUTPUT, widths=[4])


@pytest.mark.parametrize(("top_k", "threshold"), [(None, None), (1, None), (3, 0.5), (None, 0.25), (100, 0)])
def test_the_reply_is_the_rules_entries_as_three_outputs(top_k: int | None, threshold: float | None) -> None:
    values = _splade_rows(2, 40, seed=5)
    call = _decode(top_k=top_k, threshold=threshold)
    engine_ext.check_outputs(call, SPARSE, "splade")
    tensors = {name: (datatype, shape, np.frombuffer(payload, "<f4" if datatype == "FP32" else "<i8"))
               for name, datatype, shape, raw, payload in engine_ext.encode_outputs(call, SPARSE, values)}
    pairs, weights = _reference(values, top_k or 0, float(threshold or 0))
    assert list(tensors) == ["SPARSE_INDICES", "SPARSE_VALUES", "SPARSE_COUNTS"]
    np.testing.assert_array_equal(tensors["SPARSE_INDICES"][2], pairs[:, 1])
    np.testing.assert_array_equal(tensors["SPARSE_VALUES"][2], weights)
    np.testing.assert_array_equal(tensors["SPARSE_COUNTS"][2], np.bincount(pairs[:, 0], minlength=2))
    assert tensors["SPARSE_COUNTS"][:2] == ("INT64", (2,)) and tensors["SPARSE_VALUES"][1] == (len(weights),)


def test_a_requested_output_alone_and_as_contents() -> None:
    values = _splade_rows(2, 40, seed=6)
    call = engine_ext.decode_call(TEXTS, [("SPARSE_VALUES", None, ("bool_param", False))], [], None, None, 8)
    [(name, datatype, shape, raw, payload)] = engine_ext.encode_outputs(call, SPARSE, values)
    weights = _reference(values, 0, 0.0)[1]
    assert (name, datatype, shape, raw) == ("SPARSE_VALUES", "FP32", (len(weights),), False)
    np.testing.assert_array_equal(np.asarray(payload, np.float32), weights)


@pytest.mark.parametrize(("params", "message"), [
    ({"top_k": 0}, "request parameter 'top_k' must be >= 1"),
    ({"top_k": -3}, "request parameter 'top_k' must be >= 1"),
    ({"top_k": "5"}, "request parameter 'top_k' must be an integer (int64_param), got string_param"),
    ({"threshold": -0.1}, "request parameter 'threshold' must be a finite number >= 0"),
    ({"threshold": float("inf")}, "request parameter 'threshold' must be a finite number >= 0 (the least weight kept, "
                                  "exclusive), got a non-finite one"),
    ({"threshold": "0.5"}, "request parameter 'threshold' must be a number (double_param), got string_param"),
])
def test_bad_bounds_are_refused_by_decode(params: dict[str, object], message: str) -> None:
    with pytest.raises(engine_ext.WireError, match="^" + re.escape(message)):
        _decode(**params)


def test_check_takes_bounds_only_for_a_sparse_model_and_refuses_widths_there() -> None:
    with pytest.raises(engine_ext.WireError, match="'top_k' and 'threshold' apply to a sparse embedding model's "
                                                   "'SPARSE_VALUES'; model 'e' is an embedding model"):
        engine_ext.check_outputs(_decode(threshold=0.5), DENSE, "e")
    for params in ({"dimensions": 4}, {"embedding_type": "binary"}):
        with pytest.raises(engine_ext.WireError, match="a sparse embedding's width is its vocabulary"):
            engine_ext.check_outputs(_decode(**params), SPARSE, "s")
    with pytest.raises(engine_ext.WireError, match="unknown output 'EMBEDDING'"):
        engine_ext.check_outputs(engine_ext.decode_call(TEXTS, [("EMBEDDING", None, None)], [], None, None, 8),
                                 SPARSE, "s")
    call = _decode(top_k=2, threshold=1)  # an integer threshold is a number too
    assert (call.top_k, call.threshold) == (2, 1.0)
