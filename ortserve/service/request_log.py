"""The one `request` log line, the request metrics and the trace of a ModelInfer call, whichever front end answered it.

Every front end describes a finished call by the same record: the Python side (gRPC and REST) fills a `CallRecord`,
the native front end's C++ side an `engine_ext.RequestEvent` with the same fields (the data plane's event thread reads
them); `log_call` turns either into the line, the series and, with tracing on, the spans (`tracing.Tracing`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from ortserve.service.logs import iso_utc
from ortserve.service.metrics import Metrics

log = structlog.get_logger("ortserve.request")


class CallFields(Protocol):
    """What a finished call's record holds (`CallRecord`, `engine_ext.RequestEvent`)."""

    request_id: str
    model: str
    version: str
    route: str
    texts: int
    batch_size: int
    queue_s: float
    tokenize_s: float
    engine_s: float
    total_s: float
    status: str
    error: str
    ended_unix: float
    trace_id: str
    parent_span_id: str
    sampled: int
    tracestate: str


class CallTracer(Protocol):
    def export(self, call: CallFields, *, transport: str, frontend: str) -> str:
        """The call's spans; returns its trace id ("" when not traced)."""


@dataclass(slots=True)
class CallRecord:
    """A call the Python front end answered, filled in as it goes."""

    request_id: str
    model: str
    version: str = ""
    """The version that answered, else the one the call pinned, else ""."""
    route: str = ""
    """"pin" or "bucket N"; "" when no version was chosen."""
    texts: int = 0
    """0 until the call decoded."""
    batch_size: int = 0
    queue_s: float = 0.0
    tokenize_s: float = 0.0
    engine_s: float = 0.0
    total_s: float = 0.0
    status: str = ""
    error: str = ""
    ended_unix: float = 0.0
    """0: now."""
    trace_id: str = ""
    """The caller's trace (32 hex digits), "" when it sent none."""
    parent_span_id: str = ""
    sampled: int = -1
    """The caller's sampling decision: 1, 0, or -1 when it made none."""
    tracestate: str = ""

    def answered(self, result: Any) -> None:
        """The batcher's timings of an answered call (data_plane.InferResult)."""
        self.batch_size = result.batch_size
        self.queue_s, self.tokenize_s, self.engine_s = result.queue_s, result.tokenize_s, result.engine_s


@dataclass(frozen=True, slots=True)
class LogSampling:
    """Which calls get a `request` line (settings request_log_sample, latency_slo_p99_ms): every failed one, every
    one that took `slow_s` or more, and of the rest the share `share`, chosen by request id, so that a call's line is
    there or not whoever looks. A line per call cost tens of MB a minute under load; metrics and traces still count
    every call."""

    share: float = 1.0
    slow_s: float = 0.0

    def keeps(self, call: CallFields) -> bool:
        if call.status != "OK" or call.total_s >= self.slow_s or self.share >= 1.0:
            return True
        return zlib.crc32(call.request_id.encode()) < self.share * 2**32


EVERY_CALL = LogSampling()


def log_call(metrics: Metrics, call: CallFields, *, frontend: str = "", transport: str = "grpc",
             tracing: CallTracer | None = None, sampling: LogSampling = EVERY_CALL) -> None:
    """Count the call (its texts on OK), export its spans (`tracing`), and, when `sampling` keeps it, write its line:
    request_id, model, version, route, texts, the batch's timings on OK, status, total_ms, frontend (native),
    transport (grpc or http), then trace_id and error where set."""
    model = call.model or "none"
    version = call.version or "none"
    if call.status == "OK":
        m = metrics.for_version(model, version)
        m.ok.inc()
        m.request_seconds.observe(call.total_s)
        m.texts.inc(call.texts)
        m.queue_seconds.observe(call.queue_s)
        m.tokenize_seconds.observe(call.tokenize_s)
    else:
        metrics.requests.labels(model, version, call.status).inc()
    trace_id = tracing.export(call, transport=transport, frontend=frontend) if tracing is not None else call.trace_id
    if not sampling.keeps(call):
        return
    fields: dict[str, Any] = {"request_id": call.request_id, "model": call.model, "version": call.version or None}
    if call.route:
        fields["route"] = call.route
    if call.texts:
        fields["texts"] = call.texts
    if call.status == "OK":
        fields.update(batch_size=call.batch_size, queue_ms=ms(call.queue_s), tokenize_ms=ms(call.tokenize_s),
                      engine_ms=ms(call.engine_s))
    fields.update(status=call.status, total_ms=ms(call.total_s))
    if frontend:
        fields["frontend"] = frontend
    fields["transport"] = transport
    if trace_id:
        fields["trace_id"] = trace_id
    if call.error:
        fields["error"] = call.error
    if call.ended_unix:
        fields["timestamp"] = iso_utc(call.ended_unix)  # when the reply went out, not when this line was written
    log.info("request", **fields)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
