"""Interactive before bulk (issue 45 item 4), the decision over plain values (batch_policy.cc ChooseNext, bound as
choose_next): while any interactive text is pending, the next batch is ChooseBatch's choice among the interactive
texts alone; otherwise among the bulk ones, within bulk_batch_tokens padded tokens (a longer text alone). The batcher
running it: tests/dataplane/test_batcher.py (bulk)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import BatchPolicy, choose_batch, choose_next

pending_texts = st.lists(st.tuples(st.integers(1, 300), st.floats(0, 10), st.booleans()), min_size=1, max_size=60)
policies = st.builds(BatchPolicy, max_batch_size=st.integers(1, 32), max_queue_delay_s=st.sampled_from([0.0, 0.01, 60]),
                     max_padding_ratio=st.sampled_from([1.0, 1.05, 1.5]), max_batch_tokens=st.integers(1, 2048),
                     sort_window=st.sampled_from([0, 4, 48]), bulk_batch_tokens=st.integers(1, 512))


@settings(max_examples=500, deadline=None)
@given(pending=pending_texts, now=st.floats(0, 20), policy=policies)
def test_interactive_texts_are_chosen_first(pending: list[tuple[int, float, bool]], now: float,
                                            policy: BatchPolicy) -> None:
    chosen = choose_next(pending, now, policy)
    assert chosen and len(set(chosen)) == len(chosen)
    interactive = [i for i, (_, _, bulk) in enumerate(pending) if not bulk]
    served = interactive or list(range(len(pending)))  # all bulk otherwise
    assert set(chosen) <= set(served)
    if interactive:  # exactly ChooseBatch among the interactive texts
        alone = choose_batch([pending[i][:2] for i in interactive], now, policy)
        assert chosen == [interactive[i] for i in alone]
    else:  # bulk runs are short: within bulk_batch_tokens padded tokens, or one text alone
        widest = max(pending[i][0] for i in chosen)
        assert len(chosen) == 1 or widest * len(chosen) <= min(policy.max_batch_tokens, policy.bulk_batch_tokens)


def test_one_bulk_text_waits_for_any_interactive_one() -> None:
    policy = BatchPolicy(max_queue_delay_s=0.0)  # the oldest must be included... within its class
    pending = [(10, 0.0, True), (10, 0.5, True), (12, 9.0, False)]
    assert choose_next(pending, 10.0, policy) == [2]
    assert choose_next(pending[:2], 10.0, policy) == [0, 1]


@settings(max_examples=300, deadline=None)
@given(pending=pending_texts, shadow=st.lists(st.booleans(), min_size=60, max_size=60), now=st.floats(0, 20),
       policy=policies)
def test_shadow_copies_run_only_when_nothing_else_is_pending(pending: list[tuple[int, float, bool]],
                                                            shadow: list[bool], now: float,
                                                            policy: BatchPolicy) -> None:
    """A shadow copy's text (bulk too, shadow_copy.h) is the lowest class: chosen only when no interactive or bulk
    text is pending, and then as ChooseBatch's choice among the shadow texts within bulk_batch_tokens."""
    flags = shadow[: len(pending)]
    texts = [(length, at, bulk or flag) for (length, at, bulk), flag in zip(pending, flags, strict=True)]
    chosen = choose_next(texts, now, policy, flags)
    live = [i for i, flag in enumerate(flags) if not flag]
    if live:
        assert chosen == [live[i] for i in choose_next([texts[i] for i in live], now, policy)]
    else:
        widest = max(texts[i][0] for i in chosen)
        assert len(chosen) == 1 or widest * len(chosen) <= min(policy.max_batch_tokens, policy.bulk_batch_tokens)
        assert chosen == choose_next(texts, now, policy)  # among shadow texts alone: bulk's rule


def test_a_shadow_text_waits_for_any_bulk_one() -> None:
    policy = BatchPolicy(max_queue_delay_s=0.0)
    pending = [(10, 0.0, True), (10, 0.5, True)]
    assert choose_next(pending, 10.0, policy, [True, False]) == [1]
    assert choose_next(pending, 10.0, policy, [True, True]) == [0, 1]
