"""The KServe/Triton classification extension as one pure function: scores -> top-k "score:index:label" strings.

A requested output with the parameter `classification` = k (tritonclient: `InferRequestedOutput("LOGITS",
class_count=k)`) is answered, per text, with its k best classes as BYTES strings, best first, formatted as Triton
formats them: the score with six decimals (`std::to_string` of the float, C's "%f"), the column index, the label.

The native front end has the same function in C++ (`engine_ext/src/dataplane/classification.cc`); the two give the same
bytes for the same float32 scores (tests/service/test_classification.py holds them to it with hypothesis), so
both are written as the same sequence of IEEE operations:
- rank by the raw score, higher first; equal scores by lower index; NaN after every number (the engine refuses
  non-finite outputs, so this only makes the order total);
- probabilities = softmax in double precision: max over the row (NaN skipped), exp(x - max) with libm's `exp`
  (math.exp here, std::exp there), summed left to right, each divided by the sum;
- the score printed with "%.6f" ("nan", "inf", "-inf" as such).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CLASSIFICATION = "classification"
"""The requested output's parameter that asks for the top k classes (int64_param)."""
SCORES = "scores"
"""The request parameter that chooses what the strings report: "logits" (the default) or "probabilities"."""
SCORE_MODES = ("logits", "probabilities")


def top_k(scores: np.ndarray, k: int, labels: Sequence[str], *, probabilities: bool = False) -> list[list[bytes]]:
    """Per row of `scores` (float32 [N, C]), its min(k, C) best classes as b"score:index:label", best first.

    `labels` names the C columns. `probabilities` reports (and ranks by, which orders the same) softmax(row)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    matrix = np.asarray(scores, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] != len(labels):
        raise ValueError(f"scores of shape {list(matrix.shape)} do not fit {len(labels)} labels")
    encoded = [label.encode("utf-8") for label in labels]
    keep = min(k, len(labels))
    rows: list[list[bytes]] = []
    for row in matrix.tolist():  # Python floats: the float32 values, exactly
        order = sorted(range(len(row)), key=lambda i: (math.isnan(row[i]), -row[i] if row[i] == row[i] else 0.0, i))
        shown = softmax(row) if probabilities else row
        rows.append([b"%s:%d:%s" % (format_score(shown[i]).encode(), i, encoded[i]) for i in order[:keep]])
    return rows


def softmax(row: Sequence[float]) -> list[float]:
    """exp(x - max) / sum, in double precision, in the order the C++ side computes it (see the module docstring)."""
    top = -math.inf
    for value in row:
        if value > top:
            top = value
    exps = [math.exp(value - top) for value in row]
    total = 0.0
    for value in exps:
        total += value
    return [value / total for value in exps]


def format_score(value: float) -> str:
    """Triton's score text: six decimals, as C's "%f"."""
    if math.isnan(value):
        return "nan"
    return f"{value:.6f}"
