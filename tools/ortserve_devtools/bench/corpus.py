"""A deterministic corpus of English-like sentences of varied length, from a seeded generator.

Lengths follow a log-normal spread (median ~16 words, 4..120): mostly short texts, a long tail, and
a few past the model's max_seq_len so truncation is exercised, as in real review/comment traffic.
The same seed gives the same texts on every machine and Python version (only `random.Random`'s
documented-stable `random()` is used), so runs of different servers see identical requests.
"""

from __future__ import annotations

import math
import random

# Plain words (one WordPiece token each) mixed with rarer ones that split into several pieces.
_WORD_TEXT = """
the a an and or but so because while if when then than this that these those it its they them we you
he she i my our your their his her is was are were be been being have has had do does did will would
can could should may might must not no very really quite too also just only even still good great
bad awful fine nice poor excellent terrible decent average amazing boring slow fast cheap expensive
friendly rude helpful useless broken working new old small large long short movie film book story
plot actor music sound picture screen phone battery camera app update price service staff delivery
order package box room hotel food meal dinner coffee table seat day week month year time hour minute
morning evening night weekend holiday trip flight train work job team manager customer support call
email message account password problem issue bug fix answer question review rating star experience
quality design size colour color feature love like hate enjoy recommend return buy use try wait
arrive leave stay watch read listen play open close start stop break fail crash charge last keep
feel seem look think know want need get make take give find tell ask help show see say go come put
set run turn move pay cost spend about after before during over under again never always often
sometimes usually maybe almost well much many more most less least few some any every each all both
other another same first second last next previous whole entire half full empty clean dirty quiet
loud warm cold unbelievably disappointing overpriced underwhelming unresponsive straightforward
intuitive counterintuitive refurbished miscommunication troubleshooting subscription notifications
reimbursement compatibility configuration documentation cinematography soundtrack choreography
protagonist antagonist screenplay melodramatic predictable unforgettable bluetooth wifi firmware
touchscreen smartwatch headphones earbuds charger adapter keyboard
"""
_WORDS = tuple(_WORD_TEXT.split())
_ENDINGS = (".", ".", ".", "!", "?", "...")


def make_corpus(count: int, *, seed: int = 0, min_words: int = 4, max_words: int = 120,
                median_words: float = 16.0, spread: float = 0.85) -> list[str]:
    """`count` sentences; word counts log-normal around `median_words`, clipped to [min_words, max_words]."""
    if count < 1:
        raise ValueError(f"corpus size must be >= 1, got {count}")
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}..{max_words}")
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words = round(median_words * math.exp(spread * _normal(rng)))
        words = max(min_words, min(max_words, words))
        texts.append(_sentence(rng, words))
    return texts


def _normal(rng: random.Random) -> float:
    # Box-Muller from random() alone: stable across Python versions, unlike gauss()'s internals.
    u1 = 1.0 - rng.random()
    u2 = rng.random()
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def _pick(rng: random.Random, seq: tuple[str, ...] | list[str]) -> str:
    return seq[int(rng.random() * len(seq))]


def _sentence(rng: random.Random, words: int) -> str:
    parts = [_pick(rng, _WORDS) for _ in range(words)]
    out: list[str] = []
    clause = 0
    for i, word in enumerate(parts):
        clause += 1
        if i + 1 < len(parts) and clause >= 6 and rng.random() < 0.15:  # commas split long clauses
            word += ","
            clause = 0
        out.append(word)
    out[0] = out[0].capitalize()
    return " ".join(out) + _pick(rng, _ENDINGS)
