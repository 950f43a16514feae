"""A BERT sentence classifier written directly as an ONNX graph (opset 17) from numpy weights.

Graph, per batch of token ids ``[batch, seq]``::

    Gather(word) + Gather(position, position_ids[:, :seq]) + Gather(token_type)  -> LayerNormalization
    N x [ Q,K,V = MatMul+Add ; Reshape [0,0,heads,dim] ; Transpose ; MatMul(Q,K^T) / sqrt(dim)
          + (1 - mask) * -10000 ; Softmax ; MatMul(.,V) ; Transpose ; Reshape [0,0,hidden]
          MatMul+Add ; Add residual ; LayerNormalization
          MatMul+Add ; GELU = x * 0.5 * (1 + Erf(x / sqrt 2)) ; MatMul+Add ; Add residual ; LayerNormalization ]
    masked mean pooling: ReduceSum(h * mask) / Max(ReduceSum(mask), 1e-9)
    L2 normalisation:     x / Max(Sqrt(ReduceSumSquare(x)), 1e-12)
    head (optional):      MatMul+Add -> ``logits`` [batch, num_labels]

Why this shape: it is the node pattern ``torch.onnx`` emits for HF BERT, so the engine serves a realistic
model and ONNX Runtime's optimisers recognise it. Checked with ORT 1.31: a session at ORT_ENABLE_ALL fuses
MatMul+Add+GELU into BiasGelu, the scaled Q.K^T into FusedMatMul and the head into Gemm (its
SkipLayerNormalization fusion needs a static sequence length, so it stays off with a dynamic ``seq``);
the offline ``onnxruntime.transformers`` optimiser (``model_type="bert"``) fuses every block into
EmbedLayerNormalization, Attention, SkipLayerNormalization and BiasGelu (tests check both).
The additive mask of -10000 (not -inf) keeps Softmax finite; exp(-10000) underflows to exactly 0 in
float32, so padding never changes the result for shorter texts.
Pooling + L2 normalisation follow sentence-transformers all-MiniLM-L6-v2 (Transformer -> mean Pooling ->
Normalize); the normalised embedding makes a linear head over it a scaled cosine similarity.

Without a head the graph outputs ``sentence_embedding`` [batch, hidden] instead of ``logits`` (or the name given
as ``embedding_output``: an embedding bundle's ``embedding``); the MiniLM builder uses that to derive its head,
the embedding builders serve it, and tests use it to check the encoder alone.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortserve_devtools.bert_weights import BertConfig, BertWeights, ClassifierHead, check_weights

OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
LOGITS = "logits"
SENTENCE_EMBEDDING = "sentence_embedding"
_MASK_FILL = -10000.0
_ONE = np.array(1.0, dtype=np.float32)


class _GraphBuilder:
    """Collects nodes and initializers; every node gets a stable, readable name (for profiles)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._counts: dict[str, int] = {}
        self._const_names: set[str] = set()

    def const(self, name: str, value: np.ndarray) -> str:
        """Add an initializer once; shared constants (shapes, scalars) are asked for by every layer."""
        if name not in self._const_names:
            self._const_names.add(name)
            self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], scope: str, **attrs: object) -> str:
        key = f"{scope}/{op_type}"
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        name = f"{key}_{n}" if n else key
        self.nodes.append(helper.make_node(op_type, inputs, [name + ":0"], name=name, **attrs))
        return name + ":0"

    def rename_last_output(self, name: str) -> str:
        self.nodes[-1].output[0] = name
        return name


def _linear(g: _GraphBuilder, x: str, weights: BertWeights, prefix: str, scope: str) -> str:
    # HF stores Linear weights as [out, in]; MatMul wants [in, out].
    w = g.const(f"{prefix}.weight.T", weights[f"{prefix}.weight"].T)
    b = g.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
    return g.op("Add", [g.op("MatMul", [x, w], scope), b], scope)


def _layer_norm(g: _GraphBuilder, x: str, weights: BertWeights, prefix: str, eps: float, scope: str) -> str:
    gamma = g.const(f"{prefix}.weight", weights[f"{prefix}.weight"])
    beta = g.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
    return g.op("LayerNormalization", [x, gamma, beta], scope, axis=-1, epsilon=eps)


