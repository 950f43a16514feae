"""A bundle's tokenizer, as the server runs it: the engine's C++ WordPiece where it reproduces the bundle's
`tokenizer.json` exactly, Hugging Face `tokenizers` otherwise.

Both give the same ids (tests/engine/test_wordpiece.py holds the C++ one to HF's on generated text); the
C++ one takes a few microseconds of CPU per sentence where HF takes ~90 here, and is cheap enough to run on
the event loop instead of a thread hop away (see `BundleTokenizer.inline`).

A token classifier's entities need each token's character span in the caller's text (`TokenEncoding`): the C++
WordPiece gives HF's offsets (tests/engine/test_wordpiece.py holds them equal) and `tokenizers` tracks them through
normalisation; both mark subwords by transformers' rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from tokenizers import Tokenizer

from ortserve.bundle import tokenizer as bundle_tokenizer
from ortserve.bundle.manifest import read_pad_id
from ortserve.engine_ext import UnsupportedTokenizer, WordPiece, load_wordpiece

TokenizerChoice = Literal["auto", "native", "hf"]
TOKENIZER_CHOICES: tuple[TokenizerChoice, ...] = ("auto", "native", "hf")

INLINE_MAX_CHARS = 2048
"""Requests with at most this many characters in all are tokenized by the C++ tokenizer on the calling
thread (the event loop): ~40 us of work at most, less than the hand-off to a thread and back costs. Longer
ones go to the tokenizer pool, so one huge request never stalls the loop."""


class TokenizerError(ValueError):
    """The bundle's tokenizer cannot be opened as asked (e.g. `native` for a tokenizer.json it cannot run)."""


@dataclass(frozen=True)
class TokenEncoding:
    """One text as a token classifier reads it."""

    ids: np.ndarray
    """int64 [T], special tokens included, truncated to max_seq_len."""
    spans: np.ndarray
    """int64 [T, 4] per token: start and end (code points of the text), is_subword (continues the word before it,
    by transformers' TokenClassificationPipeline rule), special ([CLS], [SEP], ...)."""
    chars_read: int
    """The text's length when it was read whole, else where truncation stopped (the last token's end)."""


@dataclass(frozen=True)
class BundleTokenizer:
    kind: Literal["native", "hf"]
    encode: Callable[[Sequence[str]], list[np.ndarray]]
    """Token ids per text (int64), truncated to max_seq_len, never empty; thread-safe."""
    pad_id: int
    fallback: str = ""
    """Why the C++ tokenizer was not used (empty when it is, or when `hf` was asked for)."""
    native: WordPiece | None = None
    """The C++ tokenizer itself when `kind` is native: the native front end tokenizes with it directly."""
    encode_pairs: Callable[[Sequence[str], Sequence[str]], tuple[list[np.ndarray], list[int]]] | None = None
    """Token ids per pair of texts (one row each, truncated to max_seq_len as the tokenizer truncates pairs) and
    where each pair's second text begins (its token type 1; 0: no types); None unless opened with `pairs`."""
    encode_tokens: Callable[[Sequence[str]], list[TokenEncoding]] | None = None
    """Each text's ids with its tokens' spans (a token classifier's); None unless opened with `tokens`."""

    def inline(self, texts: Sequence[str]) -> bool:
        """Whether tokenizing `texts` on the calling thread is cheaper than a hand-off to a thread."""
        return self.kind == "native" and sum(map(len, texts)) <= INLINE_MAX_CHARS


def open_tokenizer(tokenizer_json: Path, max_seq_len: int, choice: TokenizerChoice = "auto", *,
                   pairs: bool = False, tokens: bool = False,
                   pair_template: tuple[str, str, str] | None = None) -> BundleTokenizer:
    """`pairs`: the bundle reads pairs of texts; the C++ tokenizer runs it only where it also makes pairs exactly
    as the checkpoint's tokenizer does ([CLS] a [SEP] b [SEP], token types 0 then 1). `tokens`: a token
    classifier, whose texts come with each token's span (`encode_tokens`). `pair_template`: a decoder reranker's
    text around each pair (manifest.pair_template), read as one text on HF tokenizers."""
    if choice not in TOKENIZER_CHOICES:
        raise TokenizerError(f"tokenizer must be one of {', '.join(TOKENIZER_CHOICES)}, got {choice!r}")
    fallback = ""
    if pair_template is not None:
        if choice == "native":
            raise TokenizerError(f"{tokenizer_json}: a pair template (a decoder reranker's) runs on HF tokenizers")
        return _hf(tokenizer_json, max_seq_len, "a pair template runs on HF tokenizers", pairs, tokens, pair_template)
    if choice != "hf":
        try:
            native = load_wordpiece(tokenizer_json, max_seq_len, pairs=pairs)
        except UnsupportedTokenizer as e:
            if choice == "native":
                raise TokenizerError(f"{tokenizer_json}: {e}") from None
            fallback = str(e)
        else:
            return BundleTokenizer(kind="native", encode=native.encode, pad_id=read_pad_id(tokenizer_json),
                                   native=native, encode_pairs=_native_pairs(native) if pairs else None,
                                   encode_tokens=_native_tokens(native) if tokens else None)
    return _hf(tokenizer_json, max_seq_len, fallback, pairs, tokens)


