"""Sparse embedding models (SPLADE) served (issue 57 item 1), imported through PyTorch and published to a file
registry behind one real server per front end:

- each version passed its load-time check of SparseEncoder's reference weights;
- V2 over gRPC and REST answers SPARSE_INDICES, SPARSE_VALUES and SPARSE_COUNTS equal to SparseEncoder.encode's
  (indices, values) within 1e-4, for a SparseEncoder directory, a fill-mask one and a bare masked LM;
- top_k answers what encode(max_active_dims=k) keeps, threshold every weight above it, both by the one C++ rule;
- TEI's /embed_sparse answers [[{"index", "value"}]] per text, as TEI does; POST / routes to it;
- ModelMetadata lists the three outputs and the parameters;
- bad calls (top_k 0, a negative or non-finite threshold, dimensions or a compact embedding_type on a sparse model,
  top_k on a dense one, a dense route on a sparse model and back) are INVALID_ARGUMENT / 400 naming what they got.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from support.bad_calls import assert_parameters_refused
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN, MASKED_LM_TASK, make_checkpoint, sparse_encoder_of
from support.importing import SMALL_BATCHES
from support.server_process import ServerProcess, infer_request, serving_published, set_parameters

from ortserve.prepare.importer import ImportResult, import_checkpoint
from ortserve.proto import grpc_service_pb2 as pb

TEXTS = [
    "ok",
    "The battery died after two days and support never answered.",
    "naïve café crème brûlée — Ångström",
    "最高の映画でした 🎉",
    "a long one: " + " ".join(["the plot kept going, scene after scene, and nobody could follow it"] * 6),
    "",
]
ABS, REL = 1e-4, 1e-4
"""|served - SparseEncoder's| <= ABS + REL x |theirs| (test_sparse_vector's bound: FP32 on any CPU)."""
MODELS = {"splade": "bert-st", "splade-sum": "distilbert-st", "splade-bare": "bert-mlm"}
DENSE = "mlm-dense"


@pytest.fixture(scope="session")  # not per front end
def dense_bundle(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> ImportResult:
    """A bare DistilBertForMaskedLM imported without --task: a dense embedding model of its encoder, with the
    import's warning that it could be sparse (a BERT one has no pooler weights for transformers' BertModel)."""
    root = tmp_path_factory.mktemp("mlm-dense")
    checkpoint = make_checkpoint(root / "mlm", "distilbert", task=MASKED_LM_TASK, seed=73)
    result = import_checkpoint(checkpoint, root / "bundle", max_seq_len=IMPORT_MAX_SEQ_LEN)
    assert result.manifest.spec.dense and "--task sparse" in result.warnings[0]
    return result


@pytest.fixture(scope="module")
def served(sparse_imported: dict[str, ImportResult], dense_bundle: ImportResult,
           tmp_path_factory: pytest.TempPathFactory, frontend: str) -> Iterator[ServerProcess]:
    bundles = {model: sparse_imported[name].path for model, name in MODELS.items()}
    bundles[DENSE] = dense_bundle.path
    with serving_published(tmp_path_factory.mktemp("sparse-store"), bundles, ["--frontend", frontend, *SMALL_BATCHES],
                           http=True) as server:
        yield server


@pytest.fixture(scope="module")
def references(sparse_checkpoints: dict[str, Path]) -> dict[str, np.ndarray]:
    """model -> SparseEncoder.encode(TEXTS) as dense float32 [texts, vocabulary]."""
    out = {}
    for model, name in MODELS.items():
        encoder = sparse_encoder_of(sparse_checkpoints[name], bare=name == "bert-mlm")
        out[model] = encoder.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).numpy()
    return out


def sparse_call(stub: Any, model: str, texts: list[str], **params: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each text's (indices, values) from a V2 gRPC call with `params` as its request parameters."""
    reply = stub.ModelInfer(set_parameters(infer_request(texts, model=model), params))
    tensors = {}
    for n, out in enumerate(reply.outputs):
        dtype = "<f4" if out.datatype == "FP32" else "<i8"
        tensors[out.name] = (np.frombuffer(reply.raw_output_contents[n], dtype=dtype) if reply.raw_output_contents
                             else np.asarray(out.contents.fp32_contents if out.datatype == "FP32"
                                             else out.contents.int64_contents, dtype=dtype))
    assert [o.name for o in reply.outputs] == ["SPARSE_INDICES", "SPARSE_VALUES", "SPARSE_COUNTS"]
    return split(tensors["SPARSE_INDICES"], tensors["SPARSE_VALUES"], tensors["SPARSE_COUNTS"])


