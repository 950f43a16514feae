"""Decoder embedders served (issue 56): the Qwen3-Embedding-shaped import and a Qwen2 base model published to a file
registry behind one real server per front end, over loopback gRPC and the OpenAI route, held to sentence-transformers'
encode (prompt and Matryoshka width included) and to transformers' last token; each version passed its load-time
check of PyTorch's reference answers, int8 and bf16 copies (bf16 where this CPU has it) too; texts of mixed lengths
that share engine runs answer what each answers alone; bad calls get INVALID_ARGUMENT or 400 naming what they got."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from support.batching import burst_behind_busy
from support.bf16 import bf16_unavailable
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN, QWEN3_EMBEDDING_PROMPTS
from support.importing import SMALL_BATCHES
from support.server_process import ServerProcess, infer_request, logits_of, serving_published

from ortserve.prepare.importer import MIN_COSINE, ImportResult
from ortserve.proto import grpc_service_pb2 as pb

TEXTS = [
    "ok",
    "The battery died after two days and support never answered.",
    "Das Essen war ausgezeichnet, der Service freundlich.",
    "Обслуживание было медленным, но еда вкусная.",
    "最高の映画でした 🎉",
    "a long one: " + " ".join(["the plot kept going, scene after scene, and nobody could follow it"] * 6),
]
EMBEDDER, BASE = "qwen3-embedding", "qwen2-base"


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def optimised(decoder_imported: dict[str, ImportResult], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Qwen3-Embedding-shaped import's int8 copy, and its bf16 one where this CPU has bf16."""
    from ortserve.prepare.optimize import optimize_bundle

    root = tmp_path_factory.mktemp("decoder-optimised")
    levels = ["int8"] + ([] if bf16_unavailable() else ["bf16"])
    return {f"{EMBEDDER}-{level}": optimize_bundle(decoder_imported["qwen3-st"].path, root / level, level).path
            for level in levels}


@pytest.fixture(scope="module")
def served(decoder_imported: dict[str, ImportResult], optimised: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory, frontend: str) -> Iterator[ServerProcess]:
    bundles = {EMBEDDER: decoder_imported["qwen3-st"].path, BASE: decoder_imported["qwen2"].path, **optimised}
    with serving_published(tmp_path_factory.mktemp("decoder-store"), bundles,
                           ["--frontend", frontend, *SMALL_BATCHES], http=True) as server:
        yield server


def embed(stub: Any, model: str, texts: list[str], **params: Any) -> np.ndarray:
    request = infer_request(texts, model=model)
    for name, value in params.items():
        if isinstance(value, str):
            request.parameters[name].string_param = value
        else:
            request.parameters[name].int64_param = value
    return np.asarray(logits_of(stub.ModelInfer(request)), np.float32)


def st_encode(path: Path, texts: list[str], **kwargs: Any) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", truncate_dim=kwargs.pop("truncate_dim", None))
    model.max_seq_length = IMPORT_MAX_SEQ_LEN
    return np.asarray(model.encode(texts, convert_to_numpy=True, show_progress_bar=False, **kwargs), np.float32)


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    cosine = (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= MIN_COSINE, cosine


def test_each_version_passed_its_load_time_check_on_hf_tokenizers(served: ServerProcess,
                                                                    optimised: dict[str, Path]) -> None:
    for model in (EMBEDDER, BASE, *optimised):
        loaded = served.wait_event("version_loaded", model=model)
        assert loaded["verify"] == "passed", model  # PyTorch's reference answers, on the server, before traffic
        assert loaded["tokenizer"] == "hf", model  # byte-level BPE: the C++ WordPiece does not run it


@pytest.mark.parametrize("prompt_name", [None, "query", "document"])
def test_grpc_answers_equal_sentence_transformers_encode(stub: Any, decoder_checkpoints: dict[str, Path],
                                                         prompt_name: str | None) -> None:
    """Short, multilingual and past max_seq_len, many in one call and one alone, with each of its prompts."""
    params = {"prompt_name": prompt_name} if prompt_name else {}
    expected = st_encode(decoder_checkpoints["qwen3-st"], TEXTS, prompt_name=prompt_name)
    assert_close(embed(stub, EMBEDDER, TEXTS, **params), expected)
    assert_close(embed(stub, EMBEDDER, TEXTS[1:2], **params), expected[1:2])


def test_dimensions_equal_truncate_dim(stub: Any, decoder_checkpoints: dict[str, Path]) -> None:
    for k in (16, 8):
        got = embed(stub, EMBEDDER, TEXTS, prompt_name="query", dimensions=k)
        expected = st_encode(decoder_checkpoints["qwen3-st"], TEXTS, prompt_name="query", truncate_dim=k,
                             normalize_embeddings=True)
        assert_close(got, expected)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=0, atol=1e-5)


