"""The native gRPC front end (engine_ext.Frontend) in front of a Python grpc.aio backend on a unix socket.

What it serves natively (ModelInfer on the tiny BERT bundle through a real ServedVersion, health, reflection)
and what it proxies (every other method, and any ModelInfer the wire rules refuse, which the backend answers with the
same rules' messages, through service/inference.py). Plus the wire rules themselves over plain values.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.certs import make_certs
from support.instances import options
from support.server_process import ask_classification
from support.v2_tensors import join_raw_bytes, split_raw_bytes

from ortserve.bundle.kinds import CLASSIFIER
from ortserve.engine_ext import VersionOutput, _engine
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve.service import codec, inference
from ortserve.service.errors import InvalidArgument
from ortserve.service.instance import ModelInstance
from ortserve.service.served_output import ServedOutput

if not _engine.HAS_FRONTEND:
    pytest.skip(f"native front end not built: {_engine.FRONTEND_MISSING}", allow_module_level=True)

from ortserve.engine_ext import (
    BatcherSettings,
    EventSink,
    Frontend,
    Lanes,
    Routes,
    ServedVersion,
    classification_top_k,
)

MAX_TEXTS = 8
MODEL = "classifier"


class _Front:
    """A Frontend and the Routes it reads (in the server the data plane owns them and the manager sets them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.routes = Routes()
        self._frontend = Frontend(*args, routes=self.routes, **kwargs)

    def set_routes(self, table: dict[str, tuple[Any, ...]]) -> None:
        self.routes.set(table)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._frontend, name)
TEXTS = ["the movie was great", "ok", "a much longer sentence about the weather, neither good nor bad", "hello"]


# ---- the Python backend ---------------------------------------------------------------------------------


class _Servicer(pb_grpc.GRPCInferenceServiceServicer):
    """Stands in for the real servicer: records what reached it, answers with the wire rules' errors."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def _record(self, method: str, context: Any) -> dict[str, Any]:
        metadata = dict(context.invocation_metadata() or ())
        self._backend.calls.append((method, metadata))
        return metadata

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        metadata = self._record("ServerMetadata", context)
        await context.send_initial_metadata((("x-backend", "python"),))
        context.set_trailing_metadata((("x-echo", str(metadata.get("x-echo", ""))), ("x-bin-bin", b"\x00\xff")))
        return pb.ServerMetadataResponse(name="python")

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        self._record("ServerLive", context)
        return pb.ServerLiveResponse(live=False)  # the native answer says True: tells who answered

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        self._record("ModelMetadata", context)
        context.set_trailing_metadata((("x-request-id", "r-1"), ("grpc-retry-pushback-ms", "25")))
        await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model '{request.name}'")
        raise AssertionError("abort raises")

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        self._record("ModelInfer", context)
        try:
            _python_checks(request)
        except InvalidArgument as e:
            await context.abort(e.code, e.message)
        return pb.ModelInferResponse(model_name=request.model_name, model_version="python", id=request.id)


# What the tiny bundle's version answers (conftest's tiny_bundle: the default labels).
SERVED = ServedOutput(kind=CLASSIFIER, name="LOGITS", labels=("negative", "positive"), columns=2)


def _decode(request: pb.ModelInferRequest, *, max_texts_per_request: int) -> Any:
    """The message by the wire rules, as the Python front end reads it (codec.call_from, then inference.prepare)."""
    prepared = inference.prepare(codec.call_from(request, {}, None), max_texts_per_request=max_texts_per_request)
    return inference.decoded_call(prepared)


def _python_checks(request: pb.ModelInferRequest, served: ServedOutput = SERVED) -> list[str]:
    """What handlers.ModelInfer checks before it runs the model, in its order; raises InvalidArgument."""
    call = _decode(request, max_texts_per_request=MAX_TEXTS)
    inference.check_outputs(call, served, request.model_name)
    return list(call.texts)


class Backend:
    """A grpc.aio server on its own event loop thread, listening on a unix socket."""

    def __init__(self, socket: Path) -> None:
        self.address = f"unix:{socket}"
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="backend-loop", daemon=True)
        self._server: grpc.aio.Server | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)

    async def _start(self) -> None:
        server = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(_Servicer(self), server)

        async def status(request: bytes, context: Any) -> bytes:
            self.calls.append(("Status", dict(context.invocation_metadata() or ())))
            return b'{"models": {}}'

        handler = grpc.unary_unary_rpc_method_handler(
            status, request_deserializer=lambda b: b, response_serializer=lambda b: b
        )
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("ortserve.admin.v1.Admin",
                                                                              {"Status": handler})])
        server.add_insecure_port(self.address)
        await server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    b = Backend(tmp_path_factory.mktemp("fe") / "backend.sock")
    b.start()
    yield b
    b.stop()


# ---- the native side ------------------------------------------------------------------------------------


@dataclass
class Native:
    classifier: ModelInstance
    lanes: Any
    sink: Any
    version: Any

    def reference(self, texts: list[str]) -> np.ndarray:
        """The Python ModelInstance, one text per run (no batching, no padding)."""
        return np.concatenate([self.classifier.run(self.classifier.tokenize([t])) for t in texts])

    def requests(self) -> list[Any]:
        return [e for e in self.sink.drain(4096, 0.0) if isinstance(e, _engine.RequestEvent)]


def _native(bundle: Path, version: str = "1") -> Native:
    classifier = ModelInstance.load(bundle, options(intra_op_threads=1, narrow_engine=True), tokenizer="native")
    lanes = Lanes(2, 1)
    sink = EventSink()
    settings = BatcherSettings(
        max_batch_size=32, max_queue_delay_s=0.002, max_padding_ratio=1.3, batch_overhead_tokens=0,
        max_batch_tokens=1024, sort_window=24, max_queue_items=256, default_timeout_s=0.0, engine_concurrency=2,
    )
    native = ServedVersion(MODEL, version, text_model=classifier.text_model, settings=settings, lanes=lanes,
                           events=sink)
    return Native(classifier, lanes, sink, native)


def _routes(native: Native, *, outputs: bool = True) -> dict[str, tuple[Any, ...]]:
    """The table manager.data_plane_routes sets: with each version's outputs (ModelInstance.served.wire)."""
    served = ServedOutput.of(native.classifier.manifest)
    if not outputs:
        return {MODEL: (["1"], [10000], {"1": native.version})}
    return {MODEL: (["1"], [10000], {"1": native.version}, {"1": served.wire})}


