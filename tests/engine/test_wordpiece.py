"""The native WordPiece tokenizer against Hugging Face tokenizers: same ids, same rejections of shapes it
cannot reproduce, same results from many threads (pairs of texts and the Unicode tables: test_wordpiece_pairs.py).
Every single-text parity check also holds `encode_spans` to HF: each token's span (HF's `Encoding.offsets`, code
points of the str), whether it is a continuation (HF's token starts with the continuing prefix),
`special_tokens_mask`, and how much of the text the kept tokens read (`chars_read`)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tokenizers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortserve_devtools.minilm_source import find_model_dir
from ortserve_devtools.wordpiece_tokenizer import build_wordpiece_tokenizer, tiny_vocab
from support.wordpiece_texts import (
    EXAMPLES,
    MINILM_MAX_SEQ_LEN,
    SEPARATORS,
    TINY_MAX_SEQ_LEN,
    any_text,
    long_text,
    mixed_text,
    unicode_soup,
    word,
)
from tokenizers import Tokenizer

from ortserve.engine_ext import UnsupportedTokenizer, WordPiece, load_wordpiece
from ortserve.engine_ext.wordpiece import wordpiece_from_config

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Pair:
    """A tokenizer.json loaded both ways, configured as the server configures HF's."""

    native: WordPiece
    hf: Tokenizer

    def check(self, text: str) -> None:
        encoding = self.hf.encode(text)
        expected = encoding.ids
        (got,) = self.native.encode([text])
        assert got.dtype == np.int64
        assert got.tolist() == expected, f"text {text!r}"
        self.check_spans(text, encoding)

    def check_spans(self, text: str, encoding: tokenizers.Encoding | None = None) -> None:
        encoding = encoding or self.hf.encode(text)
        ((ids, spans, chars_read),) = self.native.encode_spans([text])
        assert ids.dtype == spans.dtype == np.int64 and spans.shape == (len(ids), 4)
        assert ids.tolist() == encoding.ids, f"text {text!r}"
        assert [tuple(row) for row in spans.tolist()] == hf_spans(self.hf, encoding, text), f"text {text!r}"
        assert chars_read == hf_chars_read(text, encoding), f"text {text!r}"


def hf_spans(hf: Tokenizer, encoding: tokenizers.Encoding, text: str) -> list[tuple[int, int, int, int]]:
    """(start, end, is_subword, special) per token, from HF: its offsets (code points of the str), transformers'
    subword rule (TokenClassificationPipeline.gather_pre_entities: with a continuing prefix, the token's string is not
    as long as its span; without one, no space borders its start; never the unknown token), its special_tokens_mask."""
    prefix = hf.model.continuing_subword_prefix
    unk = hf.token_to_id(hf.model.unk_token)

    def subword(token: str, token_id: int, start: int, end: int) -> int:
        if token_id == unk:
            return 0
        return int(len(token) != end - start if prefix else start > 0 and " " not in text[start - 1:start + 1])

    return [(start, end, subword(token, token_id, start, end), special) for token, token_id, (start, end), special
            in zip(encoding.tokens, encoding.ids, encoding.offsets, encoding.special_tokens_mask, strict=True)]


def hf_chars_read(text: str, encoding: tokenizers.Encoding) -> int:
    """As ortserve.service.tokenization's token encoder: the whole text unless truncation cut tokens, else the end
    of the last non-special token kept."""
    if not encoding.overflowing:
        return len(text)
    ends = [end for (_, end), special in zip(encoding.offsets, encoding.special_tokens_mask, strict=True)
            if not special]
    return max(ends, default=0)


def _pair(path: Path, max_seq_len: int) -> Pair:
    hf = Tokenizer.from_file(str(path))
    hf.no_padding()
    hf.enable_truncation(max_length=max_seq_len)
    return Pair(native=load_wordpiece(path, max_seq_len), hf=hf)


def _pair_from_config(config: dict[str, Any], tmp_path: Path, max_seq_len: int) -> Pair:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    return _pair(path, max_seq_len)


@pytest.fixture(scope="module")
def tiny_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wordpiece") / "tokenizer.json"
    build_wordpiece_tokenizer(tiny_vocab(512), TINY_MAX_SEQ_LEN).save(str(path))
    return path


