"""The rollout's decision and records as plain values: stages, checks, histograms, the story."""

from __future__ import annotations

import pytest

from ortserve.bundle.agreement import Tally
from ortserve.registry.records import RecordError
from ortserve.registry.rollout import (
    LATENCY_BOUNDS_S,
    Advance,
    Checks,
    Figures,
    Hold,
    Latency,
    Plan,
    Promote,
    RollBack,
    Rollout,
    Side,
    breaches,
    decide,
    parse_duration,
    parse_steps,
    summed,
)

CHECKS = Checks(min_agreement=0.99, max_error_rate=0.01, max_p99_ratio=1.5, min_calls=10, min_judged=10)
PLAN = Plan(model="m", stable="v1", candidate="v2", steps=(25, 100), interval_s=60, shadow_s=30, shadow_percent=10,
            checks=CHECKS)


def side(calls: int, errors: int = 0, seconds: float = 0.01) -> Side:
    s = Side()
    for i in range(calls):
        s = s.observe(seconds, ok=i >= errors)
    return s


def healthy(stage: int = 0, calls: int = 20, rollout: str = "r1") -> Figures:
    return Figures(rollout, stage, stable=side(calls), candidate=side(calls),
                   agreement=Tally(calls=calls, judged=calls, agreed=calls))


def test_the_stages_are_the_shadow_then_each_step() -> None:
    assert [(s.name, s.shadow_percent, s.weight, s.hold_s) for s in PLAN.stages()] == [
        ("shadow", 10, 0, 30), ("canary 25%", 0, 25, 60), ("canary 100%", 0, 100, 60)]
    assert [s.name for s in Plan("m", "v1", "v2", steps=(50,), shadow_s=0).stages()] == ["canary 50%"]


def test_a_healthy_rollout_holds_then_advances_stage_by_stage_then_promotes() -> None:
    r = Rollout.begin(PLAN, "r1", now=0.0, who="me")
    assert (r.weights(), r.shadow()) == ({"v1": 100}, ("v2", 10))
    assert isinstance(decide(r, healthy(0), now=10.0), Hold)
    assert decide(r, healthy(0), now=30.0) == Advance(1)
    r = r.after(Advance(1), healthy(0), now=30.0)
    assert r is not None and (r.weights(), r.shadow()) == ({"v1": 75, "v2": 25}, None)
    assert decide(r, healthy(1), now=90.0) == Advance(2)
    r = r.after(Advance(2), healthy(1), now=90.0)
    assert r is not None and r.weights() == {"v2": 100}
    assert decide(r, healthy(2), now=150.0) == Promote()
    r = r.after(Promote(), healthy(2), now=150.0)
    assert r is not None and (r.status, r.weights(), r.shadow()) == ("promoted", {"v2": 100}, None)
    assert [s.event for s in r.story] == ["started", "advanced", "advanced", "promoted"]
    assert isinstance(decide(r, healthy(2), now=999.0), Hold)


def test_a_stage_waits_for_enough_calls_and_judged_answers() -> None:
    r = Rollout.begin(PLAN, "r1", now=0.0)
    few = healthy(0, calls=5)
    assert decide(r, few, now=100.0) == Hold("shadow: 5 of 10 calls seen")
    unjudged = Figures("r1", 0, stable=side(20), candidate=side(20), agreement=Tally(calls=20, judged=3, agreed=3))
    assert decide(r, unjudged, now=100.0) == Hold("shadow: 3 of 10 answers judged")


