"""Traces through the mesh: the caller's W3C or B3 context on either transport and either front end reaches the
request line, and with --otlp-endpoint each call's spans reach a real OTLP/gRPC receiver on loopback, parented to
the caller's span."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
from support.otlp import Receiver, Span, otlp_receiver
from support.server_process import ServerProcess, infer_request, running_server, stub_for

SERVER_KIND = 2  # OTLP Span.SpanKind SPAN_KIND_SERVER
STATUS_ERROR = 2  # OTLP Status.StatusCode STATUS_CODE_ERROR
CHILDREN = ["tokenize", "queue", "engine", "reply"]


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def receiver() -> Iterator[tuple[str, Receiver]]:
    with otlp_receiver() as r:
        yield r


@pytest.fixture(scope="module")
def traced(tiny_bundle: Path, frontend: str, receiver: tuple[str, Receiver]) -> Iterator[ServerProcess]:
    endpoint, _ = receiver
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend,
                         "--otlp-endpoint", endpoint], http=True) as server:
        yield server


def _trace_id(n: int, frontend: str) -> str:
    """A trace id of its own per test and front end (one receiver hears both front ends' servers)."""
    return f"{n:08x}" + ("a" if frontend == "python" else "b") * 24


def _grpc(server: ServerProcess, metadata: tuple[tuple[str, str], ...], *, model: str = "classifier") -> None:
    channel, stub = stub_for(server.address)
    with channel, contextlib.suppress(grpc.RpcError):
        stub.ModelInfer(infer_request(["the movie was great", "ok"], model=model), metadata=metadata, timeout=10)


def _rest(server: ServerProcess, headers: dict[str, str]) -> None:
    requests.post(f"http://127.0.0.1:{server.http_port}/v2/models/classifier/infer", headers=headers, timeout=10,
                  json={"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2],
                                    "data": ["the movie was great", "ok"]}]})


def _check_call_spans(spans: list[Span], *, trace_id: str, parent: str, frontend: str, transport: str) -> Span:
    (root,) = [s for s in spans if s.name == "ModelInfer"]
    assert (root.trace_id, root.parent_span_id, root.kind) == (trace_id, parent, SERVER_KIND)
    assert root.attributes["ortserve.model"] == "classifier" and root.attributes["ortserve.version"] == "1"
    assert root.attributes["ortserve.batch_size"] == 2 and root.attributes["ortserve.status"] == "OK"
    assert root.attributes["ortserve.transport"] == transport
    assert root.attributes["ortserve.frontend"] == (frontend if transport == "grpc" else "python")
    assert root.resource["service.name"] == "ortserve"
    children = sorted((s for s in spans if s is not root), key=lambda s: s.start_ns)
    assert [s.name for s in children] == CHILDREN
    for child in children:
        assert child.parent_span_id == root.span_id and child.trace_id == trace_id
        assert root.start_ns <= child.start_ns <= child.end_ns <= root.end_ns
    assert all(a.end_ns <= b.start_ns for a, b in itertools.pairwise(children))  # laid end to end
    return root


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_traceparent_call_is_exported_under_the_caller_s_span(traced: ServerProcess, receiver: tuple[str, Receiver],
                                                                frontend: str, transport: str) -> None:
    _, rx = receiver
    trace_id, parent = _trace_id(1 if transport == "grpc" else 2, frontend), "b7ad6b7169203331"
    headers = {"traceparent": f"00-{trace_id}-{parent}-01", "tracestate": "congo=t61rcWkgMzE",
               "x-request-id": f"w3c-{transport}"}
    if transport == "grpc":
        _grpc(traced, tuple(headers.items()))
    else:
        _rest(traced, headers)
    _check_call_spans(rx.trace(trace_id, spans=5), trace_id=trace_id, parent=parent, frontend=frontend,
                      transport=transport)
    assert traced.wait_event("request", request_id=f"w3c-{transport}")["trace_id"] == trace_id


@pytest.mark.parametrize("style", ["single", "multi"])
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_b3_headers_parent_the_call(traced: ServerProcess, receiver: tuple[str, Receiver], frontend: str,
                                    transport: str, style: str) -> None:
    _, rx = receiver
    trace_id = _trace_id(10 + (transport == "http") + 2 * (style == "multi"), frontend)
    parent = "e457b5a2e4d86bd1"
    headers = {"b3": f"{trace_id}-{parent}-1"} if style == "single" else {
        "x-b3-traceid": trace_id, "x-b3-spanid": parent, "x-b3-sampled": "1"}
    if transport == "grpc":
        _grpc(traced, tuple(headers.items()))
    else:
        _rest(traced, headers)
    _check_call_spans(rx.trace(trace_id, spans=5), trace_id=trace_id, parent=parent, frontend=frontend,
                      transport=transport)