@pytest.fixture(scope="module")
def tiny_config(tiny_json: Path) -> dict[str, Any]:
    return json.loads(tiny_json.read_text())


@pytest.fixture(scope="module")
def tiny(tiny_json: Path) -> Pair:
    return _pair(tiny_json, TINY_MAX_SEQ_LEN)


@pytest.fixture(scope="module")
def minilm_json() -> Path:
    try:
        return find_model_dir() / "tokenizer.json"
    except FileNotFoundError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def minilm(minilm_json: Path) -> Pair:
    return _pair(minilm_json, MINILM_MAX_SEQ_LEN)


@EXAMPLES
@given(text=st.one_of(mixed_text, long_text, unicode_soup, any_text))
def test_tiny_parity(tiny: Pair, text: str) -> None:
    tiny.check(text)


@EXAMPLES
@given(text=st.one_of(mixed_text, long_text, unicode_soup, any_text))
def test_minilm_parity(minilm: Pair, text: str) -> None:
    minilm.check(text)


@pytest.mark.parametrize("flags", [
    {"strip_accents": False},
    {"strip_accents": True, "lowercase": False},
    {"strip_accents": None, "lowercase": False},
    {"clean_text": False},
    {"handle_chinese_chars": False},
    {"clean_text": False, "handle_chinese_chars": False, "strip_accents": False, "lowercase": False},
], ids=lambda flags: ",".join(f"{k}={v}" for k, v in flags.items()))
def test_normalizer_flags_parity(minilm_json: Path, tmp_path: Path, flags: dict[str, Any]) -> None:
    config = json.loads(minilm_json.read_text())
    config["normalizer"].update(flags)
    pair = _pair_from_config(config, tmp_path, MINILM_MAX_SEQ_LEN)

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=st.one_of(mixed_text, unicode_soup, any_text))
    def check(text: str) -> None:
        pair.check(text)

    check()


@pytest.mark.parametrize("change", ["prefix", "max_chars", "bert_processing", "added_outside_vocab"])
def test_model_variants_parity(tiny_config: dict[str, Any], tmp_path: Path, change: str) -> None:
    config = copy.deepcopy(tiny_config)
    if change == "prefix":
        vocab = config["model"]["vocab"]
        config["model"]["vocab"] = {t.replace("##", "@@", 1) if t.startswith("##") else t: i for t, i in vocab.items()}
        config["model"]["continuing_subword_prefix"] = "@@"
    elif change == "max_chars":
        config["model"]["max_input_chars_per_word"] = 5
    elif change == "bert_processing":
        ids = config["model"]["vocab"]
        config["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", ids["[SEP]"]],
                                    "cls": ["[CLS]", ids["[CLS]"]]}
    else:
        config["added_tokens"].append({"id": 512, "content": "<extra>", "single_word": False, "lstrip": False,
                                       "rstrip": False, "normalized": False, "special": True})
    pair = _pair_from_config(config, tmp_path, TINY_MAX_SEQ_LEN)
    assert pair.native.vocab_size == pair.hf.get_vocab_size()

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=st.one_of(mixed_text, long_text, st.just("ab<extra>cd <extra>"), st.just("hello world xy")))
    def check(text: str) -> None:
        pair.check(text)

    check()


_MARKS = ["\U0001d165", "\U0001d16d", "\u1b44", "\u302e", "\u0301", "\u0316", "\u0345", "\u093f"]


@pytest.mark.parametrize("strip_accents", [True, False])
def test_canonical_reordering_parity(tiny_config: dict[str, Any], tmp_path: Path, strip_accents: bool) -> None:
    """Marks that survive strip_accents (spacing marks with a combining class) keep NFD's canonical order;
    only a vocabulary holding such sequences can tell, so give it every ordering of pairs."""
    config = copy.deepcopy(tiny_config)
    config["normalizer"]["strip_accents"] = strip_accents
    vocab = config["model"]["vocab"]
    pieces = _MARKS + [a + b for a in _MARKS for b in _MARKS if a != b]
    for piece in pieces + [f"e{piece}" for piece in pieces] + [f"##{piece}" for piece in pieces]:
        vocab.setdefault(piece, len(vocab))
    pair = _pair_from_config(config, tmp_path, 4096)
    # Without strip_accents HF applies no NFD at all, so nothing is reordered.
    expected = "e\U0001d165\U0001d16d" if strip_accents else "e\U0001d16d\U0001d165"
    assert pair.native.encode(["e\U0001d16d\U0001d165"])[0].tolist()[1] == vocab[expected]

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=st.text(alphabet=st.sampled_from(["a", "e", " ", *_MARKS]), max_size=30))
    def check(text: str) -> None:
        pair.check(text)

    check()


