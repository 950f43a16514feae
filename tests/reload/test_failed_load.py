"""A version that cannot serve changes no traffic, and the server says why (invariants 1 and 4).

Each case publishes a broken version through the registry (it passes `registry publish` validation:
the defect only shows when the server fetches, loads or warms it up), routes 50% to it, and checks
over real gRPC that every call stays on v1, that ModelReady/ModelMetadata for the bad version say
so, that `ortserve status --json` shows the failure, and that the failure metric counted it.

The server runs with --max-loaded-versions 1, so a version that is published but not routed is
not loaded: that lets the sha256 case corrupt the artifact after publishing and before any fetch.
"""

from __future__ import annotations

import shutil
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from onnx import TensorProto, helper, numpy_helper
from reload_harness import (
    Registry,
    make_registry,
    model_status,
    status_cli,
    wait_routing,
    wait_until,
    wait_version_state,
)
from support.prometheus_text import metric, scrape
from support.server_process import ServerProcess, infer_request, running_server, stub_for
from support.tiny_bundle import tiny_model

from ortserve.proto import grpc_service_pb2 as pb

MODEL = "sentiment"


def corrupt_artifact(reg: Registry, version: str) -> None:
    """Flip bytes in the middle of the published tar: same size, different sha256 (the record keeps the old)."""
    uri = reg.state(MODEL).versions[version].artifact.uri
    path = Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path))
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


def with_model(good: Path, dest: Path, model: onnx.ModelProto, *, check: bool = True) -> Path:
    """A bundle with `good`'s tokenizer and manifest and another graph."""
    shutil.copytree(good, dest)
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, str(dest / "model.onnx"))
    return dest


