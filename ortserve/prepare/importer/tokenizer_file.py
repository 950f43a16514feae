"""The bundle's tokenizer.json, from the checkpoint's tokenizer as transformers loads it.

    text = tokenizer_json(hf_tokenizer, max_seq_len, lowercase=False)
    ids = bundle_ids(text, texts, max_seq_len)        what the server's tokenizers make of each text

transformers turns whatever the checkpoint has (tokenizer.json, vocab.txt, vocab.json + merges.txt, a SentencePiece
model) into a `tokenizers` backend; its serialised form is the bundle's tokenizer.json, with
- truncation at max_seq_len, keeping a text's first tokens and its special tokens, as transformers does and as the
  server sets it itself (a checkpoint whose tokenizer truncates on the left is refused);
- no padding strategy, but the checkpoint's pad token and id, so that bundle/manifest.pad_id pads batches with the
  id the model was trained with (RoBERTa's position ids are computed from it);
- a Lowercase normalizer first where sentence-transformers lowercases texts before its tokenizer (do_lower_case);
- for a decoder reranker (`wrap`), a post-processor that puts its prompt's prefix and suffix ids around each text
  (TemplateProcessing with two many-id special tokens), which truncation keeps as the model card's code does.
The parity gate then holds `bundle_ids` to the checkpoint tokenizer's own ids for every text: anything transformers
does in Python that the backend does not would show there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ortserve.bundle import tokenizer as bundle_tokenizer
from ortserve.bundle.manifest import pad_id
from ortserve.prepare.importer.checkpoint import CheckpointError


def tokenizer_json(hf_tokenizer: Any, max_seq_len: int, *, lowercase: bool = False,
                   wrap: tuple[list[int], list[int]] | None = None) -> str:
    from tokenizers import Tokenizer, normalizers, processors

    if getattr(hf_tokenizer, "truncation_side", "right") != "right":
        raise CheckpointError(f"the tokenizer truncates long texts on the {hf_tokenizer.truncation_side}; the server "
                              "keeps a text's first max_seq_len tokens (truncation_side right)")
    # A copy, set up as the server reads texts: the checkpoint's stays as it was.
    backend = bundle_tokenizer.set_up(Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str()), max_seq_len)
    if lowercase:
        backend.normalizer = (normalizers.Sequence([normalizers.Lowercase(), backend.normalizer])
                              if backend.normalizer is not None else normalizers.Lowercase())
    if wrap is not None:
        prefix, suffix = wrap
        specials = [{"id": name, "ids": ids, "tokens": [backend.id_to_token(i) for i in ids]}
                    for name, ids in (("<prefix>", prefix), ("<suffix>", suffix)) if ids]
        single = " ".join(["<prefix>"] * bool(prefix) + ["$A"] + ["<suffix>"] * bool(suffix))
        backend.post_processor = processors.TemplateProcessing(single=single, special_tokens=specials)
    spec = json.loads(backend.to_str())
    pad_token, pad = hf_tokenizer.pad_token, hf_tokenizer.pad_token_id
    if isinstance(pad_token, str) and isinstance(pad, int) and pad_id(spec) != pad:
        # Only where the bundle rule would not find it by name: a padding entry names it (strategy: the batch's
        # longest, which pads nothing when one text is encoded; the server resets padding anyway).
        spec["padding"] = {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None,
                           "pad_id": pad, "pad_type_id": 0, "pad_token": pad_token}
    return json.dumps(spec, ensure_ascii=False, indent=2) + "\n"


def bundle_ids(text: str, texts: Sequence[str], max_seq_len: int,
               pairs: Sequence[str] | None = None) -> list[list[int]]:
    """Token ids of each text (with `pairs`: of each pair) under the tokenizer.json `text`, set up as the server sets
    it up (service/tokenization.py: padding off, truncation at max_seq_len)."""
    from tokenizers import Tokenizer

    tokenizer = bundle_tokenizer.set_up(Tokenizer.from_str(text), max_seq_len)
    if pairs is not None:
        return [list(tokenizer.encode(t, p).ids) for t, p in zip(texts, pairs, strict=True)]
    return [list(tokenizer.encode(t).ids) for t in texts]
