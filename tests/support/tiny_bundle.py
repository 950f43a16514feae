"""A tiny but real model bundle for registry tests (the real BERT builder lives in tools/ortserve_devtools).

The ONNX graph embeds input_ids, masks the embeddings with attention_mask, mean-pools over the
sequence and projects to logits [batch, num_labels] (a token classifier's: each token's embedding projected, logits
[batch, seq, num_labels]); the tokenizer is a WordLevel vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, pre_tokenizers

VOCAB = ["[PAD]", "[UNK]", "good", "bad", "movie", "great", "awful", "the", "a", "plot"]


def build_tiny_bundle(dest: str | Path, *, labels: Sequence[str] = ("negative", "positive"), seed: int = 0,
                      max_seq_len: int = 32, notes: str = "tiny test bundle", hidden: int = 4,
                      token_type_ids: bool = False) -> Path:
    """Writes model.onnx, tokenizer.json and manifest.json into `dest`; `seed` changes the bytes."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(tiny_model(num_labels=len(labels), seed=seed, hidden=hidden, token_type_ids=token_type_ids),
              str(out / "model.onnx"))
    tiny_tokenizer().save(str(out / "tokenizer.json"))
    manifest = {"format": "onnx-text-classifier", "labels": list(labels), "max_seq_len": max_seq_len,
                "notes": notes}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def build_tiny_embedding_bundle(dest: str | Path, *, dim: int = 4, seed: int = 0, max_seq_len: int = 32,
                                notes: str = "tiny embedding test bundle", graph_output: str = "embedding") -> Path:
    """An embedding bundle (format onnx-text-embedding, output `embedding` FP32 [batch, dim]); `graph_output`
    names the graph's output instead, for bundles whose graph does not fit their manifest."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(tiny_model(num_labels=dim, seed=seed, output_name=graph_output), str(out / "model.onnx"))
    tiny_tokenizer().save(str(out / "tokenizer.json"))
    manifest = {"format": "onnx-text-embedding", "dim": dim, "max_seq_len": max_seq_len, "notes": notes}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def build_tiny_token_bundle(dest: str | Path, *, labels: Sequence[str] = ("O", "B-PER", "I-PER"), seed: int = 0,
                            max_seq_len: int = 32, notes: str = "tiny token test bundle",
                            per_token: bool = True) -> Path:
    """A token classifier bundle (format onnx-token-classifier, output `logits` FP32 [batch, seq, labels]);
    `per_token` False puts a classifier's graph ([batch, labels]) under it, for bundles whose graph does not fit."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(tiny_model(num_labels=len(labels), seed=seed, per_token=per_token), str(out / "model.onnx"))
    tiny_tokenizer().save(str(out / "tokenizer.json"))
    manifest = {"format": "onnx-token-classifier", "labels": list(labels), "max_seq_len": max_seq_len,
                "notes": notes}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def tiny_model(*, num_labels: int = 2, seed: int = 0, hidden: int = 4, token_type_ids: bool = False,
               input_type: int = TensorProto.INT64, output_type: int = TensorProto.FLOAT,
               output_name: str = "logits", per_token: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    emb = numpy_helper.from_array(rng.standard_normal((len(VOCAB), hidden)).astype(np.float32), "emb")
    proj = numpy_helper.from_array(rng.standard_normal((hidden, num_labels)).astype(np.float32), "proj")
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids64"], to=TensorProto.INT64),
        helper.make_node("Gather", ["emb", "ids64"], ["embedded"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["embedded", "mask3"], ["masked"]),
        *([] if per_token else [helper.make_node("ReduceMean", ["masked"], ["pooled"], axes=[1], keepdims=0)]),
        helper.make_node("MatMul", ["masked" if per_token else "pooled", "proj"], ["raw_logits"]),
        helper.make_node("Cast", ["raw_logits"], [output_name], to=output_type),
    ]
    inits = [emb, proj, numpy_helper.from_array(np.array([2], np.int64), "axis2")]
    inputs = [helper.make_tensor_value_info("input_ids", input_type, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", input_type, ["batch", "seq"])]
    if token_type_ids:
        inputs.append(helper.make_tensor_value_info("token_type_ids", input_type, ["batch", "seq"]))
        nodes.append(helper.make_node("Identity", ["token_type_ids"], ["unused_token_types"]))
    graph = helper.make_graph(nodes, "tiny_classifier", inputs,
                              [helper.make_tensor_value_info(output_name, output_type,
                                                             ["batch", *(["seq"] if per_token else []), num_labels])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def tiny_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok
