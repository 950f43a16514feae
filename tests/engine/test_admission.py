"""Admission's pure function (admission.cc, bound as admission_refusal) over plain values: whether a call joins the
queue or is answered at once, without a batcher, a thread or a model."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import ADMISSION_DEADLINE_SHARE, admission_refusal

EXAMPLES = settings(max_examples=400, deadline=None)
LIMITS = {"max_queue_items": 64, "max_queue_wait_s": 0.0}
# 10 texts queued and 10 running at 100 texts/s: 200 ms of work ahead.
BUSY: dict[str, Any] = {"closed": False, "queued_texts": 10, "running_texts": 10, "texts_per_s": 100.0}


def admit(queue: dict[str, Any], texts: int, left_s: float | None, **limits: Any) -> tuple[str, str, float] | None:
    return admission_refusal(**queue, texts=texts, left_s=left_s, **{**LIMITS, **limits})


def test_a_closed_version_refuses_everything() -> None:
    assert admit({**BUSY, "closed": True}, 1, None) == ("UNAVAILABLE", "model version is shutting down; retry", 0.0)


def test_an_empty_queue_admits_any_call() -> None:
    idle = {**BUSY, "queued_texts": 0}
    assert admit(idle, 1000, None, max_queue_items=4) is None  # bounded by the request's maximum, not the queue
    assert admit(idle, 1, 0.001) is None
    assert admit(BUSY, 0, 0.001) is None  # nothing to run: an empty answer


def test_the_queue_bound_counts_texts() -> None:
    assert admit(BUSY, 54, None) is None
    code, message, retry_after_s = admit(BUSY, 55, None)
    assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 10 texts queued for this model version "
                                                     "(limit 64); retry with backoff")
    assert retry_after_s == pytest.approx(0.2)


def test_a_deadline_admits_what_finishes_within_its_share() -> None:
    # 200 ms ahead plus 100 ms of its own: admitted with 400 ms left (3/4 of it is 300 ms), refused with less.
    assert admit(BUSY, 10, 0.4) is None
    code, message, retry_after_s = admit(BUSY, 10, 0.39)
    assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 10 texts queued for this model version, about "
                                                     "300 ms of work including this call's, which has 390 ms left; "
                                                     "retry with backoff or a longer deadline")
    assert retry_after_s == pytest.approx(0.2)  # the work ahead's drain time, not the call's own


def test_a_deadline_overrides_the_wait_bound() -> None:
    assert admit(BUSY, 1, 10.0, max_queue_wait_s=0.01) is None


def test_without_a_deadline_the_wait_bound_holds() -> None:
    assert admit(BUSY, 1, None, max_queue_wait_s=0.25) is None
    code, message, _ = admit(BUSY, 1, None, max_queue_wait_s=0.1)
    assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 10 texts queued for this model version, about "
                                                     "200 ms of work (limit 100 ms); retry with backoff")
    assert admit(BUSY, 1, None, max_queue_wait_s=0.0) is None  # 0: no bound


def test_no_measured_rate_no_refusal_by_time() -> None:
    unmeasured = {**BUSY, "texts_per_s": 0.0}
    assert admit(unmeasured, 10, 0.001) is None
    assert admit(unmeasured, 10, None, max_queue_wait_s=0.001) is None


queues = st.fixed_dictionaries({
    "closed": st.just(False), "queued_texts": st.integers(0, 200), "running_texts": st.integers(0, 200),
    "texts_per_s": st.sampled_from([0.0]) | st.floats(1, 1e5)})


@EXAMPLES
@given(queue=queues, texts=st.integers(0, 128), left_s=st.none() | st.floats(-1, 100), items=st.integers(1, 256),
       wait_s=st.sampled_from([0.0]) | st.floats(0.001, 10), more_s=st.floats(0, 100))
def test_admission_properties(queue: dict[str, Any], texts: int, left_s: float | None, items: int, wait_s: float,
                              more_s: float) -> None:
    refusal = admit(queue, texts, left_s, max_queue_items=items, max_queue_wait_s=wait_s)
    rate, queued = queue["texts_per_s"], queue["queued_texts"]
    ahead_s = (queued + queue["running_texts"]) / rate if rate else 0.0
    if refusal is None:
        assert texts == 0 or queued == 0 or queued + texts <= items  # the memory bound holds
        if texts and queued and left_s is not None:  # what was admitted should finish within its share
            assert ahead_s + texts / (rate or float("inf")) <= ADMISSION_DEADLINE_SHARE * left_s + 1e-9
        # More time never turns an admission into a refusal.
        later = None if left_s is None else left_s + more_s
        assert admit(queue, texts, later, max_queue_items=items, max_queue_wait_s=wait_s) is None
    else:
        code, _, retry_after_s = refusal
        assert code == "RESOURCE_EXHAUSTED" and texts > 0 and queued > 0
        assert retry_after_s == pytest.approx(ahead_s)