def split(indices: Any, values: Any, counts: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    ends = np.cumsum(counts)
    return [(np.asarray(indices[e - c:e], np.int64), np.asarray(values[e - c:e], np.float32))
            for c, e in zip(counts, ends, strict=True)]


def dense(entries: list[tuple[np.ndarray, np.ndarray]], columns: int) -> np.ndarray:
    out = np.zeros((len(entries), columns), np.float32)
    for row, (indices, values) in enumerate(entries):
        assert (np.diff(indices) > 0).all() and (values > 0).all()  # ascending columns, the kept weights
        out[row, indices] = values
    return out


def assert_equal_to_encode(got: np.ndarray, theirs: np.ndarray) -> None:
    np.testing.assert_allclose(got, theirs, atol=ABS, rtol=REL)
    assert not ((got > ABS) & (theirs == 0)).any() and not ((theirs > ABS) & (got == 0)).any()


def test_each_version_passed_its_load_time_check(served: ServerProcess) -> None:
    for model in MODELS:
        loaded = served.wait_event("version_loaded", model=model)
        assert loaded["verify"] == "passed", model  # SparseEncoder's weights, on the server, before traffic
        assert loaded["kind"] == "sparse embedding model"


@pytest.mark.parametrize("model", sorted(MODELS))
def test_grpc_answers_equal_sparse_encoder(stub: Any, references: dict[str, np.ndarray], model: str) -> None:
    columns = references[model].shape[1]
    assert_equal_to_encode(dense(sparse_call(stub, model, TEXTS), columns), references[model])
    assert_equal_to_encode(dense(sparse_call(stub, model, TEXTS[1:2]), columns), references[model][1:2])


def test_rest_answers_what_grpc_does(served: ServerProcess, stub: Any, references: dict[str, np.ndarray]) -> None:
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}],
           "parameters": {"top_k": 5, "threshold": 0.01}}
    rest = requests.post(f"http://127.0.0.1:{served.http_port}/v2/models/splade/infer", json=doc, timeout=60).json()
    by_name = {o["name"]: o for o in rest["outputs"]}
    assert [o["datatype"] for o in rest["outputs"]] == ["INT64", "FP32", "INT64"]
    assert by_name["SPARSE_COUNTS"]["shape"] == [len(TEXTS)]
    got = split(by_name["SPARSE_INDICES"]["data"], by_name["SPARSE_VALUES"]["data"], by_name["SPARSE_COUNTS"]["data"])
    want = sparse_call(stub, "splade", TEXTS, top_k=5, threshold=0.01)
    for (gi, gv), (wi, wv) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gv, wv)


@pytest.mark.parametrize("k", [1, 3, 20])
def test_top_k_keeps_what_max_active_dims_keeps(stub: Any, references: dict[str, np.ndarray], k: int) -> None:
    """The k largest weights of each text (fewer where it has fewer non-zeros), each SparseEncoder's within the
    bound; a weight left out is never above a kept one by more than the bound (ties at the edge may go either way)."""
    theirs = references["splade"]
    for row, (indices, values) in enumerate(sparse_call(stub, "splade", TEXTS, top_k=k)):
        assert len(indices) == min(k, int((theirs[row] > 0).sum()))
        np.testing.assert_allclose(values, theirs[row, indices], atol=ABS, rtol=REL)
        left = np.delete(theirs[row], indices)
        if len(values):
            assert left.max(initial=0.0) <= values.min() + 2 * (ABS + REL * values.min())


def test_threshold_keeps_the_weights_above_it(stub: Any, references: dict[str, np.ndarray]) -> None:
    theirs = references["splade"]
    threshold = float(np.quantile(theirs[theirs > 0], 0.5))
    for row, (indices, values) in enumerate(sparse_call(stub, "splade", TEXTS, threshold=threshold)):
        assert (values > threshold).all()
        clear = np.flatnonzero(theirs[row] > threshold + ABS + REL * threshold)
        assert set(clear) <= set(indices)


