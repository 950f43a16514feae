"""The corpus is the same for everyone who runs the bench, and its lengths are a realistic spread."""

from __future__ import annotations

import pytest
from ortserve_devtools.bench.corpus import make_corpus


def test_same_seed_same_texts_other_seed_other_texts() -> None:
    assert make_corpus(50, seed=3) == make_corpus(50, seed=3)
    assert make_corpus(50, seed=3) != make_corpus(50, seed=4)


def test_word_counts_spread_within_bounds() -> None:
    counts = sorted(len(t.split()) for t in make_corpus(2000))
    assert counts[0] >= 4 and counts[-1] <= 120
    assert 10 <= counts[len(counts) // 2] <= 25  # mostly short texts...
    assert sum(c >= 90 for c in counts) >= 10  # ...with a long tail that max_seq_len 128 truncates


def test_first_texts_are_fixed() -> None:
    # Pins the generator: a change here changes every published figure, so it must be deliberate.
    assert make_corpus(1)[0].startswith("Time fast question seat more long call leave refurbished")


def test_bad_size_is_refused() -> None:
    with pytest.raises(ValueError, match="corpus size"):
        make_corpus(0)