@pytest.mark.parametrize(("figures", "check"), [
    (Figures("r1", 0, side(50), side(50), Tally(calls=50, judged=50, agreed=48)), "agreement"),
    (Figures("r1", 0, side(50), side(50, errors=2), Tally(calls=50, judged=50, agreed=50)), "error rate"),
    (Figures("r1", 1, side(50), side(50, seconds=0.05)), "p99 ratio"),
])
def test_a_breach_rolls_back_at_once_and_says_which_check_with_its_figures(figures: Figures, check: str) -> None:
    r = Rollout.begin(PLAN, "r1", now=0.0)
    if figures.stage:  # a canary step
        r = r.after(Advance(figures.stage), healthy(0), now=0.0)
        assert r is not None
    decision = decide(r, figures, now=1.0)  # long before the stage's time is up
    assert isinstance(decision, RollBack) and [b.check for b in decision.breaches] == [check]
    back = r.after(decision, figures, now=1.0)
    assert back is not None and back.status == "rolled_back" and back.weights() == {"v1": 100}
    assert back.reason.startswith(check) and back.shadow() is None
    assert back.story[-1].event == "rolled back" and check in back.story[-1].detail


def test_the_shadow_stage_judges_agreement_and_errors_not_the_copies_latency() -> None:
    r = Rollout.begin(PLAN, "r1", now=0.0)
    slow_copies = Figures("r1", 0, side(50), side(50, seconds=0.05), Tally(calls=50, judged=50, agreed=50))
    assert decide(r, slow_copies, now=1.0) == Hold("shadow: 29s to hold")
    assert [b.check for b in breaches(slow_copies, CHECKS)] == ["p99 ratio"]  # what a canary step would judge


def test_checks_with_too_few_calls_never_fail() -> None:
    bad = Figures("r1", 0, side(5), side(5, errors=5, seconds=1.0), Tally(calls=5, judged=5, agreed=0))
    assert breaches(bad, CHECKS) == ()


def test_only_the_current_stage_of_this_rollout_is_summed() -> None:
    figures = [healthy(1), healthy(1), healthy(0), healthy(1, rollout="old")]
    total = summed(figures, "r1", 1)
    assert (total.replicas, total.candidate.calls, total.agreement.judged) == (2, 40, 40)


def test_latency_quantiles_read_merged_histograms_as_prometheus_does() -> None:
    fast = Latency()
    for _ in range(99):
        fast = fast.observe(0.004)
    slow = fast.observe(0.4)
    p99 = fast.quantile(0.99)
    assert p99 is not None and 0.0025 < p99 <= 0.005  # linear within the (2.5 ms, 5 ms] bucket
    merged = slow + slow
    p99, p999 = merged.quantile(0.99), merged.quantile(0.999)
    assert merged.total == 200 and p99 is not None and p99 <= 0.005 and p999 is not None and p999 > 0.3
    assert Latency().quantile(0.99) is None
    assert Latency().observe(99.0).quantile(0.99) == LATENCY_BOUNDS_S[-1]


def test_records_round_trip_through_json() -> None:
    r = Rollout.begin(PLAN, "r1", now=5.0, who="me@host")
    r = r.after(Advance(1), healthy(0), now=35.0)
    assert r is not None
    assert Rollout.from_json(r.to_json()) == r
    f = healthy(1)
    assert Figures.from_json(f.to_json()) == f
    with pytest.raises(RecordError):
        Rollout.from_json(b'{"id": "x"}')
    with pytest.raises(RecordError):
        Figures.from_json(b'{"rollout": "x", "stage": -1}')


@pytest.mark.parametrize("bad", [
    {"steps": (50, 25)}, {"steps": ()}, {"steps": (0, 100)}, {"candidate": "v1"}, {"interval_s": 0},
    {"shadow_percent": 0}])
def test_bad_plans_are_refused(bad: dict[str, object]) -> None:
    args: dict[str, object] = {"model": "m", "stable": "v1", "candidate": "v2", **bad}
    with pytest.raises(RecordError):
        Plan(**args)  # type: ignore[arg-type]


def test_durations_and_steps_parse() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "2m", "1h", "0.5s")] == [90, 90, 120, 3600, 0.5]
    assert parse_steps("5,25,50,100") == (5, 25, 50, 100)
    with pytest.raises(ValueError):
        parse_duration("soon")
