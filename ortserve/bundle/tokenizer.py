"""The server's tokenizer, set up in one place: a bundle's tokenizer.json read by Hugging Face `tokenizers` with
padding off (the server pads each batch to its own longest row; a tokenizer.json that pads to a fixed length would
waste most of the engine's work) and truncation at max_seq_len (a text keeps its first max_seq_len tokens). Every
reader that must count or make the tokens the server makes (the server's fallback tokenizer, the gate, the reference
answers, the importer's checks, TEI's /tokenize) sets it up here."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer


def set_up(tokenizer: Tokenizer, max_seq_len: int | None) -> Tokenizer:
    """`tokenizer` as the server reads texts: padding off, truncation at max_seq_len (None: none, every token)."""
    tokenizer.no_padding()
    if max_seq_len is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_seq_len)
    return tokenizer


def load(tokenizer_json: str | Path, max_seq_len: int | None) -> Tokenizer:
    """A bundle's tokenizer.json, set up as the server reads texts (`set_up`)."""
    return set_up(Tokenizer.from_file(str(tokenizer_json)), max_seq_len)
