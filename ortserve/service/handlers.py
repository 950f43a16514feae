"""KServe V2 servicer: a translator. Decode → lease a version → infer → encode.

The wire rules are the C++ ones both front ends use (reached through `codec`), lookup lives in the manager, batching
in the batcher; this file only wires them per call, maps errors to statuses (errors carry their own code) and writes
the call's record (`request_log`), the same one the native front end writes.
"""

from __future__ import annotations

import asyncio
import json
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
from ortserve.service.errors import InvalidArgument, NotFound, ResourceExhausted, ServiceError, Unavailable
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics
from ortserve.service.request_log import CallRecord, log_call

log = structlog.get_logger("ortserve.request")
T = TypeVar("T")
SERVICE = "inference.GRPCInferenceService"
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
    def __init__(self, manager: ModelManager, metrics: Metrics, *, max_texts_per_request: int) -> None:
        self._manager = manager
        self._metrics = metrics
        self._max_texts = max_texts_per_request
        self.accepting = True  # False once shutdown starts: readiness says so before the port closes

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.accepting and self._manager.ready_for_traffic())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self.accepting and self._manager.model_ready(request.name, request.version))

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="ortserve", version=__version__, extensions=["classification"])

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        return await _answer(context, lambda: self._model_metadata(request))

    async def _model_metadata(self, request: pb.ModelMetadataRequest) -> pb.ModelMetadataResponse:
        route = self._manager.route_table.models.get(request.name)
        if route is None:
            if request.name in self._manager.wanted_models():
                raise Unavailable(self._manager.not_ready_reason(request.name))
            raise NotFound(f"unknown model '{request.name}'")
        if request.version and request.version not in route.versions:
            failure = self._manager.version_failure(request.name, request.version)
            if failure:
                raise Unavailable(f"model '{request.name}' version '{request.version}' failed to load: {failure}")
            raise NotFound(f"model '{request.name}' has no loaded version '{request.version}'")
        version = route.versions[request.version] if request.version else next(iter(route.versions.values()))
        meta = pb.ModelMetadataResponse(name=request.name, versions=sorted(route.versions), platform="onnxruntime_onnx")
        meta.inputs.add(name=codec.INPUT_NAME, datatype="BYTES", shape=[-1])
        if version.instance is None:  # closed between the table read and here: describe what it was
            meta.outputs.add(name=codec.WIRE_OUTPUTS["classifier"], datatype="FP32", shape=[-1, -1])
            return meta
        served = codec.ServedOutput.of(version.instance.manifest)
        meta.outputs.add(name=served.name, datatype="FP32", shape=[-1, served.columns])
        # An extension of the protocol (MLServer's field number, see the .proto): the model's kind and a classifier's
        # labels in LOGITS column order, as a JSON array (labels may hold commas); class_count names them per call.
        meta.parameters["kind"].string_param = served.kind
        if served.kind == "classifier":
            meta.parameters["labels"].string_param = json.dumps(list(served.labels), ensure_ascii=False)
        return meta

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        started = time.monotonic()
        metadata = dict(context.invocation_metadata() or ())
        # An id too long to echo is refused below, answered under one of ours.
        request_id, id_error = engine_ext.choose_request_id(str(metadata.get("x-request-id") or ""))
        record = CallRecord(request_id=request_id, model=request.model_name, version=request.model_version)
        self._metrics.in_flight.inc()
        try:
            if id_error:
                raise InvalidArgument(id_error)
            call = codec.decode(request, max_texts_per_request=self._max_texts)
            routing_key = engine_ext.choose_routing_key(call.routing_key, str(metadata.get("x-routing-key") or ""),
                                                        request_id)
            remaining = context.time_remaining()
            deadline = None if remaining is None else started + remaining
            record.texts = len(call.texts)
            with self._manager.lease(
                request.model_name, version=request.model_version, routing_key=routing_key
            ) as lease:
                lv = lease.version
                record.version, record.route = lv.version, lease.route
                assert lv.batcher is not None and lv.instance is not None  # READY versions always have both
                served = codec.ServedOutput.of(lv.instance.manifest)
                codec.check_outputs(call, served, request.model_name)
                result = await lv.batcher.infer(call.texts, deadline=deadline)
            response = pb.ModelInferResponse(model_name=request.model_name, model_version=lv.version, id=request.id)
            codec.encode(response, call, served, result.outputs)
            # Trailers, not headers: they travel in the same write as the reply and the status, while an
            # explicit header send costs a separate gRPC batch per call (about a tenth of the loop's time).
            context.set_trailing_metadata((("x-request-id", request_id), ("x-model-version", lv.version)))
            record.answered(result)
            self._finish(record, started, "OK")
            return response
        except ServiceError as e:
            self._finish(record, started, e.code.name, error=e.message)
            trailers: tuple[tuple[str, str], ...] = (("x-request-id", request_id),)
            if isinstance(e, ResourceExhausted):
                trailers += (("grpc-retry-pushback-ms", str(engine_ext.pushback_ms(e.retry_after_s))),)
            context.set_trailing_metadata(trailers)
            await context.abort(e.code, e.message)
            raise  # abort raises; this line is never reached
        except asyncio.CancelledError:
            self._finish(record, started, "CANCELLED")
            raise
        except Exception:
            log.exception("request_failed", request_id=request_id, model=request.model_name)
            self._finish(record, started, "INTERNAL")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error; request id {request_id}")
            raise
        finally:
            self._metrics.in_flight.dec()

    def _finish(self, record: CallRecord, started: float, status: str, error: str = "") -> None:
        record.status, record.error, record.total_s = status, error, time.monotonic() - started
        log_call(self._metrics, record)


async def _answer(context: Any, make: Callable[[], Awaitable[T]]) -> T:
    try:
        return await make()
    except ServiceError as e:
        await context.abort(e.code, e.message)
        raise
