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
LAST_HIDDEN_STATE = "last_hidden_state"
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


def _positions(g: _GraphBuilder, config: BertConfig, scope: str = "embeddings") -> str:
    """[1, seq] position ids 0..seq-1. HF's export pattern: slice a [1, max_position] position_ids buffer to the
    sequence length. (Gather over Range(seq) is equivalent, but ORT 1.31's GatherToSliceFusion rewrites it into a
    Slice whose starts are 2-D, which then fails at run time.)"""
    seq_len = g.op("Slice", [g.op("Shape", ["input_ids"], scope), g.const("const.one_1d", np.array([1], np.int64)),
                             g.const("const.two_1d", np.array([2], np.int64))], scope)  # [seq] as a 1-D tensor
    all_positions = g.const("embeddings.position_ids", np.arange(config.max_position, dtype=np.int64)[None, :])
    return g.op("Slice", [all_positions, g.const("const.zero_1d", np.array([0], np.int64)), seq_len,
                          "const.one_1d"], scope)


def _embeddings(g: _GraphBuilder, config: BertConfig, weights: BertWeights, *, positions: str | None = None,
                token_types: str = "token_type_ids", scope: str = "embeddings") -> str:
    """Word + position + token type embeddings, normalised. `positions`: [1, seq] or [batch, seq] ids (default
    0..seq-1); `token_types`: [batch, seq] ids (default the graph input)."""
    s = scope
    word = g.op("Gather", [g.const("embeddings.word_embeddings.weight",
                                   weights["embeddings.word_embeddings.weight"]), "input_ids"], s)
    if positions is None:
        positions = _positions(g, config, s)
    pos_table = g.const("embeddings.position_embeddings.weight", weights["embeddings.position_embeddings.weight"])
    position = g.op("Gather", [pos_table, positions], s)  # [1, seq, hidden] (broadcast) or [batch, seq, hidden]
    type_table = g.const("embeddings.token_type_embeddings.weight",
                         weights["embeddings.token_type_embeddings.weight"])
    token_type = g.op("Gather", [type_table, token_types], s)
    summed = g.op("Add", [g.op("Add", [word, position], s), token_type], s)
    return _layer_norm(g, summed, weights, "embeddings.LayerNorm", config.layer_norm_eps, s)


def _additive_mask(g: _GraphBuilder, mask: str = "attention_mask", scope: str = "mask") -> tuple[str, str]:
    """Return (mask as float [batch, seq], additive attention bias [batch, 1, 1, seq]) of an int64 0/1 `mask`."""
    s = scope
    mask_f = g.op("Cast", [mask], s, to=TensorProto.FLOAT)
    # HF's node order (Unsqueeze, Unsqueeze, Cast, Sub, Mul): the one ORT's offline Attention fusion matches.
    axis1 = g.const("const.axis_1", np.array([1], np.int64))
    axis2 = g.const("const.axis_2", np.array([2], np.int64))
    expanded = g.op("Unsqueeze", [g.op("Unsqueeze", [mask, axis1], s), axis2], s)
    inverted = g.op("Sub", [g.const("const.one_f32", _ONE),
                            g.op("Cast", [expanded], s, to=TensorProto.FLOAT)], s)
    bias = g.op("Mul", [inverted, g.const("const.mask_fill", np.array(_MASK_FILL, dtype=np.float32))], s)
    return mask_f, bias


def _encoder_layer(g: _GraphBuilder, config: BertConfig, weights: BertWeights, n: int, x: str,
                   mask_bias: str, scope_prefix: str = "") -> str:
    p, s = f"encoder.layer.{n}", f"{scope_prefix}layer{n}"
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
    if head is not None:
        _check_head(config, head)

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

    return _model(g, graph_name, output, check)


def _check_head(config: BertConfig, head: ClassifierHead, width: int | None = None) -> None:
    width = config.hidden if width is None else width
    if head.weight.shape[1:] != (width,):
        raise ValueError(f"head weight shape {head.weight.shape} does not match its input width {width}")
    if head.bias.shape != (head.num_labels,):
        raise ValueError(f"head bias shape {head.bias.shape} does not match {head.num_labels} labels")


