"""A ModelInfer call on the Python side, whichever transport carried it (grpc.aio's handler, the REST server).

A transport reads the call off the wire into an `InferCall` (the fields the C++ wire rules read, the headers, the
deadline), hands it to `Inference.infer`, and writes the `InferReply` (or the `CallFailed`) back in its own format.
The call crosses into C++ once (`engine_ext.start_call`, the native front end's call path: request id, decode,
routing key, the version from the data plane's route table, outputs check, lease, prompt, the batcher) and its
answer comes back through the completion queue as the reply's tensors; a version on HF tokenizers gets its texts
tokenized here, on the tokenizer pool, and submitted as ids in a second crossing. What the data plane does not route
(a model or version whose refusal the manager names) takes the Python path:

    prepare (C++)  ->  manager.lease (pin or bucket)  ->  outputs check  ->  VersionBatcher  ->  encode (C++)

Both transports therefore answer a call alike: the same rules and messages (the native front end's too), the same
routing, admission and deadlines, the same `request` line, metrics and trace.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import structlog

from ortserve import engine_ext
from ortserve.bundle.kinds import CLASSIFIER
from ortserve.service.data_plane import DataPlane, failure_of
from ortserve.service.errors import InvalidArgument, NotFound, ServiceError, TooManyTexts, Unavailable
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics
from ortserve.service.request_log import EVERY_CALL, CallRecord, LogSampling, log_call
from ortserve.service.served_output import ServedOutput
from ortserve.service.tokenization import INLINE_MAX_CHARS, TokenEncoding

log = structlog.get_logger("ortserve.request")
INPUT_NAME: str = engine_ext.TEXT_INPUT
PAIR_INPUT: str = engine_ext.PAIR_INPUT
Param = tuple[str | None, Any] | None
"""An InferParameter as the wire rules take it: None when absent, else (its oneof field's name or None, value)."""
TRACE_HEADERS = ("traceparent", "tracestate", "b3", "x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags")
CALL_HEADERS = ("x-request-id", "x-routing-key", *TRACE_HEADERS)
"""What `prepare` reads of a call's headers, in engine_ext.prepare_call's order."""


@dataclass
class InferCall:
    """A ModelInfer call as a transport read it (the parts the wire rules and the routing read)."""

    model: str
    version: str = ""
    id: str = ""
    inputs: list[tuple[str, str, list[int], bool, list[bytes]]] = field(default_factory=list)
    """(name, datatype, shape, has_contents, bytes_contents) per input."""
    outputs: list[tuple[str, Param, Param]] = field(default_factory=list)
    """(name, classification, binary_data) per requested output."""
    raw_input_contents: list[bytes] = field(default_factory=list)
    scores: Param = None
    routing_key: Param = None
    aggregation: Param = None
    priority: Param = None
    """"interactive" or "bulk" (the batcher's classes); None: by the call's size (bulk_min_texts)."""
    prompt_name: Param = None
    """One of the version's prompts, put before each text; None: none."""
    dimensions: Param = None
    """An embedding's width to truncate to (one the version was trained for); None: its full width."""
    embedding_type: Param = None
    """An embedding's compact type ("int8", "uint8", "binary", "ubinary"); None: float."""
    top_k: Param = None
    """A sparse embedding's most entries per text; None: no bound."""
    threshold: Param = None
    """A sparse embedding's least weight kept (exclusive); None: every non-zero weight."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Lower-case names: x-request-id, x-routing-key and the trace headers (TRACE_HEADERS)."""
    deadline: float | None = None
    """time.monotonic() by which the caller wants its answer; None: no deadline."""
    transport: str = "grpc"


@dataclass
class InferReply:
    request_id: str
    model: str
    version: str
    id: str
    tensors: list[tuple[str, str, tuple[int, int], bool, Any]]
    """engine_ext.encode_outputs: (name, datatype, (rows, width), raw, payload) per output."""
    token_count: int
    """The tokens the model read for the call (special tokens included, after truncation): the client APIs' usage."""


class CallFailed(Exception):
    """The call ends with `error` (its status and message); `request_id` goes back with it."""

    def __init__(self, error: ServiceError, request_id: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.request_id = request_id


@dataclass(frozen=True)
class ModelDescription:
    """What ModelMetadata says of a model (both transports)."""

    name: str
    versions: list[str]
    platform: str
    inputs: list[tuple[str, str, list[int]]]
    outputs: list[tuple[str, str, list[int]]]
    parameters: dict[str, str | bool]
    """kind and a classifier's labels (strings); multi_label (true) for a classifier with independent labels."""


class Started(NamedTuple):
    """engine_ext.start_call's answer."""

    request_id: str
    trace: tuple[str, str, int, str]
    error: str | None
    """The rules' refusal (INVALID_ARGUMENT)."""
    too_many_texts: bool
    passed: str | None
    """Why the data plane left the call to Python (a passthrough reason, or "long_texts"); None when started."""
    version: str
    route: str
    texts: int
    call: Any
    """engine_ext.StartedCall (cancel, submit_ids) when routed and leased, else None."""
    tokenize: tuple[list[str], list[str] | None] | None
    """The (texts, pairs) a version on HF tokenizers needs as ids (`StartedCall.submit_ids`); None: submitted."""


class Inference:
    def __init__(self, manager: ModelManager, plane: DataPlane, metrics: Metrics, *, max_texts_per_request: int,
                 tracing: Any = None, sampling: LogSampling = EVERY_CALL) -> None:
        self._manager = manager
        self._plane = plane
        self._metrics = metrics
        self._sampling = sampling
        self._max_texts = max_texts_per_request
        self._tracing = tracing

    async def infer(self, call: InferCall) -> InferReply:
        started = time.monotonic()
        record = CallRecord(request_id="", model=call.model, version=call.version)
        self._metrics.in_flight.inc()
        try:
            reply = await self._on_the_call_path(call, record)
            if reply is None:
                reply = await self._on_the_python_path(call, record)
            self._finish(record, started, "OK", call.transport, after_reply=True)
            return reply
        except ServiceError as e:
            self._finish(record, started, e.code.name, call.transport, error=e.message)
            raise CallFailed(e, record.request_id) from None
        except BaseException as e:
            if not isinstance(e, Exception):  # cancelled: the caller went away
                self._finish(record, started, "CANCELLED", call.transport)
                raise
            log.exception("request_failed", request_id=record.request_id, model=call.model)
            self._finish(record, started, "INTERNAL", call.transport)
            raise CallFailed(ServiceError(f"internal error; request id {record.request_id}"),
                             record.request_id) from None
        finally:
            self._metrics.in_flight.dec()

    async def _on_the_call_path(self, call: InferCall, record: CallRecord) -> InferReply | None:
        """The call in one crossing (`start_call`), answered as the reply's tensors; None when the data plane
        left it to the Python path."""
        plane = self._plane
        token, answer = plane.expect()
        try:
            started = self._start(call, token, INLINE_MAX_CHARS)
            if started.passed == "long_texts":  # tokenizing them would hold the loop: the tokenizer pool does it
                started = await asyncio.get_running_loop().run_in_executor(
                    plane.tokenize_pool, self._start, call, token, None, started.request_id)
        except BaseException:
            plane.forget(token)
            raise
        record.request_id = started.request_id
        record.trace_id, record.parent_span_id, record.sampled, record.tracestate = started.trace
        record.texts = started.texts
        if started.call is None:
            plane.forget(token)
            if started.error is not None:
                raise (TooManyTexts if started.too_many_texts else InvalidArgument)(started.error)
            return None
        record.version, record.route = started.version, started.route
        try:
            if started.tokenize is not None:
                await self._submit_ids(call, started)
            code, message, tensors, timings = await answer
        except BaseException:
            # Cancelled (or its tokenizing failed): its texts leave the queue, a running batch finishes and its
            # answer is dropped; a call never submitted gives its lease back.
            started.call.cancel()
            plane.forget(token)
            raise
        if tensors is None:
            raise failure_of(code, message, timings["retry_after_s"])
        record.batch_size = int(timings["batch_size"])
        record.queue_s, record.tokenize_s, record.engine_s = timings["queue_s"], timings["tokenize_s"], \
            timings["engine_s"]
        return InferReply(request_id=record.request_id, model=call.model, version=started.version, id=call.id,
                          tensors=tensors, token_count=int(timings["tokens"]))

    async def _submit_ids(self, call: InferCall, started: Started) -> None:
        """A version on HF tokenizers: its texts tokenized on the tokenizer pool, submitted as ids (the second
        crossing; start_call checked that the queue takes them at one token a text)."""
        instance = self._manager.instance_of(call.model, started.version)
        assert instance is not None and started.tokenize is not None  # leased: not closed
        began = time.monotonic()
        ids, seconds, encodings = await asyncio.get_running_loop().run_in_executor(
            self._plane.tokenize_pool, instance.tokenize_rows, *started.tokenize)
        tokens = None if encodings is None else [(encoding.spans, encoding.chars_read) for encoding in encodings]
        started.call.submit_ids(ids, None if call.deadline is None else call.deadline - time.monotonic(),
                                time.monotonic() - began, seconds, tokens)

    def _start(self, call: InferCall, token: int, inline_chars: int | None, request_id: str = "") -> Started:
        """`request_id`: the one a first try chose (a call keeps one id, and routes by it when it has no key)."""
        return Started(*engine_ext.start_call(
            self._plane.routes, call.model, call.version, call.inputs, call.outputs, call.raw_input_contents,
            call.scores, call.routing_key, self._max_texts, call.aggregation, call.priority, call.prompt_name,
            call.dimensions, call.embedding_type, call_headers(call, request_id),
            None if call.deadline is None else call.deadline - time.monotonic(), self._plane.completions, token,
            inline_chars, call.top_k, call.threshold))

    async def _on_the_python_path(self, call: InferCall, record: CallRecord) -> InferReply:
        """A call the data plane did not route: a model or version the route table does not hold, which the
        manager's lease refuses by name (or, in a race with a swap, serves)."""
        prepared = prepare(call, max_texts_per_request=self._max_texts, request_id=record.request_id)
        decoded = decoded_call(prepared)
        with self._manager.lease(call.model, version=call.version, routing_key=prepared.routing_key) as lease:
            lv = lease.version
            record.version, record.route = lv.version, lease.route
            assert lv.batcher is not None and lv.instance is not None  # READY versions always have both
            served = lv.instance.served
            check_outputs(decoded, served, call.model)
            read = prompted_texts(decoded, served)
            result = await lv.batcher.infer(read, deadline=call.deadline, pairs=decoded.pairs, bulk=decoded.bulk)
        tensors = encode_tensors(decoded, served, result.outputs, result.tokens)
        record.answered(result)
        return InferReply(request_id=record.request_id, model=call.model, version=lv.version, id=call.id,
                          tensors=tensors, token_count=result.token_count)

    def _finish(self, record: CallRecord, started: float, status: str, transport: str, error: str = "", *,
                after_reply: bool = False) -> None:
        """Time the call now and write its record: at once, or (`after_reply`, an answered call) once the loop has
        written its reply, so the caller does not wait for its line and metrics."""
        record.status, record.error, record.total_s = status, error, time.monotonic() - started
        write = functools.partial(log_call, self._metrics, record, transport=transport, tracing=self._tracing,
                                  sampling=self._sampling)
        if after_reply:
            self._plane.after_reply(write)
        else:
            write()

    def describe(self, name: str, version: str = "") -> ModelDescription:
        """ModelMetadata: the model's versions, input and output (the version's, else the first routed one's)."""
        route = self._manager.route_table.models.get(name)
        if route is None:
            if name in self._manager.wanted_models():
                raise Unavailable(self._manager.not_ready_reason(name))
            raise NotFound(f"unknown model '{name}'")
        if version and version not in route.versions:
            failure = self._manager.version_failure(name, version)
            if failure:
                raise Unavailable(f"model '{name}' version '{version}' failed to load: {failure}")
            raise NotFound(f"model '{name}' has no loaded version '{version}'")
        chosen = route.versions[version] if version else next(iter(route.versions.values()))
        if chosen.instance is None:  # closed between the table read and here: describe what it was
            return ModelDescription(name, sorted(route.versions), "onnxruntime_onnx", [(INPUT_NAME, "BYTES", [-1])],
                                    [(CLASSIFIER.wire_output, "FP32", [-1, -1])], {})
        inputs, outputs, parameters = chosen.instance.served.metadata()
        return ModelDescription(name, sorted(route.versions), "onnxruntime_onnx", inputs, outputs, parameters)


def call_headers(call: InferCall, request_id: str = "") -> tuple[str, ...]:
    """The call's CALL_HEADERS, in order ('' when absent); `request_id` in x-request-id's place when given."""
    headers = tuple(call.headers.get(name, "") for name in CALL_HEADERS)
    return (request_id, *headers[1:]) if request_id else headers


def prepare(call: InferCall, *, max_texts_per_request: int, request_id: str = "") -> Any:
    """The call's first steps by the C++ rules, in the native front end's order and one crossing
    (`engine_ext.PreparedCall`: request id, trace context, the decoded call, routing key, or the refusal)."""
    return engine_ext.prepare_call(call.inputs, call.outputs, call.raw_input_contents, call.scores,
                                   call.routing_key, max_texts_per_request, call.aggregation, call.priority,
                                   call.prompt_name, call.dimensions, call.embedding_type,
                                   call_headers(call, request_id), call.top_k, call.threshold)


def decoded_call(prepared: Any) -> Any:
    """The prepared call's `engine_ext.DecodedCall` (texts, pairs, outputs, probabilities, raw_output, routing_key,
    prompt_name, dimensions), or InvalidArgument (TooManyTexts past max_texts_per_request) naming the first rule it
    breaks."""
    if prepared.error is not None:
        raise (TooManyTexts if prepared.too_many_texts else InvalidArgument)(prepared.error)
    return prepared.call


def check_outputs(decoded: Any, served: ServedOutput, model: str) -> None:
    """InvalidArgument unless the leased version takes the call's inputs (TEXT_PAIR exactly when it takes pairs),
    answers every requested output, keeps the prompt it names and answers the dimensions it asks for (C++ wire
    rules)."""
    try:
        engine_ext.check_outputs(decoded, served.wire, model)
    except engine_ext.WireError as e:
        raise InvalidArgument(str(e)) from None


def prompted_texts(decoded: Any, served: ServedOutput) -> list[str]:
    """The texts the model reads: each after the prompt the call names, else as sent (C++ wire rules)."""
    if decoded.prompt_name is None:
        return decoded.texts
    return engine_ext.prompted_texts(decoded, served.wire)


def encode_tensors(decoded: Any, served: ServedOutput, values: np.ndarray,
                   tokens: list[TokenEncoding] | None = None) -> list[Any]:
    """The reply's output tensors for the version's `values` (float32 [texts, columns]; a token classifier's with
    its texts' `tokens`), by the C++ wire rules."""
    token_rows = None if tokens is None else [(t.spans, t.chars_read) for t in tokens]
    return list(engine_ext.encode_outputs(decoded, served.wire, np.ascontiguousarray(values, dtype=np.float32),
                                          tokens=token_rows))
