"""KServe V2 over HTTP/REST: the README's curl and requests examples and docs/serving.md's tritonclient.http one, JSON
and the binary extension, answers equal to gRPC's, every bad call answered by its own status with gRPC's message, and
the server unharmed."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.http as triton_http
from support.bad_calls import CASES, bad_call
from support.server_process import ServerProcess, ask_classification, infer_request, logits_of, stub_for
from support.v2_tensors import join_raw_bytes, split_raw_bytes

from ortserve.engine_ext import route_bucket
from ortserve.proto import grpc_service_pb2 as pb

README = Path(__file__).resolve().parents[2] / "README.md"
SERVING_DOC = README.parent / "docs" / "serving.md"
TEXTS = ["I loved it", "never again", "a much longer sentence about the weather, neither good nor bad"]
HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404}


@pytest.fixture(scope="module")
def url(server: ServerProcess) -> str:
    return f"http://127.0.0.1:{server.http_port}"


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[Any]:
    channel, stub = stub_for(server.address)
    yield stub
    channel.close()


def _infer(url: str, doc: dict[str, Any], path: str = "/v2/models/classifier/infer", **kw: Any) -> requests.Response:
    return requests.post(url + path, json=doc, timeout=10, **kw)


def _text_input(texts: list[str]) -> dict[str, Any]:
    return {"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}


def _strings(response: pb.ModelInferResponse) -> list[bytes]:
    """A gRPC reply's BYTES output, raw or in contents."""
    if response.raw_output_contents:
        return split_raw_bytes(response.raw_output_contents[0])
    return list(response.outputs[0].contents.bytes_contents)


def _still_serving(url: str) -> None:
    reply = _infer(url, {"inputs": [_text_input(["still fine"])]})
    assert reply.status_code == 200, reply.text


# ---- the README's examples and docs/serving.md's, as written ----------------------------------------------


def _readme_blocks(lang: str, doc: Path = README, heading: str = "### Over HTTP/REST") -> list[str]:
    section = doc.read_text().split(heading, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


PYTHON_EXAMPLES = {"requests": (README, "### Over HTTP/REST", 0),
                   "tritonclient.http": (SERVING_DOC, "## Over HTTP/REST", 0)}


def test_the_readme_curl_example(server: ServerProcess) -> None:
    (block,) = _readme_blocks("bash")
    command = block.replace("localhost:8000", f"127.0.0.1:{server.http_port}")
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30, check=True).stdout
    reply = json.loads(out)
    assert reply["model_version"] == "1" and reply["outputs"][0]["shape"] == [2, 1]
    assert all(re.fullmatch(r"-?\d+\.\d{6}:[01]:(negative|positive)", d) for d in reply["outputs"][0]["data"])


@pytest.mark.parametrize("example", sorted(PYTHON_EXAMPLES))
def test_the_readme_python_examples(server: ServerProcess, stub: Any, example: str) -> None:
    doc, heading, index = PYTHON_EXAMPLES[example]
    block = _readme_blocks("python", doc, heading)[index].replace("localhost:8000", f"127.0.0.1:{server.http_port}")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, f"{doc.name} example {example}", "exec"), {})
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", printed.getvalue())]
    expected = logits_of(stub.ModelInfer(infer_request(["I loved it", "never again"]), timeout=10))
    np.testing.assert_allclose(numbers, expected.ravel(), rtol=1e-5, atol=1e-6)
    assert printed.getvalue().rstrip().endswith("1")  # the version that answered


# ---- answers: JSON, binary, classification, routing ------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_http_answers_equal_grpc(server: ServerProcess, binary: bool) -> None:
    """tritonclient.grpc would clash with ortserve's own protos in one process: the gRPC side is the raw stub."""
    elements = np.array([t.encode() for t in TEXTS], dtype=object)
    http = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    text = triton_http.InferInput("TEXT", [len(TEXTS)], "BYTES")
    text.set_data_from_numpy(elements, binary_data=binary)
    over_http = http.infer("classifier", [text], outputs=[triton_http.InferRequestedOutput("LOGITS",
                                                                                          binary_data=binary)])
    top = http.infer("classifier", [text], outputs=[triton_http.InferRequestedOutput("LOGITS", binary_data=binary,
                                                                                    class_count=2)])
    channel, stub = stub_for(server.address)
    with channel:
        grpc_logits = logits_of(stub.ModelInfer(infer_request(TEXTS), timeout=10))
        grpc_top = _strings(stub.ModelInfer(ask_classification(infer_request(TEXTS), 2), timeout=10))
    np.testing.assert_array_equal(over_http.as_numpy("LOGITS"), grpc_logits)
    assert top.as_numpy("LOGITS").astype(bytes).ravel().tolist() == grpc_top
    response = over_http.get_response()
    assert response["model_version"] == "1"
    assert ("parameters" in response["outputs"][0]) == binary  # binary_data_size: the tensor came as bytes
    assert http.is_server_live() and http.is_server_ready() and http.is_model_ready("classifier")
    assert not http.is_model_ready("nope")


def test_json_tensors_nested_or_flat_and_the_scores_parameter(url: str, stub: Any) -> None:
    grpc_logits = logits_of(stub.ModelInfer(infer_request(TEXTS[:2]), timeout=10))
    for data, shape in ((TEXTS[:2], [2]), ([[TEXTS[0]], [TEXTS[1]]], [2, 1])):
        reply = _infer(url, {"id": "call-7", "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": shape,
                                                         "data": data}]})
        doc = reply.json()
        assert (doc["id"], doc["model_name"], doc["outputs"][0]["shape"]) == ("call-7", "classifier", [2, 2])
        np.testing.assert_array_equal(np.asarray(doc["outputs"][0]["data"], dtype=np.float32), grpc_logits.ravel())
    probabilities = _infer(url, {"parameters": {"scores": "probabilities"}, "inputs": [_text_input(TEXTS[:1])],
                                 "outputs": [{"name": "LOGITS", "parameters": {"classification": 2}}]}).json()
    grpc_top = stub.ModelInfer(ask_classification(infer_request(TEXTS[:1]), 2, scores="probabilities"), timeout=10)
    assert probabilities["outputs"][0]["data"] == [e.decode() for e in _strings(grpc_top)]


def test_binary_request_with_json_reply_and_binary_data_output(url: str, stub: Any) -> None:
    header = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2],
                                     "parameters": {"binary_data_size": len(join_raw_bytes([b"ab", "é".encode()]))}}],
                         "parameters": {"binary_data_output": True}}).encode()
    body = header + join_raw_bytes([b"ab", "é".encode()])
    reply = requests.post(url + "/v2/models/classifier/versions/1/infer", data=body, timeout=10,
                          headers={"Inference-Header-Content-Length": str(len(header)),
                                   "Content-Type": "application/octet-stream"})
    assert reply.status_code == 200, reply.text
    length = int(reply.headers["Inference-Header-Content-Length"])
    doc = json.loads(reply.content[:length])
    assert doc["outputs"][0]["parameters"]["binary_data_size"] == len(reply.content) - length == 2 * 2 * 4
    logits = np.frombuffer(reply.content[length:], dtype="<f4").reshape(2, 2)
    np.testing.assert_array_equal(logits, logits_of(stub.ModelInfer(infer_request(["ab", "é"]), timeout=10)))
    # The classification extension's strings as a binary BYTES tensor.
    header = json.dumps({"inputs": [_text_input(["ab"])], "outputs": [
        {"name": "LOGITS", "parameters": {"classification": 1, "binary_data": True}}]}).encode()
    reply = requests.post(url + "/v2/models/classifier/infer", data=header, timeout=10)
    length = int(reply.headers["Inference-Header-Content-Length"])
    (top,) = split_raw_bytes(reply.content[length:])
    assert re.fullmatch(rb"-?\d+\.\d{6}:[01]:(negative|positive)", top)


def test_routing_key_as_header_or_parameter_picks_the_bucket(server: ServerProcess, url: str) -> None:
    for key, how in (("user-42", "header"), ("user-43", "parameter")):
        doc: dict[str, Any] = {"inputs": [_text_input(["x"])]}
        headers = {"x-request-id": f"route-{key}"}
        if how == "header":
            headers["x-routing-key"] = key
        else:
            doc["parameters"] = {"routing_key": key}
        reply = _infer(url, doc, headers=headers)
        assert reply.headers["x-request-id"] == f"route-{key}" and reply.headers["x-model-version"] == "1"
        line = server.wait_event("request", request_id=f"route-{key}")
        assert line["route"] == f"bucket {route_bucket('classifier', key)}" and line["transport"] == "http"


def test_health_and_metadata(url: str, stub: Any) -> None:
    assert requests.get(url + "/v2/health/live", timeout=10).status_code == 200
    assert requests.get(url + "/v2/health/ready", timeout=10).status_code == 200
    server = requests.get(url + "/v2", timeout=10).json()
    assert server["name"] == "ortserve" and "classification" in server["extensions"]
    grpc_meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="classifier"), timeout=10)
    for path in ("/v2/models/classifier", "/v2/models/classifier/versions/1"):
        meta = requests.get(url + path, timeout=10).json()
        assert meta["versions"] == list(grpc_meta.versions) == ["1"]
        assert meta["outputs"] == [{"name": "LOGITS", "datatype": "FP32", "shape": [-1, 2]}]
        assert json.loads(meta["parameters"]["labels"]) == ["negative", "positive"]
        assert requests.get(url + path + "/ready", timeout=10).status_code == 200
    assert requests.get(url + "/v2/models/classifier/versions/9/ready", timeout=10).status_code == 400
    for path in ("/v2/models/nope", "/v2/models/classifier/versions/9"):
        reply = requests.get(url + path, timeout=10)
        assert reply.status_code == 404 and "error" in reply.json()


# ---- errors: the same messages as gRPC, one status each ---------------------------------------------------


def _as_rest(request: pb.ModelInferRequest) -> tuple[str, bytes, dict[str, str]]:
    """The same call as a REST body: contents as JSON data (or, not UTF-8, as a binary section), raw contents as the
    binary extension, parameters and outputs alike."""
    doc: dict[str, Any] = {"inputs": [], "outputs": []}
    sections: list[bytes] = []
    for i, tensor in enumerate(request.inputs):
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        elements = list(tensor.contents.bytes_contents)
        raw = request.raw_input_contents[i] if i < len(request.raw_input_contents) else None
        if tensor.contents.fp32_contents:
            entry["data"] = list(tensor.contents.fp32_contents)
        elif raw is None and all(_utf8(e) for e in elements):
            entry["data"] = [e.decode() for e in elements]
        else:
            if raw is not None and elements:
                entry["data"] = [e.decode() for e in elements]
            section = raw if raw is not None else join_raw_bytes(elements)
            entry["parameters"] = {"binary_data_size": len(section)}
            sections.append(section)
        doc["inputs"].append(entry)
    for out in request.outputs:
        doc["outputs"].append({"name": out.name})
    doc["parameters"] = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in request.parameters.items()}
    header = json.dumps(doc).encode()
    path = f"/v2/models/{request.model_name}" + (f"/versions/{request.model_version}" if request.model_version
                                                  else "") + "/infer"
    headers = {"Inference-Header-Content-Length": str(len(header))} if sections else {}
    return path, header + b"".join(sections), headers