def _embeddings(g: _GraphBuilder, config: BertConfig, weights: BertWeights) -> str:
    s = "embeddings"
    word = g.op("Gather", [g.const("embeddings.word_embeddings.weight",
                                   weights["embeddings.word_embeddings.weight"]), "input_ids"], s)
    # HF's export pattern: slice a [1, max_position] position_ids buffer to the sequence length.
    # (Gather over Range(seq) is equivalent, but ORT 1.31's GatherToSliceFusion rewrites it into a Slice
    # whose starts are 2-D, which then fails at run time.)
    seq_len = g.op("Slice", [g.op("Shape", ["input_ids"], s), g.const("const.one_1d", np.array([1], np.int64)),
                             g.const("const.two_1d", np.array([2], np.int64))], s)  # [seq] as a 1-D tensor
    all_positions = g.const("embeddings.position_ids", np.arange(config.max_position, dtype=np.int64)[None, :])
    positions = g.op("Slice", [all_positions, g.const("const.zero_1d", np.array([0], np.int64)), seq_len,
                               "const.one_1d"], s)  # [1, seq]
    pos_table = g.const("embeddings.position_embeddings.weight", weights["embeddings.position_embeddings.weight"])
    position = g.op("Gather", [pos_table, positions], s)  # [1, seq, hidden], broadcast over the batch
    type_table = g.const("embeddings.token_type_embeddings.weight",
                         weights["embeddings.token_type_embeddings.weight"])
    token_type = g.op("Gather", [type_table, "token_type_ids"], s)
    summed = g.op("Add", [g.op("Add", [word, position], s), token_type], s)
    return _layer_norm(g, summed, weights, "embeddings.LayerNorm", config.layer_norm_eps, s)


def _additive_mask(g: _GraphBuilder) -> tuple[str, str]:
    """Return (mask as float [batch, seq], additive attention bias [batch, 1, 1, seq])."""
    s = "mask"
    mask_f = g.op("Cast", ["attention_mask"], s, to=TensorProto.FLOAT)
    # HF's node order (Unsqueeze, Unsqueeze, Cast, Sub, Mul): the one ORT's offline Attention fusion matches.
    axis1 = g.const("const.axis_1", np.array([1], np.int64))
    axis2 = g.const("const.axis_2", np.array([2], np.int64))
    expanded = g.op("Unsqueeze", [g.op("Unsqueeze", ["attention_mask", axis1], s), axis2], s)
    inverted = g.op("Sub", [g.const("const.one_f32", _ONE),
                            g.op("Cast", [expanded], s, to=TensorProto.FLOAT)], s)
    bias = g.op("Mul", [inverted, g.const("const.mask_fill", np.array(_MASK_FILL, dtype=np.float32))], s)
    return mask_f, bias


def _encoder_layer(g: _GraphBuilder, config: BertConfig, weights: BertWeights, n: int, x: str,
                   mask_bias: str) -> str:
    p, s = f"encoder.layer.{n}", f"layer{n}"
    heads_shape = g.const("const.heads_shape", np.array([0, 0, config.heads, config.head_dim], dtype=np.int64))
    q = g.op("Transpose", [g.op("Reshape", [_linear(g, x, weights, f"{p}.attention.self.query", s),
                                            heads_shape], s)], s, perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [_linear(g, x, weights, f"{p}.attention.self.key", s),
                                            heads_shape], s)], s, perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [_linear(g, x, weights, f"{p}.attention.self.value", s),
                                            heads_shape], s)], s, perm=[0, 2, 1, 3])
    sqrt_dim = g.const("const.sqrt_head_dim", np.array(math.sqrt(config.head_dim), dtype=np.float32))
    scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k], s), sqrt_dim], s), mask_bias], s)
    context = g.op("MatMul", [g.op("Softmax", [scores], s, axis=-1), v], s)
    hidden_shape = g.const("const.hidden_shape", np.array([0, 0, config.hidden], dtype=np.int64))
    merged = g.op("Reshape", [g.op("Transpose", [context], s, perm=[0, 2, 1, 3]), hidden_shape], s)
    attn = _linear(g, merged, weights, f"{p}.attention.output.dense", s)
    x = _layer_norm(g, g.op("Add", [attn, x], s), weights, f"{p}.attention.output.LayerNorm",
                    config.layer_norm_eps, s)

    inner = _linear(g, x, weights, f"{p}.intermediate.dense", s)
    # Exact GELU in the node order ORT's GeluFusion matches: Div, Erf, Add 1, Mul x, Mul 0.5.
    sqrt2 = g.const("const.sqrt2", np.array(math.sqrt(2.0), np.float32))
    one_plus_erf = g.op("Add", [g.op("Erf", [g.op("Div", [inner, sqrt2], s)], s), g.const("const.one_f32", _ONE)], s)
    gelu = g.op("Mul", [g.op("Mul", [inner, one_plus_erf], s), g.const("const.half", np.array(0.5, np.float32))], s)
    out = _linear(g, gelu, weights, f"{p}.output.dense", s)
    return _layer_norm(g, g.op("Add", [out, x], s), weights, f"{p}.output.LayerNorm", config.layer_norm_eps, s)


