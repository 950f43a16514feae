"""KServe V2 servicer: a translator. Decode and validate → lease a version → batcher → encode.

Lookup lives in the manager, batching in the batcher, the wire format in codec; this file only
wires them per call, maps errors to statuses (errors carry their own code) and writes the one
structured log line per request.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf.message import DecodeError, Message

from ortserve import __version__
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve.service import codec
from ortserve.service.errors import NotFound, ResourceExhausted, ServiceError, Unavailable
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics
from ortserve.service.request_log import finish_request, ms

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
    def __init__(self, manager: ModelManager, metrics: Metrics, *, max_texts: int) -> None:
        self._manager = manager
        self._metrics = metrics
        self._max_texts = max_texts
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
        if version.classifier is None:  # closed between the table read and here: describe what it was
            meta.outputs.add(name=codec.OUTPUT_NAME, datatype="FP32", shape=[-1, -1])
            return meta
        served = codec.ServedOutput.of(version.classifier.manifest)
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
        caller_id = str(metadata.get("x-request-id") or "")
        # An id too long to echo is refused below, answered under one of ours.
        fits = 0 < len(caller_id.encode()) <= codec.MAX_REQUEST_ID_BYTES
        request_id = caller_id if fits else uuid.uuid4().hex
        fields: dict[str, Any] = {
            "request_id": request_id,
            "model": request.model_name,
            "version": request.model_version or None,
        }
        version_label = "none"
        self._metrics.in_flight.inc()
        try:
            codec.check_request_id(caller_id)
            texts = codec.decode_texts(request, max_texts=self._max_texts)
            outputs = codec.requested_outputs(request)
            probabilities = codec.score_mode(request, outputs)
            routing_key = (
                codec.string_parameter(request.parameters, "routing_key")
                or str(metadata.get("x-routing-key") or "")
                or request_id
            )
            remaining = context.time_remaining()
            deadline = None if remaining is None else started + remaining
            fields["texts"] = len(texts)
            with self._manager.lease(
                request.model_name, version=request.model_version, routing_key=routing_key
            ) as lease:
                lv = lease.version
                fields.update(version=lv.version, route=lease.route)
                version_label = lv.version
                assert lv.batcher is not None and lv.classifier is not None  # READY versions always have both
                served = codec.ServedOutput.of(lv.classifier.manifest)
                codec.check_outputs(outputs, served, request.model_name)
                result = await lv.batcher.infer(texts, deadline=deadline)
            response = pb.ModelInferResponse(model_name=request.model_name, model_version=lv.version, id=request.id)
            codec.encode_outputs(response, result.logits, served, outputs, probabilities=probabilities,
                                 raw=codec.wants_raw_output(request))
            # Trailers, not headers: they travel in the same write as the reply and the status, while an
            # explicit header send costs a separate gRPC batch per call (about a tenth of the loop's time).
            context.set_trailing_metadata((("x-request-id", request_id), ("x-model-version", lv.version)))
            fields.update(
                batch_size=result.batch_size,
                queue_ms=ms(result.queue_s),
                tokenize_ms=ms(result.tokenize_s),
                engine_ms=ms(result.engine_s),
            )
            self._finish(fields, started, "OK", version_label, queue_s=result.queue_s, tokenize_s=result.tokenize_s)
            return response
        except ServiceError as e:
            self._finish(fields, started, e.code.name, version_label, error=e.message)
            trailers: tuple[tuple[str, str], ...] = (("x-request-id", request_id),)
            if isinstance(e, ResourceExhausted):
                trailers += (("grpc-retry-pushback-ms", str(max(1, round(e.retry_after_s * 1000)))),)
            context.set_trailing_metadata(trailers)
            await context.abort(e.code, e.message)
            raise  # abort raises; this line is never reached
        except asyncio.CancelledError:
            self._finish(fields, started, "CANCELLED", version_label)
            raise
        except Exception:
            log.exception("request_failed", **fields)
            self._finish(fields, started, "INTERNAL", version_label)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error; request id {request_id}")
            raise
        finally:
            self._metrics.in_flight.dec()

    def _finish(self, fields: dict[str, Any], started: float, code: str, version: str, **extra: Any) -> None:
        finish_request(self._metrics, fields, code, version, time.monotonic() - started, **extra)


async def _answer(context: Any, make: Callable[[], Awaitable[T]]) -> T:
    try:
        return await make()
    except ServiceError as e:
        await context.abort(e.code, e.message)
        raise
