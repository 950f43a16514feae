"""The ranges an embedding bundle's int8 and uint8 answers read (the manifest's `embedding_ranges`,
bundle/embedding_ranges.py), calibrated as sentence-transformers' quantize_embeddings calibrates
(`calibration_embeddings`): each dimension's minimum and maximum over the calibration texts' embeddings, at each
width a call may ask for (a narrower width's vectors cut to it and renormalised to unit length, as the server
answers `dimensions`). The importer calibrates on PyTorch's answers for its evaluation texts: the built-in corpus
(prepare/eval_corpus.txt) unless the checkpoint brings its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ortserve.bundle.embedding_ranges import MANIFEST_KEY as MANIFEST_KEY


def calibrate(vectors: np.ndarray, widths: Sequence[int], *, source: str) -> dict[str, Any]:
    """The manifest entry for float32 `vectors` [texts, dim] at `widths` (dim first); `source` names the texts."""
    full = np.asarray(vectors, dtype=np.float32)
    out: dict[str, list[list[float]]] = {}
    for width in widths:
        cut = full[:, :width]
        if width < full.shape[1]:
            norms = np.linalg.norm(cut.astype(np.float64), axis=1, keepdims=True)
            cut = (cut / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        out[str(width)] = [cut.min(axis=0).tolist(), cut.max(axis=0).tolist()]
    return {"source": source, "texts": int(full.shape[0]), "widths": out}