def test_tei_embed_sparse(served: ServerProcess, stub: Any, references: dict[str, np.ndarray]) -> None:
    base = f"http://127.0.0.1:{served.http_port}"
    rows = requests.post(f"{base}/embed_sparse", json={"model": "splade-bare", "inputs": TEXTS}, timeout=60).json()
    assert isinstance(rows, list) and len(rows) == len(TEXTS)
    assert all(set(entry) == {"index", "value"} for row in rows for entry in row)
    got = dense([(np.asarray([e["index"] for e in row], np.int64), np.asarray([e["value"] for e in row], np.float32))
                 for row in rows], references["splade-bare"].shape[1])
    assert_equal_to_encode(got, references["splade-bare"])
    one = requests.post(f"{base}/embed_sparse", json={"model": "splade", "inputs": TEXTS[1], "top_k": 4},
                        timeout=60).json()
    want = sparse_call(stub, "splade", TEXTS[1:2], top_k=4)[0]
    assert [e["index"] for e in one[0]] == want[0].tolist() and len(one) == 1
    root = requests.post(f"{base}/", json={"model": "splade", "inputs": [TEXTS[1]], "top_k": 4}, timeout=60).json()
    assert root == one
    info = requests.get(f"{base}/info", params={"model": "splade"}, timeout=30).json()
    assert info["model_type"] == {"embedding": {"pooling": "splade"}}


def test_metadata_lists_the_outputs(stub: Any, references: dict[str, np.ndarray]) -> None:
    metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="splade"))
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
        ("SPARSE_INDICES", "INT64", [-1]), ("SPARSE_VALUES", "FP32", [-1]), ("SPARSE_COUNTS", "INT64", [-1])]
    assert metadata.parameters["kind"].string_param == "sparse-embedding"
    assert metadata.parameters["vocabulary"].string_param == str(references["splade"].shape[1])
    assert "dimensions" not in metadata.parameters and "embedding_types" not in metadata.parameters


def test_one_output_alone(stub: Any) -> None:
    request = infer_request(TEXTS[:2], model="splade")
    request.outputs.add(name="SPARSE_COUNTS")
    reply = stub.ModelInfer(request)
    assert [o.name for o in reply.outputs] == ["SPARSE_COUNTS"] and list(reply.outputs[0].shape) == [2]


@pytest.mark.parametrize(("model", "params", "message"), [
    ("splade", {"top_k": 0}, "'top_k' must be >= 1"),
    ("splade", {"threshold": -0.5}, "'threshold' must be a finite number >= 0"),
    ("splade", {"threshold": "high"}, "'threshold' must be a number (double_param), got string_param"),
    ("splade", {"dimensions": 16}, "a sparse embedding's width is its vocabulary"),
    ("splade", {"embedding_type": "int8"}, "a sparse embedding's width is its vocabulary"),
    (DENSE, {"top_k": 3}, "apply to a sparse embedding model's 'SPARSE_VALUES'; model 'mlm-dense' is an embedding"),
])
def test_bad_calls_name_what_they_got(served: ServerProcess, model: str, params: dict[str, Any], message: str) -> None:
    assert_parameters_refused(served, model, params, message)  # gRPC and REST


def test_a_non_finite_threshold_is_refused(stub: Any) -> None:
    """Over gRPC (JSON has no NaN: REST refuses the body before the rule)."""
    with pytest.raises(grpc.RpcError) as caught:
        sparse_call(stub, "splade", TEXTS[:1], threshold=float("nan"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'threshold' must be a finite number >= 0 (the least weight kept, exclusive), got a non-finite one" in \
        caught.value.details()


def test_the_http_routes_refuse_the_other_kind(served: ServerProcess) -> None:
    base = f"http://127.0.0.1:{served.http_port}"
    for path, body, message in (
            ("/embed_sparse", {"model": DENSE, "inputs": "x"}, "not a sparse embedding model (SPLADE): use /embed"),
            ("/embed", {"model": "splade", "inputs": "x"}, "use /embed_sparse"),
            ("/v1/embeddings", {"model": "splade", "input": "x"}, "its sparse vectors are at /embed_sparse"),
            ("/embed_sparse", {"model": "splade", "inputs": "x", "top_k": 0}, "'top_k' must be >= 1"),
            ("/embed_sparse", {"model": "splade", "inputs": "x", "top_k": "5"}, "'top_k' must be an integer"),
            ("/embed_sparse", {"model": "splade", "inputs": "x", "threshold": -1}, "'threshold' must be a finite")):
        reply = requests.post(base + path, json=body, timeout=30)
        assert reply.status_code == 400, (path, reply.text)
        assert message in reply.text, (path, reply.text)
