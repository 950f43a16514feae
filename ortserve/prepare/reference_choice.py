"""Which texts a bundle keeps as reference answers, and their outputs (the file's format: bundle/references.py).

Every bundle writer calls this module: the demo builders (`attach`, the bundle's own FP32 model), `registry
optimize` (`build` with the source's and the candidate's logits, which the accuracy gate has already computed) and
the import path (PyTorch's outputs). `choose` picks the texts from the bundle's evaluation set (else the built-in
corpus) so that they matter: the shortest, the longest (past max_seq_len, so truncation is checked), one per
non-Latin script, and, for a classifier, the decisive texts with the smallest margins and the most confident ones
of each label. It is a pure function; `onnxruntime` and `tokenizers` are imported only by `attach`.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ortserve.bundle.manifest import (
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    MODEL_FILE,
    REFERENCES_FILE,
    TOKENIZER_FILE,
    BundleError,
    load_manifest,
)
from ortserve.bundle.model_files import model_digest
from ortserve.bundle.references import ReferenceSet, manifest_entry, token_counts
from ortserve.prepare.accuracy import (
    load_eval_set,
    make_batches,
    margins,
    open_session,
    run_outputs,
    run_token_outputs,
)

COUNT = 32
"""Texts a bundle carries: enough for each kind of text below; checking them costs MiniLM about a tenth of a
second on two cores (README, Reliability)."""
SHORTEST, LONGEST, SCRIPTS, SMALLEST_MARGINS, CONFIDENT_PER_LABEL = 3, 4, 8, 10, 2
MIN_MARGIN = 0.1
"""The accuracy gate's default margin (accuracy.GateSettings.min_margin): decisive means at least this far ahead."""


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
           min_margin: float = MIN_MARGIN, count: int = COUNT, per_token: bool = False,
           eligible: Sequence[bool] | np.ndarray | None = None) -> Selection:
    """Which evaluation texts a bundle keeps as references (see the module docstring); deterministic.

    `eligible` (bool per text): only these may be kept (an optimised embedding model's texts whose vectors kept the
    precision's cosine floor in every candidate run); None: every text.

    `per_token`: a token classifier's, `source` (and each candidate) float32 [T, labels] per text; a text is
    decisive when all its tokens are, its margin is its least decisive token's, and "the most confident of each
    label" are the texts with the most confident tokens of that label."""
    n = len(texts)
    if not (len(token_counts) == n == len(source)) or any(len(c) != n for c in candidates):
        raise ValueError(f"{n} texts, {len(token_counts)} token counts and {len(source)} outputs do not line up")
    picked: dict[int, None] = {}  # insertion-ordered set
    allowed = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if len(allowed) != n:
        raise ValueError(f"{n} texts and {len(allowed)} eligibility flags do not line up")

    def take(indices: Sequence[int] | np.ndarray, most: int) -> None:
        added = 0
        for i in indices:
            if len(picked) >= count or added >= most:
                return
            if int(i) not in picked and allowed[int(i)]:
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
    rest = [i for i in range(n) if i not in picked and allowed[i]]
    want = count - len(picked)
    if want > 0 and rest:
        step = len(rest) / want
        take([rest[min(len(rest) - 1, math.floor(k * step))] for k in range(want)], want)
    rows = tuple(sorted(picked))
    return Selection(rows=rows, decisive=tuple(bool(decisive[i]) for i in rows))


def build(texts: Sequence[str], token_counts: Sequence[int], source: np.ndarray | Sequence[np.ndarray], *,
          max_seq_len: int, classifier: bool, candidates: Sequence[np.ndarray | Sequence[np.ndarray]] = (),
          min_margin: float = MIN_MARGIN, count: int = COUNT, pairs: Sequence[str] | None = None,
          per_token: bool = False, eligible: Sequence[bool] | np.ndarray | None = None,
          sparse: bool = False) -> ReferenceSet:
    """The reference set: `choose`'s texts (with their second texts, `pairs`) with the source's outputs for them.
    `per_token`: `source` is a token classifier's, float32 [T, labels] per text, T its tokens as the server reads
    them (truncated at max_seq_len). `sparse`: a sparse embedding model's (its file keeps the non-zero weights)."""
    picked = choose(texts, token_counts, source, max_seq_len=max_seq_len, classifier=classifier,
                    candidates=candidates, min_margin=min_margin, count=count, per_token=per_token,
                    eligible=eligible)
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
                        decisive=picked.decisive, pairs=second, sparse=sparse)



def attach(bundle_dir: str | Path, *, outputs_from: str = "") -> ReferenceSet:
    """Writes references.jsonl into a bundle from its own model.onnx run in FP32 on the CPU, and names it in the
    manifest (rewritten with its keys in their order). For builders of FP32 bundles; `registry optimize` and the
    import path build theirs from outputs they already have."""
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
                 max_seq_len=manifest.max_seq_len, classifier=manifest.spec.labelled,
                 per_token=manifest.per_token, sparse=manifest.spec.sparse)
    data = refs.encode()
    model_sha = model_digest(root)
    source = outputs_from or (f"this bundle's model.onnx (sha256 {model_sha[:12]}) in FP32, ONNX Runtime "
                              f"{onnxruntime.__version__} on the CPU, {evals.name}")
    (root / REFERENCES_FILE).write_bytes(data)
    raw = json.loads((root / MANIFEST_FILE).read_bytes()[:MAX_MANIFEST_BYTES])
    raw["references"] = manifest_entry(data, refs, source)
    (root / MANIFEST_FILE).write_text(json.dumps(raw, indent=2) + "\n")
    load_manifest(root)  # the entry parses
    return refs