def test_a_call_without_context_is_traced_under_its_request_id(traced: ServerProcess,
                                                               receiver: tuple[str, Receiver], frontend: str) -> None:
    _, rx = receiver
    request_id = _trace_id(20, frontend)
    _grpc(traced, (("x-request-id", request_id),))
    root = _check_call_spans(rx.trace(request_id, spans=5), trace_id=request_id, parent="", frontend=frontend,
                             transport="grpc")
    assert root.attributes["ortserve.request_id"] == request_id
    # A request id that is no trace id: a fresh trace, named on the call's line.
    _grpc(traced, (("x-request-id", f"order-77-{frontend}"),))
    logged = traced.wait_event("request", request_id=f"order-77-{frontend}")["trace_id"]
    (root,) = [s for s in rx.trace(logged, spans=5) if s.name == "ModelInfer"]
    assert root.attributes["ortserve.request_id"] == f"order-77-{frontend}"


def test_the_caller_s_no_is_respected_and_still_logged(traced: ServerProcess, receiver: tuple[str, Receiver],
                                                       frontend: str) -> None:
    _, rx = receiver
    unsampled, sampled = _trace_id(30, frontend), _trace_id(31, frontend)
    _grpc(traced, (("traceparent", f"00-{unsampled}-b7ad6b7169203331-00"), ("x-request-id", "unsampled-1")))
    _grpc(traced, (("traceparent", f"00-{sampled}-b7ad6b7169203331-01"),))
    rx.trace(sampled, spans=5)  # exported after the unsampled call: that one had its chance
    assert not [s for s in rx.spans if s.trace_id == unsampled]
    assert traced.wait_event("request", request_id="unsampled-1")["trace_id"] == unsampled


def test_a_failed_call_s_span_says_so(traced: ServerProcess, receiver: tuple[str, Receiver], frontend: str) -> None:
    _, rx = receiver
    trace_id = _trace_id(40, frontend)
    _grpc(traced, (("traceparent", f"00-{trace_id}-b7ad6b7169203331-01"),), model="nope")
    (root,) = rx.trace(trace_id, spans=1)
    assert root.status_code == STATUS_ERROR and root.attributes["ortserve.status"] == "NOT_FOUND"


def test_without_an_endpoint_the_line_still_names_the_trace(server: ServerProcess, frontend: str) -> None:
    """The shared server exports nothing; the caller's trace id still reaches its request line, both transports."""
    trace_id = _trace_id(50, frontend)
    _grpc(server, (("traceparent", f"00-{trace_id}-b7ad6b7169203331-01"), ("x-request-id", "plain-grpc")))
    _rest(server, {"b3": f"{trace_id}-e457b5a2e4d86bd1-1", "x-request-id": "plain-http"})
    assert server.wait_event("request", request_id="plain-grpc")["trace_id"] == trace_id
    line = server.wait_event("request", request_id="plain-http")
    assert (line["trace_id"], line["transport"]) == (trace_id, "http")


def test_the_sample_ratio_decides_for_calls_without_a_decision(tiny_bundle: Path,
                                                               receiver: tuple[str, Receiver]) -> None:
    endpoint, rx = receiver
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--otlp-endpoint", endpoint,
                         "--trace-sample-ratio", "0"]) as server:
        undecided, decided = _trace_id(60, "auto"), _trace_id(61, "auto")
        _grpc(server, (("x-request-id", undecided),))
        _grpc(server, (("traceparent", f"00-{decided}-b7ad6b7169203331-01"),))
        rx.trace(decided, spans=5)
        assert not [s for s in rx.spans if s.trace_id == undecided]


def test_an_endpoint_without_the_sdk_stops_the_start_with_one_line(tiny_bundle: Path) -> None:
    """The SDK is the extra `tracing`: without it the server refuses to start rather than run untraced."""
    blocked = ("import sys; sys.modules['opentelemetry.sdk'] = None; from ortserve.service.cli import main; "
               "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", blocked, "serve", "--bundle", str(tiny_bundle), "--port", "0",
                           "--http-port", "0", "--no-metrics", "--otlp-endpoint", "http://127.0.0.1:4317"],
                          capture_output=True, text=True, timeout=60)
    output: Any = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "pip install 'ortserve[tracing]'" in output and "Traceback" not in output
