"""A release that checks itself: the rollout's records, its figures, and the decision that moves it, as plain data.

    plan = Plan(model, stable, candidate, shadow_s, shadow_percent, steps, interval_s, checks)
    state = Rollout.begin(plan, rollout_id, now)          the record at rollouts/<model>/state (check-and-set)
    figures = sum of every replica's Figures for (rollout_id, stage)   rollouts/<model>/figures/<replica>
    decision = decide(state, figures, now)                pure: Hold | Advance | Promote | RollBack
    state.after(decision, figures, now)                   the next record, with the step in its history

The stages: a shadow stage (the candidate gets a copy of `shadow_percent`% of the stable version's calls, its answers
compared and never returned) held for `shadow_s`, then one canary stage per step (the candidate answers `step`% of
the routing keys) held for `interval_s` each; after the last the candidate is promoted (100%). Each stage is judged
on the figures of that stage only (Kayenta's lesson: a baseline from the same window, on the same traffic), summed
over every replica. A breach of any check, at any time, rolls traffic back to the stable version and the record
says which check failed with its figures; a stage advances once its time is up and it has seen `min_calls`.

The checks (`Checks`, the `registry rollout` flags of the same names):
    agreement     the candidate's answers agree with the stable version's (bundle/agreement.py, per kind) on at
                  least `min_agreement` of what was judged; judged once `min_judged` items were
    error rate    the candidate's failed calls (shadow or live) over its calls at most `max_error_rate`
    P99 ratio     the candidate's P99 latency over the stable version's in the same stage at most `max_p99_ratio`
                  (from merged histograms, as Prometheus' histogram_quantile reads them); canary stages only: a
                  shadow copy runs in the lowest class, so its time is not what a caller would see
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ortserve.bundle.agreement import Tally
from ortserve.registry.records import RecordError, check_name, dump_record, load_record

ROLLOUTS_PREFIX = "rollouts/"
LATENCY_BOUNDS_S: tuple[float, ...] = (0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
                                       0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds of the latency histogram every replica keeps (a last bucket, +Inf, holds the rest): the server's
`ortserve_request_duration_seconds` buckets (service/metrics.py uses these), so a replica's figures are read from its
metrics and a Flagger or Argo query over them sees the same buckets."""
STORY_LIMIT = 32
Status = Literal["running", "promoted", "rolled_back", "aborted"]
SHADOW = "shadow"


def rollout_prefix(model: str) -> str:
    return f"{ROLLOUTS_PREFIX}{check_name('model', model)}/"


def state_key(model: str) -> str:
    return f"{rollout_prefix(model)}state"


def figures_prefix(model: str) -> str:
    return f"{rollout_prefix(model)}figures/"


def figures_key(model: str, replica: str) -> str:
    return f"{figures_prefix(model)}{check_name('replica', replica)}"


