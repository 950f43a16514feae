"""A bf16 version served by a real server beside its FP32 source, on both front ends (issue 46).

The tiny BERT is published as v1 (FP32) and its `optimize --optimize bf16` copy as v2-bf16, 50/50, to a file
registry. The server must load v2-bf16 on OpenVINO, pass its load-time reference check under the bf16 rule (the
gate's recorded bound x 1.5 + 2% of the logit), say so in its `version_loaded` line, `ortserve status` and the verify
metric, and answer pinned calls over gRPC and REST within that same rule of what v1 answers to the same texts. CPUs
without bf16 skip this (tests/support/bf16.py); there the version is refused at load (test_bf16_every_cpu.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.bf16 import require_bf16
from support.prometheus_text import metric, scrape
from support.server_process import ServerProcess, infer_request, logits_of, running_server, stub_for

from ortserve.bundle.manifest import load_manifest
from ortserve.bundle.references import ReferenceSet
from ortserve.prepare.accuracy import GateSettings, builtin_eval_set
from ortserve.prepare.optimize import optimize_bundle
from ortserve.prepare.reference_choice import COUNT, decisive_rows
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.filestore import FileStore
from ortserve.registry.publishing import publish
from ortserve.service.verify import judge, rule_for

MODEL, FP32, BF16 = "classifier", "v1", "v2-bf16"
# Every 35th built-in text (48: short, long, other scripts) and two of a few tokens: one call of 50.
TEXTS = [*builtin_eval_set().texts[::35], "ok", "never again"]


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_bf16()
    root = tmp_path_factory.mktemp("bf16-serving")
    source = build_tiny_bundle(root / "source", seed=7).path  # decisive on the whole corpus: the gate passes
    bf16 = optimize_bundle(source, root / "bf16", "bf16", gate=GateSettings(speed_rounds=0)).path
    return {FP32: source, BF16: bf16}


@pytest.fixture(scope="module")
def served(bundles: dict[str, Path], frontend: str, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[ServerProcess]:
    """A server on a file registry where v2-bf16 is a 50% canary of v1; both versions loaded."""
    store = tmp_path_factory.mktemp("bf16-store")
    files, artifacts = FileStore(store), ArtifactStore(store / "artifacts")
    publish(files, artifacts, model=MODEL, version=FP32, bundle_dir=bundles[FP32], weight=100)
    publish(files, artifacts, model=MODEL, version=BF16, bundle_dir=bundles[BF16], weight=50)
    with running_server(["--registry", store.as_uri(), "--frontend", frontend], ready=False, http=True) as server:
        for version in (FP32, BF16):
            server.wait_event("version_loaded", timeout=120, model=MODEL, version=version)
        yield server


def _status(server: ServerProcess, *json_flag: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", server.address,
                           *json_flag], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done


def test_a_bf16_version_loads_on_openvino_and_passes_its_reference_check(served: ServerProcess) -> None:
    loaded = served.wait_event("version_loaded", model=MODEL, version=BF16)
    assert (loaded["precision"], loaded["optimization"], loaded["verify"]) == ("bf16", "bf16", "passed")
    assert loaded["runtime"].startswith("openvino ") and loaded["runtime"].endswith(" bf16"), loaded["runtime"]
    assert loaded["level"] == "info"  # a version that passes its check is no warning

    versions: dict[str, Any] = json.loads(_status(served, "--json").stdout)["models"][MODEL]["versions"]
    bf16, fp32 = versions[BF16], versions[FP32]
    assert (bf16["state"], bf16["device"], bf16["precision"], bf16["runtime"]) == ("ready", "cpu", "bf16",
                                                                                   loaded["runtime"])
    assert fp32["precision"] == "fp32" and fp32["runtime"].startswith("onnxruntime ")
    check = bf16["verify"]
    assert check["result"] == "passed" and check["texts"] == COUNT
    assert check["rule"].startswith("bf16 on cpu: |delta| <= ") and "+ 0.02 x max(1, |logit|)" in check["rule"]
    assert 0 < check["max_abs_delta"] <= check["bound"]  # bf16 differs from the FP32 references, within the rule
    decisive, of = map(int, check["decisive_agreement"].split("/"))
    assert decisive == of > 0

    table = _status(served).stdout
    (line,) = [row for row in table.splitlines() if row.strip().startswith(BF16)]
    assert "ready" in line and "precision=bf16" in line and "outputs=passed(" in line, table
    body = scrape(served.metrics_port)
    assert metric(body, "ortserve_version_verify_total", model=MODEL, version=BF16, result="passed") == 1


def _references(texts: list[str], fp32: np.ndarray) -> ReferenceSet:
    """v1's answers as references, decisive where the source leads by the references' margin (as a bundle's are)."""
    return ReferenceSet(texts=tuple(texts), outputs=fp32, decisive=tuple(bool(d) for d in decisive_rows(fp32)))


def _rest_logits(served: ServerProcess, version: str) -> np.ndarray:
    reply = requests.post(f"http://127.0.0.1:{served.http_port}/v2/models/{MODEL}/versions/{version}/infer",
                          json={"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS)],
                                            "data": TEXTS}]}, timeout=20)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-model-version"] == version
    (output,) = reply.json()["outputs"]
    return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])


def test_bf16_answers_within_its_rule_of_the_fp32_versions_answers(served: ServerProcess,
                                                                   bundles: dict[str, Path]) -> None:
    channel, stub = stub_for(served.address)
    with channel:
        answers = {}
        for version in (FP32, BF16):
            reply = stub.ModelInfer(infer_request(TEXTS, model=MODEL, version=version), timeout=20)
            assert reply.model_version == version
            answers[version] = logits_of(reply)
    fp32, bf16 = answers[FP32], answers[BF16]
    assert bf16.shape == fp32.shape == (len(TEXTS), 2) and bf16.dtype == np.float32
    assert not np.array_equal(bf16, fp32)  # OpenVINO's bf16 answered, not an FP32 session

    refs = _references(TEXTS, fp32)
    rule = rule_for(load_manifest(bundles[BF16]), "cpu")
    assert rule.name == "bf16 on cpu" and rule.gate_delta is not None
    verdict = judge(refs, bf16, rule)
    assert verdict.result == "passed", verdict.line()
    assert sum(refs.decisive) >= len(TEXTS) // 2  # the label check had texts to hold

    # REST reaches the same version through the same batcher: the same call, the same answers.
    over_rest = _rest_logits(served, BF16)
    assert judge(refs, over_rest, rule).result == "passed"
    np.testing.assert_allclose(over_rest, bf16, rtol=0, atol=1e-6)  # JSON carries the float32s as decimals
