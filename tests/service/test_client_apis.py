"""The client APIs on the HTTP port (issue 39), called by the real clients from PyPI over real HTTP, against a server
of three imported checkpoints (a sentence-transformers embedder, a CrossEncoder reranker, a classifier) on a file
registry, and a server of the embedder alone (a call that names no model):

- OpenAI: `openai` sync and async `embeddings.create` (base64, the SDK's default, and float), LangChain's
  `OpenAIEmbeddings`, `models.list`/`retrieve`: the embeddings equal the V2 path's and sentence-transformers'
  `encode`, `usage` counts the tokens the model read (sentence-transformers' own tokenizer says how many);
- Cohere/Jina rerank: `cohere.ClientV2.rerank` (/v2/rerank) and /v1/rerank: results sorted, scores equal to the V2
  path's SCORE and to CrossEncoder.predict([(query, text)]), the tokens counted;
- TEI's /embed, /rerank, /predict, /tokenize, /info, and huggingface_hub's `InferenceClient.feature_extraction` and
  `text_classification` (the HF Inference API's /models/{model}, and TEI's /embed): equal to the V2 path's, to
  sentence-transformers' and CrossEncoder's, the tokens to transformers' tokenizer's;
- vLLM's /v1/classify; prompts kept at import and chosen per call (`prompt_name`) equal to encode(prompt_name=);
- every API's bad calls (bad JSON, wrong types, unknown model, empty input, ...) get that API's error shape and the V2
  REST status, never a trace; a call is a V2 call: its `request` line, its x-request-id.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN, OFFLINE, make_checkpoint, make_sentence_transformer
from support.server_process import ServerProcess, running_server, serving_published

from ortserve.prepare.importer import import_checkpoint

os.environ.update(OFFLINE)
README = Path(__file__).resolve().parents[2] / "README.md"
TEXTS = ["The battery died after two days.", "ok", "Das Akku hält eine Woche, sagt der Test.", "最高の電池でした 🎉",
         "a long one: " + " ".join(["the battery kept going, day after day, and nobody could believe it"] * 4)]
EMBED_MAX_SEQ_LEN = 32
MODELS = ("embed", "rerank", "classify")
PROMPTS = {"query": "query: ", "passage": "passage: "}
MATRYOSHKA_DIMS = (16, 8)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """What users load: a sentence-transformers directory, a CrossEncoder directory, a classifier checkpoint."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("client-apis")
    embed = make_sentence_transformer(root / "st", "bert", pooling="mean", normalize=True,
                                      max_seq_length=EMBED_MAX_SEQ_LEN, seed=21)
    st_config = embed / "config_sentence_transformers.json"  # prompts by name, none by default
    config = json.loads(st_config.read_text()) if st_config.is_file() else {}
    st_config.write_text(json.dumps({**config, "prompts": PROMPTS, "default_prompt_name": None}))
    scorer = make_checkpoint(root / "ce-ck", "bert", labels=("score",), seed=22)
    CrossEncoder(str(scorer), device="cpu").save(str(root / "ce"))  # the CrossEncoder layout (sigmoid)
    classify = make_checkpoint(root / "cls", "bert", labels=("negative", "positive"), seed=23)
    return {"embed": embed, "rerank": root / "ce", "classify": classify}


