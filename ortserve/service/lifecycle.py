"""The lifecycle of one loaded model version: a state enum and its legal transitions.

    NEW → LOADING → READY → DRAINING → CLOSED ;  any but CLOSED → FAILED → CLOSED

READY means verified, loaded and warmed up: only READY versions enter the route table.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    NEW = "new"
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    CLOSED = "closed"
    FAILED = "failed"


_LEGAL: dict[State, frozenset[State]] = {
    State.NEW: frozenset({State.LOADING, State.FAILED}),
    State.LOADING: frozenset({State.READY, State.FAILED}),
    State.READY: frozenset({State.DRAINING, State.FAILED}),
    State.DRAINING: frozenset({State.CLOSED, State.FAILED}),
    State.FAILED: frozenset({State.CLOSED}),
    State.CLOSED: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


def check_transition(current: State, target: State) -> None:
    if target not in _LEGAL[current]:
        raise IllegalTransition(f"illegal lifecycle transition {current.value} → {target.value}")
