"""Write a model bundle directory: ``model.onnx``, ``tokenizer.json``, ``manifest.json`` and the reference answers.

The manifest follows the bundle contract (``format``, then ``labels`` for a classifier or ``dim`` for an
embedding model, ``max_seq_len``, ``notes``; see ``ortserve.bundle.manifest``). Values are validated here too, so
a builder bug shows up at build time and not as a registry rejection later. Then ``references.jsonl``: the model's
own FP32 outputs for texts chosen from the built-in corpus (``ortserve.bundle.references.attach``; for a bundle
of pairs ``demo_references.attach_pairs``).
Files are serialised with fixed key order and no timestamps, so identical inputs give identical bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import onnx
from tokenizers import Tokenizer

from ortserve.bundle.kinds import BY_FORMAT, CLASSIFIER, EMBEDDING, SPARSE_EMBEDDING, TOKEN_CLASSIFIER
from ortserve.bundle.manifest import (
    MANIFEST_FILE,
    MAX_SEQ_LEN,
    MIN_SEQ_LEN,
    MODEL_FILE,
    REFERENCES_FILE,
    SCORE_ACTIVATIONS,
    TOKENIZER_FILE,
)
from ortserve.prepare import reference_choice


@dataclass(frozen=True)
class WrittenBundle:
    """What a builder wrote, for callers that report or verify it."""

    path: Path
    labels: tuple[str, ...]
    """A classifier's labels; () for an embedding bundle."""
    max_seq_len: int
    file_sizes: dict[str, int]
    dim: int | None = None
    """An embedding bundle's width; None for a classifier."""
    format: str = CLASSIFIER.format
    """The manifest's format (the kind of bundle)."""
    pairs: bool = False
    """A classifier of pairs (TEXT + TEXT_PAIR)."""

    @property
    def kind(self) -> str:
        """"classifier", "embedding" or "token-classifier" (BundleManifest.kind)."""
        return BY_FORMAT[self.format].name


def check_labels(labels: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    labels = tuple(labels)
    if not labels:
        raise ValueError("labels must be a non-empty list of strings")
    bad = [label for label in labels if not isinstance(label, str) or not label]
    if bad:
        raise ValueError(f"labels must be non-empty strings, got {bad!r}")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be unique, got {list(labels)!r}")
    return labels


def check_max_seq_len(max_seq_len: int) -> int:
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int):
        raise ValueError(f"max_seq_len must be an int, got {max_seq_len!r}")
    if not MIN_SEQ_LEN <= max_seq_len <= MAX_SEQ_LEN:
        raise ValueError(f"max_seq_len must be in {MIN_SEQ_LEN}..{MAX_SEQ_LEN}, got {max_seq_len}")
    return max_seq_len


def write_bundle(dest: Path, *, model: onnx.ModelProto, tokenizer: Tokenizer, labels: tuple[str, ...] | None = None,
                 max_seq_len: int, notes: str, dim: int | None = None, pairs: bool = False,
                 score_activation: str | None = None, per_token: bool = False, sparse: bool = False) -> WrittenBundle:
    """Create ``dest`` if needed and (over)write the bundle files in it: a classifier bundle with ``labels``,
    an embedding bundle with ``dim`` (exactly one of the two; with ``sparse`` a sparse one, dim its vocabulary). A
    classifier may read ``pairs`` (one label: a reranker, with its ``score_activation``); with ``per_token`` it is a
    token classifier (a label per token)."""
    if (labels is None) == (dim is None):
        raise ValueError("a bundle has labels (a classifier) or dim (an embedding model), exactly one of them")
    if sparse and dim is None:
        raise ValueError("sparse applies to a bundle with dim (its vocabulary)")
    if (pairs or per_token) and labels is None:
        raise ValueError("pairs and per_token apply to a bundle with labels")
    if pairs and per_token:
        raise ValueError("a token classifier reads one text, not pairs")
    if score_activation is not None and (not pairs or len(labels or ()) != 1 or
                                         score_activation not in SCORE_ACTIVATIONS):
        raise ValueError(f"score_activation ({', '.join(SCORE_ACTIVATIONS)}) applies to a bundle of pairs with one "
                         f"label, got {score_activation!r}")
    check_max_seq_len(max_seq_len)
    if dim is not None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        kind_keys: dict[str, object] = {"format": (SPARSE_EMBEDDING if sparse else EMBEDDING).format, "dim": dim}
        labels = ()
    else:
        assert labels is not None
        labels = check_labels(labels)
        kind_keys = {"format": (TOKEN_CLASSIFIER if per_token else CLASSIFIER).format, "labels": list(labels)}
        if pairs:
            kind_keys["pairs"] = True
        if score_activation is not None:
            kind_keys["score_activation"] = score_activation
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"bundle destination {dest} exists and is not a directory")
    dest.mkdir(parents=True, exist_ok=True)

    manifest = {**kind_keys, "max_seq_len": max_seq_len, "notes": notes}
    files = {
        MODEL_FILE: model.SerializeToString(),
        TOKENIZER_FILE: tokenizer.to_str(pretty=True).encode("utf-8"),
        MANIFEST_FILE: (json.dumps(manifest, indent=2) + "\n").encode("utf-8"),
    }
    for name, data in files.items():
        (dest / name).write_bytes(data)
    if pairs:
        from ortserve_devtools import demo_references  # lazy: ONNX Runtime

        demo_references.attach_pairs(dest)
    else:
        reference_choice.attach(dest)  # a token classifier's: a row of label logits per token
    names = (*files, REFERENCES_FILE)
    return WrittenBundle(path=dest, labels=labels, max_seq_len=max_seq_len,
                         file_sizes={name: (dest / name).stat().st_size for name in names}, dim=dim,
                         format=str(kind_keys["format"]), pairs=pairs)