# -- figures ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    """A latency histogram over LATENCY_BOUNDS_S (counts per bucket, the last +Inf); `+` merges."""

    counts: tuple[int, ...] = (0,) * (len(LATENCY_BOUNDS_S) + 1)

    def observe(self, seconds: float) -> Latency:
        i = next((i for i, bound in enumerate(LATENCY_BOUNDS_S) if seconds <= bound), len(LATENCY_BOUNDS_S))
        counts = list(self.counts)
        counts[i] += 1
        return Latency(tuple(counts))

    def __add__(self, other: Latency) -> Latency:
        return Latency(tuple(a + b for a, b in zip(self.counts, other.counts, strict=True)))

    def __sub__(self, earlier: Latency) -> Latency:
        """What was observed since `earlier` (counters that only grow; a reset reads as nothing since)."""
        return Latency(tuple(max(0, a - b) for a, b in zip(self.counts, earlier.counts, strict=True)))

    @property
    def total(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear within the bucket; the last finite bound past it; None if empty."""
        total = self.total
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for i, count in enumerate(self.counts):
            if seen + count >= rank and count > 0:
                if i == len(LATENCY_BOUNDS_S):
                    return LATENCY_BOUNDS_S[-1]
                low = LATENCY_BOUNDS_S[i - 1] if i > 0 else 0.0
                return low + (LATENCY_BOUNDS_S[i] - low) * (rank - seen) / count
            seen += count
        return LATENCY_BOUNDS_S[-1]


@dataclass(frozen=True)
class Side:
    """One version's calls in a stage: how many, how many failed, how long they took."""

    calls: int = 0
    errors: int = 0
    latency: Latency = field(default_factory=Latency)

    def observe(self, seconds: float, *, ok: bool) -> Side:
        return Side(self.calls + 1, self.errors + int(not ok), self.latency.observe(seconds))

    def __add__(self, other: Side) -> Side:
        return Side(self.calls + other.calls, self.errors + other.errors, self.latency + other.latency)

    def __sub__(self, earlier: Side) -> Side:
        return Side(max(0, self.calls - earlier.calls), max(0, self.errors - earlier.errors),
                    self.latency - earlier.latency)

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.calls if self.calls else None

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "errors": self.errors, "latency": list(self.latency.counts)}

    @classmethod
    def from_dict(cls, data: Any) -> Side:
        if not isinstance(data, dict):
            raise RecordError("a side's figures must be an object")
        counts = data.get("latency", [])
        if not (isinstance(counts, list) and len(counts) == len(LATENCY_BOUNDS_S) + 1
                and all(_count(c) for c in counts)) or not _count(data.get("calls")) or not _count(data.get("errors")):
            raise RecordError("a side's figures need counts: calls, errors, latency (one per bucket)")
        return cls(data["calls"], data["errors"], Latency(tuple(counts)))


@dataclass(frozen=True)
class Figures:
    """What one replica saw of one stage of one rollout (or, summed, what every replica saw)."""

    rollout: str = ""
    stage: int = 0
    stable: Side = field(default_factory=Side)
    candidate: Side = field(default_factory=Side)
    agreement: Tally = field(default_factory=Tally)
    replicas: int = 1

    def __add__(self, other: Figures) -> Figures:
        return Figures(self.rollout, self.stage, self.stable + other.stable, self.candidate + other.candidate,
                       self.agreement + other.agreement, self.replicas + other.replicas)

    def to_dict(self) -> dict[str, Any]:
        t = self.agreement
        return {"rollout": self.rollout, "stage": self.stage, "stable": self.stable.to_dict(),
                "candidate": self.candidate.to_dict(),
                "agreement": {"calls": t.calls, "judged": t.judged, "agreed": t.agreed,
                              "concordance_sum": t.concordance_sum, "ranked_calls": t.ranked_calls}}

    def to_json(self) -> bytes:
        return dump_record(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes, *, key: str = "figures") -> Figures:
        data = load_record(raw, key)
        try:
            a = data.get("agreement")
            if not isinstance(a, dict) or not all(_count(a.get(k)) for k in ("calls", "judged", "agreed",
                                                                                "ranked_calls")):
                raise RecordError("agreement needs counts: calls, judged, agreed, ranked_calls")
            tally = Tally(calls=a["calls"], judged=a["judged"], agreed=a["agreed"],
                          concordance_sum=float(a.get("concordance_sum", 0.0)), ranked_calls=a["ranked_calls"])
            rollout, stage = data.get("rollout"), data.get("stage")
            if not isinstance(rollout, str) or not _count(stage):
                raise RecordError("rollout must be a string and stage a count")
            return cls(rollout, stage, Side.from_dict(data.get("stable")), Side.from_dict(data.get("candidate")),
                       tally)
        except (RecordError, TypeError, ValueError) as e:
            raise RecordError(f"{key}: {e}") from None


def summed(figures: Iterable[Figures], rollout: str, stage: int) -> Figures:
    """Every replica's figures for this rollout's stage added up (others are stale: an earlier stage or rollout)."""
    total = Figures(rollout, stage, replicas=0)
    for one in figures:
        if one.rollout == rollout and one.stage == stage:
            total = total + one
    return total


# -- the plan, the checks and the decision --------------------------------------------------------------------------


