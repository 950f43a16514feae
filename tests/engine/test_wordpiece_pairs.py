"""The native WordPiece against HF tokenizers, part two: pairs of texts, `[CLS] a [SEP] b [SEP]` with HF's
longest-first truncation (odd and even budgets, one text or both past it, literal special tokens inside either), the
second text starting where HF's token types turn to 1, and the pair templates it refuses; and the Unicode tables
still matching the installed HF. (A file of its own so that the two halves of the longest parity runs, here and in
test_wordpiece.py, land on different workers, under the sanitizers too.)"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortserve_devtools.minilm_source import find_model_dir
from ortserve_devtools.wordpiece_tokenizer import build_wordpiece_tokenizer, tiny_vocab
from support.wordpiece_texts import EXAMPLES, TINY_MAX_SEQ_LEN, any_text, long_text, mixed_text, unicode_soup
from tokenizers import Tokenizer

from ortserve.engine_ext import UnsupportedTokenizer, WordPiece, load_wordpiece, longest_first, wordpiece_tables_version
from ortserve.engine_ext.wordpiece import wordpiece_from_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wordpiece-pairs") / "tokenizer.json"
    build_wordpiece_tokenizer(tiny_vocab(512), TINY_MAX_SEQ_LEN).save(str(path))
    return path


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_wordpiece_tables", REPO / "scripts" / "gen_wordpiece_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_tables_match_installed_tokenizers() -> None:
    """Re-probes HF (~5 s): a tokenizers upgrade that changes any character's behaviour fails here."""
    generator = _load_generator()
    committed = generator.OUTPUT.read_text()
    assert wordpiece_tables_version() == tokenizers.__version__, (
        f"the native tables come from tokenizers {wordpiece_tables_version()}, but {tokenizers.__version__} is "
        "installed: rerun scripts/gen_wordpiece_tables.py and rebuild")
    assert generator.render(generator.probe()) == committed, (
        f"tokenizers {tokenizers.__version__} behaves differently from the committed tables: rerun "
        "scripts/gen_wordpiece_tables.py and rebuild")


# --- pairs of texts ------------------------------------------------------------------------------------

pair_texts = st.one_of(mixed_text, long_text, unicode_soup, any_text, st.just(""))


def _hf_pairs(path: Path, max_len: int) -> Tokenizer:
    hf = Tokenizer.from_file(str(path))
    hf.no_padding()
    hf.enable_truncation(max_length=max_len)
    return hf


def _check_pair(native: WordPiece, hf: Tokenizer, first: str, second: str) -> None:
    expected = hf.encode(first, second)
    ((ids, starts),) = native.encode_pairs([first], [second])
    assert ids.tolist() == expected.ids, f"pair {first!r} / {second!r}"
    assert starts == expected.type_ids.index(1), f"pair {first!r} / {second!r}"
    assert expected.type_ids == [0] * starts + [1] * (len(expected.ids) - starts)


@pytest.fixture(scope="module", params=[8, 9, 32, 33])
def tiny_pairs(request: pytest.FixtureRequest, tiny_json: Path) -> tuple[WordPiece, Tokenizer]:
    """Budgets of 5, 6, 29 and 30 tokens: which text keeps the odd one is where truncations differ."""
    max_len = int(request.param)
    return load_wordpiece(tiny_json, max_len, pairs=True), _hf_pairs(tiny_json, max_len)


@EXAMPLES
@given(first=pair_texts, second=pair_texts)
def test_tiny_pair_parity(tiny_pairs: tuple[WordPiece, Tokenizer], first: str, second: str) -> None:
    _check_pair(*tiny_pairs, first, second)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=pair_texts, second=pair_texts)
def test_minilm_pair_parity(first: str, second: str) -> None:
    try:
        path = find_model_dir() / "tokenizer.json"
    except FileNotFoundError as error:
        pytest.skip(str(error))
    _check_pair(load_wordpiece(path, 128, pairs=True), _hf_pairs(path, 128), first, second)


@pytest.mark.parametrize(("first", "second"), [
    ("", ""), ("a query", ""), ("", "a passage"),
    ("x " * 40, "y " * 40), ("x " * 41, "y " * 40), ("x " * 40, "y " * 41),  # both past: the odd token's owner
    ("x " * 3, "y " * 60), ("x " * 60, "y " * 3), ("[SEP] x [SEP]", "[CLS] y"),
])
def test_explicit_pairs(tiny_json: Path, first: str, second: str) -> None:
    for max_len in (8, 9, 32, 33):
        _check_pair(load_wordpiece(tiny_json, max_len, pairs=True), _hf_pairs(tiny_json, max_len), first, second)


@given(first=st.integers(0, 80), second=st.integers(0, 80), budget=st.integers(0, 70))
def test_longest_first_keeps_what_it_states(first: int, second: int, budget: int) -> None:
    """Fills the budget, cuts the longer first: the shorter is whole when it fits in half, else each keeps half."""
    kept_first, kept_second = longest_first(first, second, budget)
    assert kept_first <= first and kept_second <= second
    assert kept_first + kept_second == min(first + second, budget)
    shorter, kept_shorter = min((first, kept_first), (second, kept_second))
    if shorter <= budget // 2:
        assert kept_shorter == shorter
    else:
        assert min(kept_first, kept_second) == budget // 2


def test_encode_pairs_needs_one_second_text_per_text(tiny_json: Path) -> None:
    native = load_wordpiece(tiny_json, 32, pairs=True)
    with pytest.raises(ValueError, match="2 texts and 1 pairs"):
        native.encode_pairs(["a", "b"], ["c"])


def test_pair_templates_it_cannot_reproduce_are_refused(tiny_json: Path) -> None:
    config: dict[str, Any] = json.loads(tiny_json.read_text())
    wordpiece_from_config(config, 32, pairs=True)  # the BERT template
    roberta_like = copy.deepcopy(config)
    pair = roberta_like["post_processor"]["pair"]
    pair.insert(3, copy.deepcopy(pair[2]))  # [CLS] $A [SEP] [SEP] $B [SEP]
    with pytest.raises(UnsupportedTokenizer, match="pair template"):
        wordpiece_from_config(roberta_like, 32, pairs=True)
    wordpiece_from_config(roberta_like, 32)  # single texts are still the C++ tokenizer's
    no_types = copy.deepcopy(config)
    for piece in no_types["post_processor"]["pair"]:
        next(iter(piece.values()))["type_id"] = 0
    with pytest.raises(UnsupportedTokenizer, match="pair template"):
        wordpiece_from_config(no_types, 32, pairs=True)