@pytest.fixture(scope="module")
def bundles(sources: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("client-api-bundles")
    # The embedder as if trained to be truncated (Matryoshka) to 16 and 8 of its 32 dimensions: calls may ask.
    return {name: import_checkpoint(source, root / name,
                                    max_seq_len=EMBED_MAX_SEQ_LEN if name == "embed" else IMPORT_MAX_SEQ_LEN,
                                    matryoshka_dims=MATRYOSHKA_DIMS if name == "embed" else None).path
            for name, source in sources.items()}


@pytest.fixture(scope="module")
def served(bundles: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving_published(tmp_path_factory.mktemp("client-api-store"), bundles, ["--frontend", "python"],
                           http=True) as server:
        yield server


@pytest.fixture(scope="module")
def url(served: ServerProcess) -> str:
    return f"http://127.0.0.1:{served.http_port}"


@pytest.fixture(scope="module")
def solo(bundles: dict[str, Path]) -> Iterator[str]:
    """A server of the embedder alone: calls that name no model get it. Bodies up to 64 KiB."""
    with running_server(["--bundle", str(bundles["embed"]), "--model-name", "solo", "--max-message-bytes", "65536"],
                        http=True) as server:
        yield f"http://127.0.0.1:{server.http_port}"


@pytest.fixture(scope="module")
def st_embeddings(sources: dict[str, Path]) -> tuple[np.ndarray, int]:
    """sentence-transformers' `encode` of TEXTS, and the tokens its tokenizer gives the model for them."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(sources["embed"]), device="cpu")
    tokens = int(model.tokenize(TEXTS)["attention_mask"].sum())
    return model.encode(TEXTS, convert_to_numpy=True, show_progress_bar=False), tokens


def v2_embeddings(url: str, model: str, texts: list[str]) -> np.ndarray:
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
    reply = requests.post(f"{url}/v2/models/{model}/infer", json=doc, timeout=30)
    reply.raise_for_status()
    out = reply.json()["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def assert_same_embeddings(got: Any, url: str, texts: list[str], expected: np.ndarray) -> None:
    """Equal to the V2 path's answer, and to sentence-transformers' within the importer's parity."""
    got = np.asarray(got, dtype=np.float32)
    np.testing.assert_allclose(got, v2_embeddings(url, "embed", texts), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


# ---- OpenAI ------------------------------------------------------------------------------------------------------


def test_openai_sdk_embeddings_equal_v2_and_sentence_transformers(url: str, st_embeddings: tuple[np.ndarray, int],
                                                                  served: ServerProcess) -> None:
    from openai import OpenAI

    expected, tokens = st_embeddings
    client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    # The SDK's default asks for base64 (little-endian float32 bytes) and decodes it; "float" asks for numbers.
    for kw in ({}, {"encoding_format": "float"}):
        reply = client.embeddings.create(model="embed", input=TEXTS, **kw)  # type: ignore[arg-type]
        assert reply.model == "embed" and [d.index for d in reply.data] == list(range(len(TEXTS)))
        assert_same_embeddings([d.embedding for d in reply.data], url, TEXTS, expected)
        assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens
    asked = client.embeddings.create(model="embed", input=TEXTS, encoding_format="base64")  # left to the caller
    decoded = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in asked.data]  # type: ignore[arg-type]
    assert_same_embeddings(decoded, url, TEXTS, expected)
    raw = client.embeddings.with_raw_response.create(model="embed", input="ok", extra_headers={
        "x-request-id": "openai-call-1"})
    assert raw.headers["x-request-id"] == "openai-call-1" and raw.headers["x-model-version"] == "v1"
    line = served.wait_event("request", request_id="openai-call-1")
    assert (line["model"], line["status"], line["transport"], line["texts"]) == ("embed", "OK", "http", 1)


def test_openai_async_sdk(url: str, st_embeddings: tuple[np.ndarray, int]) -> None:
    from openai import AsyncOpenAI

    async def embed_each() -> list[list[float]]:
        client = AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        replies = await asyncio.gather(*(client.embeddings.create(model="embed", input=text) for text in TEXTS))
        await client.close()
        return [r.data[0].embedding for r in replies]

    assert_same_embeddings(asyncio.run(embed_each()), url, TEXTS, st_embeddings[0])


def test_langchain_openai_embeddings(url: str, st_embeddings: tuple[np.ndarray, int]) -> None:
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(base_url=f"{url}/v1", api_key="x", model="embed",  # type: ignore[arg-type]
                                  check_embedding_ctx_length=False, max_retries=0)
    assert_same_embeddings(embeddings.embed_documents(TEXTS), url, TEXTS, st_embeddings[0])
    assert_same_embeddings([embeddings.embed_query(TEXTS[1])], url, TEXTS[1:2], st_embeddings[0][1:2])


def test_langchain_embeds_5000_texts_in_its_default_chunks(url: str, served: ServerProcess) -> None:
    """Issue 45's finding: LangChain's OpenAIEmbeddings sends its default chunk_size (1,000 texts) a call, past the old
    128-text bound, and no deadline. 5,000 texts, no retries allowed: five calls of 1,000, each within
    max_texts_per_request and the default time budget, answered as the V2 path answers."""
    from langchain_openai import OpenAIEmbeddings

    texts = [f"text number {i}: {TEXTS[i % len(TEXTS)]}" for i in range(5000)]
    embeddings = OpenAIEmbeddings(base_url=f"{url}/v1", api_key="x", model="embed",  # type: ignore[arg-type]
                                  check_embedding_ctx_length=False, max_retries=0,
                                  default_headers={"x-request-id": "langchain-5000"})
    assert embeddings.chunk_size == 1000  # LangChain's default, unchanged
    got = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
    assert got.shape[0] == 5000
    expected = np.concatenate([v2_embeddings(url, "embed", texts[i:i + 1000]) for i in range(0, 5000, 1000)])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    served.wait_event("request", request_id="langchain-5000")
    lines = [e for e in served.events("request") if e.get("request_id") == "langchain-5000"]
    assert [(e["status"], e["texts"]) for e in lines] == [("OK", 1000)] * 5


def test_openai_models(url: str) -> None:
    from openai import NotFoundError, OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    listed = client.models.list().data
    assert sorted(m.id for m in listed) == sorted(MODELS)
    assert all(m.object == "model" and m.owned_by == "ortserve" and m.created > 0 for m in listed)
    assert client.models.retrieve("rerank").id == "rerank"
    with pytest.raises(NotFoundError) as err:
        client.models.retrieve("nope")
    assert "'nope' is not served here" in str(err.value) and "'embed'" in str(err.value)


def test_classify_in_vllms_shape(url: str, sources: dict[str, Path]) -> None:
    import transformers

    reply = requests.post(f"{url}/v1/classify", json={"model": "classify", "input": TEXTS}, timeout=30)
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    expected = softmax(classifier_logits(url, TEXTS))
    assert doc["object"] == "list" and doc["model"] == "classify" and doc["id"].startswith("classify-")
    assert [d["index"] for d in doc["data"]] == list(range(len(TEXTS)))
    assert all(d["num_classes"] == 2 for d in doc["data"])
    np.testing.assert_allclose([d["probs"] for d in doc["data"]], expected, rtol=0, atol=1e-6)
    assert [d["label"] for d in doc["data"]] == [("negative", "positive")[j] for j in expected.argmax(axis=1)]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(sources["classify"]))
    read = tokenizer(TEXTS, truncation=True, max_length=IMPORT_MAX_SEQ_LEN)["input_ids"]
    assert doc["usage"]["prompt_tokens"] == sum(map(len, read)) and doc["usage"]["completion_tokens"] == 0
    bad = requests.post(f"{url}/classify", json={"model": "embed", "input": "x"}, timeout=30)
    assert bad.status_code == 400 and "not a classifier" in bad.json()["error"]["message"]


def test_a_call_naming_no_model_gets_the_one_served(solo: str) -> None:
    reply = requests.post(f"{solo}/v1/embeddings", json={"input": ["ok", "fine"]}, timeout=30)
    assert reply.status_code == 200 and reply.json()["model"] == "solo" and len(reply.json()["data"]) == 2


OPENAI_BAD = [
    ("not JSON", b"{nope", 400, None, "not JSON"),
    ("not an object", b"[1]", 400, None, "JSON object"),
    ("input a number", {"model": "embed", "input": 3}, 400, "input", "a string or an array of strings"),
    ("input empty", {"model": "embed", "input": []}, 400, "input", "is empty"),
    ("empty text", {"model": "embed", "input": ["a", ""]}, 400, "input", "empty string at index 1"),
    ("token ids", {"model": "embed", "input": [[101, 2023]]}, 400, "input", "token ids"),
    ("unknown model", {"model": "nope", "input": "x"}, 404, "model", "model 'nope' is not served here"),
    ("no model of several", {"input": "x"}, 400, "model", "serves several models"),
    ("a classifier", {"model": "classify", "input": "x"}, 400, "model", "not an embedding model"),
    ("encoding", {"model": "embed", "input": "x", "encoding_format": "int8"}, 400, "encoding_format", "'float'"),
    ("dimensions", {"model": "embed", "input": "x", "dimensions": 12}, 400, "dimensions",
     "'dimensions' 12 is refused: model 'embed' answers 32 dimensions and was trained to be truncated (Matryoshka) "
     "to 16, 8 only: send one of 32, 16, 8"),
    ("prompt_name", {"model": "embed", "input": "x", "prompt_name": "title"}, 400, "prompt_name",
     "'prompt_name' 'title' is not a prompt of model 'embed' (its prompts: 'passage', 'query')"),
]


@pytest.mark.parametrize(("case", "body", "status", "param", "message"), OPENAI_BAD, ids=[c[0] for c in OPENAI_BAD])
def test_openai_bad_calls_get_openai_errors(url: str, case: str, body: Any, status: int, param: str | None,
                                            message: str) -> None:
    kw: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
    reply = requests.post(f"{url}/v1/embeddings", timeout=30, **kw)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and message in error["message"]
    assert "Traceback" not in reply.text


def test_openai_sdk_raises_by_status(url: str) -> None:
    from openai import BadRequestError, NotFoundError, OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    with pytest.raises(NotFoundError):
        client.embeddings.create(model="nope", input="x")
    with pytest.raises(BadRequestError, match="not an embedding model"):
        client.embeddings.create(model="classify", input="x")


def test_the_deadline_header_is_read(url: str) -> None:
    ok = requests.post(f"{url}/v1/embeddings", json={"model": "embed", "input": "x"},
                       headers={"x-request-timeout-ms": "30000"}, timeout=30)
    assert ok.status_code == 200
    bad = requests.post(f"{url}/v1/embeddings", json={"model": "embed", "input": "x"},
                        headers={"x-request-timeout-ms": "soon"}, timeout=30)
    assert bad.status_code == 400 and "x-request-timeout-ms" in bad.json()["error"]["message"]


# ---- Cohere / Jina rerank ----------------------------------------------------------------------------------------

QUERY = "Which phone has the longest battery life?"


@pytest.fixture(scope="module")
def ce_scores(sources: dict[str, Path]) -> tuple[np.ndarray, int]:
    """CrossEncoder.predict([(QUERY, text)]) for TEXTS (its sigmoid), and the tokens its tokenizer gives the model."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(sources["rerank"]), device="cpu", max_length=IMPORT_MAX_SEQ_LEN)
    pairs = [(QUERY, text) for text in TEXTS]
    encoded = model.tokenizer([QUERY] * len(TEXTS), TEXTS, truncation=True, max_length=IMPORT_MAX_SEQ_LEN,
                              padding=True)
    tokens = int(np.asarray(encoded["attention_mask"]).sum())
    return np.asarray(model.predict(pairs, show_progress_bar=False), dtype=np.float32), tokens


def v2_scores(url: str, query: str, texts: list[str], output: str = "SCORE") -> np.ndarray:
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts},
                      {"name": "TEXT_PAIR", "datatype": "BYTES", "shape": [1], "data": [query]}],
           "outputs": [{"name": output}]}
    reply = requests.post(f"{url}/v2/models/rerank/infer", json=doc, timeout=30)
    reply.raise_for_status()
    return np.asarray(reply.json()["outputs"][0]["data"], dtype=np.float32)


def test_cohere_sdk_rerank_equals_v2_and_cross_encoder(url: str, ce_scores: tuple[np.ndarray, int]) -> None:
    import cohere

    expected, tokens = ce_scores
    client = cohere.ClientV2(api_key="x", base_url=url)
    reply = client.rerank(model="rerank", query=QUERY, documents=TEXTS, top_n=3)
    best_first = sorted(range(len(TEXTS)), key=lambda i: -expected[i])
    assert [r.index for r in reply.results] == best_first[:3]
    got = np.asarray([r.relevance_score for r in reply.results], dtype=np.float32)
    np.testing.assert_allclose(got, v2_scores(url, QUERY, TEXTS)[best_first[:3]], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, expected[best_first[:3]], rtol=0, atol=1e-4)
    assert reply.meta is not None and reply.meta.tokens is not None and reply.meta.tokens.input_tokens == tokens


def test_jina_shape_rerank_with_documents(url: str, ce_scores: tuple[np.ndarray, int]) -> None:
    """/v1/rerank, documents as objects with "text", every result with its document, all of them sorted."""
    body = {"model": "rerank", "query": QUERY, "documents": [{"text": t} for t in TEXTS], "return_documents": True}
    reply = requests.post(f"{url}/v1/rerank", json=body, timeout=30, headers={"x-request-id": "rerank-1"})
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    assert doc["id"] == "rerank-1" and doc["model"] == "rerank" and doc["usage"]["total_tokens"] == ce_scores[1]
    scores = [r["relevance_score"] for r in doc["results"]]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in doc["results"]) == list(
        range(len(TEXTS)))
    assert all(r["document"] == {"text": TEXTS[r["index"]]} for r in doc["results"])
    np.testing.assert_allclose(scores, ce_scores[0][[r["index"] for r in doc["results"]]], rtol=0, atol=1e-4)


RERANK_BAD = [
    ("not JSON", b"{", 400, "not JSON"),
    ("no query", {"model": "rerank", "documents": ["a"]}, 400, "'query' must be a non-empty string"),
    ("documents a string", {"model": "rerank", "query": "q", "documents": "a"}, 400, "'documents' must be an array"),
    ("documents empty", {"model": "rerank", "query": "q", "documents": []}, 400, "'documents' is empty"),
    ("a document a number", {"model": "rerank", "query": "q", "documents": ["a", 3]}, 400, "documents[1]"),
    ("top_n zero", {"model": "rerank", "query": "q", "documents": ["a"], "top_n": 0}, 400, "'top_n'"),
    ("unknown model", {"model": "nope", "query": "q", "documents": ["a"]}, 404, "model 'nope' is not served"),
    ("an embedder", {"model": "embed", "query": "q", "documents": ["a"]}, 400, "not a reranker"),
    ("no model of several", {"query": "q", "documents": ["a"]}, 400, "serves several models"),
]


@pytest.mark.parametrize(("case", "body", "status", "message"), RERANK_BAD, ids=[c[0] for c in RERANK_BAD])
def test_rerank_bad_calls_get_cohere_errors(url: str, case: str, body: Any, status: int, message: str) -> None:
    kw: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
    for path in ("/v1/rerank", "/v2/rerank"):
        reply = requests.post(url + path, timeout=30, **kw)
        assert reply.status_code == status, reply.text
        assert set(reply.json()) == {"message"} and message in reply.json()["message"]


def test_cohere_sdk_raises_by_status(url: str) -> None:
    import cohere
    from cohere.errors import BadRequestError, NotFoundError

    client = cohere.ClientV2(api_key="x", base_url=url)
    with pytest.raises(NotFoundError):
        client.rerank(model="nope", query=QUERY, documents=TEXTS)
    with pytest.raises(BadRequestError):
        client.rerank(model="classify", query=QUERY, documents=TEXTS)


# ---- TEI and huggingface_hub -------------------------------------------------------------------------------------


@pytest.fixture
def inference_client(monkeypatch: pytest.MonkeyPatch) -> Any:
    """huggingface_hub's InferenceClient, let out of offline mode (it refuses every URL then, loopback included); the
    tests still reach no hub: the client posts to the URL it is given."""
    from huggingface_hub import InferenceClient, constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return InferenceClient


def test_hf_inference_client_feature_extraction(url: str, solo: str, st_embeddings: tuple[np.ndarray, int],
                                                inference_client: Any) -> None:
    InferenceClient = inference_client
    expected = st_embeddings[0]
    # The HF Inference API's URL of a model (several served), and TEI's /embed on a server of one model.
    for base in (f"{url}/models/embed", f"{url}/models/embed/pipeline/feature-extraction", f"{solo}/embed"):
        got = InferenceClient(base_url=base).feature_extraction(TEXTS[2])
        assert got.shape == (1, expected.shape[1])
        assert_same_embeddings(got, url, TEXTS[2:3], expected[2:3])


def classifier_logits(url: str, texts: list[str]) -> np.ndarray:
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
    out = requests.post(f"{url}/v2/models/classify/infer", json=doc, timeout=30).json()["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_hf_inference_client_text_classification(url: str, inference_client: Any) -> None:
    client = inference_client(base_url=f"{url}/models/classify")
    expected = softmax(classifier_logits(url, TEXTS[:1]))[0]
    got = client.text_classification(TEXTS[0])
    assert [g.label for g in got] == [("negative", "positive")[j] for j in np.argsort(-expected, kind="stable")]
    np.testing.assert_allclose([g.score for g in got], np.sort(expected)[::-1], rtol=0, atol=1e-6)
    assert len(client.text_classification(TEXTS[0], top_k=1)) == 1
    raw = client.text_classification(TEXTS[0], function_to_apply="none")
    np.testing.assert_allclose(sorted(g.score for g in raw), np.sort(classifier_logits(url, TEXTS[:1])[0]),
                               rtol=0, atol=1e-6)


def test_tei_embed(url: str, solo: str, st_embeddings: tuple[np.ndarray, int]) -> None:
    expected = st_embeddings[0]
    for body in ({"inputs": TEXTS}, {"inputs": TEXTS, "normalize": False, "truncate": True}):
        reply = requests.post(f"{solo}/embed", json=body, timeout=30)
        assert reply.status_code == 200, reply.text
        assert_same_embeddings(reply.json(), url, TEXTS, expected)  # the model normalizes: the same either way
    one = requests.post(f"{url}/embed", json={"model": "embed", "inputs": TEXTS[1]}, timeout=30).json()
    assert_same_embeddings(one, url, TEXTS[1:2], expected[1:2])


def test_tei_rerank(url: str, ce_scores: tuple[np.ndarray, int]) -> None:
    body = {"model": "rerank", "query": QUERY, "texts": TEXTS, "return_text": True}
    ranks = requests.post(f"{url}/rerank", json=body, timeout=30).json()
    best_first = sorted(range(len(TEXTS)), key=lambda i: -ce_scores[0][i])
    assert [r["index"] for r in ranks] == best_first and all(r["text"] == TEXTS[r["index"]] for r in ranks)
    np.testing.assert_allclose([r["score"] for r in ranks], ce_scores[0][best_first], rtol=0, atol=1e-4)
    raw = requests.post(f"{url}/rerank", json={**body, "raw_scores": True, "return_text": False}, timeout=30).json()
    assert all("text" not in r for r in raw)
    logits = v2_scores(url, QUERY, TEXTS, output="LOGITS")
    np.testing.assert_allclose([r["score"] for r in raw], logits[[r["index"] for r in raw]], rtol=0, atol=1e-6)


def test_tei_predict(url: str, ce_scores: tuple[np.ndarray, int]) -> None:
    def predict(body: dict[str, Any]) -> Any:
        reply = requests.post(f"{url}/predict", json=body, timeout=30)
        assert reply.status_code == 200, reply.text
        return reply.json()

    logits = classifier_logits(url, TEXTS[:2])
    one = predict({"model": "classify", "inputs": TEXTS[0]})  # one input: its list, best first
    assert [p["score"] for p in one] == sorted((p["score"] for p in one), reverse=True)
    np.testing.assert_allclose(sorted(p["score"] for p in one), np.sort(softmax(logits[0])), rtol=0, atol=1e-6)
    batch = predict({"model": "classify", "inputs": [[TEXTS[0]], [TEXTS[1]]], "raw_scores": True})
    assert len(batch) == 2
    for row, predictions in zip(logits, batch, strict=True):
        np.testing.assert_allclose([p["score"] for p in predictions], np.sort(row)[::-1], rtol=0, atol=1e-6)
    # A reranker reads a pair [query, text] query first; its score is CrossEncoder's.
    pair = predict({"model": "rerank", "inputs": [QUERY, TEXTS[3]]})
    assert pair[0]["label"] == "score"
    np.testing.assert_allclose(pair[0]["score"], ce_scores[0][3], rtol=0, atol=1e-4)


def test_tei_tokenize(url: str, sources: dict[str, Path]) -> None:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(sources["embed"]))
    text = TEXTS[4]  # longer than max_seq_len: every token is shown
    tokens = requests.post(f"{url}/tokenize", json={"model": "embed", "inputs": [text]}, timeout=30).json()[0]
    assert [t["id"] for t in tokens] == tokenizer(text)["input_ids"] and len(tokens) > EMBED_MAX_SEQ_LEN
    assert tokens[0] == {"id": tokenizer.cls_token_id, "text": "[CLS]", "special": True, "start": None, "stop": None}
    assert all(t["text"] == text[t["start"]:t["stop"]] for t in tokens if not t["special"])
    bare = requests.post(f"{url}/tokenize", json={"model": "embed", "inputs": text, "add_special_tokens": False},
                         timeout=30).json()[0]
    assert bare == tokens[1:-1]


def test_tei_info(url: str, solo: str) -> None:
    info = requests.get(f"{solo}/info", timeout=30).json()
    assert (info["model_id"], info["model_type"], info["max_input_length"]) == (
        "solo", {"embedding": {"pooling": "mean"}}, EMBED_MAX_SEQ_LEN)
    assert info["auto_truncate"] is True and info["model_dtype"] == "float32" and info["max_client_batch_size"] >= 1
    reranker = requests.get(f"{url}/info", params={"model": "rerank"}, timeout=30).json()["model_type"]
    assert reranker == {"reranker": {"id2label": {"0": "score"}, "label2id": {"score": 0}}}


TEI_BAD = [
    ("/embed", b"{", 400, "not JSON"),
    ("/embed", {"model": "embed", "inputs": 3}, 400, "a string or an array of strings"),
    ("/embed", {"model": "embed", "inputs": []}, 400, "is empty"),
    ("/embed", {"model": "embed", "inputs": "x", "normalize": "yes"}, 400, "'normalize' must be true or false"),
    ("/embed", {"model": "classify", "inputs": "x"}, 400, "not an embedding model"),
    ("/embed", {"inputs": "x"}, 400, "serves several models"),
    ("/rerank", {"model": "rerank", "query": "q", "texts": []}, 400, "`texts` cannot be empty"),
    ("/rerank", {"model": "embed", "query": "q", "texts": ["a"]}, 400, "not a re-ranker model"),
    ("/predict", {"model": "classify", "inputs": ["a", "b", "c"]}, 400, "a list of 3 strings is neither"),
    ("/predict", {"model": "rerank", "inputs": "a"}, 400, "reads pairs of strings"),
    ("/predict", {"model": "nope", "inputs": "a"}, 404, "model 'nope' is not served here"),
    ("/tokenize", {"model": "embed", "inputs": {"text": "a"}}, 400, "a string or an array of strings"),
    ("/models/rerank", {"inputs": "a"}, 400, "is a reranker"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), TEI_BAD,
                         ids=[f"{p}-{i}" for i, (p, *_) in enumerate(TEI_BAD)])
def test_tei_bad_calls_get_tei_errors(url: str, path: str, body: Any, status: int, message: str) -> None:
    kw: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
    reply = requests.post(url + path, timeout=30, **kw)
    assert reply.status_code == status, reply.text
    assert set(reply.json()) == {"error", "error_type"} and message in reply.json()["error"]
    assert reply.json()["error_type"] == "validation"
    missing = requests.get(f"{url}/info", params={"model": "nope"}, timeout=30)
    assert missing.status_code == 404 and "'nope'" in missing.json()["error"]


def test_a_body_past_max_message_bytes_is_413_in_each_apis_shape(solo: str) -> None:
    big = {"input": ["word " * 20_000], "inputs": "x", "query": "q", "documents": ["x"]}
    shapes = {"/v1/embeddings": lambda d: d["error"]["code"] == "request_too_large",
              "/v2/rerank": lambda d: set(d) == {"message"},
              "/embed": lambda d: d["error_type"] == "validation"}
    for path, shaped in shapes.items():
        reply = requests.post(solo + path, json=big, timeout=30)
        assert reply.status_code == 413 and "max_message_bytes (65536 bytes)" in reply.text and shaped(reply.json())


def test_prompts_kept_at_import_and_chosen_per_call(url: str, sources: dict[str, Path], bundles: dict[str, Path],
                                                   inference_client: Any) -> None:
    """The checkpoint's prompts are kept in the bundle; `prompt_name` puts one before each text, as
    sentence-transformers' encode(prompt_name=...) does, on the OpenAI, TEI and HF routes."""
    from openai import OpenAI
    from sentence_transformers import SentenceTransformer

    from ortserve.bundle.manifest import load_manifest

    imported = load_manifest(bundles["embed"]).imported
    assert imported is not None and imported.details["prompts"] == PROMPTS
    model = SentenceTransformer(str(sources["embed"]), device="cpu")
    expected = {name: model.encode(TEXTS, prompt_name=name, convert_to_numpy=True, show_progress_bar=False)
                for name in PROMPTS}
    prompted = {name: [prompt + text for text in TEXTS] for name, prompt in PROMPTS.items()}
    client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    reply = client.embeddings.create(model="embed", input=TEXTS, extra_body={"prompt_name": "query"})
    assert_same_embeddings([d.embedding for d in reply.data], url, prompted["query"], expected["query"])
    assert reply.usage.prompt_tokens == int(model.tokenize(prompted["query"])["attention_mask"].sum())
    tei = requests.post(f"{url}/embed", json={"model": "embed", "inputs": TEXTS, "prompt_name": "passage"},
                        timeout=30).json()
    assert_same_embeddings(tei, url, prompted["passage"], expected["passage"])
    hf = inference_client(base_url=f"{url}/models/embed").feature_extraction(TEXTS[0], prompt_name="query")
    assert_same_embeddings(hf, url, prompted["query"][:1], expected["query"][:1])
    plain = np.asarray([d.embedding for d in client.embeddings.create(model="embed", input=TEXTS).data])
    assert np.abs(plain - expected["query"]).max() > 1e-3  # the prompt changes the answer: the parity above means it


def test_dimensions_equal_sentence_transformers_truncate_dim(url: str, sources: dict[str, Path],
                                                             bundles: dict[str, Path]) -> None:
    """`dimensions` (the OpenAI SDK's, TEI's) answers the first k components renormalised: the full answer so cut,
    and SentenceTransformer(truncate_dim=k).encode(normalize_embeddings=True), with a prompt too."""
    from openai import OpenAI
    from sentence_transformers import SentenceTransformer

    from ortserve.bundle.manifest import load_manifest

    assert load_manifest(bundles["embed"]).widths == (32, *MATRYOSHKA_DIMS)
    client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    full = np.asarray([d.embedding for d in client.embeddings.create(model="embed", input=TEXTS).data])
    for k in MATRYOSHKA_DIMS:
        model = SentenceTransformer(str(sources["embed"]), device="cpu", truncate_dim=k)
        reply = client.embeddings.create(model="embed", input=TEXTS, dimensions=k)
        got = np.asarray([d.embedding for d in reply.data], dtype=np.float32)
        cut = full[:, :k] / np.linalg.norm(full[:, :k], axis=1, keepdims=True)
        np.testing.assert_allclose(got, cut, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got, model.encode(TEXTS, convert_to_numpy=True, show_progress_bar=False,
                                                     normalize_embeddings=True), rtol=0, atol=1e-4)
        prompted = requests.post(f"{url}/embed", json={"model": "embed", "inputs": TEXTS, "dimensions": k,
                                                       "prompt_name": "query"}, timeout=30).json()
        np.testing.assert_allclose(prompted, model.encode(TEXTS, prompt_name="query", convert_to_numpy=True,
                                                          show_progress_bar=False, normalize_embeddings=True),
                                   rtol=0, atol=1e-4)


# ---- the one status map ------------------------------------------------------------------------------------------


def test_every_api_words_the_v2_status_in_its_own_shape() -> None:
    """Refusals the servers above cannot be made to give at will: the V2 REST status, Retry-After as V2 sends it,
    each API's shape."""
    from ortserve.service import cohere_api, openai_api, tei_api
    from ortserve.service.errors import DeadlineExceeded, ResourceExhausted, Unavailable
    from ortserve.service.text_calls import ApiError

    full = ApiError.of(ResourceExhausted("queue full", retry_after_s=2.2), "r1")
    assert (full.status, full.headers()) == (429, {"x-request-id": "r1", "Retry-After": "3"})
    loading = ApiError.of(Unavailable("loading"))
    assert (loading.status, loading.headers()) == (503, {"Retry-After": "1"})
    late = ApiError.of(DeadlineExceeded("too late"))
    assert late.status == 504 and "Retry-After" not in late.headers()
    assert openai_api.error_body(full) == {"error": {"message": "queue full", "type": "rate_limit_error",
                                                     "param": None, "code": "rate_limit_exceeded"}}
    assert cohere_api.error_body(late) == {"message": "too late"}
    assert tei_api.error_body(loading) == {"error": "loading", "error_type": "unhealthy"}


# ---- the README's calls, as written -------------------------------------------------------------------------------


def test_the_readme_examples(url: str) -> None:
    section = README.read_text().split("### The clients teams already use", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    printed = []
    for index, block in enumerate(blocks):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.replace("localhost:8000", url.removeprefix("http://")), f"README.md client example "
                         f"{index}", "exec"), {})
        printed.append(out.getvalue().split())
    assert printed[0][0] == "32" and int(printed[0][1]) > 4  # the width, the tokens read
    assert printed[1][0] in ("0", "1") and 0 < float(printed[1][1]) < 1  # the best document, its sigmoid score
