"""Reference answers: texts a bundle carries with the outputs its source model gave for them, so that whatever
machine loads the bundle can check it answers the same before it takes traffic (service/verify.py).

    references.jsonl   one object per line, in a fixed order:
                       {"text": "...", "output": [0.1234, ...], "decisive": true}
    manifest.json      "references": {"file": "references.jsonl", "sha256": "<of the file>", "texts": 48,
                                      "outputs_from": "<the model and runtime that computed the outputs>"}

`output` is the source model's FP32 output for the text (a classifier's logits, an embedding model's vector).
`decisive` marks the classifier texts whose top label must not change at any precision: the source's top-1
probability leads the runner-up by at least the gate's margin (and, for an optimised bundle, the optimised model's
too, on the same label), so that no rounding a kernel may do can flip it; always false for embeddings.

A token classifier's row (format onnx-token-classifier; BundleManifest.per_token) has the same keys, its `output`
a list of T rows, one per token, each the len(labels) logits of that token in the manifest's label order:

    {"text": "Ana lives in Lisbon.", "output": [[1.25, -0.5, 0.125], [0.5, 2.0, -1.0], ...], "decisive": false}

T is the text's token count under the bundle's tokenizer.json as the server sets it up (HF `tokenizers`, padding
off, truncation at max_seq_len, special tokens included): row t is the logits at position t of the graph's
`logits` [batch, seq, labels] for that text, exactly the positions the server answers, in order (a text past
max_seq_len has T = max_seq_len). 1 <= T <= max_seq_len. `decisive` is true when every token's top label is
decisive as above (and the same in every candidate run). In memory (ReferenceSet) the rows of all texts are
concatenated into `outputs` [sum of T, labels], `tokens` giving each text's T; `token_rows()` splits them back.

A sparse embedding model's row (format onnx-sparse-embedding; Kind.sparse) keeps its vector's non-zero weights
only, their vocabulary columns ascending (its `dim` is the vocabulary's size, tens of thousands of columns):

    {"text": "...", "output": {"indices": [1012, 2023, ...], "values": [0.8125, 1.5, ...]}, "decisive": false}

In memory its `outputs` are the dense rows [texts, dim] as for an embedding model.

Read by the server (service/verify.py checks a version against them) and by `registry publish`; written by
every bundle writer through `ReferenceSet.encode` and `manifest_entry` (which texts: prepare/reference_choice.py).
`tokenizers` is imported only by `token_counts`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ortserve.bundle.manifest import REFERENCES_FILE, TOKENIZER_FILE, BundleError, References

MAX_TEXTS = 256
MAX_FILE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ReferenceSet:
    texts: tuple[str, ...]
    outputs: np.ndarray
    """float32 [texts, columns]: the source model's FP32 output for each text; for a token classifier float32
    [sum of tokens, columns]: every text's token rows, text after text (see the module docstring)."""
    decisive: tuple[bool, ...]
    pairs: tuple[str, ...] | None = None
    """A bundle of pairs: each text's second text (its row's "pair"); None for one text a row."""
    tokens: tuple[int, ...] | None = None
    """A token classifier's: each text's token count T (its rows in `outputs`); None for one output row a text."""
    sparse: bool = False
    """A sparse embedding model's: each row is written as its non-zero weights (the module docstring)."""

    def __post_init__(self) -> None:
        rows = len(self.texts) if self.tokens is None else sum(self.tokens)
        if self.outputs.ndim != 2 or len(self.outputs) != rows or len(self.decisive) != len(self.texts):
            raise ValueError(f"{len(self.texts)} texts, {len(self.decisive)} decisive flags and outputs of shape "
                             f"{list(self.outputs.shape)} do not line up"
                             + ("" if self.tokens is None else f" with {rows} tokens"))
        if self.tokens is not None and (len(self.tokens) != len(self.texts) or min(self.tokens, default=1) < 1):
            raise ValueError(f"{len(self.texts)} texts and token counts {list(self.tokens)} (one >= 1 per text)")
        if self.pairs is not None and len(self.pairs) != len(self.texts):
            raise ValueError(f"{len(self.texts)} texts and {len(self.pairs)} second texts")

    @property
    def per_token(self) -> bool:
        """A token classifier's references: `outputs` holds a row per token."""
        return self.tokens is not None

    def token_rows(self) -> tuple[np.ndarray, ...]:
        """A token classifier's outputs per text: float32 [T, columns] each, in text order (views of `outputs`)."""
        if self.tokens is None:
            raise ValueError("token_rows: these references hold one output row per text")
        ends = np.cumsum(self.tokens)
        return tuple(self.outputs[end - count:end] for count, end in zip(self.tokens, ends, strict=True))

    def encode(self) -> bytes:
        """The file's bytes: deterministic (same values, same bytes), 9 significant digits (exact for float32)."""
        lines = []
        per_text = self.token_rows() if self.tokens is not None else self.outputs
        for n, (text, row, decisive) in enumerate(zip(self.texts, per_text, self.decisive, strict=True)):
            output: list[Any] | dict[str, Any] = (
                _sparse_row(row) if self.sparse else _numbers(row) if self.tokens is None
                else [_numbers(token) for token in row])
            pair = {} if self.pairs is None else {"pair": self.pairs[n]}
            lines.append(json.dumps({"text": text, **pair, "output": output, "decisive": bool(decisive)},
                                    ensure_ascii=False, separators=(",", ":")))
        return ("\n".join(lines) + "\n").encode("utf-8")


