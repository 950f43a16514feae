"""An independent numpy BERT forward pass: the reference the bundle builders and the served embeddings are held to.

Written from the HF ``BertModel`` definition (float64, one unpadded text at a time, no mask needed) plus
sentence-transformers' mean pooling and L2 normalisation (all-MiniLM-L6-v2's Transformer -> Pooling(mean) ->
Normalize); it shares no code with ``ortserve_devtools.bert_graph``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ortserve_devtools.bert_weights import BertConfig, BertWeights, ClassifierHead

_erf = np.vectorize(math.erf)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _dense(x: np.ndarray, w: BertWeights, prefix: str) -> np.ndarray:
    return x @ w[f"{prefix}.weight"].astype(np.float64).T + w[f"{prefix}.bias"]


def reference_embedding(config: BertConfig, w: BertWeights, ids: list[int], type_ids: list[int]) -> np.ndarray:
    """Normalised mean-pooled sentence embedding of one unpadded sequence."""
    pooled = reference_token_states(config, w, ids, type_ids).mean(axis=0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def reference_token_states(config: BertConfig, w: BertWeights, ids: list[int], type_ids: list[int]) -> np.ndarray:
    """The last hidden state [tokens, hidden] of one unpadded sequence."""
    ids_a, types_a = np.array(ids), np.array(type_ids)
    x = (w["embeddings.word_embeddings.weight"][ids_a]
         + w["embeddings.position_embeddings.weight"][np.arange(len(ids))]
         + w["embeddings.token_type_embeddings.weight"][types_a]).astype(np.float64)
    eps = config.layer_norm_eps
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    seq, heads, dim = len(ids), config.heads, config.head_dim
    for n in range(config.layers):
        p = f"encoder.layer.{n}"
        q, k, v = (_dense(x, w, f"{p}.attention.self.{name}").reshape(seq, heads, dim).transpose(1, 0, 2)
                   for name in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(dim)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(seq, config.hidden)
        x = _layer_norm(_dense(context, w, f"{p}.attention.output.dense") + x,
                        w[f"{p}.attention.output.LayerNorm.weight"], w[f"{p}.attention.output.LayerNorm.bias"], eps)
        inner = _dense(x, w, f"{p}.intermediate.dense")
        inner = 0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)))
        x = _layer_norm(_dense(inner, w, f"{p}.output.dense") + x,
                        w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"], eps)
    return x


def reference_logits(config: BertConfig, w: BertWeights, head: ClassifierHead, ids: list[int],
                     type_ids: list[int]) -> np.ndarray:
    return reference_embedding(config, w, ids, type_ids) @ head.weight.astype(np.float64).T + head.bias


def pad_encodings(encodings: list[Any]) -> dict[str, np.ndarray]:
    """A graph's feed for HF `tokenizers` encodings: padded to the longest with id 0, type ids as the tokenizer gives
    them, as the server pads (written here, not borrowed from the builder)."""
    seq = max(len(e.ids) for e in encodings)
    out = {name: np.zeros((len(encodings), seq), dtype=np.int64)
           for name in ("input_ids", "attention_mask", "token_type_ids")}
    for row, e in enumerate(encodings):
        out["input_ids"][row, : len(e.ids)] = e.ids
        out["attention_mask"][row, : len(e.ids)] = 1
        out["token_type_ids"][row, : len(e.ids)] = e.type_ids
    return out