def _pool_and_normalize(g: _GraphBuilder, h: str, mask_f: str) -> str:
    s = "pooling"
    axis1 = g.const("const.axis_1", np.array([1], dtype=np.int64))
    mask3 = g.op("Unsqueeze", [mask_f, g.const("const.axis_2", np.array([2], dtype=np.int64))], s)
    summed = g.op("ReduceSum", [g.op("Mul", [h, mask3], s), axis1], s, keepdims=0)  # [batch, hidden]
    count = g.op("ReduceSum", [mask3, axis1], s, keepdims=0)  # [batch, 1]
    floor = g.const("const.count_floor", np.array(1e-9, dtype=np.float32))
    pooled = g.op("Div", [summed, g.op("Max", [count, floor], s)], s)
    s = "normalize"
    norm = g.op("Sqrt", [g.op("ReduceSumSquare", [pooled], s, axes=[1], keepdims=1)], s)
    eps = g.const("const.norm_floor", np.array(1e-12, dtype=np.float32))
    return g.op("Div", [pooled, g.op("Max", [norm, eps], s)], s)


def build_bert_graph(config: BertConfig, weights: BertWeights, head: ClassifierHead | None,
                     *, graph_name: str = "bert_classifier", check: bool = True,
                     embedding_output: str = SENTENCE_EMBEDDING) -> onnx.ModelProto:
    """Build the model; output ``logits`` with a head, ``embedding_output`` (the normalised sentence embedding
    [batch, hidden]) without one.

    ``check`` runs the ONNX checker with shape inference (about 1 s for MiniLM); skip it only for a graph
    that goes straight into ONNX Runtime, which validates on load.
    """
    check_weights(config, weights)
    if head is not None and head.weight.shape[1:] != (config.hidden,):
        raise ValueError(f"head weight shape {head.weight.shape} does not match hidden size {config.hidden}")
    if head is not None and head.bias.shape != (head.num_labels,):
        raise ValueError(f"head bias shape {head.bias.shape} does not match {head.num_labels} labels")

    g = _GraphBuilder()
    mask_f, mask_bias = _additive_mask(g)
    h = _embeddings(g, config, weights)
    for n in range(config.layers):
        h = _encoder_layer(g, config, weights, n, h, mask_bias)
    embedding = _pool_and_normalize(g, h, mask_f)

    if head is None:
        g.rename_last_output(embedding_output)
        output = helper.make_tensor_value_info(embedding_output, TensorProto.FLOAT, ["batch", config.hidden])
    else:
        w = g.const("classifier.weight.T", head.weight.astype(np.float32).T)
        b = g.const("classifier.bias", head.bias.astype(np.float32))
        g.op("Add", [g.op("MatMul", [embedding, w], "classifier"), b], "classifier")
        g.rename_last_output(LOGITS)
        output = helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT, ["batch", head.num_labels])

    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"]) for name in INPUT_NAMES]
    graph = helper.make_graph(g.nodes, graph_name, inputs, [output], initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="ortserve_devtools", producer_version="1")
    # Pin the IR version so that the bytes do not depend on which onnx release wrote them.
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model
