"""Admission's pure functions (admission.cc, bound as admission_refusal and call_tokens) over plain values: whether a
call joins the queue or is answered at once, and the work it counts, without a batcher, a thread or a model."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import (
    ADMISSION_DEADLINE_SHARE,
    BatchPolicy,
    admission_refusal,
    bucket_shape,
    call_tokens,
    split_rows,
)

EXAMPLES = settings(max_examples=400, deadline=None)
LIMITS = {"max_queue_items": 64}
# 10 texts (100 tokens) queued and 100 padded tokens running at 1,000 tokens/s: 200 ms of work ahead.
BUSY: dict[str, Any] = {"closed": False, "queued_texts": 10, "queued_tokens": 100, "running_tokens": 100,
                        "tokens_per_s": 1000.0}
IDLE: dict[str, Any] = {**BUSY, "queued_texts": 0, "queued_tokens": 0, "running_tokens": 0}
EXPIRED = "deadline exceeded before the request reached the engine"


def admit(queue: dict[str, Any], texts: int, tokens: int, left_s: float | None,
          **limits: Any) -> tuple[str, str, float] | None:
    return admission_refusal(**queue, texts=texts, tokens=tokens, left_s=left_s, **{**LIMITS, **limits})


def test_a_closed_version_refuses_everything() -> None:
    assert admit({**BUSY, "closed": True}, 1, 1, None) == ("UNAVAILABLE", "model version is shutting down; retry",
                                                           0.0)


def test_nothing_to_run_is_always_admitted() -> None:
    assert admit(BUSY, 0, 0, -1.0) is None  # an empty answer


def test_a_passed_deadline_is_answered_at_once() -> None:
    assert admit(IDLE, 1, 1, 0.0) == ("DEADLINE_EXCEEDED", EXPIRED, 0.0)
    assert admit(BUSY, 1, 1, -0.5) == ("DEADLINE_EXCEEDED", EXPIRED, 0.0)


def test_the_queue_bound_counts_texts_and_spares_an_empty_queue() -> None:
    assert admit(BUSY, 54, 54, None) is None
    code, message, retry_after_s = admit(BUSY, 55, 55, None)
    assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 10 texts queued for this model version "
                                                     "(limit 64); retry with backoff")
    assert retry_after_s == pytest.approx(0.2)
    # What one call may send is bounded by the request's maximum, not the queue.
    assert admit({**IDLE, "running_tokens": 10_000}, 1000, 1000, None, max_queue_items=4) is None


def test_a_deadline_admits_what_finishes_within_its_share() -> None:
    # 200 ms ahead plus 100 ms of its own (100 tokens): admitted with 400 ms left (3/4 of it is 300 ms).
    assert admit(BUSY, 10, 100, 0.4) is None
    code, message, retry_after_s = admit(BUSY, 10, 100, 0.39)
    assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 10 texts queued for this model version, about "
                                                     "300 ms of work including this call's, which has 390 ms left; "
                                                     "retry with backoff or a longer deadline")
    assert retry_after_s == pytest.approx(0.2)  # the work ahead's drain time, not the call's own


def test_a_call_counts_its_tokens_not_its_texts() -> None:
    # The finding of issue 29: at the rate short texts ran at, 128 texts of 32 tokens each are 4,096 tokens of work,
    # eight times what 128 texts of 4 tokens are. With 2 s left the short call fits, the long one cannot.
    assert admit(BUSY, 128, 128 * 4, 2.0, max_queue_items=4096) is None
    code, message, _ = admit(BUSY, 128, 128 * 32, 2.0, max_queue_items=4096)
    assert code == "RESOURCE_EXHAUSTED"
    assert "about 4296 ms of work including this call's, which has 2000 ms left" in message


def test_a_deadline_counts_the_running_work_when_nothing_is_queued() -> None:
    # Nothing queued, but 2 s of batches running ahead: a call with 1 s left cannot finish.
    code, message, retry_after_s = admit({**IDLE, "running_tokens": 2000}, 1, 10, 1.0)
    assert code == "RESOURCE_EXHAUSTED" and retry_after_s == pytest.approx(2.0)
    assert message.startswith("server busy: 0 texts queued for this model version, about 2010 ms of work")


def test_a_call_that_cannot_finish_alone_is_refused_on_an_idle_engine() -> None:
    assert admit(IDLE, 8, 1000, 1.4) is None  # 1 s of its own within 3/4 of 1.4 s
    code, message, retry_after_s = admit(IDLE, 8, 1000, 1.3)
    assert code == "RESOURCE_EXHAUSTED" and retry_after_s == 0.0
    assert "about 1000 ms of work including this call's, which has 1300 ms left" in message


def test_the_server_s_default_budget_is_judged_by_the_same_rule() -> None:
    """A call that sent no deadline has the server's default budget (the batcher resolves it): the same share of the
    time left, and a message that says the budget was the server's, so the caller knows to send a deadline."""
    assert admit(BUSY, 10, 100, 0.4, default_budget=True) is None
    code, message, retry_after_s = admit(BUSY, 10, 100, 0.39, default_budget=True)
    assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 10 texts queued for this model version, about "
                                                     "300 ms of work including this call's, which has 390 ms left of "
                                                     "the server's default time budget (it sent no deadline); retry "
                                                     "with backoff, or send a longer deadline")
    assert retry_after_s == pytest.approx(0.2)
    assert admit(BUSY, 10, 100, 0.39) == (code, message.replace(
        " of the server's default time budget (it sent no deadline); retry with backoff, or send a longer deadline",
        "; retry with backoff or a longer deadline"), retry_after_s)


def test_an_interactive_call_is_admitted_past_a_bulk_backlog() -> None:
    """An interactive call runs before every queued bulk text (ChooseNext), so neither its wait nor the memory bound
    counts them; a bulk call waits for everything."""
    # 4,000 bulk texts (40,000 tokens) queued behind 10 interactive ones (100 tokens) and 100 tokens running, 1,000/s.
    backlog = {**BUSY, "queued_texts": 4010, "queued_tokens": 40_100, "queued_bulk_texts": 4000,
               "queued_bulk_tokens": 40_000}
    assert admit(backlog, 1, 10, 1.0, max_queue_items=4096) is None  # 210 ms ahead of it, not 40 s
    code, message, retry_after_s = admit(backlog, 1, 10, 1.0, max_queue_items=4096, bulk=True)
    assert code == "RESOURCE_EXHAUSTED" and retry_after_s == pytest.approx(40.2)
    assert message.startswith("server busy: 4010 texts queued for this model version, about 40210 ms of work")
    code, message, retry_after_s = admit(backlog, 60, 60, None, max_queue_items=64)  # the interactive queue is full
    assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 10 interactive texts queued for this model "
                                                     "version (limit 64); retry with backoff")
    assert retry_after_s == pytest.approx(0.2)


def test_no_time_bound_leaves_the_memory_bound_alone() -> None:
    """default_timeout_ms 0 and no deadline: no time bound, however much work is ahead; the queue bound holds."""
    assert admit({**BUSY, "running_tokens": 10**9}, 1, 10, None) is None
    assert admit(BUSY, 55, 55, None)[0] == "RESOURCE_EXHAUSTED"


def test_no_measured_rate_no_refusal_by_time() -> None:
    unmeasured = {**BUSY, "tokens_per_s": 0.0}
    assert admit(unmeasured, 10, 10_000, 0.001) is None
    assert admit(unmeasured, 10, 10_000, 0.001, default_budget=True) is None


queues = st.fixed_dictionaries({
    "closed": st.just(False), "queued_texts": st.integers(0, 200), "queued_tokens": st.integers(0, 100_000),
    "running_tokens": st.integers(0, 100_000), "tokens_per_s": st.sampled_from([0.0]) | st.floats(1, 1e6)})


@EXAMPLES
@given(queue=queues, texts=st.integers(0, 128), tokens=st.integers(0, 100_000),
       left_s=st.none() | st.floats(-1, 100), items=st.integers(1, 256),
       default_budget=st.booleans(), more_s=st.floats(0, 100), fewer=st.integers(0, 100_000))
def test_admission_properties(queue: dict[str, Any], texts: int, tokens: int, left_s: float | None, items: int,
                              default_budget: bool, more_s: float, fewer: int) -> None:
    limits = {"max_queue_items": items, "default_budget": default_budget}
    refusal = admit(queue, texts, tokens, left_s, **limits)
    rate, queued = queue["tokens_per_s"], queue["queued_texts"]
    ahead_s = (queue["queued_tokens"] + queue["running_tokens"]) / rate if rate else 0.0
    if refusal is None:
        assert texts == 0 or queued == 0 or queued + texts <= items  # the memory bound holds
        if texts and left_s is not None:  # what was admitted should finish within its share
            assert ahead_s + (tokens / rate if rate else 0.0) <= ADMISSION_DEADLINE_SHARE * left_s + 1e-9
        # More time, or less work of its own, never turns an admission into a refusal.
        later = None if left_s is None else left_s + more_s
        assert admit(queue, texts, tokens, later, **limits) is None
        assert admit(queue, texts, max(tokens - fewer, 0), left_s, **limits) is None
        return
    code, _, retry_after_s = refusal
    assert texts > 0
    if code == "DEADLINE_EXCEEDED":
        assert left_s is not None and left_s <= 0
    else:
        assert code == "RESOURCE_EXHAUSTED" and retry_after_s == pytest.approx(ahead_s)
        assert left_s is not None or queued > 0  # without a deadline, only a queue refuses


@pytest.mark.parametrize(("lengths", "size", "tokens", "buckets", "expected"), [
    ([], 32, 1024, ([], []), 0),
    ([5] * 10, 4, 1024, ([], []), 50),  # three runs of width 5: 4 + 4 + 2 rows
    ([100, 100, 300, 10], 32, 400, ([], []), 200 + 300 + 10),  # each run padded to its own longest row
    ([3, 9, 4], 32, 1024, ([], []), 27),  # one run of 3 rows, padded to 9
    ([3, 5], 32, 1024, ([1, 2, 4, 8], [8, 16, 32]), 2 * 8),  # and up to the shape ladder
    ([40], 32, 1024, ([1, 2], [8, 16, 32]), 40),  # past the top rung: as it is
])
def test_call_tokens_examples(lengths: list[int], size: int, tokens: int, buckets: tuple[list[int], list[int]],
                              expected: int) -> None:
    policy = BatchPolicy(max_batch_size=size, max_batch_tokens=tokens)
    assert call_tokens(lengths, policy, *buckets) == expected


@EXAMPLES
@given(lengths=st.lists(st.integers(1, 600), max_size=200), size=st.integers(1, 64), tokens=st.integers(1, 4096),
       rows=st.lists(st.integers(1, 64), max_size=4).map(sorted), widths=st.lists(st.integers(1, 600), max_size=4))
def test_call_tokens_is_what_the_runs_pad_to(lengths: list[int], size: int, tokens: int, rows: list[int],
                                              widths: list[int]) -> None:
    policy = BatchPolicy(max_batch_size=size, max_batch_tokens=tokens)
    widths = sorted(widths)
    counted = call_tokens(lengths, policy, rows, widths)
    expected = 0
    for begin, end in split_rows(lengths, policy):
        padded_rows, padded_width = bucket_shape(end - begin, max(lengths[begin:end]), rows, widths)
        expected += padded_rows * padded_width
    assert counted == expected >= sum(lengths)
