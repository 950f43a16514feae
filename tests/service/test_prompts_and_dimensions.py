"""`prompt_name` and `dimensions` as KServe V2 request parameters (issue 39 item 2), on both front ends (the native
one serves them itself) and over REST, and `dimensions` on the OpenAI and TEI routes, against a real server of an
embedding bundle that keeps two prompts and was trained to be truncated to 16 and 8 of its 32 dimensions:

- the answer is the model's for each text after the prompt (the prompt's text, then the text), truncated to the first
  k components and renormalised to unit length, equal to onnxruntime's own session's answer so treated;
- the model's own width is always taken; a width it was not trained for, an unknown prompt, a parameter of the wrong
  type are INVALID_ARGUMENT (HTTP 400) with a message naming what it takes; ModelMetadata lists both;
- the wire rules themselves (engine_ext, the C++ both front ends run): the messages for a model that keeps no prompts
  or was not trained to be truncated, and for a classifier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from ortserve_devtools.bert_bundle import build_tiny_embedding_bundle
from support.bad_calls import assert_parameters_refused
from support.reference import Reference
from support.server_process import (
    ServerProcess,
    infer_request,
    logits_of,
    running_server,
    set_parameters,
    stub_for,
    write_texts,
)

from ortserve import engine_ext
from ortserve.proto import grpc_service_pb2 as pb

DIM = 32
MATRYOSHKA_DIMS = [16, 8]
PROMPTS = {"query": "query: ", "passage": "passage: "}
TEXTS = ["the movie was great", "a much longer sentence about the weather, neither good nor bad", "ok"]
MODEL = "search"
TRITON_SCRIPT = Path(__file__).parents[1] / "support" / "triton_client.py"


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny embedding bundle, its manifest saying what an imported sentence-transformers Matryoshka model's does."""
    dest = tmp_path_factory.mktemp("matryoshka") / "bundle"
    build_tiny_embedding_bundle(dest, seed=7)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["matryoshka_dims"] = MATRYOSHKA_DIMS
    manifest["imported"] = {"from": "sentence-transformers", "architecture": "BertModel", "tools": {},
                            "prompts": PROMPTS}
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


@pytest.fixture(scope="module")
def served(bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(bundle), "--model-name", MODEL, "--frontend", frontend], http=True) as s:
        yield s


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def reference(bundle: Path) -> Reference:
    return Reference(bundle)


def expected(reference: Reference, texts: list[str], prompt_name: str | None = None, k: int | None = None) -> Any:
    """onnxruntime's answer for the texts after the prompt, truncated to k and renormalised."""
    values = reference.embeddings([PROMPTS[prompt_name] + t for t in texts] if prompt_name else texts)
    if k is None or k == values.shape[1]:
        return values
    cut = values[:, :k]
    return cut / np.linalg.norm(cut, axis=1, keepdims=True)


def grpc_infer(served: ServerProcess, texts: list[str], request_id: str = "", **params: Any) -> pb.ModelInferResponse:
    request = set_parameters(infer_request(texts, model=MODEL), params)
    channel, stub = stub_for(served.address)
    with channel:
        return stub.ModelInfer(request, metadata=(("x-request-id", request_id),) if request_id else ())


@pytest.mark.parametrize("prompt_name", [None, "query", "passage"])
@pytest.mark.parametrize("k", [None, DIM, *MATRYOSHKA_DIMS])
def test_grpc_parameters_answer_the_prompted_texts_truncated(served: ServerProcess, reference: Reference,
                                                             frontend: str, prompt_name: str | None,
                                                             k: int | None) -> None:
    params: dict[str, Any] = {}
    if prompt_name:
        params["prompt_name"] = prompt_name
    if k:
        params["dimensions"] = k
    request_id = f"pd-{prompt_name}-{k}"
    reply = grpc_infer(served, TEXTS, request_id, **params)
    got = logits_of(reply)
    assert [(o.name, list(o.shape)) for o in reply.outputs] == [("EMBEDDING", [len(TEXTS), k or DIM])]
    np.testing.assert_allclose(got, expected(reference, TEXTS, prompt_name, k), rtol=0, atol=1e-5)
    if k and k < DIM:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=0, atol=1e-6)
    line = served.wait_event("request", request_id=request_id)
    assert line["status"] == "OK"
    if frontend == "native":  # served by the C++ front end itself, not passed on to Python
        assert line.get("frontend") == "native", line


def test_a_prompt_changes_the_answer(served: ServerProcess) -> None:
    plain = logits_of(grpc_infer(served, TEXTS))
    prompted = logits_of(grpc_infer(served, TEXTS, prompt_name="query"))
    assert np.abs(plain - prompted).max() > 1e-3


