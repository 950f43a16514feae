"""KServe V2 gRPC servicer: a translator. The message → `inference.Inference` (the call's one path on the Python side,
the REST server's too) → the reply message, its trailers, or its status (errors carry their own code).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf.message import DecodeError, Message

from ortserve import __version__, engine_ext
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve.service import codec
from ortserve.service.errors import ResourceExhausted, ServiceError
from ortserve.service.inference import CallFailed, Inference
from ortserve.service.manager import ModelManager

log = structlog.get_logger("ortserve.request")
T = TypeVar("T")
SERVICE = "inference.GRPCInferenceService"
EXTENSIONS = ("classification",)
_METHODS: dict[str, tuple[type[Message], type[Message]]] = {
    "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
    "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
    "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
}


class _Unparsable:
    """A body that is not the method's request message, passed to the method instead of failing in gRPC's
    deserializer (which would answer UNKNOWN naming a Python exception class)."""

    def __init__(self, message_type: type[Message], size: int) -> None:
        self.type_name = message_type.DESCRIPTOR.full_name
        self.size = size


def _lenient(message_type: type[Message]) -> Callable[[bytes], Message | _Unparsable]:
    def parse(data: bytes) -> Message | _Unparsable:
        try:
            return message_type.FromString(data)
        except DecodeError:
            return _Unparsable(message_type, len(data))

    return parse


def _refusing_unparsable(method: Callable[[Any, Any], Awaitable[Message]]) -> Callable[[Any, Any], Awaitable[Message]]:
    async def call(request: Any, context: Any) -> Message:
        if isinstance(request, _Unparsable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"the request body ({request.size} bytes) is not a valid {request.type_name} message")
        return await method(request, context)

    return call


def add_inference_service(servicer: InferenceServicer, server: grpc.aio.Server) -> None:
    """The generated `add_GRPCInferenceServiceServicer_to_server`, except that a body that does not parse is
    answered INVALID_ARGUMENT by the method (the native front end passes such bodies here too)."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _refusing_unparsable(getattr(servicer, name)),
            request_deserializer=_lenient(request_type),
            response_serializer=response_type.SerializeToString,
        )
        for name, (request_type, response_type) in _METHODS.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, manager: ModelManager, inference: Inference) -> None:
        self._manager = manager
        self._inference = inference
        self.accepting = True  # False once shutdown starts: readiness says so before the port closes

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.accepting and self._manager.ready_for_traffic())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self.accepting and self._manager.model_ready(request.name, request.version))

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="ortserve", version=__version__, extensions=list(EXTENSIONS))

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        return await _answer(context, lambda: self._model_metadata(request))

    async def _model_metadata(self, request: pb.ModelMetadataRequest) -> pb.ModelMetadataResponse:
        d = self._inference.describe(request.name, request.version)
        meta = pb.ModelMetadataResponse(name=d.name, versions=d.versions, platform=d.platform)
        for name, datatype, shape in d.inputs:
            meta.inputs.add(name=name, datatype=datatype, shape=shape)
        for name, datatype, shape in d.outputs:
            meta.outputs.add(name=name, datatype=datatype, shape=shape)
        # An extension of the protocol (MLServer's field number, see the .proto).
        for key, value in d.parameters.items():
            if isinstance(value, bool):  # multi_label
                meta.parameters[key].bool_param = value
            else:
                meta.parameters[key].string_param = value
        return meta

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        headers = {str(k).lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        try:
            reply = await self._inference.infer(codec.call_from(request, headers, deadline))
        except CallFailed as failed:
            trailers: tuple[tuple[str, str], ...] = (("x-request-id", failed.request_id),)
            if isinstance(failed.error, ResourceExhausted):
                trailers += (("grpc-retry-pushback-ms", str(engine_ext.pushback_ms(failed.error.retry_after_s))),)
            context.set_trailing_metadata(trailers)
            await context.abort(failed.error.code, failed.error.message)
            raise  # abort raises; this line is never reached
        # Trailers, not headers: they travel in the same write as the reply and the status, while an explicit
        # header send costs a separate gRPC batch per call (about a tenth of the loop's time).
        context.set_trailing_metadata((("x-request-id", reply.request_id), ("x-model-version", reply.version)))
        return codec.reply_message(reply)


async def _answer(context: Any, make: Callable[[], Awaitable[T]]) -> T:
    try:
        return await make()
    except ServiceError as e:
        await context.abort(e.code, e.message)
        raise
