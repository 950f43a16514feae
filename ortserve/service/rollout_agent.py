"""Each server's part in a rollout (`registry rollout`): its own figures of the stage in force, and a try at the step.

    every rollout_step_s, on its own thread (ortserve-rollouts), for each running rollout of a model it serves:
        mine = this replica's calls per version since it saw the stage begin     (read from its metrics)
        stepper.put_figures(store, model, replica, mine)                         its own key, one writer
        stepper.step(store, model)                                               one server wins each step (CAS)

So no process is added to run a rollout, none is lost with a replica, and the decision is made on the sum of every
replica's figures (registry/rollout.py). A replica's figures are the difference of its cumulative series between now
and when it first saw the stage: in a canary stage the request series (`ortserve_requests_total`,
`ortserve_request_duration_seconds`); in the shadow stage the shadow copies' (`ortserve_shadow_*`: the candidate's
calls are its compared and failed copies, dropped ones are not its doing; each side's latency is its engine time on
the same calls, shown and not judged (rollout.breaches); the agreement tally). The same series a Prometheus query
reads, so Flagger or Argo users judge the same numbers.

State: `_baselines` is owned by the agent's thread (nothing else touches it).
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog
from prometheus_client import CollectorRegistry

from ortserve.bundle.agreement import Tally
from ortserve.registry import stepper
from ortserve.registry.records import NAME_RE
from ortserve.registry.rollout import LATENCY_BOUNDS_S, ROLLOUTS_PREFIX, Figures, Latency, Rollout, Side
from ortserve.registry.store import Store, StoreError

log = structlog.get_logger("ortserve.rollouts")


def replica_name() -> str:
    """This server's key among the replicas' figures: its host name and process id, as a registry name."""
    raw = re.sub(r"[^A-Za-z0-9._-]", "-", f"{socket.gethostname()}-{os.getpid()}").lstrip("._-")
    name = raw[-64:].lstrip("._-") or f"replica-{os.getpid()}"
    return name if NAME_RE.fullmatch(name) and ".." not in name else f"replica-{os.getpid()}"


def served_sides(registry: CollectorRegistry, model: str) -> dict[str, Side]:
    """Every version's cumulative calls, failures and latency so far, read from the server's request series."""
    ok: dict[str, int] = {}
    errors: dict[str, int] = {}
    cumulative: dict[str, dict[float, float]] = {}
    for family in registry.collect():
        if family.name == "ortserve_requests":
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels.get("model") == model:
                    version = sample.labels["version"]
                    bucket = ok if sample.labels.get("code") == "OK" else errors
                    bucket[version] = bucket.get(version, 0) + int(sample.value)
        elif family.name == "ortserve_request_duration_seconds":
            for sample in family.samples:
                if sample.name.endswith("_bucket") and sample.labels.get("model") == model:
                    le = float(sample.labels["le"])
                    cumulative.setdefault(sample.labels["version"], {})[le] = sample.value
    return {version: Side(calls=ok.get(version, 0) + errors.get(version, 0), errors=errors.get(version, 0),
                          latency=_histogram(cumulative.get(version, {})))
            for version in {*ok, *errors, *cumulative}}


def _histogram(counts_by_bound: dict[float, float]) -> Latency:
    counts, below = [], 0
    for bound in (*LATENCY_BOUNDS_S, float("inf")):
        total = int(counts_by_bound.get(bound, below))
        counts.append(max(0, total - below))
        below = total
    return Latency(tuple(counts))


def shadow_sides(registry: CollectorRegistry, model: str, stable: str, candidate: str) -> tuple[Side, Side, Tally]:
    """The shadow copies of `stable`'s calls to `candidate` so far: each side's calls and engine time, and the
    agreement tally, read from the server's shadow series."""
    pair = {"model": model, "stable": stable, "candidate": candidate}
    outcomes: dict[str, int] = {}
    counts: dict[str, float] = {}
    engine: dict[str, dict[float, float]] = {"stable": {}, "candidate": {}}
    for family in registry.collect():
        for sample in family.samples:
            if any(sample.labels.get(k) != v for k, v in pair.items()):
                continue
            if sample.name == "ortserve_shadow_calls_total":
                outcomes[sample.labels["outcome"]] = int(sample.value)
            elif sample.name in ("ortserve_shadow_judged_total", "ortserve_shadow_agreed_total",
                                 "ortserve_shadow_ranked_calls_total", "ortserve_shadow_concordance_total"):
                counts[sample.name] = sample.value
            elif sample.name == "ortserve_shadow_engine_duration_seconds_bucket":
                engine[sample.labels["role"]][float(sample.labels["le"])] = sample.value
    compared, failed = outcomes.get("compared", 0), outcomes.get("failed", 0)
    tally = Tally(calls=compared, judged=int(counts.get("ortserve_shadow_judged_total", 0)),
                  agreed=int(counts.get("ortserve_shadow_agreed_total", 0)),
                  concordance_sum=counts.get("ortserve_shadow_concordance_total", 0.0),
                  ranked_calls=int(counts.get("ortserve_shadow_ranked_calls_total", 0)))
    return (Side(calls=compared, errors=0, latency=_histogram(engine["stable"])),
            Side(calls=compared + failed, errors=failed, latency=_histogram(engine["candidate"])), tally)