@pytest.fixture(scope="module")
def native(tiny_bundle: Path) -> Iterator[Native]:
    n = _native(tiny_bundle)
    yield n
    n.version.close()
    n.lanes.stop()
    n.classifier.close()


def _frontend(backend: Backend, sink: Any, address: str = "127.0.0.1:0") -> Any:
    return _Front(address, backend.address, events=sink, max_message_bytes=1 << 20, max_header_bytes=1 << 16,
                    max_texts_per_request=MAX_TEXTS)


@pytest.fixture(scope="module")
def frontend(backend: Backend, native: Native) -> Iterator[tuple[Any, int]]:
    fe = _frontend(backend, native.sink)
    port = fe.start()
    fe.set_routes(_routes(native))
    yield fe, port
    fe.shutdown(0)


@pytest.fixture(scope="module")
def channel(frontend: tuple[Any, int]) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{frontend[1]}") as ch:
        yield ch


@pytest.fixture
def stub(channel: grpc.Channel) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(channel)


def _request(texts: list[str], *, model: str = MODEL, raw: bool = False, version: str = "",
             binary_data: bool | None = None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, model_version=version, id="call-7")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
    if raw:
        request.raw_input_contents.append(join_raw_bytes([t.encode() for t in texts]))
    else:
        tensor.contents.bytes_contents.extend(t.encode() for t in texts)
    if binary_data is not None:
        request.outputs.add(name="LOGITS").parameters["binary_data"].bool_param = binary_data
    return request


def _classify(texts: list[str], k: int, **asked: Any) -> pb.ModelInferRequest:
    return ask_classification(_request(texts), k, **asked)


def _classes(response: pb.ModelInferResponse) -> list[list[bytes]]:
    out = response.outputs[0]
    assert out.name == "LOGITS" and out.datatype == "BYTES"
    rows, k = list(out.shape)
    if response.raw_output_contents:
        flat = split_raw_bytes(response.raw_output_contents[0])
    else:
        flat = list(out.contents.bytes_contents)
    assert len(flat) == rows * k
    return [flat[r * k:(r + 1) * k] for r in range(rows)]


def _logits(response: pb.ModelInferResponse) -> np.ndarray:
    out = response.outputs[0]
    assert out.name == "LOGITS" and out.datatype == "FP32"
    if response.raw_output_contents:
        values = np.frombuffer(response.raw_output_contents[0], dtype="<f4")
    else:
        values = np.array(out.contents.fp32_contents, dtype=np.float32)
    return values.reshape(list(out.shape))


# ---- proxied calls --------------------------------------------------------------------------------------


def test_proxied_unary_carries_metadata_both_ways(stub: Any, backend: Backend) -> None:
    response, call = stub.ServerMetadata.with_call(
        pb.ServerMetadataRequest(), metadata=(("x-echo", "hello"), ("x-blob-bin", b"\x00\x01\x02"))
    )
    assert response.name == "python"
    assert ("x-backend", "python") in call.initial_metadata()
    trailers = dict(call.trailing_metadata())
    assert trailers["x-echo"] == "hello" and trailers["x-bin-bin"] == b"\x00\xff"
    method, seen = backend.calls[-1]
    assert method == "ServerMetadata" and seen["x-echo"] == "hello" and seen["x-blob-bin"] == b"\x00\x01\x02"


def test_server_live_and_ready_are_answered_natively(backend: Backend, native: Native) -> None:
    fe = _frontend(backend, native.sink)
    port = fe.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            before = len(backend.calls)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=5).live
            assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready  # "" not set yet
            fe.set_health("", True)
            assert stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready
            fe.set_health("", False)
            assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready
            fe.set_health("", True)
            assert backend.calls[before:] == []  # none of them reached Python
            # A body that is not a ServerLiveRequest goes to the backend, whose error the caller gets.
            garbage = ch.unary_unary("/inference.GRPCInferenceService/ServerLive")
            with pytest.raises(grpc.RpcError) as err:
                garbage(b"\xff\xff\xff", timeout=5)
            assert "Error parsing message with type 'inference.ServerLiveRequest'" in (err.value.details() or "")
    finally:
        fe.shutdown(1.0)


