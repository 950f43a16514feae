"""Moving a rollout through the registry: start, step, abort, and each replica's figures. Any process may step.

    rollout = start(store, plan)                  the rollout record and its first routing, one txn
    put_figures(store, model, replica, figures)   each replica writes its own key (one writer each)
    step(store, model)                            read -> decide (rollout.decide, pure) -> one txn
    abort(store, model, why)

A step is one transaction guarded by the modify indexes it read: the rollout record (check-and-set), the routing it
puts in force, and the versions it routes to. So when every server steps every few seconds, exactly one of them moves
each stage, a replica that dies mid-rollout loses nothing (the record is in the store, and the next stepper reads
it), and a step that lost the race changes nothing. Routing that a person changed under a running rollout (`registry
route`, `rollback`) aborts it: the rollout never overwrites a person's weights. The step that ends a rollout
deletes the replicas' figure keys in its transaction (its story keeps the figures it ended on).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from ortserve.registry.catalog import ModelState, read_model_state
from ortserve.registry.publishing import Refused, actor, next_routing
from ortserve.registry.records import RecordError, routing_key, version_key
from ortserve.registry.rollout import (
    Decision,
    Figures,
    Hold,
    Plan,
    Rollout,
    decide,
    figures_key,
    figures_prefix,
    state_key,
    summed,
)
from ortserve.registry.store import MAX_TXN_OPS, Entry, Store, TxnOp, check_op, delete_op, put_op


@dataclass(frozen=True)
class Read:
    """The rollout record as read, with the index a write must compare against (0: none)."""

    rollout: Rollout | None
    index: int


def read(store: Store, model: str) -> Read:
    entry = store.get(state_key(model))
    if entry is None:
        return Read(None, 0)
    return Read(Rollout.from_json(entry.value, key=entry.key), entry.modify_index)


def figures(store: Store, model: str) -> list[Figures]:
    """Every replica's latest figures; unreadable ones are skipped (a replica of another release)."""
    return _figures(store.list(figures_prefix(model)))


def _figures(entries: list[Entry]) -> list[Figures]:
    out = []
    for entry in entries:
        try:
            out.append(Figures.from_json(entry.value, key=entry.key))
        except RecordError:
            continue
    return out


def put_figures(store: Store, model: str, replica: str, mine: Figures) -> None:
    store.put(figures_key(model, replica), mine.to_json())


def start(store: Store, plan: Plan, *, who: str | None = None, now: float | None = None) -> Rollout:
    """Records the plan and puts its first stage in force, in one txn. Refused while another rollout runs, unless
    both versions are published, and unless the stable version has all the traffic."""
    who = who or actor()
    now = time.time() if now is None else now
    for _ in range(40):
        current = read(store, plan.model)
        if current.rollout is not None and current.rollout.running:
            raise Refused(f"{plan.model} has a rollout running ({current.rollout.plan.candidate}, "
                          f"{current.rollout.current.name}); `registry rollout {plan.model} --abort` first")
        state = read_model_state(store, plan.model)
        for version in (plan.stable, plan.candidate):
            if version not in state.versions:
                raise Refused(f"{plan.model}/{version} is not published")
        weights = dict(state.routing.weights) if state.routing else {}
        if {v: w for v, w in weights.items() if w} != {plan.stable: 100}:
            raise Refused(f"a rollout starts from {plan.stable}=100; {plan.model} routes "
                          f"{weights or 'nothing'} (set it with `registry route`)")
        rollout = Rollout.begin(plan, uuid.uuid4().hex[:12], now, who)
        if store.txn(_writes(state, current.index, rollout, who)):
            return rollout
    raise Refused(f"gave up: {plan.model} keeps changing under us")


def step(store: Store, model: str, *, now: float | None = None) -> tuple[Rollout | None, Decision]:
    """One try at moving the model's rollout: the record as it stands after, and what was decided. A lost race
    decides Hold("another replica stepped")."""
    now = time.time() if now is None else now
    current = read(store, model)
    rollout = current.rollout
    if rollout is None or not rollout.running:
        return rollout, Hold("no rollout running")
    state = read_model_state(store, model)
    in_force = dict(state.routing.weights) if state.routing else {}
    if {v: w for v, w in in_force.items() if w} != rollout.weights() or _shadow(state) != rollout.shadow():
        why = f"routing changed outside the rollout (now {in_force}, the rollout put {rollout.weights()} in force)"
        done = rollout.aborted(now, why)
        if store.txn([put_op(state_key(model), done.to_json(), cas=current.index),
                      check_op(routing_key(model), state.routing_index)]):
            return done, Hold(why)
        return rollout, Hold("another replica stepped")
    entries = store.list(figures_prefix(model))
    seen = summed(_figures(entries), rollout.id, rollout.stage)
    decision = decide(rollout, seen, now)
    nxt = rollout.after(decision, seen, now)
    if nxt is None:
        return rollout, decision
    ops = _writes(state, current.index, nxt, "rollout " + rollout.id)
    if not nxt.running:  # the story keeps the figures it ended on; the replicas' keys go (as many as a txn takes)
        ops += [delete_op(e.key) for e in entries[: MAX_TXN_OPS - len(ops)]]
    if store.txn(ops):
        return nxt, decision
    return rollout, Hold("another replica stepped")


def abort(store: Store, model: str, why: str, *, who: str | None = None, now: float | None = None) -> Rollout:
    """Stops the running rollout and routes everything to the stable version."""
    who = who or actor()
    now = time.time() if now is None else now
    for _ in range(40):
        current = read(store, model)
        if current.rollout is None or not current.rollout.running:
            raise Refused(f"{model} has no rollout running")
        done = current.rollout.aborted(now, f"{why} (by {who})")
        state = read_model_state(store, model)
        if store.txn(_writes(state, current.index, done, who)):
            return done
    raise Refused(f"gave up: {model} keeps changing under us")


def _shadow(state: ModelState) -> tuple[str, int] | None:
    return state.routing.shadow if state.routing else None


def _writes(state: ModelState, rollout_index: int, rollout: Rollout, who: str) -> list[TxnOp]:
    """The rollout record (check-and-set) and the routing it puts in force, guarded by the versions it names."""
    weights, shadow = rollout.weights(), rollout.shadow()
    ops = [put_op(state_key(state.model), rollout.to_json(), cas=rollout_index)]
    for version in sorted({*weights, rollout.plan.candidate}):
        ops.append(check_op(version_key(state.model, version), state.version_indexes.get(version, 0)))
    in_force = state.routing
    if in_force is None or dict(in_force.weights) != weights or in_force.shadow != shadow:
        ops.append(put_op(routing_key(state.model), next_routing(state, weights, who, shadow=shadow).to_json(),
                          cas=state.routing_index))
    else:
        ops.append(check_op(routing_key(state.model), state.routing_index))
    return ops
