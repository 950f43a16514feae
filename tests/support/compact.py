"""Compact embeddings as a test judges them: equal to sentence-transformers' quantize_embeddings of a float answer, but
where two calls' rounding can put a value across an edge (the float answer and the compact one come from two calls,
which may run in other batch shapes: a value moves by ~1e-7)."""

from __future__ import annotations

import numpy as np
from sentence_transformers.util.quantization import quantize_embeddings

LEVEL_EDGE = 1e-4
"""How close (in levels) to a level's edge a float may be for two calls' rounding to put it in the next level."""
SIGN_EDGE = 1e-6
"""How close to 0 a float may be for two calls' rounding to flip its bit."""


def assert_quantized(got: np.ndarray, floats: np.ndarray, kind: str, ranges: np.ndarray) -> None:
    """`got` equals quantize_embeddings(floats, kind, ranges) but where `floats` sits on an edge (module docstring)."""
    want = quantize_embeddings(floats, kind, ranges=ranges)
    assert got.dtype == want.dtype and got.shape == want.shape
    if kind.endswith("binary"):
        shift = 128 if kind == "binary" else 0
        bits = [np.unpackbits((q.astype(np.int16) + shift).astype(np.uint8), axis=-1) for q in (got, want)]
        differ = (bits[0] != bits[1])[:, : floats.shape[1]]
        assert np.all(np.abs(floats[differ]) <= SIGN_EDGE), floats[differ]
        return
    steps = np.where(ranges[1] == ranges[0], 1, (ranges[1] - ranges[0]) / 255)
    scaled = (floats - ranges[0]) / steps
    differ = got != want
    assert np.all(np.abs(got.astype(int) - want.astype(int)) <= 1)
    assert np.all(np.abs(scaled[differ] - np.round(scaled[differ])) <= LEVEL_EDGE), scaled[differ]
