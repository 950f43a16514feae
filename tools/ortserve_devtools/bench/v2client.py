"""KServe V2 ModelInfer over gRPC or HTTP/REST (the binary tensor extension), generic enough for any V2 server
(ortserve, Triton, MLServer).

Requests are built once and serialized up front; the load generator sends those bytes through a
bytes-in/bytes-out handle (a gRPC method, or `RestCall`), so the client spends no CPU on encoding in the hot loop
(on a 2-core machine every client cycle is taken from the server). Replies are parsed only when checked.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
import grpc
import numpy as np

from ortserve.proto import grpc_service_pb2 as pb
from ortserve_devtools.loadgen import CallRefused

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_READY = "/inference.GRPCInferenceService/ModelReady"
SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive"


@dataclass(frozen=True)
class V2Target:
    """What to call: the model, its BYTES input and the FP32 output to check."""

    address: str
    model: str
    version: str = ""
    input_name: str = "TEXT"
    output_name: str = "LOGITS"
    shape_n1: bool = False
    """Send shape [N, 1] instead of [N] (Triton models with a batch dim and dims [1])."""
    raw_input: bool = False
    """Put the texts in raw_input_contents (length-prefixed) instead of contents.bytes_contents."""


def text_request(model: str, texts: Sequence[str]) -> pb.ModelInferRequest:
    """The plainest V2 call of texts: one BYTES input TEXT of shape [N], every output (the server's choice)."""
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
    tensor.contents.bytes_contents.extend(t.encode() for t in texts)
    return request


def build_request(target: V2Target, texts: Sequence[str]) -> bytes:
    request = pb.ModelInferRequest(model_name=target.model, model_version=target.version)
    shape = [len(texts), 1] if target.shape_n1 else [len(texts)]
    tensor = request.inputs.add(name=target.input_name, datatype="BYTES", shape=shape)
    encoded = [t.encode() for t in texts]
    if target.raw_input:
        request.raw_input_contents.append(b"".join(struct.pack("<I", len(e)) + e for e in encoded))
    else:
        tensor.contents.bytes_contents.extend(encoded)
    request.outputs.add(name=target.output_name)
    return request.SerializeToString()


def parse_logits(target: V2Target, reply: bytes) -> np.ndarray:
    """The output tensor of a ModelInferResponse as float32 [N, ...]; ValueError if it is not there."""
    response = pb.ModelInferResponse.FromString(reply)
    for index, out in enumerate(response.outputs):
        if out.name != target.output_name:
            continue
        shape = list(out.shape)
        if response.raw_output_contents:
            return np.frombuffer(response.raw_output_contents[index], dtype="<f4").reshape(shape)
        return np.asarray(out.contents.fp32_contents, dtype=np.float32).reshape(shape)
    names = [o.name for o in response.outputs]
    raise ValueError(f"reply has no output '{target.output_name}' (outputs: {names}); set --output-name")


def infer_method(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable:
    # No serializers: requests go out as the pre-serialized bytes, replies come back as bytes.
    return channel.unary_unary(MODEL_INFER)


def channel_options(max_message_bytes: int = 16 * 1024 * 1024) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        # One TCP connection per channel: several channels spread the client over HTTP/2 connections.
        ("grpc.use_local_subchannel_pool", 1),
    ]


async def model_ready(channel: grpc.aio.Channel, target: V2Target, timeout: float) -> bool:
    call = channel.unary_unary(MODEL_READY)
    request = pb.ModelReadyRequest(name=target.model, version=target.version).SerializeToString()
    reply = await call(request, timeout=timeout)
    return pb.ModelReadyResponse.FromString(reply).ready


def server_live_method(channel: grpc.aio.Channel) -> tuple[grpc.aio.UnaryUnaryMultiCallable, bytes]:
    """ServerLive as a bytes-in/bytes-out handle and its (empty) request: the cheapest V2 call."""
    return channel.unary_unary(SERVER_LIVE), pb.ServerLiveRequest().SerializeToString()


# ---- HTTP/REST ------------------------------------------------------------------------------------------

HEADER_LENGTH = "Inference-Header-Content-Length"
REST_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 413: "RESOURCE_EXHAUSTED", 429: "RESOURCE_EXHAUSTED",
              499: "CANCELLED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 500: "INTERNAL"}
"""An HTTP status as the gRPC code the protocol maps it from, so both transports' errors count alike."""


class RestRefused(CallRefused):
    """A REST call answered with an error status (named as the gRPC code it maps to); `retry_after_s` from
    Retry-After (0 when absent)."""

    def __init__(self, status: int, details: str, retry_after_s: float) -> None:
        super().__init__(REST_CODES.get(status, f"HTTP_{status}"), details, retry_after_s)


def build_rest_request(target: V2Target, texts: Sequence[str]) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    """The call as the binary tensor extension, both ways: (body, headers)."""
    raw = b"".join(struct.pack("<I", len(e)) + e for e in (t.encode() for t in texts))
    shape = [len(texts), 1] if target.shape_n1 else [len(texts)]
    header = json.dumps({"inputs": [{"name": target.input_name, "datatype": "BYTES", "shape": shape,
                                     "parameters": {"binary_data_size": len(raw)}}],
                         "outputs": [{"name": target.output_name, "parameters": {"binary_data": True}}]}).encode()
    return header + raw, ((HEADER_LENGTH, str(len(header))),)


def rest_infer_url(target: V2Target) -> str:
    version = f"/versions/{target.version}" if target.version else ""
    return f"http://{target.address}/v2/models/{target.model}{version}/infer"


class RestCall:
    """POST a prebuilt body: the REST twin of a bytes-in/bytes-out gRPC method handle. Returns the reply's bytes
    (`last_header_length`: the last reply's JSON header, for `parse_rest_logits`)."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self._session = session
        self._url = url
        self.last_header_length = 0

    async def __call__(self, body: bytes, *, timeout: float, metadata: Sequence[tuple[str, str]] = ()) -> bytes:
        async with self._session.post(self._url, data=body, headers=dict(metadata),
                                      timeout=aiohttp.ClientTimeout(total=timeout)) as reply:
            data = await reply.read()
            if reply.status != 200:
                retry = reply.headers.get("Retry-After", "0")
                raise RestRefused(reply.status, data.decode("utf-8", "replace")[:300],
                                  float(retry) if retry.isdigit() else 0.0)
            self.last_header_length = int(reply.headers.get(HEADER_LENGTH, len(data)))
            return data


def parse_rest_logits(target: V2Target, reply: bytes, header_length: int) -> np.ndarray:
    """The output tensor of a REST reply (binary or JSON) as float32 [N, ...]; ValueError if it is not there."""
    doc = json.loads(reply[:header_length])
    offset = header_length
    for out in doc.get("outputs", []):
        size = out.get("parameters", {}).get("binary_data_size")
        if out["name"] == target.output_name:
            if size is None:
                return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
            return np.frombuffer(reply[offset: offset + size], dtype="<f4").reshape(out["shape"])
        offset += size or 0
    names = [o.get("name") for o in doc.get("outputs", [])]
    raise ValueError(f"reply has no output '{target.output_name}' (outputs: {names}); set --output-name")
