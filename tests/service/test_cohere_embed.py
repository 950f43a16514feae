"""Cohere's embed (issue 57) through Cohere's own SDK against a real server: `ClientV2.embed` (/v2/embed) and
`Client.embed` (/v1/embed) on an imported sentence-transformers model that keeps prompts, was trained (so says its
import) to be truncated to 16 and 8 of its 32 dimensions, and whose int8/uint8 ranges the import calibrated.

- float equals the V2 REST answer for the texts after the prompt `input_type` names (exactly: one server) and
  sentence-transformers' `encode(prompt_name=...)` within the importer's parity (1e-4); base64 is those float32 bytes;
- every compact type equals the V2 answer with that `embedding_type` (exactly) and sentence-transformers'
  `quantize_embeddings` of the float answer with the manifest's ranges (a level or bit may differ only at an edge,
  as tests/service/test_compact_embeddings.py states);
- output_dimension is V2's dimensions; truncate END reads a long text's start, NONE refuses it, START is refused;
- errors come back in Cohere's shape ({"message"}) and the SDK raises its own errors by status.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from support.compact import assert_quantized
from support.hf_checkpoints import OFFLINE, make_sentence_transformer
from support.server_process import running_server

from ortserve.prepare.importer import import_checkpoint

os.environ.update(OFFLINE)
MODEL = "embed"
MAX_SEQ_LEN = 32
PROMPTS = {"query": "query: ", "passage": "passage: ", "classification": "classify: "}
MATRYOSHKA_DIMS = (16, 8)
TEXTS = ["The battery died after two days.", "ok", "Das Akku hält eine Woche, sagt der Test.", "最高の電池でした 🎉"]
LONG = " ".join(["the battery kept going, day after day, and nobody could believe it"] * 4)
COMPACT = ("int8", "uint8", "binary", "ubinary")
PROMPT_OF = {"search_query": "query", "search_document": "passage", "classification": "classification",
             "clustering": None}
"""What each input_type is served with on this model (it keeps no "document" and no "clustering" prompt)."""


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    torch.set_num_threads(1)
    dest = make_sentence_transformer(tmp_path_factory.mktemp("cohere") / "st", "bert", max_seq_length=MAX_SEQ_LEN,
                                     seed=31)
    config_path = dest / "config_sentence_transformers.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    config_path.write_text(json.dumps({**config, "prompts": PROMPTS, "default_prompt_name": None}))
    return dest


@pytest.fixture(scope="module")
def bundle(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_checkpoint(source, tmp_path_factory.mktemp("cohere-bundle") / "b", max_seq_len=MAX_SEQ_LEN,
                             matryoshka_dims=MATRYOSHKA_DIMS).path


@pytest.fixture(scope="module")
def url(bundle: Path) -> Iterator[str]:
    with running_server(["--bundle", str(bundle), "--model-name", MODEL], http=True) as server:
        yield f"http://127.0.0.1:{server.http_port}"


@pytest.fixture(scope="module")
def v2_client(url: str) -> Any:
    import cohere

    return cohere.ClientV2(api_key="x", base_url=url)


@pytest.fixture(scope="module")
def st_model(source: Path) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(source), device="cpu")


def v2_infer(url: str, texts: list[str], **parameters: Any) -> np.ndarray:
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
           "parameters": {k: v for k, v in parameters.items() if v is not None}}
    reply = requests.post(f"{url}/v2/models/{MODEL}/infer", json=doc, timeout=30)
    assert reply.status_code == 200, reply.text
    out = reply.json()["outputs"][0]
    dtype = {"FP32": np.float32, "INT8": np.int8, "UINT8": np.uint8}[out["datatype"]]
    return np.asarray(out["data"], dtype=dtype).reshape(out["shape"])


def ranges_of(bundle: Path, width: int) -> np.ndarray:
    entry = json.loads((bundle / "manifest.json").read_text())["embedding_ranges"]["widths"][str(width)]
    return np.asarray(entry, dtype=np.float32)


@pytest.mark.parametrize("input_type", list(PROMPT_OF))
def test_v2_sdk_float_is_the_prompted_answer(url: str, v2_client: Any, st_model: Any, input_type: str) -> None:
    reply = v2_client.embed(texts=TEXTS, model=MODEL, input_type=input_type, embedding_types=["float", "base64"])
    got = np.asarray(reply.embeddings.float_, dtype=np.float32)
    prompt = PROMPT_OF[input_type]
    np.testing.assert_array_equal(got, v2_infer(url, TEXTS, prompt_name=prompt))
    expected = st_model.encode(TEXTS, prompt_name=prompt, convert_to_numpy=True, show_progress_bar=False)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
    decoded = [np.frombuffer(base64.b64decode(row), dtype="<f4") for row in reply.embeddings.base64]
    np.testing.assert_array_equal(np.asarray(decoded), got)
    assert reply.texts == TEXTS and reply.response_type == "embeddings_by_type"
    prompted = [PROMPTS[prompt] + t if prompt else t for t in TEXTS]
    tokens = int(st_model.tokenize(prompted)["attention_mask"].sum())
    assert reply.meta.billed_units.input_tokens == tokens


@pytest.mark.parametrize("dimension", [None, *MATRYOSHKA_DIMS])
def test_v2_sdk_compact_types_equal_v2_and_quantize_embeddings(url: str, v2_client: Any, bundle: Path,
                                                               dimension: int | None) -> None:
    reply = v2_client.embed(texts=TEXTS, model=MODEL, input_type="search_query", output_dimension=dimension,
                            embedding_types=["float", *COMPACT])
    floats = np.asarray(reply.embeddings.float_, dtype=np.float32)
    width = dimension or 32
    assert floats.shape == (len(TEXTS), width)
    np.testing.assert_array_equal(floats, v2_infer(url, TEXTS, prompt_name="query", dimensions=dimension))
    for kind in COMPACT:
        dtype = np.int8 if kind in ("int8", "binary") else np.uint8
        got = np.asarray(getattr(reply.embeddings, kind), dtype=dtype)
        np.testing.assert_array_equal(got, v2_infer(url, TEXTS, prompt_name="query", dimensions=dimension,
                                                    embedding_type=kind))
        assert_quantized(got, floats, kind, ranges_of(bundle, width))


def test_v1_sdk_floats_and_by_type(url: str) -> None:
    import cohere

    client = cohere.Client(api_key="x", base_url=url)
    floats = client.embed(texts=TEXTS, model=MODEL, input_type="search_document")
    assert floats.response_type == "embeddings_floats"
    plain = v2_infer(url, TEXTS, prompt_name="passage")
    np.testing.assert_array_equal(np.asarray(floats.embeddings, dtype=np.float32), plain)
    by_type = client.embed(texts=TEXTS, model=MODEL, input_type="search_document", embedding_types=["ubinary", "int8"])
    assert by_type.response_type == "embeddings_by_type"
    np.testing.assert_array_equal(np.asarray(by_type.embeddings.ubinary, dtype=np.uint8),
                                  v2_infer(url, TEXTS, prompt_name="passage", embedding_type="ubinary"))
    np.testing.assert_array_equal(np.asarray(by_type.embeddings.int8, dtype=np.int8),
                                  v2_infer(url, TEXTS, prompt_name="passage", embedding_type="int8"))
    assert by_type.embeddings.float_ is None


def test_v2_inputs_are_their_text_parts(url: str, v2_client: Any) -> None:
    from cohere import EmbedInput, TextEmbedContent

    inputs = [EmbedInput(content=[TextEmbedContent(text=t)]) for t in TEXTS]
    reply = v2_client.embed(inputs=inputs, model=MODEL, input_type="clustering", embedding_types=["float"])
    np.testing.assert_array_equal(np.asarray(reply.embeddings.float_, dtype=np.float32), v2_infer(url, TEXTS))


def test_truncate_end_reads_the_start_none_refuses_start_is_refused(url: str, v2_client: Any) -> None:
    from cohere.errors import BadRequestError

    end = v2_client.embed(texts=[LONG], model=MODEL, input_type="clustering", embedding_types=["float"],
                          truncate="END")
    np.testing.assert_array_equal(np.asarray(end.embeddings.float_, dtype=np.float32), v2_infer(url, [LONG]))
    with pytest.raises(BadRequestError) as info:
        v2_client.embed(texts=["ok", LONG], model=MODEL, input_type="clustering", truncate="NONE")
    found = re.match(r"texts\[1\] is (\d+) tokens, past model 'embed''s max_seq_len 32, and truncate is NONE",
                     info.value.body["message"])
    assert found and int(found.group(1)) > MAX_SEQ_LEN, info.value.body
    ok = v2_client.embed(texts=TEXTS, model=MODEL, input_type="clustering", truncate="NONE",
                         embedding_types=["float"])
    assert len(ok.embeddings.float_) == len(TEXTS)
    with pytest.raises(BadRequestError) as info:
        v2_client.embed(texts=TEXTS, model=MODEL, input_type="clustering", truncate="START")
    assert "'truncate' START is not served" in info.value.body["message"]


BAD = {
    "unknown type": ({"texts": ["x"], "embedding_types": ["int4"]}, 400,
                     "'embedding_types' holds 'int4': each must be one of float, int8, uint8, binary, ubinary, base64"),
    "types not a list": ({"texts": ["x"], "embedding_types": "int8"}, 400, "'embedding_types' must be a non-empty"),
    "no texts": ({"embedding_types": ["float"]}, 400, "'texts' must be a non-empty array of strings"),
    "texts and inputs": ({"texts": ["x"], "inputs": [{"content": [{"type": "text", "text": "x"}]}]}, 400,
                         "send 'texts' or 'inputs', not both"),
    "an image input": ({"inputs": [{"content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
                       "inputs[0].content[0] must be {\"type\": \"text\", \"text\": str}"),
    "image input_type": ({"texts": ["x"], "input_type": "image"}, 400, "input_type 'image' is not served"),
    "unknown input_type": ({"texts": ["x"], "input_type": "search"}, 400, "'input_type' must be one of"),
    "bad output_dimension": ({"texts": ["x"], "output_dimension": 12}, 400,
                             "'dimensions' 12 is refused: model 'embed' answers 32 dimensions and was trained to be "
                             "truncated (Matryoshka) to 16, 8 only"),
    "bad truncate": ({"texts": ["x"], "truncate": "MIDDLE"}, 400, "'truncate' must be one of NONE, START, END"),
    "max_tokens": ({"texts": ["x"], "max_tokens": 8}, 400, "'max_tokens' is not taken"),
    "unknown model": ({"texts": ["x"], "model": "nope"}, 404, "model 'nope' is not served here"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_calls_get_cohere_errors(url: str, case: str) -> None:
    body, status, message = BAD[case]
    reply = requests.post(f"{url}/v2/embed", json={"model": MODEL, "input_type": "search_query", **body}, timeout=30)
    assert reply.status_code == status, reply.text
    assert list(reply.json()) == ["message"] and message in reply.json()["message"], reply.json()


def test_v1_takes_texts_only(url: str) -> None:
    reply = requests.post(f"{url}/v1/embed", json={"inputs": [{"content": [{"type": "text", "text": "x"}]}]},
                          timeout=30)
    assert reply.status_code == 400 and reply.json() == {"message": "'texts' must be a non-empty array of strings"}


def test_sdk_raises_by_status(v2_client: Any) -> None:
    from cohere.errors import BadRequestError, NotFoundError

    with pytest.raises(NotFoundError):
        v2_client.embed(texts=["x"], model="nope", input_type="search_query")
    with pytest.raises(BadRequestError):
        v2_client.embed(texts=["x"], model=MODEL, input_type="search_query", embedding_types=["int4"])
