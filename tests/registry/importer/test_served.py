"""Served equals PyTorch: every imported bundle (8 architectures x 2 tasks, and a multi-label classifier) published to
an embedded registry behind one real server per front end, over loopback gRPC. Each text, texts past max_seq_len
among them, gets what transformers' pipeline (classifiers: raw logits) or PyTorch's encoder with the pooling
(embeddings) gives, computed live here: argmax identical and |delta logit| <= 1e-4 x max(1, |logit|), or cosine
>= 0.9999. Each version passed its load-time check of PyTorch's reference answers on the server, and ran the C++
WordPiece where it reproduces the checkpoint's tokenizer, HF tokenizers otherwise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from support.hf_checkpoints import ARCHITECTURES, IMPORT_MAX_SEQ_LEN, TASKS, make_checkpoint
from support.server_process import (
    ServerProcess,
    ask_classification,
    infer_request,
    logits_of,
    running_server,
)

from ortserve.prepare.importer import LOGIT_TOLERANCE, MIN_COSINE, ImportResult, import_checkpoint
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.filestore import FileStore
from ortserve.registry.publishing import publish

Key = tuple[str, str]
TEXTS = [
    "The battery died after two days and support never answered.",
    "ok",
    "Das Essen war ausgezeichnet, der Service freundlich.",
    "Обслуживание было медленным, но еда вкусная.",
    "最高の映画でした 🎉",
    "a long one: " + " ".join(["the plot kept going, scene after scene, and nobody in the room could follow it"] * 8),
]
# The C++ WordPiece serves the BERT-style tokenizers it reproduces; the others run on HF tokenizers.
NATIVE_TOKENIZER = {"bert", "distilbert", "electra"}
MULTI_LABELS = ("toxic", "funny", "sad")


def model_name(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def multi_label(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> ImportResult:
    root = tmp_path_factory.mktemp("multi")
    checkpoint = make_checkpoint(root / "checkpoint", "bert", labels=MULTI_LABELS, multi_label=True, seed=7)
    return import_checkpoint(checkpoint, root / "bundle", max_seq_len=IMPORT_MAX_SEQ_LEN)


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def store(imported: dict[Key, ImportResult], multi_label: ImportResult,
          tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    files, artifacts = FileStore(root), ArtifactStore(root / "artifacts")
    for key, result in imported.items():
        publish(files, artifacts, model=model_name(key), version="v1", bundle_dir=result.path, weight=100)
    publish(files, artifacts, model="multi", version="v1", bundle_dir=multi_label.path, weight=100)
    return root


@pytest.fixture(scope="module")
def served(store: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--registry", store.as_uri(), "--frontend", frontend], ready=False, http=True) as server:
        for key in [*((a, t) for a in ARCHITECTURES for t in TASKS)]:
            server.wait_ready(model=model_name(key), timeout=180)
        server.wait_ready(model="multi", timeout=180)
        yield server


def pytorch_outputs(checkpoint: Path, task: str, texts: list[str]) -> np.ndarray:
    """What users get from PyTorch for these texts: the pipeline's raw logits, or the encoder mean-pooled and
    normalised (the importer's default for a plain encoder), truncated at the bundle's max_seq_len."""
    import torch
    import transformers

    if task == "classify":
        pipe = transformers.pipeline("text-classification", model=str(checkpoint), device="cpu", top_k=None,
                                     function_to_apply="none")
        order = {label: i for i, label in pipe.model.config.id2label.items()}
        rows = pipe(texts, truncation=True, max_length=IMPORT_MAX_SEQ_LEN)
        out = np.zeros((len(texts), len(order)), np.float32)
        for r, row in enumerate(rows):
            for entry in row:
                out[r, order[entry["label"]]] = entry["score"]
        return out
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    model = transformers.AutoModel.from_pretrained(str(checkpoint)).eval()
    vectors = []
    with torch.inference_mode():
        for text in texts:
            encoded = tokenizer(text, truncation=True, max_length=IMPORT_MAX_SEQ_LEN, return_tensors="pt")
            hidden = model(**encoded).last_hidden_state[0]
            vector = hidden.mean(dim=0)  # one text, no padding: every token counts
            vectors.append((vector / vector.norm()).numpy())
    return np.stack(vectors)


@pytest.mark.parametrize("key", [(a, t) for a in ARCHITECTURES for t in TASKS], ids=lambda k: "-".join(k))
def test_served_answers_equal_pytorchs(stub: Any, served: ServerProcess, checkpoints: dict[Key, Path],
                                       key: Key) -> None:
    loaded = served.wait_event("version_loaded", model=model_name(key))
    assert loaded["verify"] == "passed"  # PyTorch's reference answers, on the server, before traffic
    assert loaded["tokenizer"] == ("native" if key[0] in NATIVE_TOKENIZER else "hf")
    got = logits_of(stub.ModelInfer(infer_request(TEXTS, model=model_name(key))))
    expected = pytorch_outputs(checkpoints[key], key[1], TEXTS)
    assert got.shape == expected.shape
    if key[1] == "classify":
        assert (got.argmax(axis=1) == expected.argmax(axis=1)).all()
        scale = np.maximum(1.0, np.abs(expected).max(axis=1, keepdims=True))
        assert (np.abs(got - expected) <= LOGIT_TOLERANCE * scale).all(), np.abs(got - expected).max()
    else:
        cosine = (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
        assert cosine.min() >= MIN_COSINE, cosine


def test_a_multi_label_classifier_reports_a_sigmoid_per_label(stub: Any, served: ServerProcess,
                                                              multi_label: ImportResult) -> None:
    assert multi_label.manifest.multi_label
    logits = logits_of(stub.ModelInfer(infer_request(TEXTS, model="multi")))
    reply = stub.ModelInfer(ask_classification(infer_request(TEXTS, model="multi"), 3, scores="probabilities",
                                               binary_data=False))
    rows = np.asarray(reply.outputs[0].contents.bytes_contents).reshape(len(TEXTS), 3)
    for row, text_logits in zip(rows, logits, strict=True):
        shown = {int(i): float(score) for score, i, _ in (entry.decode().split(":", 2) for entry in row)}
        for index, score in shown.items():  # each label alone, six decimals: not a softmax over the labels
            assert score == pytest.approx(1.0 / (1.0 + np.exp(-float(text_logits[index]))), abs=1e-6)
    metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="multi"))
    assert json.loads(metadata.parameters["labels"].string_param) == list(MULTI_LABELS)
    assert metadata.parameters["multi_label"].bool_param is True
    single = stub.ModelMetadata(pb.ModelMetadataRequest(name="bert-classify"))
    assert "multi_label" not in single.parameters

    # Over REST (the same wire rules): the same strings, and the metadata says multi_label.
    url = f"http://127.0.0.1:{served.http_port}/v2/models/multi"
    doc = {"parameters": {"scores": "probabilities"},
           "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}],
           "outputs": [{"name": "LOGITS", "parameters": {"classification": 3}}]}
    rest = requests.post(url + "/infer", json=doc, timeout=30).json()
    assert rest["outputs"][0]["data"] == [entry.decode() for entry in rows.reshape(-1)]
    rest_metadata = requests.get(url, timeout=30).json()
    assert rest_metadata["parameters"]["multi_label"] is True


def test_an_embedding_model_refuses_classification(stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        stub.ModelInfer(ask_classification(infer_request(["x"], model="bert-embed"), 1, output="EMBEDDING"))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