def _native_tokens(native: WordPiece) -> Callable[[Sequence[str]], list[TokenEncoding]]:
    def encode_tokens(texts: Sequence[str]) -> list[TokenEncoding]:
        return [TokenEncoding(ids=ids, spans=spans, chars_read=read) for ids, spans, read in native.encode_spans(texts)]

    return encode_tokens


def _native_pairs(native: WordPiece) -> Callable[[Sequence[str], Sequence[str]], tuple[list[np.ndarray], list[int]]]:
    def encode_pairs(texts: Sequence[str], pairs: Sequence[str]) -> tuple[list[np.ndarray], list[int]]:
        encoded = native.encode_pairs(texts, pairs)
        return [ids for ids, _ in encoded], [second for _, second in encoded]

    return encode_pairs


def _hf(tokenizer_json: Path, max_seq_len: int, fallback: str, pairs: bool = False,
        tokens: bool = False, pair_template: tuple[str, str, str] | None = None) -> BundleTokenizer:
    tokenizer = bundle_tokenizer.load(tokenizer_json, max_seq_len)
    pad_id = read_pad_id(tokenizer_json)

    def encode(texts: Sequence[str]) -> list[np.ndarray]:
        # `encode`, not `encode_batch`: the batch call hands the texts to tokenizers' rayon pool, whose
        # threads spin after each call and took ~1 ms of CPU per request from the engine (bench, open loop).
        return [np.asarray(tokenizer.encode(t).ids or [pad_id], dtype=np.int64) for t in texts]

    def encode_pairs(texts: Sequence[str], seconds: Sequence[str]) -> tuple[list[np.ndarray], list[int]]:
        ids, starts = [], []
        for text, second in zip(texts, seconds, strict=True):
            if pair_template is not None:  # one text, the template's; no token types
                before, between, after = pair_template
                ids.append(np.asarray(tokenizer.encode(before + text + between + second + after).ids or [pad_id],
                                      dtype=np.int64))
                starts.append(0)
                continue
            encoding = tokenizer.encode(text, second)
            ids.append(np.asarray(encoding.ids or [pad_id], dtype=np.int64))
            # Token types are 0 then 1 (BERT's pair template) or all 0 (RoBERTa's): where the 1s begin says both.
            starts.append(next((i for i, t in enumerate(encoding.type_ids) if t == 1), 0))
        return ids, starts

    return BundleTokenizer(kind="hf", encode=encode, pad_id=pad_id, fallback=fallback,
                           encode_pairs=encode_pairs if pairs else None,
                           encode_tokens=_token_encoder(tokenizer, pad_id) if tokens else None)


def _token_encoder(tokenizer: Tokenizer, pad_id: int) -> Callable[[Sequence[str]], list[TokenEncoding]]:
    model = tokenizer.model
    # transformers' rule (TokenClassificationPipeline.gather_pre_entities): with a continuing-subword prefix ("##"),
    # a token continues a word when its string's length differs from its span's; without one, when no space borders
    # its start; an unknown token never does.
    prefix = getattr(model, "continuing_subword_prefix", None)
    unk = getattr(model, "unk_token", None)
    unk_id = tokenizer.token_to_id(unk) if unk else None

    def encode_tokens(texts: Sequence[str]) -> list[TokenEncoding]:
        out = []
        for text in texts:
            encoding = tokenizer.encode(text)
            ids = encoding.ids or [pad_id]
            spans = np.zeros((len(ids), 4), dtype=np.int64)
            special = encoding.special_tokens_mask or [1]
            for i, (token_id, token, (start, end), is_special) in enumerate(
                    zip(ids, encoding.tokens or [""], encoding.offsets or [(0, 0)], special, strict=True)):
                subword = (len(token) != end - start) if prefix else (
                    start > 0 and " " not in text[start - 1:start + 1])
                spans[i] = (start, end, subword and token_id != unk_id, is_special)
            read = [end for (_, end), is_special in zip(encoding.offsets, special, strict=True) if not is_special]
            chars_read = max(read, default=0) if encoding.overflowing else len(text)
            out.append(TokenEncoding(ids=np.asarray(ids, dtype=np.int64), spans=spans, chars_read=chars_read))
        return out

    return encode_tokens
