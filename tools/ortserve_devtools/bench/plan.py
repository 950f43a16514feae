"""What a benchmark invocation runs, as data: the load points and a time estimate for progress lines."""

from __future__ import annotations

from dataclasses import dataclass

SWEEP_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
SWEEP_MULTI_TEXT_CONCURRENCY = (1, 8)
OVERLOAD_FACTOR = 2.0
MULTI_TEXTS = 8


@dataclass(frozen=True)
class Point:
    """One load run. `series` groups points into one line of the plot; `point` labels the dot."""

    mode: str
    texts_per_request: int
    concurrency: int = 0
    rate: float = 0.0
    series: str = ""
    tag: str = ""

    @property
    def name(self) -> str:
        load = f"c={self.concurrency}" if self.mode == "closed" else f"rate={self.rate:.0f}/s"
        tag = f" {self.tag}" if self.tag else ""
        return f"{self.mode} {load} x{self.texts_per_request}{tag}"

    @property
    def label(self) -> str:
        return f"c{self.concurrency}" if self.mode == "closed" else f"{self.rate:.0f}/s"


def sweep_points(concurrency: tuple[int, ...] = SWEEP_CONCURRENCY) -> list[Point]:
    points = [Point("closed", 1, concurrency=c, series="closed x1") for c in concurrency]
    points += [Point("closed", MULTI_TEXTS, concurrency=c, series=f"closed x{MULTI_TEXTS}")
               for c in SWEEP_MULTI_TEXT_CONCURRENCY]
    return points


def estimate_s(*, load_runs: int, warmup_s: float, duration_s: float, limit: bool, server_starts: int,
               limit_sizes: int = 7, paired_rounds: int = 0) -> float:
    """Rough wall time, for the progress lines (the engine-alone part depends on the model)."""
    per_run = warmup_s + duration_s + 0.5 + (1.5 if limit else 0)  # + the limit's size again after each run
    return load_runs * per_run + (limit_sizes * 2.5 + 3 if limit else 0) + server_starts * 6 + paired_rounds * 0.6
