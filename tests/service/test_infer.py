"""ModelInfer and the metadata RPCs over real gRPC against a real server process and engine."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from support.reference import Reference
from support.server_process import ServerProcess, infer_request, logits_of, stub_for

from ortserve.proto import grpc_service_pb2 as pb

TEXTS = [
    "the movie was great",
    "a much longer sentence about the weather, which was neither good nor bad but simply there",
    "ok",
    "hello world",
]


@pytest.fixture(scope="module")
def stub(server: ServerProcess):
    channel, stub = stub_for(server.address)
    yield stub
    channel.close()


def test_logits_match_onnxruntime_python(stub, tiny_bundle) -> None:
    expected = Reference(tiny_bundle).logits(TEXTS)
    response = stub.ModelInfer(infer_request(TEXTS))
    got = logits_of(response)
    assert response.model_name == "classifier"
    assert response.model_version == "1"
    assert response.outputs[0].name == "LOGITS" and response.outputs[0].datatype == "FP32"
    assert list(response.outputs[0].shape) == [len(TEXTS), 2]
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_raw_input_and_fp32_contents_output(stub, tiny_bundle) -> None:
    request = infer_request(TEXTS[:2], raw=True)
    out = request.outputs.add(name="LOGITS")
    out.parameters["binary_data"].bool_param = False
    response = stub.ModelInfer(request)
    assert not response.raw_output_contents
    got = np.asarray(response.outputs[0].contents.fp32_contents, dtype=np.float32).reshape(2, 2)
    np.testing.assert_allclose(got, Reference(tiny_bundle).logits(TEXTS[:2]), atol=1e-5, rtol=0)


def test_shape_n_by_1_and_unicode(stub, tiny_bundle) -> None:
    texts = ["héllo wörld ✓", "日本語のテキスト"]
    request = infer_request(texts)
    request.inputs[0].shape[:] = [2, 1]
    np.testing.assert_allclose(logits_of(stub.ModelInfer(request)), Reference(tiny_bundle).logits(texts), atol=1e-5)


def test_reply_trailers_and_id(stub) -> None:
    request = infer_request(["hi"])
    request.id = "call-42"
    response, call = stub.ModelInfer.with_call(request, metadata=(("x-request-id", "rid-7"),))
    trailers = dict(call.trailing_metadata())
    assert response.id == "call-42"
    assert trailers["x-request-id"] == "rid-7"
    assert trailers["x-model-version"] == "1"


def test_pinned_version(stub) -> None:
    assert stub.ModelInfer(infer_request(["hi"], version="1")).model_version == "1"


def test_server_and_model_metadata(stub) -> None:
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="classifier")).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="classifier", version="1")).ready
    assert not stub.ModelReady(pb.ModelReadyRequest(name="classifier", version="9")).ready
    assert not stub.ModelReady(pb.ModelReadyRequest(name="other")).ready
    meta = stub.ServerMetadata(pb.ServerMetadataRequest())
    assert meta.name == "ortserve" and meta.version
    model = stub.ModelMetadata(pb.ModelMetadataRequest(name="classifier"))
    assert list(model.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [("TEXT", "BYTES", [-1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in model.outputs] == [("LOGITS", "FP32", [-1, 2])]


def test_health_overall_liveness_and_per_model(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        for service in ("", "liveness", "classifier", "inference.GRPCInferenceService"):
            assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == serving, service
        with pytest.raises(grpc.RpcError) as e:
            health.Check(health_pb2.HealthCheckRequest(service="no-such-model"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_services(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for r in replies for s in r.list_services_response.service}
    assert {"inference.GRPCInferenceService", "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"} <= names


def test_one_json_log_line_per_request(stub, server: ServerProcess) -> None:
    stub.ModelInfer(infer_request(["log me please"]), metadata=(("x-request-id", "log-check-1"),))
    line = server.wait_event("request", request_id="log-check-1")
    assert len([e for e in server.events("request") if e.get("request_id") == "log-check-1"]) == 1
    assert line["model"] == "classifier" and line["version"] == "1" and line["status"] == "OK"
    assert line["texts"] == 1 and line["batch_size"] >= 1
    for key in ("queue_ms", "tokenize_ms", "engine_ms", "total_ms"):
        assert line[key] >= 0
    assert line["route"].startswith("bucket ")
