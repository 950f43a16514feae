"""A real OTLP/gRPC trace receiver on loopback: the collector's TraceService, keeping every span it is sent."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._changed = threading.Condition()

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,
               context: grpc.ServicerContext) -> trace_service_pb2.ExportTraceServiceResponse:
        got = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    got.append(Span(trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                                    parent_span_id=s.parent_span_id.hex(), name=s.name, kind=s.kind,
                                    start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                                    status_code=s.status.code,
                                    attributes={a.key: _value(a.value) for a in s.attributes}, resource=resource))
        with self._changed:
            self.spans.extend(got)
            self._changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def trace(self, trace_id: str, *, spans: int, timeout: float = 20.0) -> list[Span]:
        """The spans of one trace once `spans` of them arrived (the exporter batches: wait, never sleep)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [s for s in self.spans if s.trace_id == trace_id]
                if len(found) >= spans:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(found)} of {spans} spans of trace {trace_id} arrived in {timeout}s; "
                                         f"traces seen: {sorted({s.trace_id for s in self.spans})}")
                self._changed.wait(left)


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Receiver]]:
    """(endpoint for --otlp-endpoint, the receiver)."""
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", receiver
    finally:
        server.stop(grace=None)
