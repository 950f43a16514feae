"""Build the native WordPiece tokenizer from a Hugging Face ``tokenizer.json``, where it is exactly a shape
the C++ tokenizer reproduces.

    tokenizer = load_wordpiece(bundle / "tokenizer.json", max_seq_len=128)
    ids = tokenizer.encode(["a text", "another"])  # list of int64 arrays, [CLS] ... [SEP]
    [(ids, spans, chars_read)] = tokenizer.encode_spans(["a text"])  # and each token's offsets in the str

The ids equal ``Tokenizer.from_file(path)`` with ``no_padding()`` and
``enable_truncation(max_length=max_seq_len)``, then ``encode(text).ids``; ``encode_spans``' spans equal its
``offsets`` (code points of the str), its ``special_tokens_mask``, and transformers' rule for a token that
continues a word.
Supported shape:

* ``added_tokens``: special, with ``normalized``, ``lstrip``, ``rstrip`` and ``single_word`` false
* ``normalizer``: ``BertNormalizer`` (any flags; ``strip_accents: null`` follows ``lowercase``)
* ``pre_tokenizer``: ``BertPreTokenizer``
* ``model``: ``WordPiece`` (any prefix and ``max_input_chars_per_word``; ids 0..n-1, unk token in it)
* ``post_processor``: ``TemplateProcessing`` whose single template is ``<special> $A <special>``, or
  ``BertProcessing``; for a bundle of pairs (``pairs=True``) also a pair template
  ``[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1`` with the same two specials (BertProcessing's), which ``encode_pairs``
  reproduces with HF's longest-first truncation

``truncation``, ``padding`` and ``decoder`` are ignored: the server never pads, always truncates to
``max_seq_len``, and never decodes. Anything else raises ``UnsupportedTokenizer`` naming what it met.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ortserve.engine_ext._engine import WordPiece

_ADDED_TOKEN_FLAGS_OFF = ("normalized", "lstrip", "rstrip", "single_word")
_BERT_NORMALIZER_KEYS = {"type", "clean_text", "handle_chinese_chars", "strip_accents", "lowercase"}
_WORDPIECE_KEYS = {"type", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"}


class UnsupportedTokenizer(ValueError):
    """The tokenizer.json uses a component (or option) the native tokenizer does not reproduce."""


def _component_type(section: object) -> str:
    return str(section.get("type")) if isinstance(section, dict) else repr(section)


def _unsupported(what: str) -> UnsupportedTokenizer:
    return UnsupportedTokenizer(f"{what} is not supported by the native tokenizer")


def _bool_flag(section: dict[str, Any], key: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise _unsupported(f"BertNormalizer {key}={value!r}")
    return value


def _normalizer_flags(normalizer: object) -> dict[str, bool]:
    if not isinstance(normalizer, dict) or normalizer.get("type") != "BertNormalizer":
        raise _unsupported(f"normalizer {_component_type(normalizer)}")
    unknown = sorted(set(normalizer) - _BERT_NORMALIZER_KEYS)
    if unknown:
        raise _unsupported(f"BertNormalizer option {unknown[0]!r}")
    lowercase = _bool_flag(normalizer, "lowercase", True)
    strip_accents = normalizer.get("strip_accents")
    return {
        "clean_text": _bool_flag(normalizer, "clean_text", True),
        "handle_chinese_chars": _bool_flag(normalizer, "handle_chinese_chars", True),
        "strip_accents": lowercase if strip_accents is None else _bool_flag(normalizer, "strip_accents", True),
        "lowercase": lowercase,
    }


def _vocab(model: object) -> tuple[list[str], dict[str, Any]]:
    if not isinstance(model, dict) or model.get("type") != "WordPiece":
        raise _unsupported(f"model {_component_type(model)}")
    unknown = sorted(set(model) - _WORDPIECE_KEYS)
    if unknown:
        raise _unsupported(f"WordPiece option {unknown[0]!r}")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise _unsupported("a WordPiece model without a vocab")
    tokens: list[str | None] = [None] * len(vocab)
    for token, token_id in vocab.items():
        if not isinstance(token_id, int) or not 0 <= token_id < len(vocab) or tokens[token_id] is not None:
            raise _unsupported(f"WordPiece vocab ids that are not 0..{len(vocab) - 1} (token {token!r})")
        tokens[token_id] = token
    return [t for t in tokens if t is not None], model


def _added_tokens(added: object) -> list[tuple[str, int]]:
    if not isinstance(added, list):
        raise _unsupported(f"added_tokens {added!r}")
    out: list[tuple[str, int]] = []
    for token in added:
        content = token.get("content") if isinstance(token, dict) else None
        if not isinstance(content, str) or not content or not isinstance(token.get("id"), int):
            raise _unsupported(f"added token {token!r}")
        if token.get("special") is not True:
            raise _unsupported(f"non-special added token {content!r}")
        for flag in _ADDED_TOKEN_FLAGS_OFF:
            if token.get(flag, False) is not False:
                raise _unsupported(f"added token {content!r} with {flag}={token[flag]!r}")
        if any(content == seen for seen, _ in out):
            raise _unsupported(f"added token {content!r} listed twice")
        out.append((content, token["id"]))
    return out


def _check_pair_template(post_processor: dict[str, Any], cls_id: int, sep_id: int) -> None:
    """UnsupportedTokenizer unless the post-processor makes a pair as [CLS] a [SEP] b [SEP], types 0 0 0 1 1."""
    if post_processor.get("type") == "BertProcessing":
        return
    pair = post_processor.get("pair")
    specials = post_processor.get("special_tokens", {})

    def piece(p: object) -> tuple[str, object, object] | None:
        if not isinstance(p, dict) or len(p) != 1:
            return None
        kind, body = next(iter(p.items()))
        if not isinstance(body, dict):
            return None
        if kind == "SpecialToken":
            entry = specials.get(body.get("id")) if isinstance(specials, dict) else None
            ids = entry.get("ids") if isinstance(entry, dict) else None
            return kind, ids[0] if isinstance(ids, list) and len(ids) == 1 else None, body.get("type_id")
        return kind, body.get("id"), body.get("type_id")

    pieces = [piece(p) for p in pair] if isinstance(pair, list) else []
    expected = [("SpecialToken", cls_id, 0), ("Sequence", "A", 0), ("SpecialToken", sep_id, 0), ("Sequence", "B", 1),
                ("SpecialToken", sep_id, 1)]
    if pieces != expected:
        raise _unsupported(f"TemplateProcessing pair template {pair!r} (only [CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1)")


def _special_ids(post_processor: object) -> tuple[int, int]:
    """The ([CLS], [SEP]) ids the post-processor puts around a single text."""
    kind = _component_type(post_processor)
    if not isinstance(post_processor, dict):
        raise _unsupported(f"post_processor {kind}")
    if kind == "BertProcessing":
        cls, sep = post_processor.get("cls"), post_processor.get("sep")
        if not (isinstance(cls, list) and isinstance(sep, list) and len(cls) == 2 and len(sep) == 2
                and isinstance(cls[1], int) and isinstance(sep[1], int)):
            raise _unsupported(f"BertProcessing cls={cls!r} sep={sep!r}")
        return cls[1], sep[1]
    if kind != "TemplateProcessing":
        raise _unsupported(f"post_processor {kind}")
    single = post_processor.get("single")
    pieces = [next(iter(p), None) for p in single] if isinstance(single, list) and all(
        isinstance(p, dict) and len(p) == 1 for p in single) else []
    if pieces != ["SpecialToken", "Sequence", "SpecialToken"] or single[1]["Sequence"].get("id") != "A":
        raise _unsupported(f"TemplateProcessing single template {single!r} (only <special> $A <special>)")
    specials = post_processor.get("special_tokens", {})
    ids = []
    for piece in (single[0], single[2]):
        name = piece["SpecialToken"].get("id")
        entry = specials.get(name) if isinstance(specials, dict) else None
        token_ids = entry.get("ids") if isinstance(entry, dict) else None
        if not isinstance(token_ids, list) or len(token_ids) != 1 or not isinstance(token_ids[0], int):
            raise _unsupported(f"TemplateProcessing special token {name!r} that is not exactly one id")
        ids.append(token_ids[0])
    return ids[0], ids[1]


def wordpiece_from_config(config: dict[str, Any], max_seq_len: int, *, pairs: bool = False) -> WordPiece:
    """The native tokenizer for a parsed tokenizer.json; ``UnsupportedTokenizer`` if it cannot match HF (with
    ``pairs``: on pairs of texts too)."""
    if not isinstance(max_seq_len, int) or max_seq_len < 2:
        raise ValueError(f"max_seq_len must be an int >= 2 ([CLS] and [SEP]), got {max_seq_len!r}")
    added = _added_tokens(config.get("added_tokens", []))
    flags = _normalizer_flags(config.get("normalizer"))
    pre_tokenizer = config.get("pre_tokenizer")
    if pre_tokenizer != {"type": "BertPreTokenizer"}:
        raise _unsupported(f"pre_tokenizer {_component_type(pre_tokenizer)}")
    vocab, model = _vocab(config.get("model"))
    lookup = {token: n for n, token in enumerate(vocab)}
    unk_token = model.get("unk_token", "[UNK]")
    if unk_token not in lookup:
        raise _unsupported(f"a WordPiece unk_token {unk_token!r} missing from the vocab")
    prefix = model.get("continuing_subword_prefix", "##")
    max_chars = model.get("max_input_chars_per_word", 100)
    if not isinstance(prefix, str) or not isinstance(max_chars, int) or max_chars < 0:
        raise _unsupported(f"WordPiece continuing_subword_prefix={prefix!r} max_input_chars_per_word={max_chars!r}")
    cls_id, sep_id = _special_ids(config.get("post_processor"))
    if pairs:
        _check_pair_template(config["post_processor"], cls_id, sep_id)
    return WordPiece(vocab, unk_id=lookup[unk_token], cls_id=cls_id, sep_id=sep_id, added_tokens=added,
                     max_len=max_seq_len, continuing_subword_prefix=prefix, max_input_chars_per_word=max_chars,
                     **flags)


def load_wordpiece(tokenizer_json: str | Path, max_seq_len: int, *, pairs: bool = False) -> WordPiece:
    """The native tokenizer for ``tokenizer_json``, truncating to ``max_seq_len`` ids ([CLS]/[SEP] included);
    ``pairs``: it must make pairs exactly as HF does too."""
    with open(tokenizer_json, encoding="utf-8") as f:
        config = json.load(f)
    if not isinstance(config, dict):
        raise _unsupported(f"a tokenizer.json that is a {type(config).__name__}")
    return wordpiece_from_config(config, max_seq_len, pairs=pairs)
