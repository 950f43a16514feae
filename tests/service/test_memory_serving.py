"""Out-of-memory batches and shape buckets over real gRPC, on both front ends.

Without a GPU, the out-of-memory path runs through the same engine code as on one: the server caps ONNX Runtime's
CPU arena (`--cpu-arena-limit-mb`), which fails an oversized batch with the allocator error a capped GPU arena gives
(ORT's BFCArena), and `--gpu-oom-fallback` reruns it on an uncapped CPU session.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.instances import options
from support.prometheus_text import metric, scrape
from support.server_process import ServerProcess, infer_request, logits_of, running_server, stub_for

from ortserve.service.instance import ModelInstance

ARENA_MB = "8"
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 60)  # past max_seq_len: 512 tokens
BIG = [f"{i} {LONG}" for i in range(64)]  # 64 x 512 tokens: needs far more than the 8 MB arena
SMALL = ["a short one", "and another"]


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def long_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("long") / "bundle"
    build_tiny_bundle(dest, hidden=64, layers=2, heads=2, max_position=512, max_seq_len=512)
    return dest


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def reference(long_bundle: Path) -> Iterator[ModelInstance]:
    """The same model, uncapped, in this process: what every answer must equal."""
    classifier = ModelInstance.load(long_bundle, options())
    yield classifier
    classifier.close()


def _serve(bundle: Path, frontend: str, *flags: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(bundle), "--model-name", "classifier", "--frontend", frontend,
                         "--cpu-arena-limit-mb", ARENA_MB, "--max-texts-per-request", "64",
                         # the whole call in one engine run: the oversized batch is the point
                         "--max-batch-size", "64", "--max-batch-tokens", str(64 * 512), *flags]) as server:
        yield server


@pytest.fixture(scope="module")
def fallback_server(long_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    yield from _serve(long_bundle, frontend, "--gpu-oom-fallback", "lazy", "--gpu-fallback-cooldown-s", "0")


@pytest.fixture(scope="module")
def no_fallback_server(long_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    yield from _serve(long_bundle, frontend, "--gpu-oom-fallback", "off")


def _expected(reference: ModelInstance, texts: list[str]) -> np.ndarray:
    return reference.run(reference.tokenize(texts))


def test_an_oversized_batch_is_answered_by_the_cpu_fallback(fallback_server: ServerProcess,
                                                            reference: ModelInstance) -> None:
    channel, stub = stub_for(fallback_server.address)
    with channel:
        reply = stub.ModelInfer(infer_request(BIG), timeout=60)
        np.testing.assert_allclose(logits_of(reply), _expected(reference, BIG), atol=1e-5)
        # Cool-down 0: the next small call is the capped session's again, and still right.
        small = stub.ModelInfer(infer_request(SMALL), timeout=20)
        np.testing.assert_allclose(logits_of(small), _expected(reference, SMALL), atol=1e-5)

    event = fallback_server.wait_event("gpu_oom_fallback", timeout=10, answered_on_cpu=True)
    assert event["model"] == "classifier" and event["version"] == "1"
    assert event["shape"][0] == len(BIG) and "Available memory" in event["reason"]
    body = scrape(fallback_server.metrics_port)
    assert metric(body, "ortserve_gpu_fallback_total", model="classifier", version="1") >= 1
    assert metric(body, "ortserve_gpu_oom_total", model="classifier", version="1") >= 1


def test_without_fallback_an_oversized_batch_is_resource_exhausted(no_fallback_server: ServerProcess,
                                                                   reference: ModelInstance) -> None:
    channel, stub = stub_for(no_fallback_server.address)
    with channel:
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(infer_request(BIG), timeout=60)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
        assert "ran out of memory" in err.value.details() and "gpu_oom_fallback is off" in err.value.details()
        # The server keeps serving what fits.
        small = stub.ModelInfer(infer_request(SMALL), timeout=20)
        np.testing.assert_allclose(logits_of(small), _expected(reference, SMALL), atol=1e-5)
    event = no_fallback_server.wait_event("gpu_oom_fallback", timeout=10, answered_on_cpu=False)
    assert event["error"] == "gpu_oom_fallback is off"
    body = scrape(no_fallback_server.metrics_port)
    assert metric(body, "ortserve_gpu_oom_total", model="classifier", version="1") >= 1
    assert metric(body, "ortserve_gpu_fallback_total", model="classifier", version="1") == 0


@pytest.fixture(scope="module")
def bucketed_server(tiny_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend,
                         "--shape-buckets", "on", "--bucket-rows", "1,2,4,8", "--bucket-tokens", "8,16",
                         "--max-texts-per-request", "16"]) as server:
        yield server


def test_shape_buckets_never_change_a_reply(bucketed_server: ServerProcess, server: ServerProcess) -> None:
    """The same calls to a server padding to a ladder and to one that does not: the same logits."""
    calls = [["x"], ["good movie", "a much longer review of a film that went on and on"],
             [f"text number {i} " * (i % 7 + 1) for i in range(11)]]
    bucketed_channel, bucketed = stub_for(bucketed_server.address)
    plain_channel, plain = stub_for(server.address)
    with bucketed_channel, plain_channel:
        for texts in calls:
            got = logits_of(bucketed.ModelInfer(infer_request(texts), timeout=20))
            want = logits_of(plain.ModelInfer(infer_request(texts), timeout=20))
            np.testing.assert_allclose(got, want, atol=1e-5)


def test_status_reports_the_versions_compute(bucketed_server: ServerProcess) -> None:
    done = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address",
                           bucketed_server.address, "--json"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)["models"]["classifier"]["versions"]["1"]
    assert info["device"] == "cpu" and info["precision"] == "fp32"
    assert info["shape_buckets"] == {"rows": [1, 2, 4, 8], "tokens": [8, 16, 32]}  # max_seq_len is the top rung
    assert info["memory_mb"] >= 0
    loaded = bucketed_server.wait_event("version_loaded", model="classifier", version="1")
    assert loaded["device"] == "cpu" and "memory_mb" in loaded
    body = scrape(bucketed_server.metrics_port)
    assert metric(body, "ortserve_version_memory_bytes", model="classifier", version="1", device="cpu") >= 0
    assert "ortserve_version_memory_bytes{" in body


@pytest.fixture(scope="module")
def small_batch_server(tiny_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend,
                         "--max-batch-size", "4", "--max-texts-per-request", "16"]) as server:
        yield server


def test_a_lone_call_runs_in_batches_within_the_limits(small_batch_server: ServerProcess,
                                                       server: ServerProcess) -> None:
    """Every engine run respects max_batch_size, the idle path's too: 10 texts run as 4 + 4 + 2, one reply."""
    texts = [f"text {i} " * (i + 1) for i in range(10)]
    labels = dict(model="classifier", version="1")
    before = scrape(small_batch_server.metrics_port)
    small_channel, small = stub_for(small_batch_server.address)
    plain_channel, plain = stub_for(server.address)
    with small_channel, plain_channel:
        got = logits_of(small.ModelInfer(infer_request(texts), timeout=20))
        want = logits_of(plain.ModelInfer(infer_request(texts), timeout=20))
    np.testing.assert_allclose(got, want, atol=1e-5)
    after = scrape(small_batch_server.metrics_port)
    runs = metric(after, "ortserve_batch_size_count", **labels) - metric(before, "ortserve_batch_size_count", **labels)
    texts_run = metric(after, "ortserve_batch_size_sum", **labels) - metric(before, "ortserve_batch_size_sum", **labels)
    assert (runs, texts_run) == (3, 10)
