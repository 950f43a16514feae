"""ModelInfer calls each wrong in one way, the status and a fragment of the message each gets (both transports)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
import pytest
import requests
from support.server_process import ServerProcess, infer_request, set_parameters, stub_for

from ortserve.proto import grpc_service_pb2 as pb


def bad_call(kind: str) -> pb.ModelInferRequest:
    if kind == "unknown model":
        return infer_request(["x"], model="nope")
    if kind == "unknown version":
        return infer_request(["x"], version="v9")
    if kind == "missing TEXT":
        request = pb.ModelInferRequest(model_name="classifier")
        request.inputs.add(name="INPUT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"x")
        return request
    if kind == "no inputs":
        return pb.ModelInferRequest(model_name="classifier")
    if kind == "extra input":
        request = infer_request(["x"])
        request.inputs.add(name="EXTRA", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"y")
        return request
    if kind == "wrong datatype":
        request = pb.ModelInferRequest(model_name="classifier")
        request.inputs.add(name="TEXT", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
        return request
    if kind == "wrong shape rank":
        request = infer_request(["a", "b"])
        request.inputs[0].shape[:] = [1, 2]
        return request
    if kind == "shape disagrees with data":
        request = infer_request(["a", "b"])
        request.inputs[0].shape[:] = [3]
        return request
    if kind == "too many texts":
        return infer_request(["t"] * 17)  # the shared server allows 16
    if kind == "zero texts":
        return infer_request([])
    if kind == "not utf-8":
        return infer_request([b"ok", b"\xff\xfe bad"])
    if kind == "raw prefix overruns":
        request = infer_request(["ab"], raw=True)
        request.raw_input_contents[0] = b"\x09\x00\x00\x00ab"
        return request
    if kind == "raw prefix truncated":
        request = infer_request(["ab"], raw=True)
        request.raw_input_contents[0] += b"\x01\x00"
        return request
    if kind == "raw and contents":
        request = infer_request(["ab"], raw=True)
        request.inputs[0].contents.bytes_contents.append(b"ab")
        return request
    if kind == "unknown output":
        request = infer_request(["x"])
        request.outputs.add(name="PROBS")
        return request
    if kind == "routing key not a string":
        request = infer_request(["x"])
        request.parameters["routing_key"].int64_param = 5
        return request
    raise AssertionError(kind)


CASES = [
    ("unknown model", grpc.StatusCode.NOT_FOUND, "nope"),
    ("unknown version", grpc.StatusCode.NOT_FOUND, "v9"),
    ("missing TEXT", grpc.StatusCode.INVALID_ARGUMENT, "missing input 'TEXT'"),
    ("no inputs", grpc.StatusCode.INVALID_ARGUMENT, "missing input 'TEXT'"),
    ("extra input", grpc.StatusCode.INVALID_ARGUMENT, "EXTRA"),
    ("wrong datatype", grpc.StatusCode.INVALID_ARGUMENT, "datatype FP32, expected BYTES"),
    ("wrong shape rank", grpc.StatusCode.INVALID_ARGUMENT, "shape [1, 2]"),
    ("shape disagrees with data", grpc.StatusCode.INVALID_ARGUMENT, "carries 2 elements"),
    ("too many texts", grpc.StatusCode.INVALID_ARGUMENT, "maximum of 16"),
    ("zero texts", grpc.StatusCode.INVALID_ARGUMENT, "at least one text"),
    ("not utf-8", grpc.StatusCode.INVALID_ARGUMENT, "element 1 is not valid UTF-8"),
    ("raw prefix overruns", grpc.StatusCode.INVALID_ARGUMENT, "declares 9 bytes"),
    ("raw prefix truncated", grpc.StatusCode.INVALID_ARGUMENT, "truncated length prefix"),
    ("raw and contents", grpc.StatusCode.INVALID_ARGUMENT, "both contents and raw_input_contents"),
    ("unknown output", grpc.StatusCode.INVALID_ARGUMENT, "PROBS"),
    ("routing key not a string", grpc.StatusCode.INVALID_ARGUMENT, "routing_key"),
]


def assert_parameters_refused(server: ServerProcess, model: str, params: Mapping[str, Any], message: str) -> None:
    """A call of one text with `params` is INVALID_ARGUMENT over gRPC and 400 over REST, `message` in both."""
    channel, stub = stub_for(server.address)
    with channel, pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(set_parameters(infer_request(["x"], model=model), params), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in info.value.details()
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["x"]}], "parameters": dict(params)}
    reply = requests.post(f"http://127.0.0.1:{server.http_port}/v2/models/{model}/infer", json=doc, timeout=30)
    assert reply.status_code == 400 and message in reply.json()["error"], reply.text
