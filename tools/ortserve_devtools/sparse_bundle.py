"""A tiny sparse embedding bundle (format ``onnx-sparse-embedding``), offline and in milliseconds, without torch.

``build_tiny_sparse_bundle``: SPLADE's pooling over a stand-in for a masked LM's logits: each token's row of a random
[vocab, vocab] table (mostly negative, so a text keeps a few dozen weights), then log(1 + relu(.)), padding zeroed,
the max over tokens: ``sparse`` [batch, vocab], with the tiny BERT's WordPiece tokenizer. Same arguments ->
byte-identical files. For the HTTP fuzz harness and tests that need a served sparse model but no PyTorch (the real
SPLADE import is tests/registry/importer/test_sparse_import.py's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ortserve.bundle.kinds import SPARSE_EMBEDDING
from ortserve_devtools.bundle_writer import WrittenBundle, check_max_seq_len, write_bundle
from ortserve_devtools.wordpiece_tokenizer import build_wordpiece_tokenizer, tiny_vocab

OPSET = 17


def sparse_graph(table: np.ndarray) -> onnx.ModelProto:
    """input_ids, attention_mask [batch, seq] -> ``sparse`` [batch, vocab] = max over tokens of
    log(1 + relu(table[id])) x mask."""
    vocab = table.shape[1]
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["rows"]),
        helper.make_node("Relu", ["rows"], ["relu"]),
        helper.make_node("Add", ["relu", "one"], ["shifted"]),
        helper.make_node("Log", ["shifted"], ["weights"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),
        helper.make_node("Mul", ["weights", "mask3"], ["kept"]),
        helper.make_node("ReduceMax", ["kept"], [SPARSE_EMBEDDING.graph_output], axes=[1], keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
              for name in ("input_ids", "attention_mask")]
    output = helper.make_tensor_value_info(SPARSE_EMBEDDING.graph_output, TensorProto.FLOAT, ["batch", vocab])
    initializers = [numpy_helper.from_array(table.astype(np.float32), "table"),
                    numpy_helper.from_array(np.ones((), np.float32), "one"),
                    numpy_helper.from_array(np.asarray([-1], np.int64), "last")]
    graph = helper.make_graph(nodes, "tiny_sparse_embedding", inputs, [output], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ortserve_devtools")


def build_tiny_sparse_bundle(dest: Path | str, *, seed: int = 0, vocab_size: int = 512,
                             max_seq_len: int = 32) -> WrittenBundle:
    """Random tiny sparse embedding bundle (dim = ``vocab_size``); deterministic in all arguments."""
    check_max_seq_len(max_seq_len)
    vocab = tiny_vocab(vocab_size)
    table = np.random.default_rng(seed).normal(-2.0, 1.0, size=(vocab_size, vocab_size))
    notes = (f"tiny random sparse embedding model for tests (seed={seed}, vocab={vocab_size}): SPLADE's max of "
             "log(1 + relu) over a random table's rows; built by ortserve_devtools")
    return write_bundle(Path(dest), model=sparse_graph(table), tokenizer=build_wordpiece_tokenizer(vocab, max_seq_len),
                        dim=vocab_size, sparse=True, max_seq_len=max_seq_len, notes=notes)
