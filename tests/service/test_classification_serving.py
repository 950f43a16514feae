"""The classification extension and the labels metadata over real gRPC, on both front ends.

A four-label tiny BERT (labels from its manifest), a real server process per front end: `classification` = k on the
requested LOGITS answers the top k as BYTES "score:index:label", best first; `scores` = "probabilities" reports
softmax probabilities; every way to ask wrongly is INVALID_ARGUMENT naming the parameter or the outputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.reference import Reference
from support.server_process import ServerProcess, ask_classification, infer_request, running_server, stub_for
from support.v2_tensors import split_raw_bytes

from ortserve.proto import grpc_service_pb2 as pb

LABELS = ("anger", "joy: pure", "fear", "sadness")  # a colon inside a label: the client splits at the first two
TEXTS = ["the movie was great", "a much longer sentence about the weather, neither good nor bad", "ok", "hello"]


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def four_labels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("four-labels") / "bundle"
    build_tiny_bundle(dest, seed=2, labels=LABELS)  # a seed whose texts rank the labels differently
    return dest


@pytest.fixture(scope="module")
def emotions(four_labels: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(four_labels), "--model-name", "emotions", "--frontend", frontend]) as s:
        yield s


@pytest.fixture(scope="module")
def stub(emotions: ServerProcess) -> Iterator[object]:
    channel, stub = stub_for(emotions.address)
    yield stub
    channel.close()


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def logits(four_labels: Path) -> np.ndarray:
    return Reference(four_labels).logits(TEXTS)


def classify(texts: list[str], k: int, **asked: Any) -> pb.ModelInferRequest:
    return ask_classification(infer_request(texts, model="emotions"), k, **asked)


def classes(response: pb.ModelInferResponse) -> list[list[tuple[float, int, str]]]:
    """The reply's "score:index:label" strings, parsed, per text."""
    (out,) = response.outputs
    assert (out.name, out.datatype) == ("LOGITS", "BYTES")
    rows, k = out.shape
    flat = split_raw_bytes(response.raw_output_contents[0]) if response.raw_output_contents else \
        list(out.contents.bytes_contents)
    assert len(flat) == rows * k
    parsed = []
    for element in flat:
        score, index, label = element.decode().split(":", 2)
        parsed.append((float(score), int(index), label))
    return [parsed[r * k:(r + 1) * k] for r in range(rows)]


def test_top_k_best_first_with_the_manifest_labels(stub, logits: np.ndarray) -> None:
    response = stub.ModelInfer(classify(TEXTS, 3))
    assert list(response.outputs[0].shape) == [len(TEXTS), 3]
    assert len(response.raw_output_contents) == 1  # raw by default, as tritonclient reads it
    for row, expected in zip(classes(response), logits, strict=True):
        assert [i for _, i, _ in row] == list(np.argsort(-expected, kind="stable")[:3])
        assert [label for _, i, label in row] == [LABELS[i] for _, i, _ in row]
        assert [score for score, _, _ in row] == pytest.approx([expected[i] for _, i, _ in row], abs=2e-6)
    assert len({tuple(i for _, i, _ in row) for row in classes(response)}) > 1  # the texts rank differently


def test_k_past_the_labels_is_clamped(stub, logits: np.ndarray) -> None:
    response = stub.ModelInfer(classify(TEXTS[:2], 100))
    assert list(response.outputs[0].shape) == [2, len(LABELS)]
    assert [sorted(i for _, i, _ in row) for row in classes(response)] == [[0, 1, 2, 3]] * 2


def test_probabilities_sum_to_one(stub, logits: np.ndarray) -> None:
    response = stub.ModelInfer(classify(TEXTS, len(LABELS), scores="probabilities"))
    for row, expected in zip(classes(response), logits, strict=True):
        probabilities = np.exp(expected.astype(np.float64) - expected.max())
        probabilities /= probabilities.sum()
        assert sum(score for score, _, _ in row) == pytest.approx(1.0, abs=4e-6)  # six decimals each
        assert [score for score, _, _ in row] == pytest.approx([probabilities[i] for _, i, _ in row], abs=2e-6)
        assert [i for _, i, _ in row] == list(np.argsort(-expected, kind="stable"))
    top1 = classes(stub.ModelInfer(classify(TEXTS, 1, scores="probabilities")))
    assert all(0 < row[0][0] < 1 for row in top1)
    explicit = classes(stub.ModelInfer(classify(TEXTS, 1, scores="logits")))
    assert [row[0][0] for row in explicit] == pytest.approx([float(max(row)) for row in logits], abs=2e-6)


