"""The lane choice's pure functions (lane_choice.cc, bound as next_run and pick_lane) over plain values: which
session the next run takes and on which lane, without a batcher, a thread or a model."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import next_run, pick_lane

EXAMPLES = settings(max_examples=400, deadline=None)
# Two lanes, a narrow session, a sort window of 24: the server's usual shape.
CONFIG: dict[str, Any] = {"engine_concurrency": 2, "lanes": 2, "has_narrow": True, "queue_behind_at": 24}


def run(*, in_flight: int = 0, wide_running: bool = False, on_lanes: int | None = None, pending: int = 0,
        queued: bool = True, **config: Any) -> str | None:
    return next_run(in_flight=in_flight, wide_running=wide_running,
                    on_lanes=in_flight if on_lanes is None else on_lanes, pending=pending, queued=queued,
                    **{**CONFIG, **config})


def test_a_lone_call_on_an_idle_engine_takes_the_wide_session() -> None:
    assert run(queued=False) == "wide"


def test_anything_beside_a_run_or_from_the_queue_takes_the_narrow_session() -> None:
    assert run(queued=False, in_flight=1, on_lanes=0) == "narrow"  # a lone call beside a lane batch
    assert run(pending=1) == "narrow"  # a batch from the queue, even on an idle engine


def test_without_a_narrow_session_everything_runs_wide() -> None:
    assert run(queued=False, has_narrow=False) == "wide"
    assert run(pending=3, in_flight=1, has_narrow=False) == "wide"


def test_nothing_goes_beside_a_wide_run() -> None:
    assert run(wide_running=True, in_flight=1, on_lanes=0, pending=1) is None
    assert run(wide_running=True, in_flight=1, on_lanes=0, queued=False) is None


def test_a_full_engine_takes_nothing_until_the_sort_window_fills() -> None:
    assert run(in_flight=2, pending=23) is None
    assert run(in_flight=2, pending=24) == "narrow"  # queued behind a running lane batch
    assert run(in_flight=3, pending=24) == "narrow"
    assert run(in_flight=4, pending=100) is None  # one batch behind each lane at most


def test_queue_behind_only_for_queued_batches_on_lanes() -> None:
    assert run(in_flight=2, pending=24, queued=False) is None  # a lone call never waits behind a run
    assert run(in_flight=2, on_lanes=1, pending=24) is None  # never beside a lone run, which is on no lane
    assert run(in_flight=2, pending=24, lanes=0) is None  # no lanes: nothing to queue behind


@EXAMPLES
@given(in_flight=st.integers(0, 10), wide_running=st.booleans(), on_lanes=st.integers(0, 10),
       pending=st.integers(0, 100), queued=st.booleans(), concurrency=st.integers(1, 4), lanes=st.integers(0, 4),
       has_narrow=st.booleans(), behind_at=st.integers(1, 64))
def test_next_run_keeps_the_engine_within_its_bounds(in_flight: int, wide_running: bool, on_lanes: int, pending: int,
                                                     queued: bool, concurrency: int, lanes: int, has_narrow: bool,
                                                     behind_at: int) -> None:
    on_lanes = min(on_lanes, in_flight)
    session = next_run(in_flight=in_flight, wide_running=wide_running, on_lanes=on_lanes, pending=pending,
                       queued=queued, engine_concurrency=concurrency, lanes=lanes, has_narrow=has_narrow,
                       queue_behind_at=behind_at)
    if wide_running or in_flight >= 2 * concurrency:
        assert session is None
    if session is not None and in_flight >= concurrency:  # only a queued batch waits behind a lane batch
        assert queued and lanes > 0 and on_lanes == in_flight and pending >= behind_at
    if session is None and not wide_running and in_flight < concurrency:
        pytest.fail("an engine with room took nothing")
    if session == "wide":
        assert not has_narrow or (in_flight == 0 and not queued)
    if session is not None and has_narrow and (queued or in_flight > 0):
        assert session == "narrow"


@pytest.mark.parametrize(("version", "everyone", "lane"), [
    ([0, 0], [0, 0], 0),
    ([1, 0], [5, 9], 1),  # fewest of this version's batches first
    ([1, 1], [3, 2], 1),  # then fewest of every version's
    ([2, 1, 1], [0, 4, 4], 1),  # then the lowest index
    ([0], [7], 0),
])
def test_pick_lane_examples(version: list[int], everyone: list[int], lane: int) -> None:
    assert pick_lane(version, everyone) == lane


@EXAMPLES
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8)), min_size=1, max_size=8))
def test_pick_lane_takes_the_least_loaded_lane(loads: list[tuple[int, int]]) -> None:
    version, everyone = [v for v, _ in loads], [v + a for v, a in loads]
    lane = pick_lane(version, everyone)
    assert lane == min(range(len(loads)), key=lambda i: (version[i], everyone[i], i))


def test_pick_lane_needs_one_load_per_lane() -> None:
    with pytest.raises(ValueError, match="one entry per lane"):
        pick_lane([0, 0], [0])
    with pytest.raises(ValueError, match="one entry per lane"):
        pick_lane([], [])