@dataclass(frozen=True)
class Checks:
    min_agreement: float = 0.99
    max_error_rate: float = 0.001
    max_p99_ratio: float = 1.5
    min_calls: int = 100
    """A stage advances only after the candidate answered (or shadowed) this many calls, summed over replicas; the
    error-rate and latency checks judge from this many calls on each side."""
    min_judged: int = 100
    """The agreement check judges from this many judged items (decisive rows, vectors, rankings, entities) on."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_agreement <= 1.0:
            raise RecordError(f"min_agreement must be in [0, 1], got {self.min_agreement}")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise RecordError(f"max_error_rate must be in [0, 1], got {self.max_error_rate}")
        if not (self.max_p99_ratio >= 1.0 and math.isfinite(self.max_p99_ratio)):
            raise RecordError(f"max_p99_ratio must be a finite number >= 1, got {self.max_p99_ratio}")
        if self.min_calls < 1 or self.min_judged < 1:
            raise RecordError("min_calls and min_judged must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return {"min_agreement": self.min_agreement, "max_error_rate": self.max_error_rate,
                "max_p99_ratio": self.max_p99_ratio, "min_calls": self.min_calls, "min_judged": self.min_judged}


@dataclass(frozen=True)
class Stage:
    name: str  # "shadow" or "canary 25%"
    shadow_percent: int  # the share of the stable version's calls copied to the candidate (0 in a canary stage)
    weight: int  # the candidate's routing weight (0 in the shadow stage)
    hold_s: float


@dataclass(frozen=True)
class Plan:
    model: str
    stable: str
    candidate: str
    steps: tuple[int, ...] = (5, 25, 50, 100)
    interval_s: float = 120.0
    shadow_s: float = 600.0
    """0: no shadow stage."""
    shadow_percent: int = 10
    checks: Checks = field(default_factory=Checks)

    def __post_init__(self) -> None:
        check_name("model", self.model)
        check_name("version", self.stable)
        check_name("version", self.candidate)
        if self.stable == self.candidate:
            raise RecordError(f"the candidate {self.candidate} is already the stable version")
        if not self.steps or any(not 0 < s <= 100 for s in self.steps) or list(self.steps) != sorted(set(self.steps)):
            raise RecordError(f"steps must rise strictly within 1..100, got {list(self.steps)}")
        if self.interval_s <= 0 or self.shadow_s < 0 or not (0 < self.shadow_percent <= 100):
            raise RecordError("interval must be > 0, shadow >= 0 and shadow percent 1..100")

    def stages(self) -> tuple[Stage, ...]:
        shadow = (Stage(SHADOW, self.shadow_percent, 0, self.shadow_s),) if self.shadow_s > 0 else ()
        return shadow + tuple(Stage(f"canary {s}%", 0, s, self.interval_s) for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "stable": self.stable, "candidate": self.candidate, "steps": list(self.steps),
                "interval_s": self.interval_s, "shadow_s": self.shadow_s, "shadow_percent": self.shadow_percent,
                "checks": self.checks.to_dict()}

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        if not isinstance(data, dict):
            raise RecordError("plan must be an object")
        try:
            return cls(model=data["model"], stable=data["stable"], candidate=data["candidate"],
                       steps=tuple(int(s) for s in data["steps"]), interval_s=float(data["interval_s"]),
                       shadow_s=float(data["shadow_s"]), shadow_percent=int(data["shadow_percent"]),
                       checks=Checks(**data["checks"]))
        except (KeyError, TypeError, ValueError) as e:
            raise RecordError(f"plan: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class Breach:
    check: str  # "agreement", "error rate", "p99 ratio"
    detail: str  # the figures, one line: "agreement 0.9612 < 0.99 (1203 of 1251 judged)"


@dataclass(frozen=True)
class Hold:
    why: str


@dataclass(frozen=True)
class Advance:
    to_stage: int


@dataclass(frozen=True)
class Promote:
    pass


@dataclass(frozen=True)
class RollBack:
    breaches: tuple[Breach, ...]


Decision = Hold | Advance | Promote | RollBack


def p99_ratio(figures: Figures) -> float | None:
    stable, candidate = figures.stable.latency.quantile(0.99), figures.candidate.latency.quantile(0.99)
    if stable is None or candidate is None:
        return None
    return candidate / stable if stable > 0 else math.inf


def breaches(figures: Figures, checks: Checks, *, latency: bool = True) -> tuple[Breach, ...]:
    """Which checks the figures fail, each with its figures; a check with too few calls to judge never fails.
    `latency`: judge the P99 ratio (not in a shadow stage, whose copies run in the lowest class on a one-thread
    lane, batched otherwise than the live calls: their time says how the copies were run, not how the candidate
    would answer callers; the canary steps judge it on live calls)."""
    out: list[Breach] = []
    tally = figures.agreement
    agreement = tally.agreement
    if tally.judged >= checks.min_judged and agreement is not None and agreement < checks.min_agreement:
        out.append(Breach("agreement", f"agreement {agreement:.4f} < {checks.min_agreement:g} ({tally.agreed} of "
                                       f"{tally.judged} judged, {tally.calls} calls)"))
    cand = figures.candidate
    rate = cand.error_rate
    if cand.calls >= checks.min_calls and rate is not None and rate > checks.max_error_rate:
        out.append(Breach("error rate", f"error rate {rate:.4f} > {checks.max_error_rate:g} ({cand.errors} of "
                                        f"{cand.calls} calls failed)"))
    ratio = p99_ratio(figures) if latency else None
    if (ratio is not None and cand.calls >= checks.min_calls and figures.stable.calls >= checks.min_calls
            and ratio > checks.max_p99_ratio):
        p_s, p_c = figures.stable.latency.quantile(0.99), figures.candidate.latency.quantile(0.99)
        out.append(Breach("p99 ratio", f"p99 ratio {ratio:.2f} > {checks.max_p99_ratio:g} (candidate "
                                       f"{1000 * (p_c or 0):.1f} ms, stable {1000 * (p_s or 0):.1f} ms)"))
    return tuple(out)


def describe(figures: Figures) -> str:
    """The figures in one line, as the story and `registry show` print them."""
    parts = [f"{figures.replicas} replica(s)", f"candidate {figures.candidate.calls} calls "
             f"{figures.candidate.errors} errors", f"stable {figures.stable.calls} calls"]
    if figures.agreement.judged:
        parts.append(f"agreement {figures.agreement.agreed}/{figures.agreement.judged}")
    ratio = p99_ratio(figures)
    if ratio is not None:
        parts.append(f"p99 ratio {ratio:.2f}")
    return ", ".join(parts)


# -- the record -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One entry of the rollout's story: when, what happened, why, on which figures."""

    at: float
    event: str  # "started", "advanced", "promoted", "rolled back", "aborted"
    stage: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "event": self.event, "stage": self.stage, "detail": self.detail}


