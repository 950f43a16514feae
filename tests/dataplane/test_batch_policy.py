"""The batch policy's pure functions (batch_policy.cc, bound as choose_batch, split_rows and
Throughput) over plain values: the batching decision without a batcher, a thread or a model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import BatchPolicy, Throughput, choose_batch, split_rows

EXAMPLES = settings(max_examples=400, deadline=None)
POLICY = BatchPolicy(max_batch_size=4, max_queue_delay_s=0.010, max_padding_ratio=1.3,
                           batch_overhead_tokens=0, max_batch_tokens=1024, sort_window=48)


def texts(*lengths: int, at: float = 0.0) -> list[tuple[int, float]]:
    """(token count, enqueued at) pairs, one microsecond apart in the order given."""
    return [(n, at + i * 1e-6) for i, n in enumerate(lengths)]


def choose(pending: list[tuple[int, float]], now: float, policy: BatchPolicy = POLICY) -> list[int]:
    return choose_batch(pending, now, policy)


def test_nothing_pending_nothing_chosen() -> None:
    assert choose([], 0.0) == []


def test_lone_text_runs_at_once() -> None:
    assert choose(texts(17), 0.0) == [0]


def test_groups_similar_lengths_and_leaves_outliers() -> None:
    assert sorted(choose(texts(10, 50, 11, 10, 52), 0.0)) == [0, 2, 3]


def test_batch_size_is_capped() -> None:
    assert len(choose(texts(*[8] * 10), 0.0)) == 4


def test_padding_stays_within_ratio() -> None:
    pending = texts(10, 12, 13, 30, 31, 40)
    lengths = [pending[i][0] for i in choose(pending, 0.0)]
    assert len(lengths) * max(lengths) <= 1.3 * sum(lengths)


def test_overdue_oldest_text_is_included() -> None:
    pending = [(90, 0.0), *[(10, 1.0 + i * 1e-6) for i in range(4)]]
    assert 0 not in choose(pending, 0.005)  # not overdue yet: the group of short ones wins
    assert 0 in choose(pending, 0.011)  # overdue: it must go next


def test_run_overhead_pays_for_some_padding() -> None:
    # 10 and 40 tokens: 30 wasted. Worth it when a run costs more than 30 tokens' worth of work.
    assert sorted(choose(texts(10, 40), 0.0, BatchPolicy(batch_overhead_tokens=32))) == [0, 1]
    assert len(choose(texts(10, 40), 0.0, BatchPolicy(batch_overhead_tokens=16))) == 1


def test_padded_tokens_are_capped() -> None:
    policy = BatchPolicy(max_batch_size=64, max_padding_ratio=2.0, max_batch_tokens=100)
    assert len(choose(texts(*[20] * 10), 0.0, policy)) == 5  # 5 x 20 = 100 padded tokens
    assert choose(texts(300), 0.0, policy) == [0]  # one over-long text still runs, alone


def test_only_the_oldest_texts_are_sorted() -> None:
    # Six texts of length 10 arrived last; the window holds the 3 oldest (lengths 40, 41, 90).
    pending = texts(40, 41, 90, 10, 10, 10, 10, 10, 10)
    window = BatchPolicy(max_batch_size=4, max_queue_delay_s=1.0, max_padding_ratio=1.3, sort_window=3)
    assert sorted(choose(pending, 0.0, window)) == [0, 1]
    # Sorting the whole queue would have taken the four short newcomers instead.
    whole = BatchPolicy(max_batch_size=4, max_queue_delay_s=1.0, max_padding_ratio=1.3, sort_window=0)
    assert sorted(choose(pending, 0.0, whole)) == [3, 4, 5, 6]


def test_ties_go_to_the_shorter_then_older_window() -> None:
    # Two windows of two fit equally well; the one with the oldest text wins, then the shorter one.
    assert sorted(choose([(10, 0.002), (10, 0.003), (20, 0.0), (20, 0.001)], 0.0)) == [2, 3]
    assert sorted(choose([(10, 0.0), (10, 0.001), (20, 0.002), (20, 0.003)], 0.0)) == [0, 1]


def test_throughput_turns_queue_depth_into_wait() -> None:
    rate = Throughput()
    assert rate.wait_s(10) == 0.0  # nothing measured yet: no basis to refuse anyone
    rate.observe(10, 0.5)
    assert rate.texts_per_s == pytest.approx(20) and rate.wait_s(10) == pytest.approx(0.5)
    rate.observe(0, 0.1)  # an empty run and a negative interval tell nothing
    rate.observe(5, -1.0)
    assert rate.texts_per_s == pytest.approx(20)


def test_throughput_is_texts_over_busy_time_not_a_mean_of_run_rates() -> None:
    # Two lanes finishing in turn: one run 100 ms after the last, the other 1 ms after that. The queue drains 16
    # texts per 101 ms; the mean of the two runs' rates (80 and 8000 texts/s) would be 50 times that.
    rate = Throughput()
    for _ in range(20):
        rate.observe(8, 0.100)
        rate.observe(8, 0.001)
    assert rate.texts_per_s == pytest.approx(16 / 0.101, rel=0.01)
    rate.observe(8, 0.0)  # a run that ends with another one counts, with no time of its own
    assert rate.texts_per_s > 16 / 0.101


def test_throughput_follows_a_change_within_its_window() -> None:
    rate = Throughput()
    for _ in range(100):
        rate.observe(10, 0.1)  # 100 texts/s for 10 s of busy time
    for _ in range(5):
        rate.observe(10, 0.05)  # then 200 texts/s: 0.25 s of it moves the estimate part of the way
    assert 120 < rate.texts_per_s < 180
    for _ in range(40):
        rate.observe(10, 0.05)  # 2 s more: the old rate has decayed away
    assert rate.texts_per_s == pytest.approx(200, rel=0.01)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("max_batch_size", 0, "max_batch_size must be >= 1"),
    ("max_queue_delay_s", -0.001, "max_queue_delay_s must be >= 0"),
    ("max_padding_ratio", 0.99, "max_padding_ratio must be >= 1.0"),
    ("batch_overhead_tokens", -1, "batch_overhead_tokens must be >= 0"),
    ("max_batch_tokens", 0, "max_batch_tokens must be >= 1"),
    ("sort_window", -1, "sort_window must be >= 0"),
])
def test_policy_rejects_nonsense_naming_the_field(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BatchPolicy(**{field: value})


@EXAMPLES
@given(
    st.lists(st.tuples(st.integers(1, 8) | st.integers(1, 512),
                       st.sampled_from([0.0, 0.001, 0.005, 0.01]) | st.floats(0, 1)), min_size=1, max_size=80),
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
    chosen = choose(items, now, policy)
    if window:  # nothing younger than the window's youngest text is ever taken
        by_age = sorted(range(len(items)), key=lambda i: items[i][1])
        assert set(chosen) <= set(by_age[:window])
    assert chosen and len(chosen) == len(set(chosen)) and len(chosen) <= max_batch
    assert all(0 <= i < len(items) for i in chosen)
    candidates = sorted(range(len(items)), key=lambda i: items[i][1])[:window] if window else range(len(items))
    oldest = min(candidates, key=lambda i: items[i][1])
    if now - items[oldest][1] >= 0.01:
        assert oldest in chosen
    lengths = [items[i][0] for i in chosen]
    waste = len(chosen) * max(lengths) - sum(lengths)
    assert len(chosen) == 1 or waste <= max((ratio - 1) * sum(lengths), (len(chosen) - 1) * overhead) + 1e-9
    assert len(chosen) == 1 or len(chosen) * max(lengths) <= max_tokens


@pytest.mark.parametrize(("lengths", "size", "tokens", "expected"), [
    ([], 32, 1024, []),
    ([5] * 10, 4, 1024, [(0, 4), (4, 8), (8, 10)]),
    ([100, 100, 300, 10], 32, 400, [(0, 2), (2, 3), (3, 4)]),  # 3 x 300 > 400: the long one starts a run
    ([2000, 3], 32, 1024, [(0, 1), (1, 2)]),  # a row over the token bound alone is a run of its own
    ([8] * 5, 32, 1024, [(0, 5)]),
])
def test_split_rows_examples(lengths: list[int], size: int, tokens: int, expected: list[tuple[int, int]]) -> None:
    assert split_rows(lengths, BatchPolicy(max_batch_size=size, max_batch_tokens=tokens)) == expected


@EXAMPLES
@given(lengths=st.lists(st.integers(1, 600), max_size=200), size=st.integers(1, 64), tokens=st.integers(1, 4096))
def test_split_rows_covers_every_row_in_order_within_the_limits(lengths: list[int], size: int, tokens: int) -> None:
    runs = split_rows(lengths, BatchPolicy(max_batch_size=size, max_batch_tokens=tokens))
    assert [i for begin, end in runs for i in range(begin, end)] == list(range(len(lengths)))
    for begin, end in runs:
        rows = lengths[begin:end]
        assert rows and len(rows) <= size
        assert len(rows) == 1 or len(rows) * max(rows) <= tokens
        # Maximal: the next row would not have fit (runs end only where they must).
        if end < len(lengths):
            wider = lengths[begin:end + 1]
            assert len(wider) > size or len(wider) * max(wider) > tokens