def _model(g: _GraphBuilder, graph_name: str, output: onnx.ValueInfoProto, check: bool) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"]) for name in INPUT_NAMES]
    graph = helper.make_graph(g.nodes, graph_name, inputs, [output], initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="ortserve_devtools", producer_version="1")
    # Pin the IR version so that the bytes do not depend on which onnx release wrote them.
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def build_token_graph(config: BertConfig, weights: BertWeights, head: ClassifierHead | None,
                      *, graph_name: str = "bert_token_classifier", previous_token: bool = False,
                      check: bool = True) -> onnx.ModelProto:
    """A label per token: the encoder's last hidden state through a linear head -> ``logits`` [batch, seq, labels]
    (an onnx-token-classifier's output). With ``previous_token`` the head reads each token's state beside the
    previous token's (zeros before the first): ``Concat(h, Pad(h[:, :-1]))``, a head weight [labels, 2 x hidden].
    Without a head: ``last_hidden_state`` [batch, seq, hidden], the features a head is fitted on."""
    check_weights(config, weights)
    if head is not None:
        _check_head(config, head, 2 * config.hidden if previous_token else config.hidden)
    g = _GraphBuilder()
    _, mask_bias = _additive_mask(g)
    h = _embeddings(g, config, weights)
    for n in range(config.layers):
        h = _encoder_layer(g, config, weights, n, h, mask_bias)
    if head is None:
        g.rename_last_output(LAST_HIDDEN_STATE)
        output = helper.make_tensor_value_info(LAST_HIDDEN_STATE, TensorProto.FLOAT, ["batch", "seq", config.hidden])
    else:
        s = "classifier"
        if previous_token:
            before_last = g.op("Slice", [h, g.const("const.zero_1d", np.array([0], np.int64)),
                                         g.const("const.minus_one_1d", np.array([-1], np.int64)),
                                         g.const("const.one_1d", np.array([1], np.int64))], s)  # h[:, :-1]
            previous = g.op("Pad", [before_last, g.const("const.pad_seq_front", np.array([0, 1, 0, 0, 0, 0],
                                                                                       np.int64))], s)
            h = g.op("Concat", [h, previous], s, axis=2)  # [batch, seq, 2 x hidden]
        w = g.const("classifier.weight.T", head.weight.astype(np.float32).T)
        b = g.const("classifier.bias", head.bias.astype(np.float32))
        g.op("Add", [g.op("MatMul", [h, w], s), b], s)
        g.rename_last_output(LOGITS)
        output = helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT, ["batch", "seq", head.num_labels])
    return _model(g, graph_name, output, check)


def build_pair_cosine_graph(config: BertConfig, weights: BertWeights, *, graph_name: str = "bert_pair_cosine",
                            check: bool = True) -> onnx.ModelProto:
    """A bi-encoder packaged as a cross-encoder: reads a pair as BERT does (``[CLS] a [SEP] b [SEP]``, token types
    0 then 1) and outputs ``logits`` [batch, 1] = the cosine between the sentence embeddings of ``a`` and ``b``,
    each exactly what the embedding graph gives for that text alone.

    Two passes of the same encoder (shared weights), each seeing one segment only:

        first:  mask = attention_mask x (1 - token_type_ids)      [CLS] a [SEP], positions 0.., types 0
        second: mask = attention_mask x token_type_ids + (position == 0)
                                                                  [CLS] b [SEP]: the [CLS] at position 0 joins b
                positions = CumSum(mask) - 1, token types 0      so b's tokens sit at 1.. as if encoded alone
    then masked mean pooling + L2 normalisation of each, and the dot product of the two. Tokens outside a pass's
    segment only see its keys masked away (-10000), so they change nothing in it.
    """
    check_weights(config, weights)
    g = _GraphBuilder()
    s = "segments"
    one = g.const("const.one_i64", np.array(1, np.int64))
    zero = g.const("const.zero_i64", np.array(0, np.int64))
    positions = _positions(g, config, s)  # [1, seq]
    first_mask = g.op("Mul", ["attention_mask", g.op("Sub", [one, "token_type_ids"], s)], s)
    at_cls = g.op("Cast", [g.op("Equal", [positions, zero], s)], s, to=TensorProto.INT64)  # [1, seq]
    second_mask = g.op("Add", [g.op("Mul", ["attention_mask", "token_type_ids"], s), at_cls], s)
    second_positions = g.op("Sub", [g.op("CumSum", [second_mask, g.const("const.axis_1_scalar",
                                                                         np.array(1, np.int64))], s), one], s)
    type_zero = g.op("Mul", ["token_type_ids", zero], s)

    pooled = []
    for name, mask, pass_positions, types in (("first", first_mask, positions, type_zero),
                                              ("second", second_mask, second_positions, type_zero)):
        mask_f, mask_bias = _additive_mask(g, mask, f"{name}/mask")
        h = _embeddings(g, config, weights, positions=pass_positions, token_types=types,
                        scope=f"{name}/embeddings")
        for n in range(config.layers):
            h = _encoder_layer(g, config, weights, n, h, mask_bias, scope_prefix=f"{name}/")
        pooled.append(_pool_and_normalize(g, h, mask_f))
    s = "cosine"
    product = g.op("Mul", pooled, s)
    g.op("ReduceSum", [product, g.const("const.axis_1", np.array([1], dtype=np.int64))], s, keepdims=1)
    g.rename_last_output(LOGITS)
    output = helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT, ["batch", 1])
    return _model(g, graph_name, output, check)
