"""What the manager does for one model, decided as pure functions of plain data (as TF Serving's version policy):
which versions to keep loaded, which to load now and when to retry a failed one, which routing to put in force
and which versions to retire. The manager executes the plan (loads, swaps, drains); nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ortserve.registry.desired import DesiredModel


def newest(desired: DesiredModel) -> str:
    """The most recently published version (ties: the greatest name)."""
    return max(desired.versions, key=lambda v: (desired.versions[v].created_at, v))


def targets(desired: DesiredModel, max_loaded: int) -> list[str]:
    """Versions to keep loaded: every weighted one and the shadow, then the newest others up to `max_loaded` in all.
    Without any routing yet, the newest version counts as weighted."""
    weighted = [v for v, w in desired.weights.items() if w > 0 and v in desired.versions]
    if not desired.weights and desired.versions:
        weighted = [newest(desired)]
    if desired.shadow is not None and desired.shadow[0] in desired.versions and desired.shadow[0] not in weighted:
        weighted.append(desired.shadow[0])
    rest = sorted((v for v in desired.versions if v not in weighted),
                  key=lambda v: (desired.versions[v].created_at, v), reverse=True)
    return weighted + rest[: max(0, max_loaded - len(weighted))]


@dataclass(frozen=True)
class Failure:
    """A version's last failed load: the bytes it was (`DesiredVersion.source()`) and when to try them again."""

    source: str
    retry_at: float


@dataclass(frozen=True)
class LoadPlan:
    load: tuple[str, ...]
    """Versions to load now, in `targets` order."""
    retry_in: float | None
    """Seconds until the earliest backed-off version may be tried again; None when none waits."""


def plan_loads(desired: DesiredModel, *, loaded: Mapping[str, str], failures: Mapping[str, Failure],
               max_loaded: int, now: float) -> LoadPlan:
    """`loaded`: version -> source of what is loaded. A target is loaded unless the same bytes already are, or the
    same bytes failed and their backoff has not ended; new bytes under a failed version's name load at once."""
    load: list[str] = []
    retry_in: float | None = None
    for version in targets(desired, max_loaded):
        source = desired.versions[version].source()
        if loaded.get(version) == source:
            continue
        failure = failures.get(version)
        if failure is not None and failure.source == source and failure.retry_at > now:
            wait = failure.retry_at - now
            retry_in = wait if retry_in is None else min(retry_in, wait)
            continue
        load.append(version)
    return LoadPlan(tuple(load), retry_in)


@dataclass(frozen=True)
class RoutePlan:
    weights: dict[str, int]
    """The routing to put in force ({} or all zero: the model leaves the route table)."""
    order: tuple[str, ...]
    """Weighted versions oldest first: the split gives them contiguous bucket ranges in this order."""
    apply: bool
    """False: a weighted version is not ready, and the routing in force stays (invariant 4)."""
    unready: tuple[str, ...]
    clear_error: bool
    """Every weighted version is ready and no kept version is failing: the model's last error is over."""
    retire: tuple[str, ...]
    """Ready versions no longer kept: drained and closed once the new routing is in force."""
    serve: tuple[str, ...]
    """Ready versions kept: the route table's versions (weighted ones take the split, any may be pinned)."""
    shadow: tuple[str, int] | None = None
    """(version, percent): the desired shadow once it is ready and takes no weight; None: no copies."""


def plan_route(desired: DesiredModel, *, max_loaded: int, ready: Collection[str], routed: bool,
               failing: Collection[str]) -> RoutePlan:
    """`ready`: versions loaded and ready; `routed`: the model is in the route table now; `failing`: versions with a
    recorded load failure. A model's first load serves whatever is ready rather than nothing."""
    keep = set(targets(desired, max_loaded))
    usable = {v for v in ready if v in keep}
    weights = dict(desired.weights) if desired.weights else ({newest(desired): 100} if desired.versions else {})
    unready = tuple(sorted(v for v, w in weights.items() if w > 0 and v not in usable))
    apply = not (unready and routed)
    if unready and not routed:
        weights = {v: w for v, w in weights.items() if v in usable}
    published = desired.versions
    order = tuple(sorted(weights, key=lambda v: (published[v].created_at if v in published else "", v)))
    clear = apply and not unready and not (keep & set(failing))
    retire = tuple(sorted(v for v in ready if v not in keep)) if apply else ()
    shadow = desired.shadow if desired.shadow and desired.shadow[0] in usable and not weights.get(desired.shadow[0]) \
        else None
    return RoutePlan(weights, order, apply, unready, clear, retire, tuple(sorted(usable)), shadow)
