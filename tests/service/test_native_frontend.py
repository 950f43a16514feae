"""`frontend = "native"`: what is specific to it, over real gRPC with a real server process.

The rest of the suite runs both front ends (the `frontend` fixture): inference, bad input, tritonclient, batching,
TLS, shutdown, canaries and swaps under load. Here: which calls the C++ side answers and which it passes on to the
Python server, that its log lines and metrics are the Python path's, and that a build without it says so.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.prometheus_text import metric
from support.reference import Reference
from support.server_process import ServerProcess, infer_request, logits_of, running_server, stub_for

from ortserve import engine_ext
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.service import cli
from ortserve.service.config import Settings
from ortserve.service.metrics import Metrics
from ortserve.service.native_frontend import NativeFrontend

needs_native = pytest.mark.skipif(not engine_ext.HAS_FRONTEND,
                                  reason=f"native front end not built: {engine_ext.FRONTEND_MISSING}")


@pytest.fixture(scope="module")
def native_server(tiny_bundle: Path) -> Iterator[ServerProcess]:
    if not engine_ext.HAS_FRONTEND:
        pytest.skip(f"native front end not built: {engine_ext.FRONTEND_MISSING}")
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", "native",
                         "--max-texts-per-request", "16"]) as s:
        yield s


@needs_native
def test_modelinfer_is_answered_natively_and_logged_like_the_python_path(native_server: ServerProcess,
                                                                         tiny_bundle: Path) -> None:
    channel, stub = stub_for(native_server.address)
    texts = ["a native call", "with two texts"]
    with channel:
        sent = time.time()
        response, call = stub.ModelInfer.with_call(infer_request(texts), metadata=(("x-request-id", "native-1"),))
        received = time.time()
    np.testing.assert_allclose(logits_of(response), Reference(tiny_bundle).logits(texts), atol=1e-5)
    trailers = dict(call.trailing_metadata())
    assert trailers["x-request-id"] == "native-1" and trailers["x-model-version"] == "1"
    line = native_server.wait_event("request", request_id="native-1")
    assert line["frontend"] == "native" and line["status"] == "OK"
    assert {"model": "classifier", "version": "1", "texts": 2}.items() <= line.items()
    assert line["route"].startswith("bucket ")
    # Stamped when the reply went out, not when the event thread wrote it.
    assert sent <= dt.datetime.fromisoformat(line["timestamp"]).timestamp() <= received
    for field in ("batch_size", "queue_ms", "tokenize_ms", "engine_ms", "total_ms"):
        assert line[field] >= 0, field


@needs_native
def test_bad_input_is_passed_to_the_python_server_and_answered_there(native_server: ServerProcess) -> None:
    channel, stub = stub_for(native_server.address)
    with channel, pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(infer_request([b"\xff\xfe"]), metadata=(("x-request-id", "bad-utf8"),))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not valid UTF-8" in (e.value.details() or "")
    line = native_server.wait_event("request", request_id="bad-utf8")
    assert "frontend" not in line and line["status"] == "INVALID_ARGUMENT"  # the Python handler's own line


@needs_native
def test_metrics_count_native_calls_by_the_time_the_reply_is_read(native_server: ServerProcess) -> None:
    labels = dict(model="classifier", version="1")
    before = native_server.scrape()
    channel, stub = stub_for(native_server.address)
    with channel:
        for _ in range(5):
            stub.ModelInfer(infer_request(["count me"]))
    after = native_server.scrape()  # no polling: a scrape waits for the native events already pushed
    ok = dict(labels, code="OK")
    assert metric(after, "ortserve_requests_total", **ok) - metric(before, "ortserve_requests_total", **ok) == 5
    assert metric(after, "ortserve_texts_total", **labels) - metric(before, "ortserve_texts_total", **labels) == 5
    assert (metric(after, "ortserve_batch_size_count", **labels)
            - metric(before, "ortserve_batch_size_count", **labels)) >= 1
    assert metric(after, "ortserve_inflight_requests") == 0


@needs_native
def test_status_and_metadata_go_through_to_python(native_server: ServerProcess) -> None:
    done = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", native_server.address,
                           "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["models"]["classifier"]["versions"]["1"]["state"] == "ready"
    channel, stub = stub_for(native_server.address)
    from ortserve.proto import grpc_service_pb2 as pb

    with channel:
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="classifier"))
    assert meta.name == "classifier" and list(meta.versions) == ["1"]


@needs_native
def test_a_bundle_on_the_hf_tokenizer_is_served_by_the_python_path(tiny_bundle: Path) -> None:
    with running_server(["--bundle", str(tiny_bundle), "--frontend", "native", "--tokenizer", "hf"]) as server:
        channel, stub = stub_for(server.address)
        with channel:
            response = stub.ModelInfer(infer_request(["through python"]), metadata=(("x-request-id", "hf-1"),))
        np.testing.assert_allclose(logits_of(response), Reference(tiny_bundle).logits(["through python"]), atol=1e-5)
        line = server.wait_event("request", request_id="hf-1")
        assert "frontend" not in line and line["status"] == "OK"
        # Not silent: counted by reason, in the metrics and in `ortserve status`.
        assert metric(server.scrape(), "ortserve_frontend_passthrough_total", reason="version_not_native") == 1


@needs_native
def test_every_call_passed_on_to_python_is_counted_by_reason(native_server: ServerProcess) -> None:
    def counts() -> dict[str, float]:
        body = native_server.scrape()
        return {reason: metric(body, "ortserve_frontend_passthrough_total", reason=reason)
                for reason in ("unparsable", "model_not_native", "bad_input", "version_not_native")}

    before = counts()
    channel, stub = stub_for(native_server.address)
    with channel:
        raw = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        sent = [(lambda: raw(b"\xff\xff", timeout=10), "unparsable"),
                (lambda: stub.ModelInfer(infer_request(["x"], model="nope"), timeout=10), "model_not_native"),
                (lambda: stub.ModelInfer(infer_request([b"\xff"]), timeout=10), "bad_input"),
                (lambda: stub.ModelInfer(infer_request(["x"], version="v9"), timeout=10), "version_not_native")]
        for call, _ in sent:
            with pytest.raises(grpc.RpcError):
                call()
        stub.ModelInfer(infer_request(["served natively"]), timeout=10)  # not counted
    after = counts()
    assert {reason: after[reason] - before[reason] for reason in after} == {reason: 1 for _, reason in sent}
    done = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", native_server.address,
                           "--json"], capture_output=True, text=True, timeout=60, check=False)
    status = json.loads(done.stdout)["frontend"]
    assert status["kind"] == "native" and status["passthrough"]["unparsable"] >= 1
    assert set(status["passthrough"]) == {"unparsable", "model_not_native", "bad_input", "no_routable_version",
                                          "version_not_native", "version_draining"}


def test_native_on_a_build_without_it_exits_2_naming_what_is_missing(
    tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine_ext, "HAS_FRONTEND", False)
    monkeypatch.setattr(engine_ext, "FRONTEND_MISSING", "grpc++ not found by pkg-config at build time")
    assert cli.main(["serve", "--bundle", str(tiny_bundle), "--frontend", "native"]) == 2
    err = capsys.readouterr().err
    assert "grpc++ not found by pkg-config at build time" in err and "frontend=python" in err


def test_frontend_setting_is_validated(tiny_bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--bundle", str(tiny_bundle), "--frontend", "rust"]) == 2
    assert "invalid setting frontend='rust': expected one of auto, native, python" in capsys.readouterr().err


def test_auto_runs_native_where_built_and_says_why_not_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from ortserve.service.native_frontend import resolve_frontend

    assert resolve_frontend("python") == ("python", "") and resolve_frontend("native") == ("native", "")
    monkeypatch.setattr(engine_ext, "HAS_FRONTEND", True)
    assert resolve_frontend("auto") == ("native", "")
    monkeypatch.setattr(engine_ext, "HAS_FRONTEND", False)
    monkeypatch.setattr(engine_ext, "FRONTEND_MISSING", "built with -DORTSERVE_FRONTEND=OFF")
    assert resolve_frontend("auto") == ("python", "native front end not built: built with -DORTSERVE_FRONTEND=OFF")


def test_the_default_is_native_where_built_and_the_server_says_which(tiny_bundle: Path) -> None:
    with running_server(["--bundle", str(tiny_bundle)]) as server:
        started = server.events("server_started")[0]
    assert started["frontend"] == ("native" if engine_ext.HAS_FRONTEND else "python")
    assert ("frontend_fallback" in started) is not engine_ext.HAS_FRONTEND


def test_log_lines_keep_the_time_they_carry_and_stamp_the_rest() -> None:
    from ortserve.service.logs import _timestamp, iso_utc

    assert _timestamp(None, "info", {"event": "x", "timestamp": iso_utc(0.25)})["timestamp"] == \
        "1970-01-01T00:00:00.250000Z"
    now = _timestamp(None, "info", {"event": "x"})["timestamp"]
    assert now.endswith("Z") and abs(dt.datetime.fromisoformat(now).timestamp() - time.time()) < 5


@needs_native
def test_health_and_server_ready_stay_not_serving_once_the_shutdown_began() -> None:
    # A swap's health update can still be queued when SIGTERM arrives; it must not turn a draining server ready
    # (the Python side's grpc HealthServicer ignores it the same way after enter_graceful_shutdown).
    native = NativeFrontend(Settings(host="127.0.0.1", port=0), Metrics(), engine_ext.EventSink(),
                            engine_ext.Routes(), backend="unix:/nonexistent/backend")
    port = native.start()
    try:
        ch, stub = stub_for(f"127.0.0.1:{port}")
        with ch:
            health = health_pb2_grpc.HealthStub(ch)

            def state() -> tuple[bool, int]:
                ready = stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready
                return ready, health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status

            native.set_health("", True)
            assert state() == (True, health_pb2.HealthCheckResponse.SERVING)
            native.not_serving()
            assert state() == (False, health_pb2.HealthCheckResponse.NOT_SERVING)
            native.set_health("", True)  # late
            assert state() == (False, health_pb2.HealthCheckResponse.NOT_SERVING)
    finally:
        asyncio.run(native.shutdown(0))
