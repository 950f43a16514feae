"""How close two answers of an embedding model are, one rule for every judge of them (the accuracy gate at publish,
the import's parity with PyTorch, the check at load): the cosine of each pair of rows, and the least cosine a
version's vectors must keep to its source's FP32 ones at each precision."""

from __future__ import annotations

import numpy as np

MIN_COSINE = {"fp32-cpu": 0.9999, "fp32-gpu": 0.999, "bf16": 0.999, "optimised": 0.99}
"""The floor per precision: FP32 on a CPU rounds at ~1e-7; a GPU's TF32 products at ~1e-3; bf16 keeps 8 significant
bits (cosine >= 0.99997 measured on MiniLM); int8 and fp16 ("optimised") move vectors most (int8 MiniLM: 0.977 at
worst over the built-in corpus, so some texts of some models fall under 0.99: the gate counts them)."""


def min_cosine(precision: str, *, on_gpu: bool = False) -> float:
    """The least cosine to the source's FP32 vector a version at `precision` must keep on every text it answers."""
    if precision == "fp32":
        return MIN_COSINE["fp32-gpu" if on_gpu else "fp32-cpu"]
    return MIN_COSINE.get(precision, MIN_COSINE["optimised"])


def cosines(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    """float64 [rows]: the cosine of each row pair; 0 where either row is zero or `got` holds a NaN or an infinity
    (a broken answer is as far from its reference as an orthogonal one)."""
    a = np.asarray(want, dtype=np.float64)
    b = np.asarray(got, dtype=np.float64)
    finite = np.isfinite(b).all(axis=1)
    b = np.where(finite[:, None], b, 0.0)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.where(finite & (norms > 0), (a * b).sum(axis=1) / np.maximum(norms, 1e-300), 0.0)
