"""An embedding bundle served over real gRPC, on both front ends: EMBEDDING FP32 [N, dim], equal to the numpy
sentence-transformers computation, the same whether a text ran alone or batched with others; the classifier's
outputs and the classification extension refused, naming what the model has."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortserve_devtools.bert_bundle import build_tiny_embedding_bundle, tiny_bert
from support.batching import burst_behind_busy
from support.bert_reference import reference_embedding
from support.reference import Reference
from support.server_process import ServerProcess, infer_request, logits_of, running_server, stub_for
from tokenizers import Tokenizer

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

SEED = 5
DIM = 32
TEXTS = ["the movie was great", "a much longer sentence about the weather, neither good nor bad", "ok", "hello"]
WORDS = ["the", "movie", "was", "great", "awful", "service", "quick", "slow", "battery", "died", "love",
         "hate", "it", "and", "but", "very", "not", "really", "phone", "story"]


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def embedding_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("embedding") / "bundle"
    build_tiny_embedding_bundle(dest, seed=SEED)
    return dest


@pytest.fixture(scope="module")
def search(embedding_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    # Small batches and a generous queue, so that concurrent calls are split across and merged into batches.
    with running_server(["--bundle", str(embedding_bundle), "--model-name", "search", "--frontend", frontend,
                         "--max-batch-size", "4", "--max-queue-items", "4096", "--default-timeout-ms", "0",
                         "--max-padding-ratio", "1.5"]) as s:
        yield s


@pytest.fixture(scope="module")
def stub(search: ServerProcess) -> Iterator[object]:
    channel, stub = stub_for(search.address)
    yield stub
    channel.close()


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def reference(embedding_bundle: Path) -> Reference:
    return Reference(embedding_bundle)


def embed(texts: list[str], *, output: str | None = None) -> pb.ModelInferRequest:
    request = infer_request(texts, model="search")
    if output is not None:
        request.outputs.add(name=output)
    return request


def test_embeddings_match_the_numpy_reference(stub, embedding_bundle: Path) -> None:
    response = stub.ModelInfer(embed(TEXTS))
    (out,) = response.outputs
    assert (out.name, out.datatype, list(out.shape)) == ("EMBEDDING", "FP32", [len(TEXTS), DIM])
    got = logits_of(response)
    tiny = tiny_bert(seed=SEED)
    tokenizer = Tokenizer.from_file(str(embedding_bundle / "tokenizer.json"))
    expected = np.stack([reference_embedding(tiny.config, tiny.weights, e.ids, e.type_ids)
                         for e in tokenizer.encode_batch(TEXTS)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_requested_by_name_and_as_fp32_contents(stub, reference: Reference) -> None:
    request = embed(TEXTS[:2], output="EMBEDDING")
    request.outputs[0].parameters["binary_data"].bool_param = False
    response = stub.ModelInfer(request)
    assert not response.raw_output_contents
    np.testing.assert_allclose(logits_of(response), reference.embeddings(TEXTS[:2]), rtol=0, atol=1e-5)


BAD = [
    ("LOGITS from an embedding model",
     "unknown output 'LOGITS' requested; model 'search' (an embedding model) has outputs ['EMBEDDING']"),
    ("classification on EMBEDDING",
     "output 'EMBEDDING' does not take parameter 'classification': model 'search' is an embedding model"),
    ("classification on LOGITS", "unknown output 'LOGITS' requested"),
]


def _bad(kind: str) -> pb.ModelInferRequest:
    if kind == "LOGITS from an embedding model":
        return embed(["x"], output="LOGITS")
    request = embed(["x"], output="EMBEDDING" if kind == "classification on EMBEDDING" else "LOGITS")
    request.outputs[0].parameters["classification"].int64_param = 2
    return request


@pytest.mark.parametrize(("kind", "message"), BAD, ids=[k for k, _ in BAD])
def test_a_classifier_output_is_invalid_argument_naming_the_outputs(stub, kind: str, message: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(_bad(kind), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.value.details() or "")


def test_model_metadata_says_embedding(stub) -> None:
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="search"))
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("EMBEDDING", "FP32", [-1, DIM])]
    assert meta.parameters["kind"].string_param == "embedding" and "labels" not in meta.parameters


text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)
call = st.lists(text, min_size=1, max_size=8)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(call, min_size=1, max_size=12))
def test_batched_equals_unbatched(search: ServerProcess, reference: Reference, calls: list[list[str]]) -> None:
    async def send_all() -> list[pb.ModelInferResponse]:
        async with grpc.aio.insecure_channel(search.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            return await asyncio.gather(*(stub.ModelInfer(embed(c), timeout=60) for c in calls))

    for texts, reply in zip(calls, asyncio.run(send_all()), strict=True):
        np.testing.assert_allclose(logits_of(reply), reference.embeddings(texts), rtol=0, atol=1e-5)


def test_batches_really_formed(search: ServerProcess, reference: Reference) -> None:
    """The property above means something only if texts of different calls share engine runs on this server. Not left
    to the property's bursts (on a loaded machine an idle engine may answer each of them alone): a burst of such calls
    sent right behind calls that keep the engine busy (support.batching.burst_behind_busy: sent again, a bounded
    number of times, until some shared a run) shares runs, and each reply is still its texts' own embeddings."""
    calls = [[" ".join(WORDS[i:i + 2 + i % 7])] for i in range(12)]

    def unbatched(replies: list[pb.ModelInferResponse]) -> None:
        for texts, reply in zip(calls, replies, strict=True):
            np.testing.assert_allclose(logits_of(reply), reference.embeddings(texts), rtol=0, atol=1e-5)

    burst_behind_busy(search, busy=embed([" ".join(WORDS * 3)] * 128), burst=[embed(texts) for texts in calls],
                      check=unbatched)


def test_the_native_front_end_answers_embeddings_itself(search: ServerProcess, stub, frontend: str) -> None:
    if frontend != "native":
        pytest.skip("native front end only")
    response = stub.ModelInfer(embed(TEXTS), metadata=(("x-request-id", "embed-native"),))
    assert [(o.name, list(o.shape)) for o in response.outputs] == [("EMBEDDING", [len(TEXTS), DIM])]
    line = search.wait_event("request", request_id="embed-native")
    assert line.get("frontend") == "native" and line["status"] == "OK"