@pytest.mark.parametrize("max_len", [64, 4096])
def test_texts_many_pieces_long_parity(tiny_config: dict[str, Any], tmp_path: Path, max_len: int) -> None:
    """The C++ tokenizer normalizes a segment 512 bytes at a time, each piece cut just after an ASCII space, and
    stops once it has max_len ids: the same ids as HF's tokenize-then-truncate, whether truncation comes early (64)
    or never (4096), for texts that span many pieces."""
    pair = _pair_from_config(copy.deepcopy(tiny_config), tmp_path, max_len)
    long_mixed = st.lists(st.tuples(word, st.sampled_from(SEPARATORS)), min_size=40, max_size=120).map(
        lambda parts: "".join(word + sep for word, sep in parts))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=long_mixed)
    def check(text: str) -> None:
        pair.check(text)

    check()
    pair.check("the " * 3000)  # 12 KB: ~24 pieces
    assert len(pair.native.encode(["the " * 3000])[0]) == min(max_len, 3002)
    # Spans past the first pieces: code points counted across pieces and added tokens.
    pair.check("é中 [SEP] 😀 " * 300 + "the end")


def test_every_code_point(minilm: Pair) -> None:
    """Each code point, alone and next to others, against the real vocabulary (no truncation)."""
    path = find_model_dir() / "tokenizer.json"
    pair = _pair(path, 1 << 20)
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = []
    for begin in range(0, len(points), 16):
        chars = [chr(c) for c in points[begin:begin + 16]]
        texts += ["".join(chars), " ".join(chars), "a".join(chars) + "a", "e\u0301".join(chars)]
    encodings = pair.hf.encode_batch(texts)
    expected = [encoding.ids for encoding in encodings]
    got = pair.native.encode(texts)
    mismatches = [(texts[i], got[i].tolist(), expected[i]) for i in range(len(texts)) if got[i].tolist() != expected[i]]
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[0]!r}"
    spans = pair.native.encode_spans(texts)
    mismatches = [(texts[i], spans[i][1].tolist(), hf_spans(pair.hf, encodings[i], texts[i])) for i in range(len(texts))
                  if [tuple(row) for row in spans[i][1].tolist()] != hf_spans(pair.hf, encodings[i], texts[i])
                  or spans[i][2] != len(texts[i])]
    assert not mismatches, f"{len(mismatches)} span mismatches, first: {mismatches[0]!r}"


# --- explicit cases -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "", " ", "\x00\ufffd", "Hello, world!", "a [SEP] b", "a[SEP]b", "[CLS][SEP][PAD][MASK][UNK]", "[sep]",
    "The movie was unbelievably good.", "İ", "ß", "ﬁ", "Ⅻ", "中文和English", "a\u0301\u0316", "x" * 101,
    "wordswordswords " * 40, "\t\n\r\u00a0\u3000", "e\U0001d165\u0316\u0301\U0001d16d",
    "café naïve Ångström straße", "e\u0301 a\u0344\u0316 \u0130stanbul", "中文和English 日本語、한국어。",
    "😀 👍🏽 🇫🇷 👩‍💻!", "x\x00y\u200bz\ufeff\x7f\x85w", "a\u00adb\ue000c \U000e0041d", "[SEP]" * 40,
    "Hello [MASK], " * 30,
])
def test_explicit_cases(tiny: Pair, minilm: Pair, text: str) -> None:
    tiny.check(text)
    minilm.check(text)


