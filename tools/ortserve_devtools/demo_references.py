"""Reference answers for the two demo kinds ``references.attach`` does not write: a classifier of pairs, and a token
classifier.

    attach_pairs(bundle_dir)            references.jsonl with "pair" rows, named in manifest.json
    write_token_references(bundle_dir)  references.jsonl with a row of label logits per token, NOT named (yet)

Both run the bundle's own model.onnx in FP32 on the CPU over the built-in evaluation corpus, tokenized and truncated
as the server does it (``accuracy.make_batches``), and pick the texts with ``references.choose``, as ``attach`` does.

A bundle of pairs is checked on (text i, text i + PAIR_STEP), the way ``registry import`` checks a cross-encoder.

A token classifier's rows follow the contract being added to ``references.py`` (branch ner-import): ``output`` is a
list of T rows of len(labels) logits, T the text's tokens under the bundle's tokenizer.json (HF tokenizers, padding
off, truncation at max_seq_len, special tokens included); ``decisive`` when every token's top label leads by the
gate's margin. This checkout's ``read_references`` reads one row of ``columns`` numbers per text, so naming the file
in the manifest would make ``registry publish`` refuse the bundle: the file is written beside the model and left
unnamed (the server loads the version unverified) until the per-token reader, and a per-token comparison in the load
path, are in; then ``references.attach`` writes it and this function goes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from ortserve.registry import references
from ortserve.registry.accuracy import builtin_eval_set, make_batches, open_session, run_outputs
from ortserve.registry.bundle import (
    MANIFEST_FILE,
    MODEL_FILE,
    REFERENCES_FILE,
    TOKENIZER_FILE,
    load_manifest,
)

PAIR_STEP = 7
"""A text's second text is the one PAIR_STEP further on in the corpus (unrelated texts, every mix of lengths)."""
BATCH_SIZE = 16


def _source(root: Path, eval_name: str) -> str:
    model_sha = hashlib.sha256((root / MODEL_FILE).read_bytes()).hexdigest()
    return (f"this bundle's model.onnx (sha256 {model_sha[:12]}) in FP32, ONNX Runtime {onnxruntime.__version__} on "
            f"the CPU, {eval_name}")


def attach_pairs(bundle_dir: str | Path) -> references.ReferenceSet:
    """references.jsonl for a bundle of pairs ("pairs": true), named in its manifest like ``references.attach``."""
    root = Path(bundle_dir)
    manifest = load_manifest(root)
    if not manifest.pairs:
        raise ValueError(f"{root}: not a bundle of pairs; references.attach writes its references")
    evals = builtin_eval_set()
    texts = list(evals.texts)
    seconds = [texts[(i + PAIR_STEP) % len(texts)] for i in range(len(texts))]
    batches = make_batches(root / TOKENIZER_FILE, manifest.max_seq_len, texts, BATCH_SIZE, pairs=seconds)
    outputs = run_outputs(open_session(root / MODEL_FILE, 2), batches, len(texts), manifest.output_name)
    refs = references.build(texts, references.token_counts(root / TOKENIZER_FILE, texts, seconds), outputs,
                            max_seq_len=manifest.max_seq_len, classifier=True, pairs=seconds)
    data = refs.encode()
    (root / REFERENCES_FILE).write_bytes(data)
    raw = json.loads((root / MANIFEST_FILE).read_text(encoding="utf-8"))
    raw["references"] = references.manifest_entry(data, refs, _source(root, evals.name))
    (root / MANIFEST_FILE).write_text(json.dumps(raw, indent=2) + "\n")
    load_manifest(root)  # the entry parses
    return refs


def token_outputs(bundle_dir: Path, texts: list[str]) -> list[np.ndarray]:
    """Each text's logits, float32 [T, labels], T its tokens as the server reads them (truncated at max_seq_len)."""
    manifest = load_manifest(bundle_dir)
    session = open_session(bundle_dir / MODEL_FILE, 2)
    rows: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(texts)
    for batch in make_batches(bundle_dir / TOKENIZER_FILE, manifest.max_seq_len, texts, BATCH_SIZE):
        names = {i.name for i in session.get_inputs()}
        (logits,) = session.run([manifest.output_name], {k: v for k, v in batch.feed.items() if k in names})
        for r, text_row in enumerate(batch.rows):
            rows[int(text_row)] = logits[r, :int(batch.feed["attention_mask"][r].sum())]
    return rows


def _row(text: str, output: np.ndarray, decisive: bool) -> str:
    # 9 significant digits: exact for float32, the same text for the same value (references.ReferenceSet.encode).
    values: list[Any] = [[float(f"{float(v):.9g}") for v in token] for token in output]
    return json.dumps({"text": text, "output": values, "decisive": decisive}, ensure_ascii=False,
                      separators=(",", ":"))


def write_token_references(bundle_dir: str | Path) -> int:
    """references.jsonl for a token classifier, in the per-token contract (module docstring); returns its texts.
    The manifest is left as it is."""
    root = Path(bundle_dir)
    manifest = load_manifest(root)
    if not manifest.per_token:
        raise ValueError(f"{root}: not a token classifier; references.attach writes its references")
    texts = list(builtin_eval_set().texts)
    outputs = token_outputs(root, texts)
    counts = references.token_counts(root / TOKENIZER_FILE, texts)
    # Which texts: chosen by length and script as for an embedding model (a row per text is not a label per text).
    picked = references.choose(texts, counts, np.zeros((len(texts), 1), np.float32),
                               max_seq_len=manifest.max_seq_len, classifier=False)
    lines = [_row(texts[i], outputs[i], bool(references.decisive_rows(outputs[i]).all())) for i in picked.rows]
    (root / REFERENCES_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)
