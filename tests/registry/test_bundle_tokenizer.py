"""The server's tokenizer set-up (bundle/tokenizer.py): what every reader of a bundle's tokenizer.json counts on."""

from __future__ import annotations

import json
from pathlib import Path

from ortserve_devtools.wordpiece_tokenizer import build_wordpiece_tokenizer, tiny_vocab
from tokenizers import Tokenizer

from ortserve.bundle import tokenizer as bundle_tokenizer

LONG = " ".join(["good"] * 40)


def bert_tokenizer() -> Tokenizer:
    return build_wordpiece_tokenizer(tiny_vocab(1000), 512)  # [CLS] text [SEP]


def fixed_padding_file(tmp_path: Path) -> Path:
    """A tokenizer.json as Hugging Face exports often write it: padded to a fixed 64 tokens, truncated at 64."""
    spec = json.loads(bert_tokenizer().to_str())
    spec["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                       "pad_type_id": 0, "pad_token": "[PAD]"}
    spec["truncation"] = {"direction": "Right", "max_length": 64, "strategy": "LongestFirst", "stride": 0}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    return path


def test_load_pads_nothing_and_truncates_at_max_seq_len(tmp_path: Path) -> None:
    tokenizer = bundle_tokenizer.load(fixed_padding_file(tmp_path), 16)
    assert len(tokenizer.encode("good").ids) == 3  # [CLS] good [SEP]: no padding to 64
    ids = tokenizer.encode(LONG).ids
    assert len(ids) == 16 and ids[-1] == tokenizer.token_to_id("[SEP]")  # the first 16, special tokens kept


def test_without_max_seq_len_every_token_counts(tmp_path: Path) -> None:
    tokenizer = bundle_tokenizer.load(fixed_padding_file(tmp_path), None)
    assert len(tokenizer.encode(LONG).ids) == 42
    assert len(tokenizer.encode("good").ids) == 3


def test_set_up_changes_the_tokenizer_it_is_given() -> None:
    tokenizer = bert_tokenizer()
    tokenizer.enable_padding(length=32)
    assert bundle_tokenizer.set_up(tokenizer, 8) is tokenizer
    assert tokenizer.padding is None and tokenizer.truncation["max_length"] == 8