def test_known_spans(tiny: Pair) -> None:
    """Offsets into the caller's text (code points), whatever normalizing did to it."""
    ids = tiny.hf.token_to_id
    ((got_ids, spans, chars_read),) = tiny.native.encode_spans(["Good movies, CAFÉ\u200b中 [SEP]!"])
    assert got_ids.tolist() == [ids(t) for t in ["[CLS]", "good", "movie", "##s", ",", "c", "##a", "##f", "##e",
                                                 "[UNK]", "[SEP]", "!", "[SEP]"]]
    # CAFÉ -> c ##a ##f ##e, É's span one code point though NFD made it two; the zero-width space dropped; the
    # [SEP] typed in the text at its place and not special (HF's special_tokens_mask); the real ones at (0, 0),
    # subwords to transformers' rule (five characters over an empty span).
    assert spans.tolist() == [[0, 0, 1, 1], [0, 4, 0, 0], [5, 10, 0, 0], [10, 11, 1, 0], [11, 12, 0, 0],
                              [13, 14, 0, 0], [14, 15, 1, 0], [15, 16, 1, 0], [16, 17, 1, 0], [18, 19, 0, 0],
                              [20, 25, 0, 0], [25, 26, 0, 0], [0, 0, 1, 1]]
    assert chars_read == 26
    # Truncated: chars_read is where the last kept token ends; with no room for any, 0.
    ((_, spans, chars_read),) = load_wordpiece_spans(tiny, 4).encode_spans(["Good movies!"])
    assert spans.tolist() == [[0, 0, 1, 1], [0, 4, 0, 0], [5, 10, 0, 0], [0, 0, 1, 1]] and chars_read == 10
    ((ids2, spans, chars_read),) = load_wordpiece_spans(tiny, 2).encode_spans(["Good"])
    assert len(ids2) == 2 and spans.tolist() == [[0, 0, 1, 1]] * 2 and chars_read == 0
    ((_, spans, chars_read),) = load_wordpiece_spans(tiny, 2).encode_spans([" \u200b "])  # nothing to cut
    assert chars_read == 3
    assert tiny.native.encode_spans([]) == []
    with pytest.raises(TypeError, match="not a str"):
        tiny.native.encode_spans("text")  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        tiny.native.encode_spans(["lone \ud800 surrogate"])


def load_wordpiece_spans(pair: Pair, max_len: int) -> WordPiece:
    return wordpiece_from_config(json.loads(pair.hf.to_str()), max_len)


@pytest.mark.parametrize("max_len", [2, 3, 8, 32])
def test_spans_truncation_parity(tiny_json: Path, max_len: int) -> None:
    """chars_read and the last spans where truncation cuts: inside a word's pieces, on an added token, exactly at
    the limit (nothing cut), one past it."""
    pair = _pair(tiny_json, max_len)
    for words in range(0, 40):
        pair.check_spans(" ".join(["unbelievably", "[SEP]", "x", "café"] * 10)[: words * 3])
        pair.check_spans("a " * words)


def test_spans_match_the_python_token_encoder(minilm_json: Path) -> None:
    """Every column equals what the server's HF path (service.tokenization, tokens=True) gives: one rule for the
    entities whichever tokenizer read the text (e.g. "e\u0301" with accents stripped is one token "e" over two
    characters: a subword to transformers' rule)."""
    from ortserve.service import tokenization

    python = tokenization._token_encoder(_pair(minilm_json, 16).hf, 0)
    native = load_wordpiece(minilm_json, 16)
    texts = ["Hello, World!", "café naïve Ångström", "cafe\u0301", "中文和English",
             "the movie was unbelievably good " * 5, "a [SEP] b", "", "x\x00y\u200bz 😀", "İstanbul ǅ"]
    for text, expected, (ids, spans, chars_read) in zip(texts, python(texts), native.encode_spans(texts),
                                                        strict=True):
        assert ids.tolist() == expected.ids.tolist(), text
        assert spans.tolist() == expected.spans.tolist(), text
        assert chars_read == expected.chars_read, text


def test_known_ids(tiny: Pair) -> None:
    ids = tiny.hf.token_to_id
    cls, sep, unk = ids("[CLS]"), ids("[SEP]"), ids("[UNK]")
    encode = tiny.native.encode
    assert encode([""])[0].tolist() == [cls, sep]
    assert encode(["a [SEP] b"])[0].tolist() == [cls, ids("a"), sep, ids("b"), sep]
    assert encode(["Good movies!"])[0].tolist() == [cls, ids("good"), ids("movie"), ids("##s"), ids("!"), sep]
    assert encode(["a" * 101])[0].tolist() == [cls, unk, sep]
    long = encode(["a " * 100])[0]
    assert len(long) == TINY_MAX_SEQ_LEN and long[-1] == sep