@dataclass(frozen=True)
class Rollout:
    """The rollout's one record (rollouts/<model>/state), rewritten by check-and-set at every step."""

    id: str
    plan: Plan
    stage: int
    stage_started: float
    status: Status = "running"
    reason: str = ""
    """Why it ended, when it ended other than promoted: the failed check with its figures."""
    story: tuple[Step, ...] = ()
    started_by: str = ""

    @classmethod
    def begin(cls, plan: Plan, rollout_id: str, now: float, who: str = "") -> Rollout:
        first = plan.stages()[0]
        return cls(id=rollout_id, plan=plan, stage=0, stage_started=now, started_by=who,
                   story=(Step(now, "started", first.name, f"by {who}" if who else ""),))

    @property
    def current(self) -> Stage:
        return self.plan.stages()[min(self.stage, len(self.plan.stages()) - 1)]

    @property
    def running(self) -> bool:
        return self.status == "running"

    def weights(self) -> dict[str, int]:
        """The routing weights this record puts in force."""
        p = self.plan
        if self.status == "promoted":
            return {p.candidate: 100}
        if self.status != "running" or self.current.weight == 0:
            return {p.stable: 100}
        if self.current.weight == 100:
            return {p.candidate: 100}
        return {p.stable: 100 - self.current.weight, p.candidate: self.current.weight}

    def shadow(self) -> tuple[str, int] | None:
        """(version, percent) copied from the stable version's calls, or None."""
        if self.running and self.current.shadow_percent:
            return self.plan.candidate, self.current.shadow_percent
        return None

    def after(self, decision: Decision, figures: Figures, now: float) -> Rollout | None:
        """The next record, or None when the decision changes nothing (Hold)."""
        seen = describe(figures)
        if isinstance(decision, Hold):
            return None
        if isinstance(decision, Advance):
            to = self.plan.stages()[decision.to_stage]
            return self._with(Step(now, "advanced", to.name, f"{self.current.name} held: {seen}"),
                              stage=decision.to_stage, stage_started=now)
        if isinstance(decision, Promote):
            return self._with(Step(now, "promoted", self.current.name, seen), status="promoted")
        reason = "; ".join(f"{b.check}: {b.detail}" for b in decision.breaches)
        return self._with(Step(now, "rolled back", self.current.name, f"{reason} [{seen}]"), status="rolled_back",
                          reason=reason)

    def aborted(self, now: float, why: str) -> Rollout:
        return self._with(Step(now, "aborted", self.current.name, why), status="aborted", reason=why)

    def _with(self, step: Step, **changes: Any) -> Rollout:
        story = (*self.story, step)
        if len(story) > STORY_LIMIT:  # keep the start, drop the oldest steps after it
            story = (story[0], *story[-(STORY_LIMIT - 1):])
        return replace(self, story=story, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "plan": self.plan.to_dict(), "stage": self.stage, "stage_started": self.stage_started,
                "status": self.status, "reason": self.reason, "started_by": self.started_by,
                "story": [s.to_dict() for s in self.story]}

    def to_json(self) -> bytes:
        return dump_record(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes, *, key: str = "rollout") -> Rollout:
        data = load_record(raw, key)
        try:
            plan = Plan.from_dict(data.get("plan"))
            status = data.get("status")
            if status not in ("running", "promoted", "rolled_back", "aborted"):
                raise RecordError(f"unknown status {status!r}")
            stage = data.get("stage")
            if not _count(stage) or stage >= len(plan.stages()):
                raise RecordError(f"stage {stage!r} is not one of the plan's")
            story = tuple(Step(float(s["at"]), str(s["event"]), str(s["stage"]), str(s.get("detail", "")))
                          for s in data.get("story", []))
            return cls(id=str(data["id"]), plan=plan, stage=stage, stage_started=float(data["stage_started"]),
                       status=status, reason=str(data.get("reason", "")), story=story,
                       started_by=str(data.get("started_by", "")))
        except (RecordError, KeyError, TypeError, ValueError) as e:
            raise RecordError(f"{key}: {e}") from None


