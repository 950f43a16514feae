"""Traces: with `otlp_endpoint` set, every ModelInfer is exported as OpenTelemetry spans over OTLP/gRPC, parented to
the caller's trace context, so a slow call behind a mesh can be found.

    ModelInfer (SERVER span, the caller's traceparent/B3 span as parent)
      ├─ tokenize   ├─ queue   ├─ engine   └─ reply          children laid end to end by the batcher's timings

One call's record (request_log.CallFields: the Python front end's CallRecord or the native front end's RequestEvent)
becomes its spans after it ended, with the times it ran at; the caller's context was parsed by the C++ wire rules
(`parse_trace_context`: W3C traceparent and tracestate, else B3). A call without one starts a trace whose id is its
request id when that is 32 hex digits (so a log line's request_id finds its trace), else a random one. The caller's
sampled flag decides; without one, `trace_sample_ratio` of the trace ids do (the same ids on every replica).

The OpenTelemetry SDK and its OTLP exporter are the optional extra `tracing` (pip install 'ortserve[tracing]'),
imported only when tracing is on.
"""

from __future__ import annotations

import contextvars
import random
import re
import time
from typing import Any

from ortserve import __version__
from ortserve.service.request_log import CallFields

HEX32 = re.compile(r"[0-9a-f]{32}")
_next_trace_id: contextvars.ContextVar[int] = contextvars.ContextVar("ortserve_next_trace_id", default=0)


class TracingUnavailable(RuntimeError):
    """otlp_endpoint is set, but the OpenTelemetry SDK is not installed."""


def call_trace_id(call: CallFields) -> str:
    """The call's trace: the caller's, else its request id when that is 32 hex digits (not all zeros), else ""."""
    if call.trace_id:
        return call.trace_id
    if HEX32.fullmatch(call.request_id) and call.request_id.strip("0"):
        return call.request_id
    return ""


def sampled(trace_id: str, caller: int, ratio: float) -> bool:
    """The caller's decision (1 or 0), else the trace id's low 32 bits against `ratio` (every replica agrees)."""
    if caller >= 0:
        return caller == 1
    return int(trace_id[-8:], 16) < ratio * 2**32


class Tracing:
    """Owns the tracer provider and its batch exporter; `export` runs on whichever thread logs the call."""

    def __init__(self, endpoint: str, *, sample_ratio: float = 1.0, schedule_delay_ms: int = 1000) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
            from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
        except ImportError as e:
            raise TracingUnavailable(f"otlp_endpoint={endpoint!r} needs the OpenTelemetry SDK and its OTLP exporter: "
                                     f"pip install 'ortserve[tracing]' ({e})") from None

        class _ChosenTraceIds(RandomIdGenerator):
            """A root span takes the trace id `export` chose (call_trace_id); span ids stay random."""

            def generate_trace_id(self) -> int:
                chosen = _next_trace_id.get()
                return chosen or super().generate_trace_id()

        self._trace = trace
        self._otel = (NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags)
        self.endpoint = endpoint
        self.sample_ratio = sample_ratio
        insecure = not endpoint.startswith("https://")
        address = endpoint.removeprefix("https://").removeprefix("http://")
        self._provider = TracerProvider(resource=Resource.create({"service.name": "ortserve",
                                                                  "service.version": __version__}),
                                        id_generator=_ChosenTraceIds())
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=address, insecure=insecure),
                                                             schedule_delay_millis=schedule_delay_ms))
        self._tracer = self._provider.get_tracer("ortserve", __version__)

    def export(self, call: CallFields, *, transport: str, frontend: str) -> str:
        """The call's spans, when sampled; returns the trace id its log line names: the exported trace's, else the
        caller's ("" when it sent none)."""
        trace_id = call_trace_id(call) or f"{random.getrandbits(128):032x}"
        if not sampled(trace_id, call.sampled, self.sample_ratio):
            return call.trace_id
        NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags = self._otel
        end_ns = int(call.ended_unix * 1e9) if call.ended_unix else time.time_ns()
        start_ns = end_ns - int(call.total_s * 1e9)
        context = None
        if call.parent_span_id:
            parent = SpanContext(trace_id=int(trace_id, 16), span_id=int(call.parent_span_id, 16), is_remote=True,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED))
            context = self._trace.set_span_in_context(NonRecordingSpan(parent))
        attributes: dict[str, Any] = {
            "rpc.system": "grpc" if transport == "grpc" else "http", "ortserve.request_id": call.request_id,
            "ortserve.model": call.model, "ortserve.version": call.version, "ortserve.route": call.route,
            "ortserve.texts": call.texts, "ortserve.batch_size": call.batch_size, "ortserve.status": call.status,
            "ortserve.frontend": frontend or "python", "ortserve.transport": transport}
        token = _next_trace_id.set(int(trace_id, 16))
        try:
            span = self._tracer.start_span("ModelInfer", context=context, kind=SpanKind.SERVER, start_time=start_ns,
                                           attributes=attributes)
        finally:
            _next_trace_id.reset(token)
        if call.status != "OK":
            span.set_status(Status(StatusCode.ERROR, call.error or call.status))
        inside = self._trace.set_span_in_context(span)
        at = start_ns
        for name, seconds in (("tokenize", call.tokenize_s), ("queue", call.queue_s), ("engine", call.engine_s)):
            if seconds > 0 or call.status == "OK":  # an answered call has all four, a queue of 0 s included
                step_end = min(end_ns, at + int(seconds * 1e9))
                self._tracer.start_span(name, context=inside, start_time=at).end(end_time=step_end)
                at = step_end
        if call.status == "OK":
            self._tracer.start_span("reply", context=inside, start_time=at).end(end_time=end_ns)
        span.end(end_time=end_ns)
        return trace_id

    def close(self) -> None:
        """Exports what is pending and stops the exporter (shutdown)."""
        self._provider.shutdown()
