"""choose_batch over plain lists: the batching decision without an event loop."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ortserve.service.batch_policy import BatchPolicy, PendingText, Throughput, choose_batch

POLICY = BatchPolicy(max_batch_size=4, max_queue_delay_s=0.010, max_padding_ratio=1.3, batch_overhead_tokens=0)


def texts(*lengths: int, at: float = 0.0) -> list[PendingText]:
    return [PendingText(n, at + i * 1e-6) for i, n in enumerate(lengths)]


def test_nothing_pending_nothing_chosen() -> None:
    assert choose_batch([], 0.0, POLICY) == []


def test_lone_text_runs_at_once() -> None:
    assert choose_batch(texts(17), 0.0, POLICY) == [0]


def test_groups_similar_lengths_and_leaves_outliers() -> None:
    pending = texts(10, 50, 11, 10, 52)
    assert sorted(choose_batch(pending, 0.0, POLICY)) == [0, 2, 3]


def test_batch_size_is_capped() -> None:
    assert len(choose_batch(texts(*[8] * 10), 0.0, POLICY)) == 4


def test_padding_stays_within_ratio() -> None:
    pending = texts(10, 12, 13, 30, 31, 40)
    chosen = choose_batch(pending, 0.0, POLICY)
    lengths = [pending[i].length for i in chosen]
    assert len(chosen) * max(lengths) <= 1.3 * sum(lengths)


def test_overdue_oldest_text_is_included() -> None:
    old = PendingText(90, 0.0)
    fresh = [PendingText(10, 1.0 + i * 1e-6) for i in range(4)]
    pending = [old, *fresh]
    assert choose_batch(pending, 0.005, POLICY) != [0]  # not overdue yet: the group of short ones wins
    assert 0 not in choose_batch(pending, 0.005, POLICY)
    assert 0 in choose_batch(pending, 0.011, POLICY)  # overdue: it must go next


def test_run_overhead_pays_for_some_padding() -> None:
    # 10 and 40 tokens: 30 wasted. Worth it when a run costs more than 30 tokens' worth of work.
    assert sorted(choose_batch(texts(10, 40), 0.0, BatchPolicy(batch_overhead_tokens=32))) == [0, 1]
    assert len(choose_batch(texts(10, 40), 0.0, BatchPolicy(batch_overhead_tokens=16))) == 1


def test_padded_tokens_are_capped() -> None:
    policy = BatchPolicy(max_batch_size=64, max_padding_ratio=2.0, max_batch_tokens=100)
    assert len(choose_batch(texts(*[20] * 10), 0.0, policy)) == 5  # 5 x 20 = 100 padded tokens
    assert choose_batch(texts(300), 0.0, policy) == [0]  # one over-long text still runs, alone


def test_only_the_oldest_texts_are_sorted() -> None:
    # Six texts of length 10 arrived last; the window holds the 3 oldest (lengths 40, 41, 90).
    policy = BatchPolicy(max_batch_size=4, max_queue_delay_s=1.0, max_padding_ratio=1.3, sort_window=3)
    pending = texts(40, 41, 90, 10, 10, 10, 10, 10, 10)
    assert sorted(choose_batch(pending, 0.0, policy)) == [0, 1]
    # Sorting the whole queue would have taken the four short newcomers instead.
    whole = BatchPolicy(max_batch_size=4, max_queue_delay_s=1.0, max_padding_ratio=1.3, sort_window=0)
    assert sorted(choose_batch(pending, 0.0, whole)) == [3, 4, 5, 6]


def test_throughput_turns_queue_depth_into_wait() -> None:
    rate = Throughput()
    assert rate.wait_s(10) == 0.0  # nothing measured yet: no basis to refuse anyone
    rate.observe(10, 0.5)
    assert rate.texts_per_s == 20 and rate.wait_s(10) == 0.5
    rate.observe(40, 0.5)  # a faster batch moves the estimate part of the way
    assert 20 < rate.texts_per_s < 80


def test_policy_rejects_nonsense() -> None:
    import pytest

    for kwargs in ({"max_batch_size": 0}, {"max_queue_delay_s": -1}, {"max_padding_ratio": 0.5},
                   {"max_batch_tokens": 0}, {"batch_overhead_tokens": -1}, {"sort_window": -1}):
        with pytest.raises(ValueError):
            BatchPolicy(**kwargs)


@given(
    st.lists(st.tuples(st.integers(1, 128), st.floats(0, 1)), min_size=1, max_size=60),
    st.integers(1, 64),
    st.floats(1.0, 3.0),
    st.floats(0, 2),
    st.integers(1, 4096),
    st.integers(0, 64),
    st.integers(0, 30),
)
def test_always_a_valid_nonempty_batch(items, max_batch, ratio, now, max_tokens, overhead, window) -> None:
    policy = BatchPolicy(max_batch_size=max_batch, max_queue_delay_s=0.01, max_padding_ratio=ratio,
                         max_batch_tokens=max_tokens, batch_overhead_tokens=overhead, sort_window=window)
    pending = [PendingText(n, t) for n, t in items]
    chosen = choose_batch(pending, now, policy)
    if window:  # nothing younger than the window's youngest text is ever taken
        by_age = sorted(range(len(pending)), key=lambda i: pending[i].enqueued_at)
        assert set(chosen) <= set(by_age[:window])
    assert chosen and len(chosen) == len(set(chosen)) and len(chosen) <= max_batch
    assert all(0 <= i < len(pending) for i in chosen)
    oldest = min(range(len(pending)), key=lambda i: pending[i].enqueued_at)
    if now - pending[oldest].enqueued_at >= 0.01:
        assert oldest in chosen
    lengths = [pending[i].length for i in chosen]
    waste = len(chosen) * max(lengths) - sum(lengths)
    assert len(chosen) == 1 or waste <= max((ratio - 1) * sum(lengths), (len(chosen) - 1) * overhead) + 1e-9
    assert len(chosen) == 1 or len(chosen) * max(lengths) <= max_tokens
