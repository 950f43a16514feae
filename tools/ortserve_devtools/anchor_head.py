"""A sentiment head derived from the encoder itself, so the demo model gives plausible labels untrained.

At build time the encoder graph (no head) embeds a few fixed negative and positive seed sentences with
ONNX Runtime. Each class's anchor is the L2-normalised mean of its sentence embeddings, and the head is
the fixed linear layer ``W = scale * [e_negative; e_positive]``, ``b = 0``. Because the graph's pooled
embedding is itself L2-normalised, ``logits = scale * [cos(x, e_negative), cos(x, e_positive)]``: a
nearest-anchor classifier expressed as a plain MatMul+Add, which the serving engine runs like any head.
Softmax only sees the difference of the two logits, ``scale * cos-gap``; cosine gaps between sentiment
anchors are a few tenths at most, hence the large default scale.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from tokenizers import Tokenizer

from ortserve_devtools.bert_graph import INPUT_NAMES, SENTENCE_EMBEDDING
from ortserve_devtools.bert_weights import ClassifierHead
from ortserve_devtools.wordpiece_tokenizer import PAD_ID

SENTIMENT_LABELS = ("negative", "positive")
NEGATIVE_SEEDS = (
    "this is terrible, awful, I hate it",
    "what a horrible and disappointing experience",
    "the worst product ever, a complete waste of money",
    "I am very unhappy and angry about this",
    "bad, boring and broken, do not buy it",
)
POSITIVE_SEEDS = (
    "this is wonderful, great, I love it",
    "what a fantastic and delightful experience",
    "the best product ever, worth every penny",
    "I am very happy and pleased with this",
    "good, fun and excellent, I recommend it",
)
DEFAULT_SCALE = 20.0


def encode_batch(tokenizer: Tokenizer, texts: list[str] | tuple[str, ...]) -> dict[str, np.ndarray]:
    """Tokenize and pad to the longest text with id 0, the way the server builds a batch."""
    encodings = tokenizer.encode_batch(list(texts))
    seq = max(len(e.ids) for e in encodings)
    batch = {name: np.full((len(encodings), seq), PAD_ID, dtype=np.int64) for name in INPUT_NAMES}
    for row, e in enumerate(encodings):
        n = len(e.ids)
        batch["input_ids"][row, :n] = e.ids
        batch["attention_mask"][row, :n] = e.attention_mask
        batch["token_type_ids"][row, :n] = e.type_ids
    return batch


def embed_texts(encoder: onnx.ModelProto, tokenizer: Tokenizer, texts: tuple[str, ...]) -> np.ndarray:
    """``sentence_embedding`` [len(texts), hidden] of a head-less graph from ``bert_graph``."""
    options = ort.SessionOptions()
    # A build-time helper on shared machines: one thread is plenty for a handful of sentences.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(encoder.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (embeddings,) = session.run([SENTENCE_EMBEDDING], encode_batch(tokenizer, texts))
    return embeddings


def _anchor(embeddings: np.ndarray) -> np.ndarray:
    mean = embeddings.mean(axis=0)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)


def sentiment_head(encoder: onnx.ModelProto, tokenizer: Tokenizer, *, scale: float = DEFAULT_SCALE) -> ClassifierHead:
    """Head over ``SENTIMENT_LABELS`` (row 0 negative, row 1 positive)."""
    embeddings = embed_texts(encoder, tokenizer, NEGATIVE_SEEDS + POSITIVE_SEEDS)
    negative = _anchor(embeddings[: len(NEGATIVE_SEEDS)])
    positive = _anchor(embeddings[len(NEGATIVE_SEEDS):])
    weight = (scale * np.stack([negative, positive])).astype(np.float32)
    return ClassifierHead(weight=weight, bias=np.zeros(2, dtype=np.float32))
