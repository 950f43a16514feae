"""Small real ONNX models for the engine tests, built once per session with onnx's helper API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

VOCAB_SIZE = 50
NUM_LABELS = 3
SLOW_WIDTH = 512


@dataclass(frozen=True)
class ModelFiles:
    classifier: Path  # int64 input_ids/attention_mask [batch, seq] -> float32 logits [batch, 3]
    log: Path  # float32 x [n, 4] -> y = log(x) (NaN/Inf for x <= 0), z = abs(x)
    types: Path  # int32/float64/bool [n] + float32 [2, 3] -> int64, float64, float32, bool outputs
    slow: Path  # float32 x [rows, 512] -> 32 chained MatMuls with the identity: y == x, slowly
    string_input: Path  # string input: loads in ORT, but the engine cannot feed it


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    # Pinned opset and IR version: newer onnx releases default to versions ORT may not read yet.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _classifier(path: Path) -> Path:
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.normal(size=(VOCAB_SIZE, 8)).astype(np.float32), "embedding"),
        numpy_helper.from_array(rng.normal(size=(8, NUM_LABELS)).astype(np.float32), "weight"),
        numpy_helper.from_array(rng.normal(size=(NUM_LABELS,)).astype(np.float32), "bias"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
    ]
    nodes = [
        helper.make_node("Gather", ["embedding", "input_ids"], ["embedded"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["embedded", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "axis1"], ["count"], keepdims=0),
        helper.make_node("Max", ["count", "one"], ["count_safe"]),
        helper.make_node("Div", ["summed", "count_safe"], ["pooled"]),
        helper.make_node("MatMul", ["pooled", "weight"], ["projected"]),
        helper.make_node("Add", ["projected", "bias"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", NUM_LABELS])],
        inits,
    )
    return _save(graph, path)


def _log(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Log", ["x"], ["y"]), helper.make_node("Abs", ["x"], ["z"])],
        "log",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4]),
        ],
    )
    return _save(graph, path)


def _types(path: Path) -> Path:
    inits = [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")]
    nodes = [
        helper.make_node("Cast", ["a"], ["a_int64"], to=TensorProto.INT64),
        helper.make_node("Neg", ["b"], ["b_neg"]),
        helper.make_node("Where", ["c", "b", "b_neg"], ["b_signed"]),
        helper.make_node("Mul", ["d", "two"], ["d_double"]),
        helper.make_node("Not", ["c"], ["c_not"]),
    ]
    graph = helper.make_graph(
        nodes,
        "types",
        [
            helper.make_tensor_value_info("a", TensorProto.INT32, ["n"]),
            helper.make_tensor_value_info("b", TensorProto.DOUBLE, ["n"]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, ["n"]),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("a_int64", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("b_signed", TensorProto.DOUBLE, ["n"]),
            helper.make_tensor_value_info("d_double", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("c_not", TensorProto.BOOL, ["n"]),
        ],
        inits,
    )
    return _save(graph, path)


def _slow(path: Path, layers: int = 32) -> Path:
    # One shared identity weight keeps the file small; ORT cannot fold MatMuls on a runtime input.
    inits = [numpy_helper.from_array(np.eye(SLOW_WIDTH, dtype=np.float32), "eye")]
    names = ["x"] + [f"h{i}" for i in range(1, layers)] + ["y"]
    nodes = [helper.make_node("MatMul", [names[i], "eye"], [names[i + 1]]) for i in range(layers)]
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", SLOW_WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", SLOW_WIDTH])],
        inits,
    )
    return _save(graph, path)


def _string_input(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["same"])],
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["n"])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, ["n"])],
    )
    return _save(graph, path)


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> ModelFiles:
    root = tmp_path_factory.mktemp("engine-models")
    return ModelFiles(
        classifier=_classifier(root / "classifier.onnx"),
        log=_log(root / "log.onnx"),
        types=_types(root / "types.onnx"),
        slow=_slow(root / "slow.onnx"),
        string_input=_string_input(root / "string_input.onnx"),
    )


def _token_batch(rng: np.random.Generator, batch: int, seq: int) -> dict[str, np.ndarray]:
    """Random ids with a random amount of right padding per row (mask 0, id 0)."""
    ids = rng.integers(1, VOCAB_SIZE, size=(batch, seq), dtype=np.int64)
    lengths = rng.integers(1, seq + 1, size=batch)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids * mask, "attention_mask": mask}


TokenBatch = Callable[[np.random.Generator, int, int], dict[str, np.ndarray]]


@pytest.fixture
def token_batch() -> TokenBatch:
    """The batch maker, as a fixture: tests cannot import conftest under --import-mode=importlib."""
    return _token_batch