def test_bytes_contents_when_binary_data_false(stub) -> None:
    response = stub.ModelInfer(classify(TEXTS[:2], 2, binary_data=False))
    assert not response.raw_output_contents and len(response.outputs[0].contents.bytes_contents) == 4
    assert classes(response) == classes(stub.ModelInfer(classify(TEXTS[:2], 2)))


def test_plain_logits_are_unchanged(stub, logits: np.ndarray) -> None:
    request = infer_request(TEXTS, model="emotions")
    request.outputs.add(name="LOGITS")
    (out,) = stub.ModelInfer(request).outputs
    assert (out.name, out.datatype, list(out.shape)) == ("LOGITS", "FP32", [len(TEXTS), len(LABELS)])


def _bad(kind: str) -> pb.ModelInferRequest:
    if kind == "k = 0":
        return classify(["x"], 0)
    if kind == "k < 0":
        return classify(["x"], -3)
    if kind == "k a string":
        request = infer_request(["x"], model="emotions")
        request.outputs.add(name="LOGITS").parameters["classification"].string_param = "3"
        return request
    if kind == "scores unknown":
        return classify(["x"], 1, scores="softmax")
    if kind == "scores without classification":
        request = infer_request(["x"], model="emotions")
        request.parameters["scores"].string_param = "probabilities"
        return request
    if kind == "EMBEDDING from a classifier":
        request = infer_request(["x"], model="emotions")
        request.outputs.add(name="EMBEDDING")
        return request
    if kind == "LOGITS twice":
        request = classify(["x"], 1)
        request.outputs.add(name="LOGITS")
        return request
    raise AssertionError(kind)


BAD = [
    ("k = 0", "output 'LOGITS' parameter 'classification' must be >= 1 (how many of the best classes to return), "
              "got 0"),
    ("k < 0", "parameter 'classification' must be >= 1"),
    ("k a string", "parameter 'classification' must be an integer (int64_param), got string_param"),
    ("scores unknown", "request parameter 'scores' must be 'logits' or 'probabilities', got 'softmax'"),
    ("scores without classification", "request parameter 'scores' applies to classification outputs"),
    ("EMBEDDING from a classifier", "unknown output 'EMBEDDING' requested; model 'emotions' (a classifier model) "
                                    "has outputs ['LOGITS']"),
    ("LOGITS twice", "output 'LOGITS' is requested twice"),
]


@pytest.mark.parametrize(("kind", "message"), BAD, ids=[k for k, _ in BAD])
def test_asking_wrongly_is_invalid_argument_naming_it(stub, kind: str, message: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(_bad(kind), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.value.details() or "")


def test_model_metadata_lists_the_labels(stub) -> None:
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="emotions"))
    assert json.loads(meta.parameters["labels"].string_param) == list(LABELS)
    assert meta.parameters["kind"].string_param == "classifier"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("LOGITS", "FP32", [-1, len(LABELS)])]
    assert "classification" in stub.ServerMetadata(pb.ServerMetadataRequest()).extensions


def test_the_native_front_end_answers_classification_itself(emotions: ServerProcess, stub, frontend: str) -> None:
    """Not passed on to Python: the route table carries each version's labels (manager.data_plane_routes)."""
    if frontend != "native":
        pytest.skip("native front end only")
    stub.ModelInfer(classify(TEXTS, 2, scores="probabilities"), metadata=(("x-request-id", "classify-native"),))
    line = emotions.wait_event("request", request_id="classify-native")
    assert line.get("frontend") == "native" and line["status"] == "OK"
