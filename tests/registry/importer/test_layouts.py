"""The layouts people have, imported and checked live against PyTorch: sentence-transformers directories with each
pooling the graph takes (with and without Normalize), and a transformers directory whose tokenizer is only a
vocab.txt (transformers builds the tokenizer; the bundle's tokenizer.json is what it built)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.hf_checkpoints import make_checkpoint, make_sentence_transformer

from ortserve.prepare.accuracy import make_batches, open_session, run_outputs
from ortserve.prepare.importer import MIN_COSINE, import_checkpoint

TEXTS = ["The plot was thin but the actors carried it.", "ok", "Ein kurzer Satz.", "spiders 🕷️ everywhere!!!",
         " ".join(["a sentence that goes on"] * 30)]


def served_by_onnx_runtime(bundle: Path, texts: list[str]) -> np.ndarray:
    manifest = json.loads((bundle / "manifest.json").read_text())
    session = open_session(bundle / "model.onnx", 1)
    return run_outputs(session, make_batches(bundle / "tokenizer.json", manifest["max_seq_len"], texts, 8,
                                             by_length=False), len(texts), "embedding" if "dim" in manifest else
                       "logits")


@pytest.mark.parametrize(("arch", "pooling", "normalize"), [
    ("bert", "cls", True), ("roberta", "max", False), ("mpnet", "mean", True), ("deberta-v2", ["cls", "mean"], True),
], ids=["bert-cls", "roberta-max-unnormalised", "mpnet-mean", "deberta-cls+mean"])
def test_a_sentence_transformers_directory_answers_as_encode(tmp_path: Path, arch: str, pooling: str | list[str],
                                                             normalize: bool, torch_one_thread: None) -> None:
    from sentence_transformers import SentenceTransformer

    source = make_sentence_transformer(tmp_path / "st", arch, pooling=pooling, normalize=normalize, max_seq_length=24)
    result = import_checkpoint(source, tmp_path / "bundle")
    assert result.checkpoint.layout == "sentence-transformers" and result.manifest.max_seq_len == 24
    modes = [pooling] if isinstance(pooling, str) else pooling
    assert result.manifest.dim == 32 * len(modes)
    assert result.manifest.imported is not None
    assert result.manifest.imported.to_dict()["pooling"] == modes
    expected = SentenceTransformer(str(source), device="cpu").encode(TEXTS, convert_to_numpy=True,
                                                                     show_progress_bar=False)
    got = served_by_onnx_runtime(result.path, TEXTS)
    cosine = (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= MIN_COSINE
    norms = np.linalg.norm(got, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5) == normalize  # Normalize is in the graph exactly when listed


def test_a_vocab_txt_tokenizer_becomes_the_bundles_tokenizer_json(tmp_path: Path, torch_one_thread: None) -> None:
    import transformers

    source = make_checkpoint(tmp_path / "ckpt", "bert", task="embed")
    vocab = json.loads((source / "tokenizer.json").read_text())["model"]["vocab"]
    (source / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    (source / "tokenizer.json").unlink()
    result = import_checkpoint(source, tmp_path / "bundle", max_seq_len=16)
    assert result.parity.passed and result.parity.tokenizer_mismatches == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(source))
    from tokenizers import Tokenizer

    bundle = Tokenizer.from_file(str(result.path / "tokenizer.json"))
    for text in TEXTS:
        assert bundle.encode(text).ids == tokenizer(text, truncation=True, max_length=16)["input_ids"]
