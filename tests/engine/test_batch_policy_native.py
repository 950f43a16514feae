"""The C++ batch policy against its Python reference (service/batch_policy.py): the same indices for the same
pending sets and policies, the same validation messages, the same throughput arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import NativeBatchPolicy, NativeThroughput, native_choose_batch, split_rows
from ortserve.service.batch_policy import BatchPolicy, PendingText, Throughput, choose_batch

EXAMPLES = settings(max_examples=600, deadline=None)

policies = st.builds(
    BatchPolicy,
    max_batch_size=st.integers(1, 40),
    max_queue_delay_s=st.sampled_from([0.0, 0.001, 0.01, 0.05, 1.0]) | st.floats(0, 2),
    max_padding_ratio=st.sampled_from([1.0, 1.1, 1.3, 2.0]) | st.floats(1.0, 4.0),
    batch_overhead_tokens=st.sampled_from([0, 1, 8, 64]) | st.integers(0, 200),
    max_batch_tokens=st.sampled_from([1, 16, 256, 1024]) | st.integers(1, 5000),
    sort_window=st.sampled_from([0, 1, 4, 24]) | st.integers(0, 60),
)
# Few distinct lengths and times, so that ties (where stable sorting matters) are common.
pending_sets = st.lists(
    st.builds(PendingText, length=st.integers(1, 8) | st.integers(1, 512),
              enqueued_at=st.sampled_from([0.0, 0.001, 0.005, 0.01]) | st.floats(0, 0.1)),
    max_size=80,
)


def native_policy(policy: BatchPolicy) -> NativeBatchPolicy:
    return NativeBatchPolicy(
        max_batch_size=policy.max_batch_size,
        max_queue_delay_s=policy.max_queue_delay_s,
        max_padding_ratio=policy.max_padding_ratio,
        batch_overhead_tokens=policy.batch_overhead_tokens,
        max_batch_tokens=policy.max_batch_tokens,
        sort_window=policy.sort_window,
    )


@EXAMPLES
@given(pending=pending_sets, policy=policies, now=st.sampled_from([0.0, 0.01, 0.1]) | st.floats(0, 0.2))
def test_choose_batch_matches_python(pending: list[PendingText], policy: BatchPolicy, now: float) -> None:
    expected = choose_batch(pending, now, policy)
    got = native_choose_batch([(p.length, p.enqueued_at) for p in pending], now, native_policy(policy))
    assert got == expected


def test_choose_batch_empty_and_defaults() -> None:
    assert native_choose_batch([], 0.0, NativeBatchPolicy()) == []
    defaults = NativeBatchPolicy()
    reference = BatchPolicy()
    for name in ("max_batch_size", "max_queue_delay_s", "max_padding_ratio", "batch_overhead_tokens",
                 "max_batch_tokens", "sort_window"):
        assert getattr(defaults, name) == getattr(reference, name), name


@pytest.mark.parametrize("field,value", [
    ("max_batch_size", 0),
    ("max_queue_delay_s", -0.001),
    ("max_padding_ratio", 0.99),
    ("batch_overhead_tokens", -1),
    ("max_batch_tokens", 0),
    ("sort_window", -1),
])
def test_validation_messages_match_python(field: str, value: float) -> None:
    with pytest.raises(ValueError) as python_error:
        BatchPolicy(**{field: value})
    with pytest.raises(ValueError) as native_error:
        NativeBatchPolicy(**{field: value})
    assert str(native_error.value) == str(python_error.value)
    assert field in str(native_error.value)


@EXAMPLES
@given(runs=st.lists(st.tuples(st.integers(0, 64), st.floats(-0.01, 2.0)), max_size=30),
       ahead=st.integers(0, 1000))
def test_throughput_matches_python(runs: list[tuple[int, float]], ahead: int) -> None:
    python, native = Throughput(), NativeThroughput()
    assert native.wait_s(ahead) == 0.0  # before any batch ran
    for texts, seconds in runs:
        python.observe(texts, seconds)
        native.observe(texts, seconds)
        assert native.texts_per_s == python.texts_per_s
        assert native.wait_s(ahead) == python.wait_s(ahead)


@pytest.mark.parametrize(("lengths", "size", "tokens", "expected"), [
    ([], 32, 1024, []),
    ([5] * 10, 4, 1024, [(0, 4), (4, 8), (8, 10)]),
    ([100, 100, 300, 10], 32, 400, [(0, 2), (2, 3), (3, 4)]),  # 3 x 300 > 400: the long one starts a run
    ([2000, 3], 32, 1024, [(0, 1), (1, 2)]),  # a row over the token bound alone is a run of its own
    ([8] * 5, 32, 1024, [(0, 5)]),
])
def test_split_rows_examples(lengths: list[int], size: int, tokens: int, expected: list[tuple[int, int]]) -> None:
    assert split_rows(lengths, NativeBatchPolicy(max_batch_size=size, max_batch_tokens=tokens)) == expected


@EXAMPLES
@given(lengths=st.lists(st.integers(1, 600), max_size=200), size=st.integers(1, 64), tokens=st.integers(1, 4096))
def test_split_rows_covers_every_row_in_order_within_the_limits(lengths: list[int], size: int, tokens: int) -> None:
    runs = split_rows(lengths, NativeBatchPolicy(max_batch_size=size, max_batch_tokens=tokens))
    assert [i for begin, end in runs for i in range(begin, end)] == list(range(len(lengths)))
    for begin, end in runs:
        rows = lengths[begin:end]
        assert rows and len(rows) <= size
        assert len(rows) == 1 or len(rows) * max(rows) <= tokens
        # Maximal: the next row would not have fit (runs end only where they must).
        if end < len(lengths):
            wider = lengths[begin:end + 1]
            assert len(wider) > size or len(wider) * max(wider) > tokens
