"""Deterministic version choice (pure; no I/O).

bucket = blake2b(model NUL routing_key) mod 10000, identical across processes and restarts (never
Python's salted `hash()`). Versions own contiguous bucket ranges, stacked oldest first, so the
newest version (the canary) owns the top of the range: ramping it from 5% to 20% moves keys only
from the version below it to the canary, and ramping down moves them back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

BUCKETS = 10_000


def bucket(model: str, routing_key: str) -> int:
    digest = hashlib.blake2b(f"{model}\x00{routing_key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS


@dataclass(frozen=True, slots=True)
class Split:
    """Weights laid out over the buckets; `order` is oldest version first."""

    order: tuple[str, ...]
    upper: tuple[int, ...]
    """Exclusive upper bucket of each version's range."""

    @classmethod
    def of(cls, weighted: Sequence[tuple[str, int]]) -> Split:
        """`weighted` is (version, percent) oldest first; percents sum to 100 (zeros allowed)."""
        total = sum(w for _, w in weighted)
        if total <= 0:
            return cls((), ())
        order: list[str] = []
        upper: list[int] = []
        acc = 0
        for version, weight in weighted:
            if weight <= 0:
                continue
            acc += weight
            order.append(version)
            upper.append(acc * BUCKETS // total)
        return cls(tuple(order), tuple(upper))

    def pick(self, b: int) -> str | None:
        for version, top in zip(self.order, self.upper, strict=True):
            if b < top:
                return version
        return None