def test_proxied_error_keeps_status_message_and_trailers(stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelMetadata(pb.ModelMetadataRequest(name="nope"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "unknown model 'nope'"
    trailers = dict(err.value.trailing_metadata())
    assert trailers["x-request-id"] == "r-1" and trailers["grpc-retry-pushback-ms"] == "25"


def test_generic_methods_go_to_the_backend(channel: grpc.Channel) -> None:
    status = channel.unary_unary("/ortserve.admin.v1.Admin/Status")
    assert status(b"", timeout=10) == b'{"models": {}}'
    with pytest.raises(grpc.RpcError) as err:
        channel.unary_unary("/no.Such/Method")(b"x", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as err:  # a method of the registered service that the backend lacks
        channel.unary_unary("/inference.GRPCInferenceService/NoSuchMethod")(b"", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_model_outside_the_native_table_is_proxied(stub: Any, backend: Backend) -> None:
    response = stub.ModelInfer(_request(["hello"], model="other"))
    assert response.model_version == "python" and backend.methods()[-1] == "ModelInfer"


def test_pinned_unknown_version_is_proxied(stub: Any, backend: Backend) -> None:
    response = stub.ModelInfer(_request(["hello"], version="7"))
    assert response.model_version == "python" and backend.methods()[-1] == "ModelInfer"


def _bad_requests() -> dict[str, pb.ModelInferRequest]:
    wrong_type = _request(["hello"])
    wrong_type.inputs[0].datatype = "FP32"
    bad_utf8 = _request(["x"])
    bad_utf8.inputs[0].contents.bytes_contents[0] = b"ok \xff\xfe"
    surrogate = _request(["x"], raw=True)
    surrogate.raw_input_contents[0] = join_raw_bytes([b"\xed\xa0\x80"])
    truncated = _request(["hello"], raw=True)
    truncated.raw_input_contents[0] = truncated.raw_input_contents[0][:-1]
    bad_key = _request(["hello"])
    bad_key.parameters["routing_key"].int64_param = 3
    wrong_output = _request(["hello"])
    wrong_output.outputs.add(name="PROBS")
    embedding = _request(["hello"])
    embedding.outputs.add(name="EMBEDDING")
    twice = _request(["hello"])
    twice.outputs.add(name="LOGITS")
    twice.outputs.add(name="LOGITS")
    k_zero = _classify(["hello"], 0)
    k_string = _request(["hello"])
    k_string.outputs.add(name="LOGITS").parameters["classification"].string_param = "2"
    bad_scores = _classify(["hello"], 1, scores="softmax")
    scores_alone = _request(["hello"])
    scores_alone.parameters["scores"].string_param = "probabilities"
    return {
        "EMBEDDING from a classifier": embedding,
        "output twice": twice,
        "classification 0": k_zero,
        "classification not an integer": k_string,
        "scores not a mode": bad_scores,
        "scores without classification": scores_alone,
        "wrong datatype": wrong_type,
        "bad utf-8": bad_utf8,
        "surrogate": surrogate,
        "truncated raw": truncated,
        "too many texts": _request(["t"] * (MAX_TEXTS + 1)),
        "routing_key not a string": bad_key,
        "unknown output": wrong_output,
    }


@pytest.mark.parametrize("case", sorted(_bad_requests()))
def test_bad_inputs_reach_the_backend(stub: Any, backend: Backend, native: Native, case: str) -> None:
    request = _bad_requests()[case]
    with pytest.raises(InvalidArgument) as python:
        _python_checks(request)
    before = len(backend.calls)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == python.value.message
    assert backend.methods()[before:] == ["ModelInfer"]


# ---- native ModelInfer ----------------------------------------------------------------------------------


def test_native_infer_equals_the_python_classifier(stub: Any, backend: Backend, native: Native) -> None:
    native.requests()
    before = len(backend.calls)
    for i, text in enumerate(TEXTS):
        response, call = stub.ModelInfer.with_call(_request([text], raw=i % 2 == 1),
                                                   metadata=(("x-request-id", f"native-{i}"),))
        assert (response.model_name, response.model_version, response.id) == (MODEL, "1", "call-7")
        assert response.raw_output_contents  # raw by default
        np.testing.assert_array_equal(_logits(response), native.reference([text]))
        trailers = dict(call.trailing_metadata())
        assert trailers["x-request-id"] == f"native-{i}" and trailers["x-model-version"] == "1"
    batched = stub.ModelInfer(_request(TEXTS))
    np.testing.assert_allclose(_logits(batched), native.reference(TEXTS), rtol=1e-5, atol=1e-6)
    assert len(backend.calls) == before  # nothing was proxied

    records = {r.request_id: r for r in native.requests()}
    r = records["native-0"]
    assert (r.model, r.version, r.texts, r.status, r.error) == (MODEL, "1", 1, "OK", "")
    assert r.route.startswith("bucket ") and 0 <= int(r.route.split()[1]) < 10000
    assert r.batch_size >= 1 and r.total_s > 0
    assert abs(r.ended_unix - time.time()) < 60  # the wall clock when the reply went out (the log line's time)


def test_native_fp32_contents_when_binary_data_false(stub: Any, native: Native) -> None:
    response = stub.ModelInfer(_request(TEXTS[:2], binary_data=False))
    assert not response.raw_output_contents
    assert list(response.outputs[0].shape) == [2, len(native.classifier.labels)]
    np.testing.assert_allclose(_logits(response), native.reference(TEXTS[:2]), rtol=1e-5, atol=1e-6)
    raw = stub.ModelInfer(_request(TEXTS[:2], binary_data=True))
    assert raw.raw_output_contents and not raw.outputs[0].contents.fp32_contents


def test_native_classification_is_the_top_k_of_the_logits(stub: Any, backend: Backend, native: Native) -> None:
    labels = native.classifier.labels
    logits = native.reference(TEXTS)
    before = len(backend.calls)
    for k, scores, binary_data in [(1, None, None), (2, "probabilities", None), (9, "logits", False),
                                   (2, "probabilities", False)]:
        response = stub.ModelInfer(_classify(TEXTS, k, scores=scores, binary_data=binary_data))
        assert bool(response.raw_output_contents) == (binary_data is None)
        assert list(response.outputs[0].shape) == [len(TEXTS), min(k, len(labels))]  # k past the labels: clamped
        got = _classes(response)
        expected = classification_top_k(logits, list(labels), k, scores == "probabilities")
        # The engine's batched run may differ from one text alone in the last float bit: compare parsed values.
        for got_row, expected_row in zip(got, expected, strict=True):
            parsed = [entry.decode().split(":", 2) for entry in got_row]
            assert [(i, label) for _, i, label in parsed] == [tuple(e.decode().split(":", 2)[1:]) for e in
                                                               expected_row]
            assert [float(v) for v, _, _ in parsed] == pytest.approx(
                [float(e.decode().split(":", 1)[0]) for e in expected_row], abs=2e-6)
    assert len(backend.calls) == before  # all native


def test_classification_without_labels_in_the_table_goes_to_python(backend: Backend, native: Native) -> None:
    fe = _frontend(backend, native.sink)
    port = fe.start()
    try:
        fe.set_routes(_routes(native, outputs=False))  # a table set without outputs: LOGITS, labels unknown
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            assert _logits(stub.ModelInfer(_request(["hello"]))).shape == (1, 2)  # native
            before = len(backend.calls)
            assert stub.ModelInfer(_classify(["hello"], 1)).model_version == "python"
            assert backend.methods()[before:] == ["ModelInfer"]
    finally:
        fe.shutdown(0)


def test_a_version_answering_embedding_names_it_and_refuses_logits(backend: Backend, native: Native) -> None:
    fe = _frontend(backend, native.sink)
    port = fe.start()
    try:
        # The tiny classifier's session stands in for an embedding model's: the table says what the reply is named.
        embedding = VersionOutput("embedding", "EMBEDDING")
        fe.set_routes({MODEL: (["1"], [10000], {"1": native.version}, {"1": embedding})})
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            before = len(backend.calls)
            response = stub.ModelInfer(_request(TEXTS[:2]))
            assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [("EMBEDDING", "FP32", [2, 2])]
            explicit = _request(TEXTS[:2])
            explicit.outputs.add(name="EMBEDDING")
            assert stub.ModelInfer(explicit).outputs[0].name == "EMBEDDING"
            assert len(backend.calls) == before
            # LOGITS, or classification on EMBEDDING: the Python server's to answer (the real one names the error;
            # this stand-in answers as a classifier's would).
            for request in (_request(["x"], binary_data=True), _classify(["x"], 1, output="EMBEDDING")):
                with contextlib.suppress(grpc.RpcError):
                    stub.ModelInfer(request)
            assert backend.methods()[before:] == ["ModelInfer", "ModelInfer"]
    finally:
        fe.shutdown(0)


def test_pinned_known_version_is_native_with_route_pin(stub: Any, backend: Backend, native: Native) -> None:
    native.requests()
    before = len(backend.calls)
    request = _request(["pinned"], version="1")
    request.parameters["routing_key"].string_param = "user-3"
    stub.ModelInfer(request, metadata=(("x-request-id", "pin-1"),))
    assert len(backend.calls) == before
    records = {r.request_id: r for r in native.requests()}
    assert records["pin-1"].route == "pin"


def test_routing_key_picks_the_bucket(stub: Any, native: Native) -> None:
    native.requests()
    request = _request(["keyed"])
    request.parameters["routing_key"].string_param = "user-42"
    stub.ModelInfer(request, metadata=(("x-request-id", "key-1"), ("x-routing-key", "ignored")))
    stub.ModelInfer(_request(["keyed"]), metadata=(("x-request-id", "key-2"), ("x-routing-key", "user-42")))
    records = {r.request_id: r for r in native.requests()}
    expected = f"bucket {_engine.route_bucket(MODEL, 'user-42')}"
    assert records["key-1"].route == expected and records["key-2"].route == expected


def test_no_version_owns_the_bucket_is_proxied(backend: Backend, native: Native) -> None:
    fe = _frontend(backend, native.sink)
    port = fe.start()
    try:
        fe.set_routes({MODEL: ([], [], {"1": native.version})})  # a split that routes nothing
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            response = pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(_request(["hello"]))
        assert response.model_version == "python"
    finally:
        fe.shutdown(0)


# ---- health, reflection, binding, shutdown --------------------------------------------------------------


def test_health_check_and_watch_follow_set_health(frontend: tuple[Any, int], channel: grpc.Channel) -> None:
    fe, _ = frontend
    health = health_pb2_grpc.HealthStub(channel)
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    fe.set_health("", False)
    assert health.Check(health_pb2.HealthCheckRequest(service="")).status == not_serving
    fe.set_health("", True)
    assert health.Check(health_pb2.HealthCheckRequest(service="")).status == serving
    with pytest.raises(grpc.RpcError) as err:
        health.Check(health_pb2.HealthCheckRequest(service="never-set"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND

    fe.set_health("watched", False)
    updates: queue.Queue[int] = queue.Queue()
    watch = health.Watch(health_pb2.HealthCheckRequest(service="watched"))

    def read() -> None:
        try:
            for reply in watch:
                updates.put(reply.status)
        except grpc.RpcError as e:  # the cancel() below ends the stream
            if e.code() != grpc.StatusCode.CANCELLED:
                raise

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert updates.get(timeout=10) == not_serving
        fe.set_health("watched", True)
        assert updates.get(timeout=10) == serving
        fe.set_health("watched", False)
        assert updates.get(timeout=10) == not_serving
    finally:
        watch.cancel()
        reader.join(timeout=10)


def test_health_set_before_start_applies_at_start(backend: Backend, native: Native) -> None:
    fe = _frontend(backend, native.sink)
    fe.set_health("", False)
    fe.set_health("liveness", True)
    port = fe.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            assert health.Check(health_pb2.HealthCheckRequest(service="")).status == \
                health_pb2.HealthCheckResponse.NOT_SERVING
            assert health.Check(health_pb2.HealthCheckRequest(service="liveness")).status == \
                health_pb2.HealthCheckResponse.SERVING
    finally:
        fe.shutdown(0)


def test_reflection_lists_services(channel: grpc.Channel) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert {"inference.GRPCInferenceService", "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"} <= names


def test_binding_a_port_in_use_fails(frontend: tuple[Any, int], backend: Backend, native: Native) -> None:
    address = f"127.0.0.1:{frontend[1]}"
    second = _frontend(backend, native.sink, address)
    with pytest.raises(RuntimeError, match=address):
        second.start()
    second.shutdown(0)


def test_start_twice_fails(backend: Backend, native: Native) -> None:
    fe = _frontend(backend, native.sink)
    fe.start()
    try:
        with pytest.raises(RuntimeError, match="only once"):
            fe.start()
    finally:
        fe.shutdown(0)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def own_native(tiny_bundle: Path) -> Iterator[Native]:
    """A version on lanes of its own, which the test may pause."""
    n = _native(tiny_bundle)
    yield n
    n.lanes.resume()
    n.version.close()
    n.lanes.stop()
    n.classifier.close()


def test_shutdown_grace_lets_an_in_flight_call_finish(backend: Backend, own_native: Native) -> None:
    fe = _frontend(backend, own_native.sink)
    port = fe.start()
    fe.set_routes(_routes(own_native))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        health = health_pb2_grpc.HealthStub(ch)
        fe.set_health("", True)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        own_native.lanes.pause()  # the call is admitted but cannot run until resume()
        future = stub.ModelInfer.future(_request(["finish me"]), timeout=60)
        _wait_for(lambda: fe.in_flight == 1, "the call to be in flight")
        stopper = threading.Thread(target=fe.shutdown, args=(60.0,))
        stopper.start()
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING  # at once, before the call ends
        _wait_for(lambda: not _accepts(port), "the port to stop accepting calls")
        assert stopper.is_alive() and not future.done()  # shutdown waits for the call
        own_native.lanes.resume()
        response = future.result(timeout=30)
        watch.cancel()
        stopper.join(timeout=30)
        assert not stopper.is_alive()
    np.testing.assert_array_equal(_logits(response), own_native.reference(["finish me"]))
    assert fe.in_flight == 0
    fe.shutdown(1.0)  # idempotent


def _accepts(port: int) -> bool:
    """Whether a fresh connection gets a ServerLive call through (the front end answers it)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(), timeout=2)
        except grpc.RpcError:
            return False
        return True


def test_shutdown_after_grace_cancels_the_rest(backend: Backend, own_native: Native) -> None:
    fe = _frontend(backend, own_native.sink)
    port = fe.start()
    fe.set_routes(_routes(own_native))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        own_native.lanes.pause()
        future = stub.ModelInfer.future(_request(["never runs"]), timeout=60)
        _wait_for(lambda: fe.in_flight == 1, "the call to be in flight")
        fe.shutdown(0.0)
        with pytest.raises(grpc.RpcError) as err:
            future.result(timeout=30)
    assert err.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    assert fe.in_flight == 0
    records = [r for r in own_native.requests() if r.status != "OK"]
    assert [r.status for r in records] == ["CANCELLED"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _secure_infer(port: int, certs: Path, *, client_cert: bool) -> pb.ModelInferResponse:
    creds = grpc.ssl_channel_credentials(
        root_certificates=(certs / "ca.pem").read_bytes(),
        private_key=(certs / "client.key").read_bytes() if client_cert else None,
        certificate_chain=(certs / "client.pem").read_bytes() if client_cert else None,
    )
    with grpc.secure_channel(f"localhost:{port}", creds) as ch:
        return pb_grpc.GRPCInferenceServiceStub(ch).ModelInfer(_request(["secure"]), timeout=10)


def _plaintext_fails(port: int) -> None:
    with grpc.insecure_channel(f"localhost:{port}") as ch, pytest.raises(grpc.RpcError) as e:
        pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(), timeout=3)
    assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
def test_tls_and_mtls(backend: Backend, native: Native, certs: Path, mtls: bool) -> None:
    fe = _Front("127.0.0.1:0", backend.address, events=native.sink, max_message_bytes=1 << 20,
                  max_header_bytes=1 << 16, max_texts_per_request=MAX_TEXTS,
                  tls_cert=(certs / "server.pem").read_bytes(),
                  tls_key=(certs / "server.key").read_bytes(),
                  tls_client_ca=(certs / "ca.pem").read_bytes() if mtls else None)
    port = fe.start()
    fe.set_routes(_routes(native))
    try:
        response = _secure_infer(port, certs, client_cert=True)
        assert response.model_version == "1"
        np.testing.assert_array_equal(_logits(response), native.reference(["secure"]))
        if mtls:
            with pytest.raises(grpc.RpcError):
                _secure_infer(port, certs, client_cert=False)  # no client certificate, no call
        else:
            assert _secure_infer(port, certs, client_cert=False).model_version == "1"
        _plaintext_fails(port)
    finally:
        fe.shutdown(0)


def test_tls_options_go_together(backend: Backend, native: Native) -> None:
    with pytest.raises(ValueError, match="tls_cert and tls_key"):
        _Front("127.0.0.1:0", backend.address, events=native.sink, max_message_bytes=1024,
                 max_header_bytes=1024, max_texts_per_request=1, tls_cert=b"x")
    with pytest.raises(ValueError, match="tls_client_ca needs"):
        _Front("127.0.0.1:0", backend.address, events=native.sink, max_message_bytes=1024,
                 max_header_bytes=1024, max_texts_per_request=1, tls_client_ca=b"x")


# ---- the fast-path decoder against codec.py -------------------------------------------------------------

_UTF8_EDGES = [
    b"", b"\x00", "é".encode(), "中".encode(), "\U0001f600".encode(), "\U0010ffff".encode(),
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff",
    b"\xe2\x82", b"\xe2\x82\xac", b"\x80", b"a\xc3", b"\xee\x80\x80",
]
_VALID = st.text(max_size=8).map(str.encode)
_ELEMENT = st.one_of(_VALID, _VALID, _VALID, _VALID, _VALID, st.binary(max_size=6), st.sampled_from(_UTF8_EDGES))


@st.composite
def _requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    for n in range(draw(st.sampled_from([1] * 12 + [0, 2, 2, 2, 3]))):
        names = ["TEXT"] * 12 + ["text", "IDS"] if n == 0 else ["TEXT_PAIR"] * 8 + ["TEXT"] * 2 + ["IDS"]
        tensor = request.inputs.add(name=draw(st.sampled_from(names)),
                                    datatype=draw(st.sampled_from(["BYTES"] * 12 + ["FP32", ""])))
        elements = draw(st.lists(_ELEMENT, min_size=draw(st.sampled_from([1] * 9 + [0])), max_size=5))
        shape = draw(st.sampled_from([[len(elements)]] * 6 + [[len(elements), 1]] * 3 + [None]))
        if shape is None:
            shape = draw(st.lists(st.integers(-1, 7), max_size=3))
        tensor.shape.extend(shape)
        where = draw(st.sampled_from(["contents"] * 6 + ["raw"] * 6 + ["both", "raw2", "junk"]))
        if where in ("contents", "both"):
            tensor.contents.bytes_contents.extend(elements)
        if where in ("raw", "both"):
            request.raw_input_contents.append(join_raw_bytes(elements))
        if where == "raw2":
            request.raw_input_contents.extend([join_raw_bytes(elements)] * 2)
        if where == "junk":  # lengths that do not add up (or, by chance, do)
            buffer = join_raw_bytes(elements) + draw(st.binary(max_size=5))
            request.raw_input_contents.append(buffer[: draw(st.integers(0, len(buffer)))])
        if where == "contents" and draw(st.booleans()):
            tensor.contents.fp32_contents.append(1.0)  # other content fields: codec ignores them
    for name in draw(st.lists(st.sampled_from(["LOGITS"] * 8 + ["PROBS", "EMBEDDING"]), max_size=2)):
        out = request.outputs.add(name=name)
        k = draw(st.sampled_from(["absent"] * 5 + ["int"] * 3 + ["uint", "zero", "negative", "string", "double",
                                                                  "unset"]))
        param = out.parameters["classification"] if k != "absent" else None
        if k == "int":
            param.int64_param = draw(st.integers(1, 5))
        elif k == "uint":
            param.uint64_param = draw(st.sampled_from([1, 2, 2**63, 2**64 - 1]))
        elif k == "zero":
            param.int64_param = 0
        elif k == "negative":
            param.int64_param = -1
        elif k == "string":
            param.string_param = "2"
        elif k == "double":
            param.double_param = 2.0
        if draw(st.booleans()):
            out.parameters["binary_data"].bool_param = draw(st.booleans())
    scores = draw(st.sampled_from(["absent"] * 5 + ["logits", "probabilities", "probabilities", "softmax", "int"]))
    if scores == "int":
        request.parameters["scores"].int64_param = 1
    elif scores != "absent":
        request.parameters["scores"].string_param = scores
    key = draw(st.sampled_from(["absent"] * 4 + ["string"] * 3 + ["empty string", "int", "bool", "unset"]))
    param = request.parameters["routing_key"] if key != "absent" else None
    if key == "string":
        param.string_param = "user-1"
    elif key == "empty string":
        param.string_param = ""
    elif key == "int":
        param.int64_param = 1
    elif key == "bool":
        param.bool_param = True
    return request


Accepted = tuple[list[str], list[str] | None, list[tuple[str, int]], bool]


def _oracle_texts(request: pb.ModelInferRequest, index: int, max_texts: int) -> list[str] | None:
    tensor = request.inputs[index]
    shape = list(tensor.shape)
    if tensor.datatype != "BYTES" or not (len(shape) == 1 or shape[1:] == [1]) or not 1 <= shape[0] <= max_texts:
        return None
    if request.raw_input_contents:
        if tensor.HasField("contents") or len(request.raw_input_contents) != len(request.inputs):
            return None
        try:
            elements = split_raw_bytes(request.raw_input_contents[index])
        except ValueError:
            return None
    else:
        elements = list(tensor.contents.bytes_contents)
    if len(elements) != shape[0]:
        return None
    try:
        return [e.decode("utf-8") for e in elements]
    except UnicodeDecodeError:
        return None


def _oracle(request: pb.ModelInferRequest, max_texts: int) -> Accepted | None:
    """The wire rules restated over the message, independent of the decoder: (texts, pairs, outputs,
    probabilities) of a call they accept, None for one they refuse (docs/serving.md, Calling it)."""
    names = [t.name for t in request.inputs]
    if names.count("TEXT") != 1 or names.count("TEXT_PAIR") > 1 or set(names) - {"TEXT", "TEXT_PAIR"}:
        return None
    texts = _oracle_texts(request, names.index("TEXT"), max_texts)
    if texts is None:
        return None
    pairs = None
    if "TEXT_PAIR" in names:
        queries = _oracle_texts(request, names.index("TEXT_PAIR"), max_texts)
        if queries is None or len(queries) not in (1, len(texts)):
            return None
        # A pair is read query first: each row is (TEXT_PAIR's element, TEXT's), one row per element of TEXT.
        texts, pairs = queries * len(texts) if len(queries) == 1 else queries, texts
    outputs: list[tuple[str, int]] = []
    for out in request.outputs:
        if out.name in [name for name, _ in outputs]:
            return None
        k = 0
        if "classification" in out.parameters:
            param = out.parameters["classification"]
            choice = param.WhichOneof("parameter_choice")
            if choice not in ("int64_param", "uint64_param") or getattr(param, choice) < 1:
                return None
            k = min(getattr(param, choice), 2**63 - 1)
        outputs.append((out.name, k))
    probabilities = False
    if "scores" in request.parameters:
        param = request.parameters["scores"]
        if param.WhichOneof("parameter_choice") != "string_param" or param.string_param not in ("logits",
                                                                                                 "probabilities"):
            return None
        if not any(k for _, k in outputs):
            return None
        probabilities = param.string_param == "probabilities"
    if "routing_key" in request.parameters and \
            request.parameters["routing_key"].WhichOneof("parameter_choice") != "string_param":
        return None
    return texts, pairs, outputs, probabilities


def _decoded(request: pb.ModelInferRequest, max_texts: int) -> Accepted | None:
    try:
        call = _decode(request, max_texts_per_request=max_texts)
    except InvalidArgument:
        return None
    pairs = None if call.pairs is None else list(call.pairs)
    return list(call.texts), pairs, [(name, k) for name, k in call.outputs], call.probabilities


@given(request=_requests(), max_texts=st.sampled_from([1, 2, 3, 4, 5, 8, 8, 8]))
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_wire_rules_accept_exactly_what_they_state(request: pb.ModelInferRequest, max_texts: int) -> None:
    expected = _oracle(request, max_texts)
    event("accepted" if expected is not None else "refused")  # --hypothesis-show-statistics: both
    if expected is not None and expected[1] is not None:
        event("pairs")
    if expected is not None and expected[2]:
        event("with outputs" + (", classification" if any(k for _, k in expected[2]) else ""))
    assert _decoded(request, max_texts) == expected


@pytest.mark.parametrize("element", _UTF8_EDGES)
def test_utf8_as_python_decodes_it(element: bytes) -> None:
    request = _request(["x"])
    request.inputs[0].contents.bytes_contents[0] = element
    try:
        text = element.decode("utf-8")
    except UnicodeDecodeError as e:
        with pytest.raises(InvalidArgument, match=re.escape(f"element 0 is not valid UTF-8 ({e.reason} at byte "
                                                            f"{e.start})")):
            _decode(request, max_texts_per_request=4)
    else:
        assert list(_decode(request, max_texts_per_request=4).texts) == [text]


def test_many_outputs_are_decoded_and_named() -> None:
    request = _request(["x"])
    for i in range(9):
        request.outputs.add(name=f"OUT{i}")
    assert len(_decode(request, max_texts_per_request=4).outputs) == 9
    with pytest.raises(InvalidArgument, match="unknown output 'OUT0'"):
        _python_checks(request)


def _with_pairs(request: pb.ModelInferRequest, pairs: list[str], *, shape: list[int] | None = None,
                raw: bool = False) -> pb.ModelInferRequest:
    tensor = request.inputs.add(name="TEXT_PAIR", datatype="BYTES", shape=shape or [len(pairs)])
    if raw:
        request.raw_input_contents.append(join_raw_bytes([t.encode() for t in pairs]))
    else:
        tensor.contents.bytes_contents.extend(t.encode() for t in pairs)
    return request


@pytest.mark.parametrize(("value", "bulk"), [(None, None), ("bulk", True), ("interactive", False)])
def test_the_priority_parameter_names_the_batcher_s_class(value: str | None, bulk: bool | None) -> None:
    request = _request(["a"])
    if value is not None:
        request.parameters["priority"].string_param = value
    assert _decode(request, max_texts_per_request=4).bulk is bulk


@pytest.mark.parametrize(("set_it", "message"), [
    (lambda p: setattr(p, "string_param", "urgent"), "request parameter 'priority' must be 'interactive' or 'bulk', "
                                                     "got 'urgent'"),
    (lambda p: setattr(p, "int64_param", 1), "request parameter 'priority' must be a string (string_param), got "
                                             "int64_param")])
def test_a_bad_priority_is_refused_naming_the_choices(set_it: Any, message: str) -> None:
    request = _request(["a"])
    set_it(request.parameters["priority"])
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        _decode(request, max_texts_per_request=4)


def test_pairs_are_decoded_query_first_one_per_text_or_one_for_all() -> None:
    """A row is (TEXT_PAIR's element, TEXT's): the query first, as cross-encoders are trained; `texts` holds the
    queries, `pairs` TEXT's elements, and there is one row per element of TEXT."""
    both = _with_pairs(_request(["p1", "p2"]), ["q1", "q2"])
    assert _decoded(both, 4) == (["q1", "q2"], ["p1", "p2"], [], False)
    raw = _with_pairs(_request(["passage"], raw=True), ["q"], raw=True)
    assert _decoded(raw, 4) == (["q"], ["passage"], [], False)
    query = _with_pairs(_request(["a", "b", "c"]), ["query"])  # [1]: the one query for every text
    assert _decoded(query, 4) == (["query"] * 3, ["a", "b", "c"], [], False)
    column = _with_pairs(_request(["a", "b"]), ["x", "y"], shape=[2, 1])
    assert _decoded(column, 4) == (["x", "y"], ["a", "b"], [], False)


@pytest.mark.parametrize(("build", "message"), [
    (lambda: _with_pairs(_request(["a", "b", "c"]), ["x", "y"]),
     "input 'TEXT_PAIR' has shape [2] and input 'TEXT' shape [3]: send 'TEXT_PAIR' [3] (one per text) or [1]"),
    (lambda: _with_pairs(_with_pairs(_request(["a"]), ["x"]), ["y"]),
     "unexpected inputs ['TEXT', 'TEXT_PAIR', 'TEXT_PAIR']: a model takes 'TEXT', and a model of pairs also "
     "'TEXT_PAIR'"),
    (lambda: _with_pairs(_request(["a"]), ["x"], shape=[1, 2]),
     "input 'TEXT_PAIR' has shape [1, 2], expected [N] or [N, 1]"),
    (lambda: _with_pairs(_request(["a"], raw=True), ["x"]),
     "raw_input_contents has 1 entries, expected 2 (one per input)"),
    (lambda: _bad_pair_utf8(),
     "input 'TEXT_PAIR' element 0 is not valid UTF-8"),
])
def test_bad_pairs_name_the_input_and_shapes(build: Any, message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        _decode(build(), max_texts_per_request=4)


def _bad_pair_utf8() -> pb.ModelInferRequest:
    request = _request(["a"])
    request.inputs.add(name="TEXT_PAIR", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"\xff")
    return request


def test_raw_contents_and_shapes() -> None:
    request = _request(["a", "bé"], raw=True)
    assert _decoded(request, 2) == (["a", "bé"], None, [], False)
    assert _decoded(request, 1) is None  # more than max_texts
    request.inputs[0].shape[:] = [2, 1]
    assert _decoded(request, 2) == (["a", "bé"], None, [], False)
    request.raw_input_contents[0] += struct.pack("<I", 5) + b"abc"  # declares more bytes than remain
    with pytest.raises(InvalidArgument, match="element 2 declares 5 bytes but only 3 remain"):
        _decode(request, max_texts_per_request=4)