def test_tritonclient_sends_them_as_request_parameters(served: ServerProcess, reference: Reference,
                                                       tmp_path: Path) -> None:
    texts_path = write_texts(tmp_path / "texts.json", TEXTS)
    out = subprocess.run([sys.executable, str(TRITON_SCRIPT), served.address, MODEL, str(texts_path), "--output",
                          "EMBEDDING", "--param", 'prompt_name="passage"', "--param", "dimensions=8"],
                         capture_output=True, text=True, timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["shape"] == [len(TEXTS), 8]
    np.testing.assert_allclose(np.asarray(reply["embedding"], dtype=np.float32),
                               expected(reference, TEXTS, "passage", 8), rtol=0, atol=1e-5)


def test_model_metadata_lists_the_prompts_and_widths(served: ServerProcess) -> None:
    channel, stub = stub_for(served.address)
    with channel:
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name=MODEL))
    assert json.loads(meta.parameters["prompts"].string_param) == ["passage", "query"]
    assert json.loads(meta.parameters["dimensions"].string_param) == [DIM, *MATRYOSHKA_DIMS]


def test_rest_v2_takes_them_as_parameters(served: ServerProcess, reference: Reference) -> None:
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}],
           "parameters": {"prompt_name": "query", "dimensions": 16}}
    reply = requests.post(f"http://127.0.0.1:{served.http_port}/v2/models/{MODEL}/infer", json=doc, timeout=30)
    assert reply.status_code == 200, reply.text
    out = reply.json()["outputs"][0]
    assert out["shape"] == [len(TEXTS), 16]
    np.testing.assert_allclose(np.asarray(out["data"], dtype=np.float32).reshape(out["shape"]),
                               expected(reference, TEXTS, "query", 16), rtol=0, atol=1e-5)


V2_BAD = {
    "unknown prompt": ({"prompt_name": "title"}, "request parameter 'prompt_name' 'title' is not a prompt of model "
                                                 "'search' (its prompts: 'passage', 'query')"),
    "untrained width": ({"dimensions": 12}, "request parameter 'dimensions' 12 is refused: model 'search' answers 32 "
                                            "dimensions and was trained to be truncated (Matryoshka) to 16, 8 only: "
                                            "send one of 32, 16, 8"),
    "wider than the model": ({"dimensions": 64}, "send one of 32, 16, 8"),
    "dimensions zero": ({"dimensions": 0}, "request parameter 'dimensions' must be >= 1 (the embedding width to "
                                           "truncate to), got 0"),
    "dimensions a string": ({"dimensions": "16"}, "request parameter 'dimensions' must be an integer (int64_param), "
                                                  "got string_param"),
    "dimensions a float": ({"dimensions": 16.0}, "must be an integer (int64_param), got double_param"),
    "prompt_name a number": ({"prompt_name": 1}, "request parameter 'prompt_name' must be a string (string_param), "
                                                 "got int64_param"),
}


@pytest.mark.parametrize("case", V2_BAD, ids=list(V2_BAD))
def test_bad_parameters_are_invalid_argument_naming_what_is_taken(served: ServerProcess, case: str) -> None:
    assert_parameters_refused(served, MODEL, *V2_BAD[case])


def test_a_classifier_refuses_both(server: ServerProcess) -> None:
    """The suite's tiny classifier: no prompts kept, no embedding to truncate."""
    request = infer_request(["x"])
    request.parameters["prompt_name"].string_param = "query"
    channel, stub = stub_for(server.address)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ("request parameter 'prompt_name' 'query' is not a prompt of model 'classifier' (its bundle keeps no "
                "prompts: put the prompt in front of each text)") in info.value.details()
        request = infer_request(["x"])
        request.parameters["dimensions"].int64_param = 1
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
        assert ("request parameter 'dimensions' applies to an embedding model's 'EMBEDDING'; model 'classifier' is a "
                "classifier model") in info.value.details()


# ---- the HTTP client APIs: the same parameters, the same rules -------------------------------------------------


