"""Reference answers for the one demo kind ``reference_choice.attach`` does not write: a classifier of pairs.

    attach_pairs(bundle_dir)            references.jsonl with "pair" rows, named in manifest.json

It runs the bundle's own model.onnx in FP32 on the CPU over the built-in evaluation corpus (its first PAIR_TEXTS),
each text paired with the one PAIR_STEP further on (the way ``registry import`` checks a cross-encoder), tokenized and
truncated as the server does it (``accuracy.make_batches``), and picks the pairs with ``reference_choice.build``, as
``attach`` does.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime

from ortserve.bundle import references
from ortserve.bundle.manifest import (
    MANIFEST_FILE,
    MODEL_FILE,
    REFERENCES_FILE,
    TOKENIZER_FILE,
    load_manifest,
)
from ortserve.bundle.model_files import model_digest
from ortserve.prepare import reference_choice
from ortserve.prepare.accuracy import builtin_eval_set, make_batches, open_session, run_outputs

PAIR_STEP = 7
"""A text's second text is the one PAIR_STEP further on in the corpus (unrelated texts, every mix of lengths)."""
PAIR_TEXTS = 334
"""Pairs are made from the corpus's first 334 texts (every kind and length it has): plenty to choose 32 references
from, where the whole corpus (1,669) would take the MiniLM pair graph minutes on two cores."""
BATCH_SIZE = 16


def _source(root: Path, eval_name: str) -> str:
    model_sha = model_digest(root)
    return (f"this bundle's model.onnx (sha256 {model_sha[:12]}) in FP32, ONNX Runtime {onnxruntime.__version__} on "
            f"the CPU, {eval_name}")


def attach_pairs(bundle_dir: str | Path) -> references.ReferenceSet:
    """references.jsonl for a bundle of pairs ("pairs": true), named in its manifest as
    ``reference_choice.attach`` names them."""
    root = Path(bundle_dir)
    manifest = load_manifest(root)
    if not manifest.pairs:
        raise ValueError(f"{root}: not a bundle of pairs; reference_choice.attach writes its references")
    evals = builtin_eval_set()
    texts = list(evals.texts[:PAIR_TEXTS])
    seconds = [texts[(i + PAIR_STEP) % len(texts)] for i in range(len(texts))]
    batches = make_batches(root / TOKENIZER_FILE, manifest.max_seq_len, texts, BATCH_SIZE, pairs=seconds)
    outputs = run_outputs(open_session(root / MODEL_FILE, 2), batches, len(texts), manifest.output_name)
    refs = reference_choice.build(texts, references.token_counts(root / TOKENIZER_FILE, texts, seconds), outputs,
                            max_seq_len=manifest.max_seq_len, classifier=True, pairs=seconds)
    data = refs.encode()
    (root / REFERENCES_FILE).write_bytes(data)
    raw = json.loads((root / MANIFEST_FILE).read_text(encoding="utf-8"))
    raw["references"] = references.manifest_entry(data, refs, _source(root, evals.name))
    (root / MANIFEST_FILE).write_text(json.dumps(raw, indent=2) + "\n")
    load_manifest(root)  # the entry parses
    return refs