def test_batch_and_properties(tiny: Pair) -> None:
    texts = ["one", "", "two three", "[MASK]"] * 10
    assert [row.tolist() for row in tiny.native.encode(texts)] == [e.ids for e in tiny.hf.encode_batch(texts)]
    assert tiny.native.encode([]) == []
    assert tiny.native.encode(tuple(texts))[2].tolist() == tiny.hf.encode("two three").ids
    assert tiny.native.vocab_size == tiny.hf.get_vocab_size() == 512
    for token in ["[PAD]", "[SEP]", "the", "##ing", "nope", "[unused3]", ""]:
        assert tiny.native.token_to_id(token) == tiny.hf.token_to_id(token)
    assert tiny.native.max_len == TINY_MAX_SEQ_LEN


def test_encode_rejects_bad_input(tiny: Pair) -> None:
    with pytest.raises(TypeError, match="not a str"):
        tiny.native.encode("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int"):
        tiny.native.encode(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(UnicodeEncodeError):
        tiny.native.encode(["lone \ud800 surrogate"])


# --- unsupported shapes -------------------------------------------------------------------------------

def _set(path: list[str | int], value: object) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        target = config
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_set(["normalizer"], {"type": "Sequence", "normalizers": []}), "normalizer Sequence is not supported"),
    (_set(["normalizer"], None), "normalizer None is not supported"),
    (_set(["normalizer", "strip_accents"], "yes"), "BertNormalizer strip_accents='yes'"),
    (_set(["pre_tokenizer"], {"type": "Whitespace"}), "pre_tokenizer Whitespace is not supported"),
    (_set(["model", "type"], "BPE"), "model BPE is not supported"),
    (_set(["model", "unk_token"], "<unk>"), "unk_token '<unk>' missing from the vocab"),
    (_set(["model", "vocab", "the"], 100000), "vocab ids that are not 0..511"),
    (_set(["added_tokens", 1, "normalized"], True), "added token '[UNK]' with normalized=True"),
    (_set(["added_tokens", 2, "lstrip"], True), "added token '[CLS]' with lstrip=True"),
    (_set(["added_tokens", 3, "rstrip"], True), "added token '[SEP]' with rstrip=True"),
    (_set(["added_tokens", 4, "single_word"], True), "added token '[MASK]' with single_word=True"),
    (_set(["added_tokens", 0, "special"], False), "non-special added token '[PAD]'"),
    (_set(["post_processor"], None), "post_processor None is not supported"),
    (_set(["post_processor"], {"type": "RobertaProcessing"}), "post_processor RobertaProcessing"),
    (_set(["post_processor", "single"], []), "TemplateProcessing single template []"),
    (_set(["post_processor", "special_tokens", "[CLS]", "ids"], [1, 2]),
     "special token '[CLS]' that is not exactly one id"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_unsupported_shapes(tiny_config: dict[str, Any], change: Callable[[dict[str, Any]], None],
                            message: str) -> None:
    config = copy.deepcopy(tiny_config)
    change(config)
    with pytest.raises(UnsupportedTokenizer, match="not supported by the native tokenizer") as raised:
        wordpiece_from_config(config, TINY_MAX_SEQ_LEN)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_max_seq_len_must_fit_the_specials(tiny_json: Path) -> None:
    with pytest.raises(ValueError, match="max_seq_len must be an int >= 2"):
        load_wordpiece(tiny_json, 1)
    assert load_wordpiece(tiny_json, 2).encode(["hello there"])[0].tolist() == [2, 3]


# --- threads and tables -------------------------------------------------------------------------------

def test_concurrent_encode(minilm: Pair) -> None:
    texts = [f"Text number {n}: the café's ünïcödé {'中' * (n % 7)} was [SEP] {'great ' * (n % 50)}!"
             for n in range(400)]
    expected = [row.tolist() for row in minilm.native.encode(texts)]
    results: list[list[list[int]]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def work() -> None:
        try:
            barrier.wait()
            out: list[list[int]] = []
            for _ in range(10):
                out = [row.tolist() for row in minilm.native.encode(texts)]
            results.append(out)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 6 and all(result == expected for result in results)
    assert expected == [e.ids for e in minilm.hf.encode_batch(texts)]
