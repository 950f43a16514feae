"""BERT hyper-parameters and weights as plain numpy, keyed by Hugging Face parameter names.

Weights stay in the HF layout (a dense layer's ``weight`` is ``[out, in]``) so that real checkpoints
(``model.safetensors`` of any ``BertModel``) load without renaming, and a reference implementation can
be written straight from the HF/PyTorch definition. ``bert_graph`` does the transposes it needs.

Random weights are deliberately larger than BERT's training init (std 0.02): a freshly initialised
tiny model with std 0.02 maps every text to nearly the same logits, which would make tests of masking
and batching unable to tell a right answer from a wrong one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BertWeights = dict[str, np.ndarray]
"""HF ``BertModel`` parameter name -> float32 array (``embeddings.word_embeddings.weight``, ...)."""


@dataclass(frozen=True, kw_only=True)
class BertConfig:
    """The hyper-parameters the graph needs; names follow HF ``BertConfig`` where they differ little."""

    vocab_size: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_position: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        for field in ("vocab_size", "hidden", "layers", "heads", "intermediate", "max_position"):
            if getattr(self, field) < 1:
                raise ValueError(f"BertConfig.{field} must be >= 1, got {getattr(self, field)}")
        if self.hidden % self.heads:
            raise ValueError(f"BertConfig.hidden ({self.hidden}) must be divisible by heads ({self.heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_hf_config(cls, path: Path) -> BertConfig:
        """Read an HF ``config.json`` of a BERT model with absolute positions and GELU (erf)."""
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw.get("model_type") != "bert":
            raise ValueError(f"{path}: model_type is {raw.get('model_type')!r}, expected 'bert'")
        if raw.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{path}: hidden_act {raw['hidden_act']!r} unsupported, only exact 'gelu'")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only absolute position embeddings are supported")
        return cls(
            vocab_size=raw["vocab_size"],
            hidden=raw["hidden_size"],
            layers=raw["num_hidden_layers"],
            heads=raw["num_attention_heads"],
            intermediate=raw["intermediate_size"],
            max_position=raw["max_position_embeddings"],
            type_vocab_size=raw.get("type_vocab_size", 2),
            layer_norm_eps=raw.get("layer_norm_eps", 1e-12),
        )


@dataclass(frozen=True)
class ClassifierHead:
    """``logits = pooled @ weight.T + bias``; ``weight`` is ``[num_labels, hidden]`` like an HF Linear."""

    weight: np.ndarray
    bias: np.ndarray

    @property
    def num_labels(self) -> int:
        return int(self.weight.shape[0])


def expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter the encoder uses, in a fixed order (the order random init draws them in)."""
    h, i = config.hidden, config.intermediate
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, h),
        "embeddings.position_embeddings.weight": (config.max_position, h),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    for n in range(config.layers):
        p = f"encoder.layer.{n}"
        for proj in ("query", "key", "value"):
            shapes[f"{p}.attention.self.{proj}.weight"] = (h, h)
            shapes[f"{p}.attention.self.{proj}.bias"] = (h,)
        shapes[f"{p}.attention.output.dense.weight"] = (h, h)
        shapes[f"{p}.attention.output.dense.bias"] = (h,)
        shapes[f"{p}.attention.output.LayerNorm.weight"] = (h,)
        shapes[f"{p}.attention.output.LayerNorm.bias"] = (h,)
        shapes[f"{p}.intermediate.dense.weight"] = (i, h)
        shapes[f"{p}.intermediate.dense.bias"] = (i,)
        shapes[f"{p}.output.dense.weight"] = (h, i)
        shapes[f"{p}.output.dense.bias"] = (h,)
        shapes[f"{p}.output.LayerNorm.weight"] = (h,)
        shapes[f"{p}.output.LayerNorm.bias"] = (h,)
    return shapes


def check_weights(config: BertConfig, weights: BertWeights) -> None:
    """Raise ``ValueError`` naming the first missing or mis-shaped parameter."""
    for name, shape in expected_shapes(config).items():
        if name not in weights:
            raise ValueError(f"BERT weights lack {name!r} (expected shape {shape})")
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"BERT weight {name!r} has shape {tuple(weights[name].shape)}, expected {shape}")


def random_bert_weights(config: BertConfig, rng: np.random.Generator) -> BertWeights:
    """Deterministic for a given generator state: parameters are drawn in ``expected_shapes`` order."""
    weights: BertWeights = {}
    for name, shape in expected_shapes(config).items():
        if name.endswith("LayerNorm.weight"):
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("embeddings.weight"):
            values = rng.standard_normal(shape)
        elif name.endswith(".weight"):
            # ~1/sqrt(fan_in) keeps activations O(1) through the layers without collapsing them.
            values = rng.standard_normal(shape) / np.sqrt(shape[1])
        else:
            values = 0.1 * rng.standard_normal(shape)
        weights[name] = values.astype(np.float32)
    return weights


def random_head(hidden: int, num_labels: int, rng: np.random.Generator) -> ClassifierHead:
    # The pooled embedding is L2-normalised, so a unit-scale weight gives logits of order 1.
    weight = rng.standard_normal((num_labels, hidden)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(num_labels)).astype(np.float32)
    return ClassifierHead(weight=weight, bias=bias)