def test_the_optimised_copies_answer_as_their_graphs_do(stub: Any, decoder_checkpoints: dict[str, Path],
                                                        optimised: dict[str, Path]) -> None:
    """bf16 keeps the bf16 floor to encode on every text (measured: 0.99968 at worst over the built-in corpus on a
    model of this shape); int8 quantizes activations per batch, so each text alone is held to its own graph run alone
    by ONNX Runtime (the gate judged its distance from FP32)."""
    from ortserve.bundle import tokenizer as bundle_tokenizer
    from ortserve.bundle.outputs import min_cosine
    from ortserve.prepare.accuracy import open_session

    expected = st_encode(decoder_checkpoints["qwen3-st"], TEXTS)
    for model, bundle in optimised.items():
        if model.endswith("bf16"):
            got = embed(stub, model, TEXTS)
            cosine = (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
            assert cosine.min() >= min_cosine("bf16"), cosine
            continue
        session = open_session(bundle / "model.onnx", 1)
        tokenizer = bundle_tokenizer.load(bundle / "tokenizer.json", IMPORT_MAX_SEQ_LEN)
        for text in TEXTS:
            ids = np.asarray([tokenizer.encode(text).ids], np.int64)
            own = session.run(["embedding"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
            assert_close(embed(stub, model, [text]), own)


def test_a_base_decoder_answers_its_last_tokens_state(stub: Any, decoder_checkpoints: dict[str, Path]) -> None:
    """Qwen2Model, one text at a time in transformers (no padding): its last token's hidden state, L2-normalised."""
    import torch
    import transformers

    path = decoder_checkpoints["qwen2"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModel.from_pretrained(str(path)).eval()
    rows = []
    with torch.inference_mode():
        for text in TEXTS:
            encoded = tokenizer(text, truncation=True, max_length=IMPORT_MAX_SEQ_LEN, return_tensors="pt")
            rows.append(torch.nn.functional.normalize(model(**encoded).last_hidden_state[0, -1], dim=0).numpy())
    assert_close(embed(stub, BASE, TEXTS), np.stack(rows))


def test_the_openai_route_answers_as_encode(served: ServerProcess, decoder_checkpoints: dict[str, Path]) -> None:
    url = f"http://127.0.0.1:{served.http_port}/v1/embeddings"
    doc = requests.post(url, json={"model": EMBEDDER, "input": TEXTS, "prompt_name": "query", "dimensions": 16},
                        timeout=60).json()
    got = np.asarray([d["embedding"] for d in doc["data"]], np.float32)
    assert_close(got, st_encode(decoder_checkpoints["qwen3-st"], TEXTS, prompt_name="query", truncate_dim=16,
                                normalize_embeddings=True))
    info = requests.get(f"http://127.0.0.1:{served.http_port}/info", params={"model": EMBEDDER}, timeout=30).json()
    assert info["model_type"] == {"embedding": {"pooling": "last_token"}}  # TEI's name for lasttoken
    one = requests.post(url, json={"model": EMBEDDER, "input": TEXTS[2]}, timeout=60).json()
    assert_close(np.asarray([one["data"][0]["embedding"]], np.float32),
                 st_encode(decoder_checkpoints["qwen3-st"], TEXTS[2:3]))


def test_mixed_lengths_batched_together_answer_as_alone(served: ServerProcess, stub: Any) -> None:
    """No answer changes with its batch neighbours: calls of texts of mixed lengths that share engine runs (padded on
    the right to the longest) answer what each answers alone, within float rounding. The sharing is arranged
    (support.batching.burst_behind_busy)."""
    texts = [" ".join(["Zoë"] * n) + " in Malmö" for n in (0, 1, 3, 7, 12, 20, 31, 2, 5, 9, 4, 15, 6, 11, 8, 10)]
    alone = [embed(stub, EMBEDDER, [t]) for t in texts]

    def as_alone(replies: list[pb.ModelInferResponse]) -> None:
        for one, reply in zip(alone, replies, strict=True):
            np.testing.assert_allclose(np.asarray(logits_of(reply), np.float32), one, atol=1e-5, rtol=0)

    shared = burst_behind_busy(served, busy=infer_request([" ".join(["Zoë in Malmö"] * 20)] * 128, model=EMBEDDER),
                               burst=[infer_request([t], model=EMBEDDER) for t in texts], check=as_alone)
    assert all(line["model"] == EMBEDDER for line in shared)


def test_bad_calls_name_what_they_got(served: ServerProcess, stub: Any) -> None:
    for params, message in (({"prompt_name": "passage"}, "passage"), ({"dimensions": 12}, "12")):
        with pytest.raises(grpc.RpcError) as caught:
            embed(stub, EMBEDDER, TEXTS[:1], **params)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in caught.value.details()
    reply = requests.post(f"http://127.0.0.1:{served.http_port}/v1/embeddings",
                          json={"model": EMBEDDER, "input": "x", "prompt_name": "passage"}, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "prompt_name", reply.text
    assert sorted(QWEN3_EMBEDDING_PROMPTS) == ["document", "query"]
