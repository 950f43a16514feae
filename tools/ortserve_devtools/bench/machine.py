"""What the benchmark scripts print beside every figure: the CPU they ran on, and the one percentile rule."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank value at q (0..1); NaN for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")