def _numbers(row: np.ndarray) -> list[float]:
    # 9 significant digits: exact for float32, and the same text for the same value everywhere.
    return [float(f"{float(v):.9g}") for v in row]


def _sparse_row(row: np.ndarray) -> dict[str, Any]:
    columns = np.flatnonzero(row)
    return {"indices": [int(c) for c in columns], "values": _numbers(row[columns])}


def manifest_entry(data: bytes, refs: ReferenceSet, outputs_from: str) -> dict[str, Any]:
    """The manifest's "references" object for the file `data` (refs.encode())."""
    return {"file": REFERENCES_FILE, "sha256": hashlib.sha256(data).hexdigest(), "texts": len(refs.texts),
            "outputs_from": outputs_from}


# -- reading (the server, publish) ----------------------------------------------------------------------


def read_references(bundle_dir: str | Path, entry: References, columns: int, *, per_token: bool = False,
                    max_seq_len: int | None = None, sparse: bool = False) -> ReferenceSet:
    """The bundle's reference set, checked against its manifest entry; BundleError names the file and the fault.

    `per_token` (a token classifier's bundle, BundleManifest.per_token): each row's output must be 1..max_seq_len
    token rows of `columns` numbers (module docstring); the ReferenceSet then has `tokens`. `sparse` (a sparse
    embedding model's, Kind.sparse): each row's output is its non-zero weights by column."""
    path = Path(bundle_dir) / entry.file
    try:
        if path.is_symlink() or not path.is_file():
            raise BundleError(f"{path}: missing (manifest.json names it as the reference answers)")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise BundleError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
        data = path.read_bytes()
    except OSError as e:
        raise BundleError(f"{path}: cannot read ({e.strerror})") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != entry.sha256:
        raise BundleError(f"{path}: sha256 {actual[:12]}... differs from the manifest's {entry.sha256[:12]}...")
    texts: list[str] = []
    pairs: list[str] = []
    outputs: list[list[float]] = []
    tokens: list[int] = []
    decisive: list[bool] = []
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise BundleError(f"{path}: not UTF-8 (byte {e.start})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BundleError(f"{where}: not JSON ({e.msg})") from None
        if sparse and isinstance(row, dict) and isinstance(row.get("output"), dict):
            row = {**row, "output": _dense_row(row["output"], columns, where)}
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not isinstance(row.get("output"), list):
            shape = '{"indices": [columns], "values": [numbers]}' if sparse else "[numbers]"
            raise BundleError(f'{where}: expected {{"text": "...", "output": {shape}, "decisive": true|false}}')
        output = row["output"]
        if per_token:
            limit = max_seq_len if max_seq_len is not None else len(output)
            if not 1 <= len(output) <= limit or not all(isinstance(t, list) for t in output):
                raise BundleError(f"{where}: output must be a list of 1..{limit} token rows (the text's tokens, "
                                  f"at most max_seq_len), got {_described(output)}")
            for t, token in enumerate(output):
                if not _is_numbers(token, columns):
                    raise BundleError(f"{where}: token {t}'s output must be {columns} numbers (one per label), got "
                                      f"{_described(token)}")
            tokens.append(len(output))
            outputs.extend([float(v) for v in token] for token in output)
        elif output and isinstance(output[0], list):
            raise BundleError(f"{where}: output is a list of token rows (a token classifier's), but this bundle "
                              f"answers one row of {columns} numbers per text")
        elif not _is_numbers(output, columns):
            raise BundleError(f"{where}: output must be {columns} numbers (the model's columns), got "
                              f"{len(output)} values")
        else:
            outputs.append([float(v) for v in output])
        if "pair" in row:
            if not isinstance(row["pair"], str):
                raise BundleError(f"{where}: pair must be a string (the second text)")
            pairs.append(row["pair"])
        texts.append(row["text"])
        decisive.append(row.get("decisive") is True)
    if not texts or len(texts) > MAX_TEXTS:
        raise BundleError(f"{path}: expected 1..{MAX_TEXTS} reference texts, got {len(texts)}")
    if len(texts) != entry.texts:
        raise BundleError(f"{path}: {len(texts)} texts, the manifest says {entry.texts}")
    if pairs and len(pairs) != len(texts):
        raise BundleError(f"{path}: {len(pairs)} of {len(texts)} rows have a pair; all or none must")
    if pairs and per_token:
        raise BundleError(f"{path}: rows with a pair in a token classifier's references (it reads one text)")
    values = np.asarray(outputs, dtype=np.float32).reshape(len(outputs), columns)
    if not np.isfinite(values).all():
        raise BundleError(f"{path}: outputs must be finite numbers")
    return ReferenceSet(texts=tuple(texts), outputs=values, decisive=tuple(decisive),
                        pairs=tuple(pairs) if pairs else None, tokens=tuple(tokens) if per_token else None,
                        sparse=sparse)


def _dense_row(output: dict[str, Any], columns: int, where: str) -> list[float]:
    """A sparse row ({"indices", "values"}) as its `columns` numbers; BundleError unless the indices are distinct
    columns ascending and as many as the values."""
    indices, values = output.get("indices"), output.get("values")
    if (not isinstance(indices, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices)
            or not _is_numbers(values, len(indices))):
        raise BundleError(f"{where}: a sparse output must be {{\"indices\": [columns], \"values\": [numbers]}}, as "
                          "many of each")
    if any(not 0 <= i < columns for i in indices) or any(a >= b for a, b in itertools.pairwise(indices)):
        raise BundleError(f"{where}: a sparse output's indices must be ascending columns in 0..{columns - 1}")
    row = [0.0] * columns
    for i, v in zip(indices, values, strict=True):
        row[i] = float(v)
    return row


def _is_numbers(values: Any, count: int) -> bool:
    return (isinstance(values, list) and len(values) == count
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values))