@dataclass(frozen=True)
class Baseline:
    """Where this replica's counters stood when it first saw a rollout's stage."""

    rollout: str
    stage: int
    stable: Side
    candidate: Side
    agreement: Tally = field(default_factory=Tally)


class RolloutAgent:
    def __init__(self, store: Store, metrics: CollectorRegistry, *, replica: str, step_s: float,
                 models: Iterable[str] = ()) -> None:
        self._store = store
        self._metrics = metrics
        self._replica = replica
        self._step_s = step_s
        self._models = frozenset(models) or None
        self._baselines: dict[str, Baseline] = {}

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self._step_s):
            try:
                self.tick()
            except StoreError as e:  # the watcher reports the store's health; try again next tick
                log.debug("rollout_tick_failed", error=str(e))
            except Exception:  # a bad record must not end the thread: the next tick tries again
                log.exception("rollout_tick_failed")

    def tick(self) -> None:
        for model in self._rollout_models():
            rollout = stepper.read(self._store, model).rollout
            if rollout is None or not rollout.running:
                self._baselines.pop(model, None)
                continue
            self._store_figures(model, rollout)
            after, _ = stepper.step(self._store, model)
            if after is not None and after != rollout:
                log.info("rollout_stepped", model=model, rollout=after.id, status=after.status,
                         stage=after.current.name, step=after.story[-1].event, detail=after.story[-1].detail,
                         replica=self._replica)

    def _rollout_models(self) -> list[str]:
        models = []
        for entry in self._store.list(ROLLOUTS_PREFIX):
            name, _, rest = entry.key[len(ROLLOUTS_PREFIX):].partition("/")
            if rest == "state" and (self._models is None or name in self._models):
                models.append(name)
        return models

    def _store_figures(self, model: str, rollout: Rollout) -> None:
        plan = rollout.plan
        tally = Tally()
        if rollout.current.shadow_percent:
            stable, candidate, tally = shadow_sides(self._metrics, model, plan.stable, plan.candidate)
        else:
            sides = served_sides(self._metrics, model)
            stable, candidate = sides.get(plan.stable, Side()), sides.get(plan.candidate, Side())
        base = self._baselines.get(model)
        if base is None or (base.rollout, base.stage) != (rollout.id, rollout.stage):
            base = Baseline(rollout.id, rollout.stage, stable, candidate, tally)
            self._baselines[model] = base
        mine = Figures(rollout.id, rollout.stage, stable=stable - base.stable, candidate=candidate - base.candidate,
                       agreement=tally - base.agreement)
        stepper.put_figures(self._store, model, self._replica, mine)
