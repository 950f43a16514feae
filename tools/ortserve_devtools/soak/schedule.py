"""What the soak does to the system and when: a pure function of the run's length and intervals.

Times are seconds from the start of the load. Events run one after another on the soak's main thread, so an event
that takes long (a Consul outage waits for the server to reconnect) delays the next ones rather than overlapping
them; each event's actual start is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

ROUTE = "route"
PUBLISH = "publish"
CONSUL_RESTART = "consul_restart"
CACHE_DRILL = "cache_drill"
KINDS = (ROUTE, PUBLISH, CONSUL_RESTART, CACHE_DRILL)

ROUTE_CYCLE: tuple[tuple[int, int], ...] = ((90, 10), (50, 50), (10, 90), (0, 100))
"""Weights (older, newer) of the two newest versions, one per route change in turn: a canary ramped to the whole
traffic, then the next publish becomes the next canary."""


@dataclass(frozen=True)
class Event:
    at_s: float
    kind: str
    number: int
    """1-based count within its kind."""


@dataclass(frozen=True)
class Plan:
    duration_s: float
    route_every_s: float
    publish_every_s: float
    consul_restarts: int
    drill_at: float
    """Fraction of the run at which the cache drill runs (0 = none)."""

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ValueError("the run must last > 0 s")
        if self.route_every_s <= 0 or self.publish_every_s <= 0:
            raise ValueError("route and publish intervals must be > 0 s")
        if self.consul_restarts < 0:
            raise ValueError("consul restarts must be >= 0")
        if not 0 <= self.drill_at < 1:
            raise ValueError("the cache drill's fraction must be in [0, 1)")
        if self.drill_at and self.drill_at * self.duration_s < self.route_every_s:
            raise ValueError(
                f"the cache drill at {self.drill_at * self.duration_s:.1f} s needs a version that was served and then "
                f"unloaded: a route change before it (one every {self.route_every_s:g} s); lengthen the run, "
                "route more often or move the drill later")

    def events(self) -> list[Event]:
        """Every event, in the order it runs (ties: Consul restarts and the drill before routes and publishes)."""
        out: list[Event] = []
        out += _every(ROUTE, self.route_every_s, self.duration_s)
        out += _every(PUBLISH, self.publish_every_s, self.duration_s)
        out += [Event(self.duration_s * (i + 1) / (self.consul_restarts + 1), CONSUL_RESTART, i + 1)
                for i in range(self.consul_restarts)]
        if self.drill_at:
            out.append(Event(self.duration_s * self.drill_at, CACHE_DRILL, 1))
        priority = {CONSUL_RESTART: 0, CACHE_DRILL: 1, PUBLISH: 2, ROUTE: 3}
        return sorted(out, key=lambda e: (e.at_s, priority[e.kind], e.number))


def _every(kind: str, interval_s: float, duration_s: float) -> list[Event]:
    out = []
    k = 1
    # Nothing in the last 10% of an interval before the end: its effect could not be observed.
    while k * interval_s < duration_s - 0.1 * interval_s:
        out.append(Event(k * interval_s, kind, k))
        k += 1
    return out


def route_weights(versions: list[str], change: int) -> dict[str, int]:
    """The routing of route change number `change` (1-based) over the two newest of `versions` (publish order)."""
    if not versions:
        raise ValueError("no versions to route")
    if len(versions) == 1:
        return {versions[0]: 100}
    older, newer = versions[-2], versions[-1]
    w_old, w_new = ROUTE_CYCLE[(change - 1) % len(ROUTE_CYCLE)]
    return {v: w for v, w in ((older, w_old), (newer, w_new)) if w > 0}


def version_name(number: int) -> str:
    """v001, v002, ...: zero-padded so that name order is publish order (the registry breaks created_at ties, one
    second apart at most, by name)."""
    return f"v{number:03d}"
