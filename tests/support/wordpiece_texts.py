"""Texts for the native WordPiece's parity tests against HF tokenizers (tests/engine/test_wordpiece*.py): words
and separators that stress normalisation, splitting, special tokens and truncation, and the hypothesis budget."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

TINY_MAX_SEQ_LEN = 32
MINILM_MAX_SEQ_LEN = 128
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORDS = [
    "the", "movie", "was", "unbelievably", "good", "Hello", "WORLD", "don't", "e-mail", "3.14", "#1",
    "café", "naïve", "Ångström", "İstanbul", "straße", "ǅemal", "ΣΊΣΥΦΟΣ", "ﬁne", "Ⅻ", "\uff46\uff55\uff4c\uff4c",
    "中文", "日本語", "한국어", "ภาษาไทย", "العربية", "עברית", "हिन्दी", "😀", "👍🏽", "🇫🇷", "👩‍💻", "🫠", "🥲",
    "[SEP]", "[CLS]", "[PAD]", "[MASK]", "[UNK]", "[sep]", "[SEP", "SEP]", "[[SEP]]", "##ing", "##",
    "a\u0301\u0316", "e\U0001d165\u0301\U0001d16d", "\u302e\u0301", "\ufb01\u0307", "\u0130\u0307",
    "\x00", "\ufffd", "\u200b", "\u200d", "\ufeff", "\u00ad", "\x7f", "\x85", "\ue000", "\U000e0041",
    "\u0378", "\U0010ffff",
]
SEPARATORS = [" ", "", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u1680", "\u202f",
               "\x1c", "\x0b", ",", ".", "!?", "-", "'", "\"", "(", ")", "¿", "«", "、", "。", "$", "~"]
INTERESTING = st.characters(codec="utf-8", categories=("L", "M", "N", "P", "S", "Z", "C"))

word = st.one_of(
    st.sampled_from(WORDS),
    st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=12),
    st.text(alphabet=INTERESTING, min_size=1, max_size=6),
    st.text(alphabet="abé", min_size=95, max_size=110),  # around max_input_chars_per_word
    st.text(alphabet=string.ascii_lowercase + "\u0301", min_size=90, max_size=210),
)
mixed_text = st.lists(st.tuples(word, st.sampled_from(SEPARATORS)), max_size=20).map(
    lambda parts: "".join(word + sep for word, sep in parts))
# Past max_seq_len tokens, so truncation cuts inside words, between special tokens, etc.
long_text = st.lists(st.sampled_from([*WORDS[:20], "[SEP]", "unbelievably", "x"]), min_size=20,
                     max_size=200).map(" ".join)
any_text = st.text()
unicode_soup = st.text(alphabet=INTERESTING, max_size=60)
