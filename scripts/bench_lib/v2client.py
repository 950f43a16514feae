"""KServe V2 ModelInfer over gRPC, generic enough for any V2 server (ortserve, Triton, MLServer).

Requests are built once and serialized up front; the load generator sends those bytes through a
bytes-in/bytes-out method handle, so the client spends no CPU on protobuf in the hot loop (on a
2-core machine every client cycle is taken from the server). Replies are parsed only when checked.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import numpy as np

from ortserve.proto import grpc_service_pb2 as pb

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
