"""What the compact embedding types cost in retrieval (issue 57; the figures docs/client_apis.md states): recall@10 of
each type against FP32 on a query/passage set made here, with all-MiniLM-L6-v2 (the demo's embedding model, its real
weights) and ranges calibrated on the built-in corpus as the importer calibrates them.

Passages: the built-in corpus's first PASSAGES texts. Queries: every QUERY_STEP-th passage cut to its first half of
words (at least three), so each query has a passage it came from and near ones. FP32 ranks passages by dot product
(the vectors are unit length: cosine); int8 and uint8 by dot product of the values their levels stand for (each
level's midpoint), binary and ubinary by Hamming distance of the packed bits. Recall@10 is the share of FP32's top 10
that the compact ranking's top 10 holds, over every query. The values go through the wire rules' own quantizer
(engine_ext.quantize_embeddings, what both front ends answer with). Measured (ONNX Runtime 1.32, an AVX-512 CPU):
int8 and uint8 0.993, binary and ubinary 0.644 over 100 queries and 600 passages. The floors sit 0.04 and 0.09 under
them: another CPU's rounding (AVX2) moves a vector by ~1e-6, which can swap a near tie in a top 10, not several.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.reference import Reference
from support.shared_builds import minilm_demo

from ortserve import engine_ext
from ortserve.prepare.accuracy import load_eval_set
from ortserve.prepare.embedding_calibration import calibrate

PASSAGES = 600
QUERY_STEP = 6
TOP = 10
pytestmark = pytest.mark.slow  # MiniLM over the built-in corpus: about a minute on two shared cores
FLOOR = {"int8": 0.95, "uint8": 0.95, "binary": 0.55, "ubinary": 0.55}
"""Recall@10 each type must reach (module docstring: the measured figures and the margin)."""


@pytest.fixture(scope="module")
def vectors(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(passages, queries, the corpus's calibration vectors), float32, unit length."""
    dest = minilm_demo(tmp_path_factory, "embedding").path  # build_minilm_embedding_bundle, once per run
    corpus = load_eval_set(dest, None).texts
    reference = Reference(dest)
    passages = list(corpus[:PASSAGES])
    queries = []
    for text in passages[::QUERY_STEP]:
        words = text.split()
        queries.append(" ".join(words[: max(3, len(words) // 2)]))
    every = batched(reference, corpus)
    return every[:PASSAGES], batched(reference, queries), every


def batched(reference: Reference, texts: list[str] | tuple[str, ...]) -> np.ndarray:
    """onnxruntime's embeddings in batches of 32 (padding moves a value by ~1e-7: nothing a recall figure sees)."""
    return np.concatenate([reference.logits_batch(texts[i: i + 32]) for i in range(0, len(texts), 32)])


def top(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :TOP]


def compact(values: np.ndarray, kind: str, ranges: np.ndarray) -> np.ndarray:
    data, datatype, width = engine_ext.quantize_embeddings(values, kind, ranges.ravel().tolist())
    return np.frombuffer(data, dtype=np.int8 if datatype == "INT8" else np.uint8).reshape(len(values), width)


def recall_at_10(kind: str, passages: np.ndarray, queries: np.ndarray, ranges: np.ndarray) -> float:
    truth = top(queries @ passages.T)
    p, q = compact(passages, kind, ranges), compact(queries, kind, ranges)
    if kind.endswith("binary"):
        bits_p = np.unpackbits(p.view(np.uint8), axis=1).astype(np.int32)
        bits_q = np.unpackbits(q.view(np.uint8), axis=1).astype(np.int32)
        scores = -(bits_q @ (1 - bits_p).T + (1 - bits_q) @ bits_p.T)  # minus the Hamming distance
    else:
        steps = (ranges[1] - ranges[0]) / 255
        levels = [x.astype(np.float32) + (128 if kind == "int8" else 0) for x in (q, p)]
        qv, pv = (ranges[0] + (lv + 0.5) * steps for lv in levels)
        scores = qv @ pv.T
    found = top(scores)
    return float(np.mean([len(set(a) & set(b)) / TOP for a, b in zip(found, truth, strict=True)]))


@pytest.mark.parametrize("kind", ["int8", "uint8", "binary", "ubinary"])
def test_recall_at_10_against_fp32(vectors: tuple[np.ndarray, np.ndarray, np.ndarray], kind: str) -> None:
    passages, queries, corpus = vectors
    entry = calibrate(corpus, (corpus.shape[1],), source="built-in corpus")
    ranges = np.asarray(entry["widths"][str(corpus.shape[1])], dtype=np.float32)
    recall = recall_at_10(kind, passages, queries, ranges)
    print(f"recall@10 {kind}: {recall:.3f} over {len(queries)} queries, {len(passages)} passages")
    assert recall >= FLOOR[kind], f"recall@10 of {kind} is {recall:.3f}, under {FLOOR[kind]}"