def _described(values: Any) -> str:
    return f"{len(values)} values" if isinstance(values, list) else type(values).__name__




def token_counts(tokenizer_json: str | Path, texts: Sequence[str], pairs: Sequence[str] | None = None, *,
                 max_seq_len: int | None = None) -> list[int]:
    """Tokens per text (or per pair, with `pairs`) before truncation (with the tokenizer's special tokens); with
    `max_seq_len`, after it, as the server reads them."""
    from ortserve.bundle import tokenizer as bundle_tokenizer  # lazy: tokenizers, see module docstring

    tokenizer = bundle_tokenizer.load(tokenizer_json, max_seq_len)
    if pairs is not None:
        return [len(tokenizer.encode(text, pair).ids) for text, pair in zip(texts, pairs, strict=True)]
    return [len(tokenizer.encode(text).ids) for text in texts]


def check_token_rows(bundle_dir: str | Path, refs: ReferenceSet, max_seq_len: int) -> None:
    """A token classifier's references against its tokenizer.json (validate_bundle, at publish): each text has as
    many token rows as the tokenizer, set up as the server sets it up, makes tokens of it; BundleError otherwise."""
    assert refs.tokens is not None, "token rows are a token classifier's references"
    path = Path(bundle_dir) / TOKENIZER_FILE
    counts = token_counts(path, refs.texts, max_seq_len=max_seq_len)
    for n, (text, rows, count) in enumerate(zip(refs.texts, refs.tokens, counts, strict=True), start=1):
        if rows != count:
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise BundleError(f"{Path(bundle_dir) / REFERENCES_FILE} text {n} ({shown!r}): {rows} token rows, but "
                              f"{TOKENIZER_FILE} makes {count} tokens of it (truncated at max_seq_len {max_seq_len})")
