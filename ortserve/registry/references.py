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

Every bundle writer calls this module: the demo builders (`attach`, the bundle's own FP32 model), `registry
optimize` (`build` with the source's and the candidate's logits, which the accuracy gate has already computed) and
the import path (PyTorch's outputs). `choose` picks the texts from the bundle's evaluation set (else the built-in
corpus) so that they matter: the shortest, the longest (past max_seq_len, so truncation is checked), one per
non-Latin script, and, for a classifier, the decisive texts with the smallest margins and the most confident ones
of each label. It is a pure function; `onnxruntime` and `tokenizers` are imported only by `attach`.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ortserve.registry.accuracy import margins
from ortserve.registry.bundle import (
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    MODEL_FILE,
    REFERENCES_FILE,
    TOKENIZER_FILE,
    BundleError,
    References,
    load_manifest,
)

COUNT = 32
"""Texts a bundle carries: enough for each kind of text below; checking them costs MiniLM about a tenth of a
second on two cores (README, Reliability)."""
SHORTEST, LONGEST, SCRIPTS, SMALLEST_MARGINS, CONFIDENT_PER_LABEL = 3, 4, 8, 10, 2
MIN_MARGIN = 0.1
"""The accuracy gate's default margin (accuracy.GateSettings.min_margin): decisive means at least this far ahead."""
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
            output: list[Any] = (_numbers(row) if self.tokens is None else [_numbers(token) for token in row])
            pair = {} if self.pairs is None else {"pair": self.pairs[n]}
            lines.append(json.dumps({"text": text, **pair, "output": output, "decisive": bool(decisive)},
                                    ensure_ascii=False, separators=(",", ":")))
        return ("\n".join(lines) + "\n").encode("utf-8")


def _numbers(row: np.ndarray) -> list[float]:
    # 9 significant digits: exact for float32, and the same text for the same value everywhere.
    return [float(f"{float(v):.9g}") for v in row]


@dataclass(frozen=True)
class Selection:
    """`choose`'s answer: indices into the evaluation texts, ascending, and which of them are decisive."""

    rows: tuple[int, ...]
    decisive: tuple[bool, ...]


# -- choosing the texts (pure) --------------------------------------------------------------------------


def decisive_rows(source: np.ndarray, candidates: Sequence[np.ndarray] = (), *,
                  min_margin: float = MIN_MARGIN) -> np.ndarray:
    """bool [texts]: the source leads by at least `min_margin`, and so does every candidate run (the optimised
    model in each batching the gate ran it in), on the same label."""
    sure = margins(source) >= min_margin
    for candidate in candidates:
        sure &= (margins(candidate) >= min_margin) & (source.argmax(axis=1) == candidate.argmax(axis=1))
    return sure


def script_of(text: str) -> str:
    """The text's most frequent non-Latin script (CYRILLIC, CJK, ARABIC, ...), or "" for Latin-only text."""
    counts: dict[str, int] = {}
    for ch in text:
        if ch.isalpha():
            script = unicodedata.name(ch, "UNKNOWN").split()[0]
            if script != "LATIN":
                counts[script] = counts.get(script, 0) + 1
    return max(sorted(counts), key=lambda s: counts[s]) if counts else ""


def decisive_token_texts(source: Sequence[np.ndarray], candidates: Sequence[Sequence[np.ndarray]] = (), *,
                         min_margin: float = MIN_MARGIN) -> np.ndarray:
    """bool [texts] for a token classifier (`source` float32 [T, labels] per text, each candidate run likewise):
    every token of the text is decisive (decisive_rows over its tokens)."""
    return np.array([bool(decisive_rows(rows, [c[i] for c in candidates], min_margin=min_margin).all())
                     for i, rows in enumerate(source)], dtype=bool)


def choose(texts: Sequence[str], token_counts: Sequence[int], source: np.ndarray | Sequence[np.ndarray], *,
           max_seq_len: int, classifier: bool, candidates: Sequence[np.ndarray | Sequence[np.ndarray]] = (),
           min_margin: float = MIN_MARGIN, count: int = COUNT, per_token: bool = False) -> Selection:
    """Which evaluation texts a bundle keeps as references (see the module docstring); deterministic.

    `per_token`: a token classifier's, `source` (and each candidate) float32 [T, labels] per text; a text is
    decisive when all its tokens are, its margin is its least decisive token's, and "the most confident of each
    label" are the texts with the most confident tokens of that label."""
    n = len(texts)
    if not (len(token_counts) == n == len(source)) or any(len(c) != n for c in candidates):
        raise ValueError(f"{n} texts, {len(token_counts)} token counts and {len(source)} outputs do not line up")
    picked: dict[int, None] = {}  # insertion-ordered set

    def take(indices: Sequence[int] | np.ndarray, most: int) -> None:
        added = 0
        for i in indices:
            if len(picked) >= count or added >= most:
                return
            if int(i) not in picked:
                picked[int(i)] = None
                added += 1

    by_length = sorted(range(n), key=lambda i: (token_counts[i], i))
    take(by_length, SHORTEST)
    past = [i for i in reversed(by_length) if token_counts[i] > max_seq_len]
    take(past or list(reversed(by_length)), LONGEST)
    first_of_script: dict[str, int] = {}
    for i, text in enumerate(texts):
        script = script_of(text)
        if script and script not in first_of_script:
            first_of_script[script] = i
    take(list(first_of_script.values()), SCRIPTS)
    decisive = np.zeros(n, dtype=bool)
    if per_token:
        rows = [np.asarray(r) for r in source]
        decisive = decisive_token_texts(rows, candidates, min_margin=min_margin)  # type: ignore[arg-type]
        least = np.array([margins(r).min() for r in rows])
        sure = np.flatnonzero(decisive)
        take(sorted(sure, key=lambda i: (least[i], i)), SMALLEST_MARGINS)
        for label in range(rows[0].shape[1] if rows else 0):
            best = {i: float(margins(rows[i])[rows[i].argmax(axis=1) == label].max(initial=-1.0)) for i in sure}
            of_label = [i for i in sure if best[i] >= 0.0]
            take(sorted(of_label, key=lambda i: (-best[i], i)), CONFIDENT_PER_LABEL)
    elif classifier:
        source = np.asarray(source)
        decisive = decisive_rows(source, candidates, min_margin=min_margin)  # type: ignore[arg-type]
        lead = margins(source)
        sure = np.flatnonzero(decisive)
        take(sorted(sure, key=lambda i: (lead[i], i)), SMALLEST_MARGINS)
        top = source.argmax(axis=1)
        for label in range(source.shape[1]):
            of_label = [i for i in sure if top[i] == label]
            take(sorted(of_label, key=lambda i: (-lead[i], i)), CONFIDENT_PER_LABEL)
    rest = [i for i in range(n) if i not in picked]
    want = count - len(picked)
    if want > 0 and rest:
        step = len(rest) / want
        take([rest[min(len(rest) - 1, math.floor(k * step))] for k in range(want)], want)
    rows = tuple(sorted(picked))
    return Selection(rows=rows, decisive=tuple(bool(decisive[i]) for i in rows))


def build(texts: Sequence[str], token_counts: Sequence[int], source: np.ndarray | Sequence[np.ndarray], *,
          max_seq_len: int, classifier: bool, candidates: Sequence[np.ndarray | Sequence[np.ndarray]] = (),
          min_margin: float = MIN_MARGIN, count: int = COUNT, pairs: Sequence[str] | None = None,
          per_token: bool = False) -> ReferenceSet:
    """The reference set: `choose`'s texts (with their second texts, `pairs`) with the source's outputs for them.
    `per_token`: `source` is a token classifier's, float32 [T, labels] per text, T its tokens as the server reads
    them (truncated at max_seq_len)."""
    picked = choose(texts, token_counts, source, max_seq_len=max_seq_len, classifier=classifier,
                    candidates=candidates, min_margin=min_margin, count=count, per_token=per_token)
    rows = list(picked.rows)
    chosen = tuple(texts[i] for i in rows)
    second = None if pairs is None else tuple(pairs[i] for i in rows)
    if per_token:
        per_text = [np.asarray(source[i], dtype=np.float32) for i in rows]
        if any(r.ndim != 2 or not 1 <= len(r) <= max_seq_len for r in per_text):
            raise ValueError(f"token outputs must be [1..{max_seq_len}, labels] per text, got "
                             f"{[list(r.shape) for r in per_text]}")
        return ReferenceSet(texts=chosen, outputs=np.concatenate(per_text), decisive=picked.decisive, pairs=second,
                            tokens=tuple(len(r) for r in per_text))
    return ReferenceSet(texts=chosen, outputs=np.asarray(np.asarray(source)[rows], dtype=np.float32),
                        decisive=picked.decisive, pairs=second)


def manifest_entry(data: bytes, refs: ReferenceSet, outputs_from: str) -> dict[str, Any]:
    """The manifest's "references" object for the file `data` (refs.encode())."""
    return {"file": REFERENCES_FILE, "sha256": hashlib.sha256(data).hexdigest(), "texts": len(refs.texts),
            "outputs_from": outputs_from}


# -- reading (the server, publish) ----------------------------------------------------------------------


def read_references(bundle_dir: str | Path, entry: References, columns: int, *, per_token: bool = False,
                    max_seq_len: int | None = None) -> ReferenceSet:
    """The bundle's reference set, checked against its manifest entry; BundleError names the file and the fault.

    `per_token` (a token classifier's bundle, BundleManifest.per_token): each row's output must be 1..max_seq_len
    token rows of `columns` numbers (module docstring); the ReferenceSet then has `tokens`."""
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
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not isinstance(row.get("output"), list):
            raise BundleError(f'{where}: expected {{"text": "...", "output": [numbers], "decisive": true|false}}')
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
                        pairs=tuple(pairs) if pairs else None, tokens=tuple(tokens) if per_token else None)


def _is_numbers(values: Any, count: int) -> bool:
    return (isinstance(values, list) and len(values) == count
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values))


def _described(values: Any) -> str:
    return f"{len(values)} values" if isinstance(values, list) else type(values).__name__


# -- writing them for a bundle that has none (the builders) ----------------------------------------------


def token_counts(tokenizer_json: str | Path, texts: Sequence[str], pairs: Sequence[str] | None = None, *,
                 max_seq_len: int | None = None) -> list[int]:
    """Tokens per text (or per pair, with `pairs`) before truncation (with the tokenizer's special tokens); with
    `max_seq_len`, after it, as the server reads them."""
    from tokenizers import Tokenizer  # lazy, see module docstring

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.no_padding()
    if max_seq_len is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_seq_len)
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


def attach(bundle_dir: str | Path, *, outputs_from: str = "") -> ReferenceSet:
    """Writes references.jsonl into a bundle from its own model.onnx run in FP32 on the CPU, and names it in the
    manifest (rewritten with its keys in their order). For builders of FP32 bundles; `registry optimize` and the
    import path build theirs from outputs they already have."""
    from ortserve.registry.accuracy import (  # lazy: ORT
        load_eval_set,
        make_batches,
        open_session,
        run_outputs,
        run_token_outputs,
    )

    root = Path(bundle_dir)
    manifest = load_manifest(root)
    if manifest.precision != "fp32":
        raise BundleError(f"{root}: precision {manifest.precision}: reference answers come from an FP32 model; "
                          "write them from the source bundle's")
    evals = load_eval_set(root, manifest.labels)
    import onnxruntime

    batches = make_batches(root / TOKENIZER_FILE, manifest.max_seq_len, evals.texts, 16)
    run = run_token_outputs if manifest.per_token else run_outputs
    outputs = run(open_session(root / MODEL_FILE, 2), batches, len(evals.texts), manifest.output_name)
    refs = build(evals.texts, token_counts(root / TOKENIZER_FILE, evals.texts), outputs,
                 max_seq_len=manifest.max_seq_len, classifier=manifest.kind == "classifier",
                 per_token=manifest.per_token)
    data = refs.encode()
    model_sha = hashlib.sha256((root / MODEL_FILE).read_bytes()).hexdigest()
    source = outputs_from or (f"this bundle's model.onnx (sha256 {model_sha[:12]}) in FP32, ONNX Runtime "
                              f"{onnxruntime.__version__} on the CPU, {evals.name}")
    (root / REFERENCES_FILE).write_bytes(data)
    raw = json.loads((root / MANIFEST_FILE).read_bytes()[:MAX_MANIFEST_BYTES])
    raw["references"] = manifest_entry(data, refs, source)
    (root / MANIFEST_FILE).write_text(json.dumps(raw, indent=2) + "\n")
    load_manifest(root)  # the entry parses
    return refs