def _utf8(element: bytes) -> bool:
    try:
        element.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(("kind", "code", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_call_gets_grpc_s_message_and_its_status(url: str, stub: Any, kind: str, code: grpc.StatusCode,
                                                       fragment: str) -> None:
    with pytest.raises(grpc.RpcError) as over_grpc:
        stub.ModelInfer(bad_call(kind), timeout=10)
    path, body, headers = _as_rest(bad_call(kind))
    reply = requests.post(url + path, data=body, headers=headers, timeout=10)
    # Too many texts is INVALID_ARGUMENT over gRPC and 413 (Payload Too Large) over HTTP, as OpenAI-style APIs say.
    assert reply.status_code == (413 if kind == "too many texts" else HTTP_STATUS[code]), reply.text
    assert reply.json() == {"error": over_grpc.value.details()}
    assert reply.headers["x-request-id"]
    _still_serving(url)


def _binary(header: bytes, sections: bytes) -> tuple[bytes, dict[str, str]]:
    return header + sections, {"Inference-Header-Content-Length": str(len(header))}


REST_CASES = [
    ("not json", b'{"inputs": [', {}, 400, "the request body is not JSON"),
    ("not an object", b"[1, 2]", {}, 400, 'must be a JSON object with "inputs"'),
    ("inputs not an array", b'{"inputs": {"name": "TEXT"}}', {}, 400, "inputs must be a JSON array"),
    ("shape not integers", b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": ["2"], "data": ["a"]}]}', {},
     400, 'inputs[0].shape must be an array of integers, got ["2"]'),
    ("a number for a text", b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [7]}]}', {},
     400, "inputs[0].data[0] must be a string (a BYTES element), got 7"),
    ("header length past the body", b'{"inputs": []}', {"Inference-Header-Content-Length": "999"}, 400,
     "Inference-Header-Content-Length is '999', but the body is 14 bytes"),
    ("header length not a number", b'{"inputs": []}', {"Inference-Header-Content-Length": "-1"}, 400,
     "Inference-Header-Content-Length is '-1'"),
    ("truncated binary section", *_binary(b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], '
                                          b'"parameters": {"binary_data_size": 40}}]}', b"\x05\x00\x00\x00hello"),
     400, "inputs[0] binary_data_size 40 does not fit the 9 bytes left after the JSON header"),
    ("bytes no input claims", *_binary(b'{"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], '
                                       b'"data": ["a"]}]}', b"xyz"),
     400, "3 bytes after the JSON header belong to no input's binary_data_size"),
    ("timeout not a number", b'{"parameters": {"timeout": "1s"}, "inputs": []}', {}, 400,
     "request parameter 'timeout' must be a positive integer of microseconds"),
    ("wrong content type", b'{"inputs": []}', {"Content-Type": "text/html"}, 415,
     "Content-Type 'text/html' is not an inference request"),
    ("multipart", b"--x\r\n\r\n", {"Content-Type": "multipart/form-data; boundary=x"}, 415,
     "send application/json (JSON tensors)"),
]


@pytest.mark.parametrize(("body", "headers", "status", "message"), [c[1:] for c in REST_CASES],
                         ids=[c[0] for c in REST_CASES])
def test_a_malformed_body_costs_only_its_own_call(url: str, body: bytes, headers: dict[str, str], status: int,
                                                  message: str) -> None:
    reply = requests.post(url + "/v2/models/classifier/infer", data=body, headers=headers, timeout=10)
    assert reply.status_code == status, reply.text
    assert message in reply.json()["error"], reply.json()
    assert "Traceback" not in reply.text
    _still_serving(url)


def test_a_body_over_max_message_bytes_is_413(url: str) -> None:
    reply = _infer(url, {"inputs": [_text_input(["word " * 20_000])]})  # ~100 KB, over the shared server's 64 KiB
    assert reply.status_code == 413 and "max_message_bytes (65536 bytes)" in reply.json()["error"]
    _still_serving(url)


def test_unknown_paths_and_methods(url: str) -> None:
    assert requests.get(url + "/v2/models/classifier/infer", timeout=10).status_code == 405
    assert requests.get(url + "/v3/models/classifier", timeout=10).status_code == 404  # (/v1/models: OpenAI's)
    _still_serving(url)


def test_a_passed_deadline_is_504_and_logged(server: ServerProcess, url: str) -> None:
    reply = _infer(url, {"parameters": {"timeout": 1}, "inputs": [_text_input(["x"])]},
                   headers={"x-request-id": "late-1"})
    assert reply.status_code == 504 and "deadline" in reply.json()["error"]
    assert server.wait_event("request", request_id="late-1")["status"] == "DEADLINE_EXCEEDED"