def decide(rollout: Rollout, figures: Figures, now: float) -> Decision:
    """What the rollout does next, on the summed figures of its current stage (pure)."""
    if not rollout.running:
        return Hold(f"rollout {rollout.status}")
    found = breaches(figures, rollout.plan.checks, latency=not rollout.current.shadow_percent)
    if found:
        return RollBack(found)
    stage = rollout.current
    left = rollout.stage_started + stage.hold_s - now
    if left > 0:
        return Hold(f"{stage.name}: {left:.0f}s to hold")
    needed = rollout.plan.checks.min_calls
    if figures.candidate.calls < needed:
        return Hold(f"{stage.name}: {figures.candidate.calls} of {needed} calls seen")
    if stage.shadow_percent and figures.agreement.judged < rollout.plan.checks.min_judged:
        return Hold(f"{stage.name}: {figures.agreement.judged} of {rollout.plan.checks.min_judged} answers judged")
    if rollout.stage + 1 < len(rollout.plan.stages()):
        return Advance(rollout.stage + 1)
    return Promote()


def parse_duration(text: str) -> float:
    """"90", "90s", "2m", "1h" -> seconds."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    raw = text.strip()
    scale = units.get(raw[-1:])
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 2m, 1h)") from None
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 2m, 1h)")
    return value


def parse_steps(text: str | Sequence[int]) -> tuple[int, ...]:
    if isinstance(text, str):
        try:
            return tuple(int(s) for s in text.split(",") if s.strip())
        except ValueError:
            raise ValueError(f"steps {text!r} must be percents separated by commas, e.g. 5,25,50,100") from None
    return tuple(text)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
