"""Registry writes: publish, route, rollback, retire. The CLI is a thin shell over these.

Every write is one store transaction guarded by the modify indexes of what it read:

    for attempt in range(MAX_ATTEMPTS):
        state = read_model_state(store, model)    # one consistent read
        ops = plan(state)                         # validates; raises Refused; None = nothing to do
        if ops is None or store.txn(ops): done    # False: someone wrote first -> re-read, retry

so two operators running the CLI at once never lose an update, and a refused or failed write
leaves the store exactly as it was.
"""

from __future__ import annotations

import datetime as dt
import getpass
import random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ortserve.bundle.validate import validate_bundle
from ortserve.registry.artifacts import ArtifactStore, bundle_digest
from ortserve.registry.catalog import ModelState, read_model_state
from ortserve.registry.pausepoints import pause_point
from ortserve.registry.records import (
    HISTORY_LIMIT,
    RecordError,
    Routing,
    VersionRecord,
    check_name,
    check_shadow,
    check_weights,
    format_weights,
    routing_key,
    version_key,
)
from ortserve.registry.store import Store, TxnOp, check_op, delete_op, put_op

MAX_ATTEMPTS = 40
T = TypeVar("T")


class Refused(Exception):
    """The registry said no (unknown model, bad weights, version exists...); CLI exit 1."""


@dataclass(frozen=True)
class PublishResult:
    record: VersionRecord
    routing: Routing | None
    already_published: bool


def actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def blend_weights(current: Mapping[str, int], new_version: str, weight: int) -> dict[str, int]:
    """`weight`% to the new version, 100-weight spread over `current` in proportion (largest
    remainder, ties by name), so the result is exact integers summing to 100."""
    if not 0 <= weight <= 100:
        raise Refused(f"weight must be 0..100, got {weight}")
    total = sum(current.values())
    if total <= 0:
        return {new_version: 100}
    rest = 100 - weight
    out = {v: w * rest // total for v, w in current.items()}
    leftover = rest - sum(out.values())
    by_remainder = sorted(current, key=lambda v: (-(current[v] * rest % total), v))
    for v in by_remainder[:leftover]:
        out[v] += 1
    out[new_version] = weight
    return out


def publish(store: Store, artifacts: ArtifactStore, *, model: str, version: str, bundle_dir: str | Path,
            weight: int | None = None, who: str | None = None) -> PublishResult:
    check_name("model", model)
    check_name("version", version)
    if weight is not None and not 0 <= weight <= 100:
        raise Refused(f"--weight must be 0..100, got {weight}")
    manifest = validate_bundle(bundle_dir)
    sha, _size = bundle_digest(bundle_dir)
    state = read_model_state(store, model)
    existing = state.versions.get(version)
    if existing is not None:
        return _already(existing, sha, state)
    if version_key(model, version) in state.problems:
        raise Refused(f"{model}/{version} exists but is unreadable: {state.problems[version_key(model, version)]}")

    ref = artifacts.upload(bundle_dir, before_rename=lambda: pause_point("publish-upload"))
    if ref.sha256 != sha:
        raise Refused(f"bundle {bundle_dir} changed while publishing (sha256 {sha} then {ref.sha256})")
    pause_point("publish-after-upload")
    who = who or actor()
    record = VersionRecord(model=model, version=version, artifact=ref, manifest=manifest,
                           created_at=utc_now(), created_by=who)

    def plan(state: ModelState) -> list[TxnOp] | None:
        existing = state.versions.get(version)
        if existing is not None:
            return None  # someone published it meanwhile; _already below decides
        ops = [put_op(version_key(model, version), record.to_json(), cas=0)]
        if weight is not None:
            current = state.routing.weights if state.routing else {}
            new = blend_weights(current, version, weight)
            ops.append(put_op(routing_key(model), next_routing(state, new, who).to_json(),
                              cas=state.routing_index))
        pause_point("publish-before-txn")
        return ops

    state = _write(store, model, plan)
    if state is not None:  # lost the race to an identical or conflicting publish
        return _already(state.versions[version], sha, state)
    final = read_model_state(store, model)
    return PublishResult(record=record, routing=final.routing, already_published=False)


def _already(existing: VersionRecord, sha: str, state: ModelState) -> PublishResult:
    if existing.artifact.sha256 != sha:
        raise Refused(f"{existing.model}/{existing.version} is already published with different bytes "
                      f"(sha256 {existing.artifact.sha256[:12]}…, this bundle {sha[:12]}…); "
                      f"versions are immutable, publish a new version")
    return PublishResult(record=existing, routing=state.routing, already_published=True)


def route(store: Store, model: str, weights: Mapping[str, int], who: str | None = None, *,
          shadow: tuple[str, int] | None = None) -> Routing:
    """Sets the model's weights (and its shadow, or none); every named version must be published. Returns the new
    routing."""
    who = who or actor()
    try:
        wanted = check_weights(dict(weights))
        if shadow is not None:
            shadow = check_shadow(shadow, wanted)
    except RecordError as e:
        raise Refused(str(e)) from None

    def plan(state: ModelState) -> list[TxnOp] | None:
        _require_model(state)
        try:
            check_weights(wanted, published=state.versions)
        except RecordError as e:
            raise Refused(str(e)) from None
        if shadow is not None and shadow[0] not in state.versions:
            raise Refused(f"shadow {shadow[0]} is not published")
        if state.routing is not None and dict(state.routing.weights) == wanted and state.routing.shadow == shadow:
            return None
        named = {**wanted, **({shadow[0]: 0} if shadow else {})}
        return [*_versions_unchanged(state, named),
                put_op(routing_key(model), next_routing(state, wanted, who, shadow=shadow).to_json(),
                       cas=state.routing_index)]

    _write(store, model, plan)
    return _current_routing(store, model)


def rollback(store: Store, model: str, who: str | None = None) -> Routing:
    """Restores the previous weights (pops the history). Returns the new routing."""
    who = who or actor()

    def plan(state: ModelState) -> list[TxnOp] | None:
        _require_model(state)
        if state.routing is None or not state.routing.history:
            raise Refused(f"{model} has no earlier routing to roll back to")
        previous = dict(state.routing.history[0])
        try:
            check_weights(previous, published=state.versions)
        except RecordError as e:
            raise Refused(f"cannot roll back {model} to {format_weights(previous)}: {e}") from None
        restored = Routing(weights=previous, updated_at=utc_now(), updated_by=who,
                           history=state.routing.history[1:])
        return [*_versions_unchanged(state, previous),
                put_op(routing_key(model), restored.to_json(), cas=state.routing_index)]

    _write(store, model, plan)
    return _current_routing(store, model)


def retire(store: Store, model: str, version: str) -> None:
    """Deletes a version record (its artifact stays); refused while it has traffic."""
    check_name("version", version)

    def plan(state: ModelState) -> list[TxnOp] | None:
        _require_model(state)
        if version not in state.versions:
            raise Refused(f"{model}/{version} is not published")
        weight = state.routing.weight_of(version) if state.routing else 0
        if weight > 0:
            raise Refused(f"{model}/{version} still has {weight}% of traffic; route it to 0 first")
        ops = [delete_op(version_key(model, version), cas=state.version_indexes[version])]
        if state.routing is not None and version in state.routing.weights:
            # Drop its zero entry so routing only ever names published versions.
            kept = {v: w for v, w in state.routing.weights.items() if v != version}
            shadow = state.routing.shadow if state.routing.shadow and state.routing.shadow[0] != version else None
            trimmed = Routing(weights=kept, updated_at=state.routing.updated_at,
                              updated_by=state.routing.updated_by, history=state.routing.history, shadow=shadow)
            ops.append(put_op(routing_key(model), trimmed.to_json(), cas=state.routing_index))
        elif state.routing is not None and state.routing.shadow and state.routing.shadow[0] == version:
            kept_routing = Routing(weights=state.routing.weights, updated_at=state.routing.updated_at,
                                   updated_by=state.routing.updated_by, history=state.routing.history)
            ops.append(put_op(routing_key(model), kept_routing.to_json(), cas=state.routing_index))
        else:
            ops.append(check_op(routing_key(model), state.routing_index))
        return ops

    _write(store, model, plan)


# -- internals ------------------------------------------------------------------------------------------


def _write(store: Store, model: str, plan: Callable[[ModelState], list[TxnOp] | None]) -> ModelState | None:
    """Runs read -> plan -> txn until the txn applies. Returns None when written, else the state
    that made `plan` decide there was nothing to write."""
    for attempt in range(MAX_ATTEMPTS):
        state = read_model_state(store, model)
        ops = plan(state)
        if ops is None:
            return state
        if store.txn(ops):
            return None
        # Jittered backoff so that two writers in lockstep drift apart.
        time.sleep(random.uniform(0, min(0.2, 0.002 * 2**attempt)))
    raise Refused(f"gave up after {MAX_ATTEMPTS} attempts: {model} keeps changing under us (concurrent writers)")


def _require_model(state: ModelState) -> None:
    if not state.exists:
        raise Refused(f"unknown model {state.model!r}")


def _versions_unchanged(state: ModelState, weights: Mapping[str, int]) -> list[TxnOp]:
    # A concurrent retire of a version we route to must make this txn fail, not dangle.
    return [check_op(version_key(state.model, v), state.version_indexes[v]) for v in sorted(weights)]


def next_routing(state: ModelState, weights: Mapping[str, int], who: str, *,
                 shadow: tuple[str, int] | None = None) -> Routing:
    """The model's next routing: these weights (and shadow), the ones in force first in its history."""
    history: tuple[Mapping[str, int], ...] = ()
    if state.routing is not None:
        history = (dict(state.routing.weights), *state.routing.history)[:HISTORY_LIMIT]
    return Routing(weights=dict(weights), updated_at=utc_now(), updated_by=who, history=history, shadow=shadow)


def _current_routing(store: Store, model: str) -> Routing:
    routing = read_model_state(store, model).routing
    if routing is None:  # retired concurrently between our write and this read
        raise Refused(f"{model} has no routing")
    return routing