def unloadable_graph() -> onnx.ModelProto:
    """Right signature, but an operator ONNX Runtime does not have: loads in `onnx` (the CLI's
    signature check reads the graph's inputs and outputs only), fails in InferenceSession."""
    node = helper.make_node("NoSuchOperatorInOnnxRuntime", ["input_ids", "attention_mask"], ["logits"])
    graph = helper.make_graph(
        [node], "unloadable",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def nan_graph() -> onnx.ModelProto:
    """A valid graph whose logits are always NaN: the engine's finiteness check fails the warm-up."""
    model = tiny_model(num_labels=2, seed=7)
    final = model.graph.node[-1]
    final.output[0] = "finite_logits"
    model.graph.initializer.append(numpy_helper.from_array(np.array(np.nan, dtype=np.float32), "nan"))
    model.graph.node.append(helper.make_node("Mul", ["finite_logits", "nan"], ["logits"]))
    return model


def wrong_width_graph() -> onnx.ModelProto:
    """3 logits per text for a 2-label manifest; the width is symbolic, so only running it tells."""
    model = tiny_model(num_labels=3, seed=8)
    dim = model.graph.output[0].type.tensor_type.shape.dim[1]
    dim.ClearField("dim_value")
    dim.dim_param = "labels"
    return model


# case -> (how to make the bundle, what the error must mention)
CASES = ["sha256-mismatch", "onnx-does-not-load", "warm-up-non-finite", "warm-up-wrong-width"]
EXPECTED = {
    "sha256-mismatch": "sha256 mismatch",
    "onnx-does-not-load": "NoSuchOperatorInOnnxRuntime",
    "warm-up-non-finite": "non-finite",
    "warm-up-wrong-width": "expected [2, 2]",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, bundle: Callable[..., Path]) -> Iterator[
        tuple[Registry, ServerProcess, dict[str, Path]]]:
    root = tmp_path_factory.mktemp("failed-load")
    reg = next(make_registry("file", root))
    reg.publish(MODEL, "v1", bundle(1), weight=100)
    tiny_base = root / "wordlevel"
    from support.tiny_bundle import build_tiny_bundle as build_wordlevel

    build_wordlevel(tiny_base, seed=0)
    bad = {
        "sha256-mismatch": bundle(21),
        "onnx-does-not-load": with_model(tiny_base, root / "unloadable", unloadable_graph(), check=False),
        "warm-up-non-finite": with_model(tiny_base, root / "nan", nan_graph()),
        "warm-up-wrong-width": with_model(tiny_base, root / "wide", wrong_width_graph()),
    }
    with running_server([*reg.server_args(root / "cache"), "--max-loaded-versions", "1"]) as server:
        yield reg, server, bad


@pytest.mark.parametrize("case", CASES)
def test_failed_version_changes_no_traffic(setup: tuple[Registry, ServerProcess, dict[str, Path]], case: str) -> None:
    reg, server, bad = setup
    version = f"bad-{case}"
    # The CLI's validation passes: the defect is deeper. One case runs the CLI itself; the others
    # call the same `publishing.publish` in-process (the CLI's onnx import costs seconds here).
    reg.publish(MODEL, version, bad[case], cli=case == "onnx-does-not-load")
    if case == "sha256-mismatch":
        corrupt_artifact(reg, version)
    failures_before = metric(scrape(server.metrics_port), "ortserve_reloads_total", model=MODEL, result="failure")

    reg.route(MODEL, v1=50, **{version: 50})
    info = wait_version_state(server.address, MODEL, version, "failed")
    error = info["versions"][version]["error"]
    assert EXPECTED[case] in error, error

    channel, stub = stub_for(server.address)
    with channel:
        # 60 distinct keys: were the 50/50 split in force, ~half would land on the bad version.
        versions = {stub.ModelInfer(infer_request(["good movie"], model=MODEL, routing_key=f"user-{i}"),
                                    timeout=10).model_version for i in range(60)}
        assert versions == {"v1"}
        assert stub.ModelReady(pb.ModelReadyRequest(name=MODEL), timeout=5).ready
        assert not stub.ModelReady(pb.ModelReadyRequest(name=MODEL, version=version), timeout=5).ready
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelMetadata(pb.ModelMetadataRequest(name=MODEL, version=version), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "failed to load" in err.value.details() and EXPECTED[case] in err.value.details()
        with pytest.raises(grpc.RpcError) as err:  # a pin to it is refused, not served by v1
            stub.ModelInfer(infer_request(["good movie"], model=MODEL, version=version), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    status = status_cli(server.address)["models"][MODEL]
    assert status["routing"] == {"v1": 100} and status["routable"] == ["v1"]
    assert status["versions"][version]["state"] == "failed"
    assert EXPECTED[case] in status["versions"][version]["error"]
    assert version in (status["last_error"] or "")
    failures_after = metric(scrape(server.metrics_port), "ortserve_reloads_total", model=MODEL, result="failure")
    assert failures_after >= failures_before + 1

    # Back to v1 only: the bad version is no longer wanted, so the model's error clears. (The routing
    # in force never left v1=100, so waiting for it proves nothing: wait for the error to clear.)
    reg.route(MODEL, v1=100)
    wait_until(lambda: model_status(server.address, MODEL).get("last_error") is None, timeout=15,
               what="last_error to clear once the bad version is no longer routed")
    assert model_status(server.address, MODEL)["routing"] == {"v1": 100}


def test_retired_failed_version_leaves_status(setup: tuple[Registry, ServerProcess, dict[str, Path]]) -> None:
    """Once a failed version is retired from the registry, the server forgets its failure: status
    no longer lists it, and ModelMetadata for it says NOT_FOUND (it is not "failing", it is gone)."""
    reg, server, bad = setup
    version = "bad-then-retired"
    reg.publish(MODEL, version, bad["warm-up-non-finite"], cli=False)
    reg.route(MODEL, v1=50, **{version: 50})
    wait_version_state(server.address, MODEL, version, "failed")
    reg.route(MODEL, v1=100)
    reg.retire(MODEL, version)
    wait_version_state(server.address, MODEL, version, None, timeout=10)
    channel, stub = stub_for(server.address)
    with channel, pytest.raises(grpc.RpcError) as err:
        stub.ModelMetadata(pb.ModelMetadataRequest(name=MODEL, version=version), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    body = scrape(server.metrics_port)
    assert metric(body, "ortserve_version_loaded", model=MODEL, version=version) == 0


def test_model_whose_only_version_failed_says_so(setup: tuple[Registry, ServerProcess, dict[str, Path]]) -> None:
    """A model whose every version failed is not "loading": calls and metadata must carry the load error,
    so that a caller (or an operator reading client logs) sees the cause without the status command."""
    reg, server, bad = setup
    reg.publish("broken", "v1", bad["warm-up-wrong-width"], weight=100, cli=False)
    wait_version_state(server.address, "broken", "v1", "failed")
    channel, stub = stub_for(server.address)
    with channel:
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(infer_request(["good movie"], model="broken"), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "failed to load" in err.value.details() and "expected [2, 2]" in err.value.details(), err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelMetadata(pb.ModelMetadataRequest(name="broken"), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "failed to load" in err.value.details(), err.value.details()


def test_broken_new_model_keeps_the_server_ready(setup: tuple[Registry, ServerProcess, dict[str, Path]],
                                                 bundle: Callable[..., Path]) -> None:
    """Publishing a new model whose only version cannot load must not take the server out of service
    for the models it does serve: the Kubernetes readiness probe (deploy/k8s, gRPC health of "") would
    otherwise pull every pod at once. The broken model itself reports NOT_SERVING in its own health
    entry, in status and in metrics."""
    reg, server, bad = setup
    reg.publish("broken-new", "v1", bad["warm-up-non-finite"], weight=100, cli=False)
    wait_version_state(server.address, "broken-new", "v1", "failed")
    # A swap on the healthy model (health is recomputed on swaps).
    reg.publish(MODEL, "v1-again", bundle(22), cli=False)
    reg.route(MODEL, v1=50, **{"v1-again": 50})
    wait_routing(server.address, MODEL, {"v1": 50, "v1-again": 50})
    channel, stub = stub_for(server.address)
    with channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert stub.ModelReady(pb.ModelReadyRequest(name=MODEL), timeout=5).ready
        assert not stub.ModelReady(pb.ModelReadyRequest(name="broken-new"), timeout=5).ready
        assert health.Check(health_pb2.HealthCheckRequest(service="broken-new"), timeout=5).status == \
            health_pb2.HealthCheckResponse.NOT_SERVING
        assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
        assert stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready
