"""A real, deterministic BERT WordPiece tokenizer built in-process, set up as the server reads texts.

The tiny vocabulary holds the BERT special tokens at fixed ids ([PAD]=0 because the server pads with
id 0), ASCII punctuation, every letter and digit both as a word start and as a ``##`` continuation
(so any ASCII word tokenizes to something other than [UNK]), a few hundred common English words and
suffix pieces (so ordinary sentences produce realistic multi-piece tokenizations), and finally
``[unusedN]`` fillers up to the requested size, the way BERT's own vocab reserves ids. The list is
literal and ordered, so the same arguments always produce the same ``tokenizer.json`` bytes.

Every bundle's tokenizer is written set up as the server reads it (``ortserve.bundle.tokenizer.set_up``: truncate
to ``max_seq_len``, never pad). Files exported from HF often carry ``"padding": {"strategy": {"Fixed": 128}}``,
which would silently pad every request to 128 tokens.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ortserve.bundle import tokenizer as bundle_tokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID = 0

_COMMON_WORDS = """  # whitespace-separated, split in tiny_vocab
the a an and or but if then so of to in on at by for with from as is are was were be been being am
it its this that these those there here i me my you your he him his she her we us our they them their
not no yes do does did done have has had can could will would should may might must
what which who whom whose when where why how all any some many much more most few less very too
good great bad best worst better worse love like hate enjoy happy sad angry awful terrible horrible
wonderful excellent amazing fantastic nice fine poor boring fun funny beautiful ugly perfect broken
product movie film book service food place time day night year people thing way work price quality
buy bought use used make made get got go went come came see saw know think feel felt say said want
one two three first last new old big small long short high low again never always really just only
up down out over under about after before because while until through into than also well still
recommend disappointed disappointing waste money worth return refund delivery fast slow cheap
"""

_SUFFIXES = ("##s", "##es", "##ed", "##ing", "##ly", "##er", "##est", "##ness", "##ful", "##less", "##able",
             "##ment", "##tion", "##ion", "##al", "##y", "##ity", "##ous", "##ive", "##ish")


def tiny_vocab(vocab_size: int) -> list[str]:
    """The ordered vocabulary (index = token id) padded with ``[unusedN]`` to exactly ``vocab_size``."""
    base: list[str] = list(SPECIAL_TOKENS)
    base += list(string.punctuation)
    base += list(string.ascii_lowercase) + list(string.digits)
    base += ["##" + c for c in string.ascii_lowercase + string.digits]
    seen = set(base)
    for piece in (*_COMMON_WORDS.split(), *_SUFFIXES):
        if piece not in seen:
            seen.add(piece)
            base.append(piece)
    if vocab_size < len(base):
        raise ValueError(f"vocab_size must be >= {len(base)} (the built-in WordPiece vocabulary), got {vocab_size}")
    return base + [f"[unused{n}]" for n in range(vocab_size - len(base))]


def build_wordpiece_tokenizer(vocab: list[str], max_seq_len: int) -> Tokenizer:
    """An uncased BERT tokenizer (``[CLS] text [SEP]``) over ``vocab``, configured for serving."""
    ids = {token: n for n, token in enumerate(vocab)}
    missing = [t for t in SPECIAL_TOKENS if t not in ids]
    if missing:
        raise ValueError(f"vocabulary lacks special tokens {missing}")
    if ids["[PAD]"] != PAD_ID:
        raise ValueError(f"[PAD] must have id {PAD_ID} (the server pads with it), got {ids['[PAD]']}")
    tokenizer = Tokenizer(models.WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    # Registered as special so that they are never split and are skipped when decoding.
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return bundle_tokenizer.set_up(tokenizer, max_seq_len)