def test_openai_dimensions_equal_the_full_answer_truncated(served: ServerProcess, reference: Reference) -> None:
    url = f"http://127.0.0.1:{served.http_port}/v1/embeddings"
    full = requests.post(url, json={"model": MODEL, "input": TEXTS, "prompt_name": "query"}, timeout=30).json()
    for k in (DIM, *MATRYOSHKA_DIMS):
        doc = requests.post(url, json={"model": MODEL, "input": TEXTS, "prompt_name": "query", "dimensions": k},
                            timeout=30).json()
        got = np.asarray([d["embedding"] for d in doc["data"]], dtype=np.float32)
        cut = np.asarray([d["embedding"][:k] for d in full["data"]], dtype=np.float32)
        np.testing.assert_allclose(got, cut / np.linalg.norm(cut, axis=1, keepdims=True), rtol=0, atol=1e-6)
        np.testing.assert_allclose(got, expected(reference, TEXTS, "query", k), rtol=0, atol=1e-5)
        assert doc["usage"] == full["usage"]  # the prompted texts' tokens, whatever the width


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"dimensions": 12}, "dimensions", "'dimensions' 12 is refused: model 'search' answers 32 dimensions and was "
                                       "trained to be truncated (Matryoshka) to 16, 8 only: send one of 32, 16, 8"),
    ({"dimensions": "8"}, "dimensions", "'dimensions' must be a positive integer"),
    ({"dimensions": 0}, "dimensions", "'dimensions' must be a positive integer"),
    ({"prompt_name": "title"}, "prompt_name", "'prompt_name' 'title' is not a prompt of model 'search' (its prompts: "
                                              "'passage', 'query')"),
    ({"prompt_name": ["query"]}, "prompt_name", "'prompt_name' must be a string"),
])
def test_openai_refusals_name_the_field(served: ServerProcess, body: dict[str, Any], param: str, message: str) -> None:
    reply = requests.post(f"http://127.0.0.1:{served.http_port}/v1/embeddings",
                          json={"model": MODEL, "input": "x", **body}, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and message in error["message"], error


def test_tei_embed_dimensions(served: ServerProcess, reference: Reference) -> None:
    url = f"http://127.0.0.1:{served.http_port}/embed"
    for normalize in (True, False):  # a truncated embedding is renormalised either way
        got = requests.post(url, json={"inputs": TEXTS, "dimensions": 8, "prompt_name": "passage",
                                       "normalize": normalize}, timeout=30).json()
        np.testing.assert_allclose(np.asarray(got, dtype=np.float32), expected(reference, TEXTS, "passage", 8),
                                   rtol=0, atol=1e-5)
    reply = requests.post(url, json={"inputs": "x", "dimensions": 4}, timeout=30)
    assert reply.status_code == 400 and "send one of 32, 16, 8" in reply.json()["error"]
    assert reply.json()["error_type"] == "validation"


# ---- the wire rules (the C++ both front ends run), without a server ---------------------------------------------


def decode(**params: Any) -> Any:
    return engine_ext.decode_call([("TEXT", "BYTES", [2], True, [b"a", b"b"])], [], [], None, None, 8,
                                  **{k: v for k, v in params.items()})


def test_wire_rules_for_a_model_not_trained_to_be_truncated() -> None:
    call = decode(dimensions=("int64_param", 8))
    # its own width: taken
    engine_ext.check_outputs(call, engine_ext.VersionOutput("embedding", "EMBEDDING", widths=[8]), "m")
    with pytest.raises(engine_ext.WireError, match=r"request parameter 'dimensions' 8 is refused: model 'm' answers 32 "
                                                   r"dimensions and its bundle does not record that it was trained to "
                                                   r"be truncated \(Matryoshka\); send 32 or leave 'dimensions' out"):
        engine_ext.check_outputs(call, engine_ext.VersionOutput("embedding", "EMBEDDING", widths=[32]), "m")


def test_wire_rules_truncate_and_renormalise() -> None:
    values = np.asarray([[3, 4, 12, 1], [0, 0, 5, 5], [-6, 8, 0, 0]], dtype=np.float32)
    call = engine_ext.decode_call([("TEXT", "BYTES", [3], True, [b"a", b"b", b"c"])], [], [], None, None, 8,
                                  dimensions=("uint64_param", 2))
    ((name, datatype, shape, raw, payload),) = engine_ext.encode_outputs(
        call, engine_ext.VersionOutput("embedding", "EMBEDDING"), values)
    assert (name, datatype, shape, raw) == ("EMBEDDING", "FP32", (3, 2), True)
    np.testing.assert_allclose(np.frombuffer(payload, dtype="<f4").reshape(3, 2), [[0.6, 0.8], [0, 0], [-0.6, 0.8]],
                               rtol=0, atol=1e-7)  # a zero row stays zero
    prompted = decode(prompt_name=("string_param", "q"))
    version = engine_ext.VersionOutput("embedding", "EMBEDDING", prompts={"q": "query: "})
    assert engine_ext.prompted_texts(prompted, version) == ["query: a", "query: b"]
    assert engine_ext.prompted_texts(decode(), version) == ["a", "b"]


@pytest.mark.parametrize("value", [2**63, 2**64 - 1, 2**64, 2**100, -(2**63) - 1, -(2**200)])
@pytest.mark.parametrize("kind", ["int64_param", "uint64_param"])
def test_an_integer_of_any_size_is_judged_by_the_rules_never_a_failed_conversion(kind: str, value: int) -> None:
    """JSON's integers have no size (issue 54: 2^63 on a JSON route was a 500, std::bad_cast): past 64 bits every
    integer parameter is refused by name; within uint64 a width is one no model has, a top-k every label."""
    def classify(k: int) -> Any:
        return engine_ext.decode_call([("TEXT", "BYTES", [1], True, [b"a"])], [("LOGITS", (kind, k), None)], [],
                                      None, None, 8)

    if value >= 2**64 or value < -(2**63):
        with pytest.raises(engine_ext.WireError, match=r"^request parameter 'dimensions' must be an integer from 1 to "
                                                       r"2\^64 - 1 \(the embedding width to truncate to\), got one"):
            decode(dimensions=(kind, value))
        with pytest.raises(engine_ext.WireError, match=r"^output 'LOGITS' parameter 'classification' must be an "
                                                       r"integer from 1 to 2\^64 - 1"):
            classify(value)
        return
    call = decode(dimensions=(kind, value))
    with pytest.raises(engine_ext.WireError, match=r"request parameter 'dimensions' \d+ is refused"):
        engine_ext.check_outputs(call, engine_ext.VersionOutput("embedding", "EMBEDDING", widths=[8]), "m")
    classify(value)
