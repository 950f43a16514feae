"""An imported embedding model's calibrated ranges (issue 57: what its int8 and uint8 answers read): `registry import`
records, per width a call may ask for, each dimension's minimum and maximum over PyTorch's embeddings of the built-in
corpus, as sentence-transformers' quantize_embeddings calibrates. Held here against the exported graph's own
embeddings of the same texts under onnxruntime (the import's parity gate holds the two to cosine >= 0.99999, so a
bound is 1e-4 on unit vectors), a narrower width's vectors cut and renormalised; the manifest round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN, make_checkpoint
from support.reference import Reference

from ortserve.bundle.manifest import load_manifest
from ortserve.prepare.accuracy import load_eval_set
from ortserve.prepare.importer import import_checkpoint

WIDTHS = (32, 16, 8)
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> Path:
    root = tmp_path_factory.mktemp("ranges")
    source = make_checkpoint(root / "bert-embed", "bert", task="embed", seed=5)
    return import_checkpoint(source, root / "bundle", max_seq_len=IMPORT_MAX_SEQ_LEN,
                             matryoshka_dims=list(WIDTHS[1:])).path


def test_the_manifest_records_ranges_per_width_calibrated_on_the_corpus(bundle: Path) -> None:
    entry = json.loads((bundle / "manifest.json").read_text())["embedding_ranges"]
    corpus = load_eval_set(bundle, None)
    assert entry["source"] == corpus.name == "built-in corpus"
    assert entry["texts"] == len(corpus.texts)
    assert sorted(map(int, entry["widths"]), reverse=True) == list(WIDTHS)
    vectors = Reference(bundle).embeddings(corpus.texts)
    for width in WIDTHS:
        cut = vectors[:, :width]
        if width < vectors.shape[1]:
            cut = cut / np.linalg.norm(cut, axis=1, keepdims=True)
        starts, ends = np.asarray(entry["widths"][str(width)], dtype=np.float32)
        np.testing.assert_allclose(starts, cut.min(axis=0), rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(ends, cut.max(axis=0), rtol=0, atol=TOLERANCE)
    manifest = load_manifest(bundle)
    assert manifest.embedding_ranges is not None
    assert sorted(manifest.embedding_ranges.widths, reverse=True) == list(WIDTHS)
    assert manifest.to_dict()["embedding_ranges"] == entry  # carried as written (the optimiser copies it)
