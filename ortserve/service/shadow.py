"""Shadow copies judged and counted: the events thread's side of the data plane's shadow copies (shadow_copy.h).

    book = ShadowBook(metrics, served=manager.served_output)
    book.observe(event)   # the events thread: one ShadowEvent -> its outcome, its agreement, both engine times
    book.status()         # any thread: per model the pair's figures and the calls that disagree most

A copy's outcome: `compared` (both answered: judged by the shadow version's kind, bundle/agreement.py; a token
classifier's by the entities the data plane aggregated on both sides), `dropped`
(the shadow version had no room, or the copy's deadline passed in its queue: the lowest class's lot, not the
candidate's fault), `failed` (the shadow version answered another error: an error of the candidate), `stable_failed`
(the live call failed: nothing to compare). The figures go to Prometheus (metrics.py `ortserve_shadow_*`), where a
rollout's agent (rollout_agent.py) and Flagger or Argo read them.

State: the book is guarded by its lock (the events thread writes, `ortserve status` reads).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ortserve.bundle.agreement import ENTITIES, Agreement, Entity, Tally, entities, judge_call, judge_of
from ortserve.service.metrics import Metrics

OK = "OK"
DROPPED_CODES = frozenset({"RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED"})
"""A copy answered so had no room or no time left: dropped, not the candidate's error."""
OUTCOMES = ("compared", "dropped", "failed", "stable_failed")
WORST_KEPT = 10
"""The calls that disagree most, kept per model and pair (bounded: the worst so far)."""
ROUNDING_DISTANCE = 1e-4
"""Answers nearer than this differ by rounding alone (the copy ran in another batch shape): not kept as worst."""


def outcome(stable_status: str, candidate_status: str) -> str:
    """A copy's outcome from both sides' status code names (see the module docstring)."""
    if stable_status != OK:
        return "stable_failed"
    if candidate_status == OK:
        return "compared"
    return "dropped" if candidate_status in DROPPED_CODES else "failed"


@dataclass(frozen=True)
class Judged:
    """How a candidate's answers are judged: its judge and whether its labels are independent."""

    judge: str
    multi_label: bool = False


def judged_as(served: Any) -> Judged:
    """A ServedOutput's judge."""
    judge = judge_of(labelled=bool(served.kind.labelled), reranker=bool(served.pairs and served.score),
                     per_token=bool(served.kind.per_token))
    return Judged(judge, bool(served.multi_label))


def by_row(found: list[tuple[int, int, int, str]], rows: int) -> list[list[Entity]]:
    """A ShadowEvent's [(row, start, end, label)] as each text's entities."""
    out: list[list[Entity]] = [[] for _ in range(rows)]
    for row, start, end, label in found:
        out[row].append((start, end, label))
    return out


def values(raw: bytes, rows: int, columns: int) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.float32).reshape(rows, columns)


@dataclass
class _Pair:
    """One model's stable and candidate pair: its counts and worst calls."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    tally: Tally = field(default_factory=Tally)
    worst: list[tuple[tuple[int, float], int, dict[str, Any]]] = field(default_factory=list)
    """A min-heap on (disagreed items, distance): the WORST_KEPT worst calls."""


class ShadowBook:
    def __init__(self, metrics: Metrics, *, served: Callable[[str, str], Any]) -> None:
        """`served(model, version)`: the version's ServedOutput, None once it is gone."""
        self._metrics = metrics
        self._served = served
        self._lock = threading.Lock()
        self._pairs: dict[tuple[str, str, str], _Pair] = {}  # guarded by _lock
        self._order = itertools.count()  # ties in the worst heap: the earlier call stays

    def observe(self, event: Any) -> None:
        m = self._metrics
        labels = (event.model, event.stable, event.candidate)
        result = outcome(event.stable_status, event.candidate_status)
        one: Agreement | None = None
        if result == "compared":
            served = self._served(event.model, event.candidate)
            if served is None:
                return  # retired meanwhile: nothing to count against it
            how = judged_as(served)
            if how.judge == ENTITIES:  # a token classifier's copy carries entities (shadow_copy.h)
                one = entities(by_row(event.stable_entities, event.rows), by_row(event.candidate_entities, event.rows))
            else:
                one = judge_call(how.judge, values(event.stable_values, event.rows, event.stable_columns),
                                 values(event.candidate_values, event.rows, event.candidate_columns),
                                 multi_label=how.multi_label)
            m.shadow_judged.labels(*labels).inc(one.judged)
            m.shadow_agreed.labels(*labels).inc(one.agreed)
            if one.concordance is not None:
                m.shadow_ranked.labels(*labels).inc()
                m.shadow_concordance.labels(*labels).inc(one.concordance)
            m.shadow_engine_seconds.labels(*labels, "stable").observe(event.stable_engine_s)
            m.shadow_engine_seconds.labels(*labels, "candidate").observe(event.candidate_engine_s)
        m.shadow_calls.labels(*labels, result).inc()
        with self._lock:
            pair = self._pairs.setdefault(labels, _Pair())
            pair.outcomes[result] += 1
            if one is not None:
                pair.tally = pair.tally.add(one)
                if one.disagreed or one.distance >= ROUNDING_DISTANCE:
                    self._keep_worst(pair, event, one)

    def _keep_worst(self, pair: _Pair, event: Any, one: Agreement) -> None:
        entry: dict[str, Any] = {"request_id": event.request_id, "judged": one.judged, "agreed": one.agreed,
                                 "distance": round(one.distance, 6)}
        if one.concordance is not None:
            entry["concordance"] = round(one.concordance, 4)
        if event.texts:
            entry["texts"] = list(event.texts)
        key = (one.disagreed, one.distance)
        item = (key, -next(self._order), entry)  # the order is unique: entries are never compared
        if len(pair.worst) < WORST_KEPT:
            heapq.heappush(pair.worst, item)
        elif item[:2] > pair.worst[0][:2]:
            heapq.heapreplace(pair.worst, item)

    def status(self) -> dict[str, list[dict[str, Any]]]:
        """{model: [one entry per (stable, candidate) pair]}: outcomes, agreement and the worst calls, worst first."""
        out: dict[str, list[dict[str, Any]]] = {}
        with self._lock:
            for (model, stable, candidate), pair in sorted(self._pairs.items()):
                t = pair.tally
                out.setdefault(model, []).append({
                    "stable": stable, "candidate": candidate, "outcomes": dict(pair.outcomes),
                    "judged": t.judged, "agreed": t.agreed, "agreement": t.agreement, "concordance": t.concordance,
                    "worst": [entry for _, _, entry in sorted(pair.worst, reverse=True)]})
        return out

