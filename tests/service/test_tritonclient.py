"""A stock KServe V2 client (tritonclient.grpc) gets the same logits as onnxruntime's own session, and the top
classes with their labels through the classification extension (`class_count`), unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from support.reference import Reference
from support.server_process import ServerProcess, write_texts

TEXTS = ["tritonclient says hello", "a second, rather longer text sent through a stock client", "x"]
SCRIPT = Path(__file__).parents[1] / "support" / "triton_client.py"


def triton(server: ServerProcess, tmp_path: Path, *args: str, model: str = "classifier",
           texts: list[str] = TEXTS) -> dict[str, Any]:
    texts_path = write_texts(tmp_path / "texts.json", texts)
    out = subprocess.run([sys.executable, str(SCRIPT), server.address, model, str(texts_path), *args],
                         capture_output=True, text=True, timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_tritonclient_infer_matches_onnxruntime(server: ServerProcess, tiny_bundle: Path, tmp_path: Path) -> None:
    reply = triton(server, tmp_path)
    assert reply["dtype"] == "float32"
    assert reply["model_version"] == "1"
    assert reply["metadata"]["inputs"][0]["name"] == "TEXT"
    got = np.asarray(reply["logits"], dtype=np.float32)
    np.testing.assert_allclose(got, Reference(tiny_bundle).logits(TEXTS), atol=1e-5, rtol=0)


def test_tritonclient_class_count_gets_labelled_top_classes(server: ServerProcess, tiny_bundle: Path,
                                                            tmp_path: Path) -> None:
    reference = Reference(tiny_bundle)
    logits = reference.logits(TEXTS)
    reply = triton(server, tmp_path, "--class-count", "1")
    assert (reply["dtype"], reply["shape"]) == ("object", [len(TEXTS), 1])
    for (entry,), row in zip(reply["classes"], logits, strict=True):
        score, index, label = entry.split(":", 2)
        assert int(index) == int(np.argmax(row)) and label == reference.labels[int(index)]
        assert abs(float(score) - row.max()) < 2e-6  # printed with six decimals

    clamped = triton(server, tmp_path, "--class-count", "5")  # two labels: clamped
    assert clamped["shape"] == [len(TEXTS), 2]
    assert [{e.split(":", 2)[2] for e in row} for row in clamped["classes"]] == [set(reference.labels)] * len(TEXTS)

    probabilities = triton(server, tmp_path, "--class-count", "2", "--scores", "probabilities")
    for row in probabilities["classes"]:
        assert abs(sum(float(e.split(":", 1)[0]) for e in row) - 1.0) < 2e-6


def test_tritonclient_negative_class_count_is_invalid_argument(server: ServerProcess, tmp_path: Path) -> None:
    reply = triton(server, tmp_path, "--class-count", "-1")
    assert reply["error"] == "StatusCode.INVALID_ARGUMENT"
    assert "parameter 'classification' must be >= 1" in reply["message"]
