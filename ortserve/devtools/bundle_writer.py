"""Write a model bundle directory: ``model.onnx``, ``tokenizer.json``, ``manifest.json``.

The manifest follows the bundle contract (``format``, ``labels``, ``max_seq_len``, ``notes``). Values are
validated here too, so a builder bug shows up at build time and not as a registry rejection later.
Files are serialised with fixed key order and no timestamps, so identical inputs give identical bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import onnx
from tokenizers import Tokenizer

MANIFEST_FORMAT = "onnx-text-classifier"
MIN_SEQ_LEN, MAX_SEQ_LEN = 8, 8192


@dataclass(frozen=True)
class WrittenBundle:
    """What a builder wrote, for callers that report or verify it."""

    path: Path
    labels: tuple[str, ...]
    max_seq_len: int
    file_sizes: dict[str, int]


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


def write_bundle(dest: Path, *, model: onnx.ModelProto, tokenizer: Tokenizer, labels: tuple[str, ...],
                 max_seq_len: int, notes: str) -> WrittenBundle:
    """Create ``dest`` if needed and (over)write the three bundle files in it."""
    labels = check_labels(labels)
    check_max_seq_len(max_seq_len)
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"bundle destination {dest} exists and is not a directory")
    dest.mkdir(parents=True, exist_ok=True)

    manifest = {"format": MANIFEST_FORMAT, "labels": list(labels), "max_seq_len": max_seq_len, "notes": notes}
    files = {
        "model.onnx": model.SerializeToString(),
        "tokenizer.json": tokenizer.to_str(pretty=True).encode("utf-8"),
        "manifest.json": (json.dumps(manifest, indent=2) + "\n").encode("utf-8"),
    }
    for name, data in files.items():
        (dest / name).write_bytes(data)
    return WrittenBundle(path=dest, labels=labels, max_seq_len=max_seq_len,
                         file_sizes={name: len(data) for name, data in files.items()})
