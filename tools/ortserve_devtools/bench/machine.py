"""What the benchmark scripts print beside every figure: the CPU they ran on, and the one percentile rule."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
"""The flags that decide which kernels ONNX Runtime and OpenVINO run (int8 dot products, bf16), in this order."""


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    """The CPU_FLAGS this CPU has, in CPU_FLAGS' order."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [flag for flag in CPU_FLAGS if flag in have]
    return []


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank value at q (0..1); NaN for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")
