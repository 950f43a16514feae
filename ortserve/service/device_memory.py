"""How much memory a version takes on the device it serves from, and whether another one fits the budget.

Measured, not modelled: the loader reads the device's used memory before a version opens and after its warm-up
(GPU: cudaMemGetInfo, so every allocation counts, cuBLAS workspaces and captured graphs included; CPU: the
process's resident memory). Loads are serialised on one loader thread, so deltas do not overlap; traffic on
serving versions can still grow their arenas meanwhile, which the next load then sees as its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ortserve.engine_ext import EngineError, cuda_memory_info

MIB = 1024 * 1024


class MemoryBudgetError(RuntimeError):
    """A version would take the loaded versions past memory_budget_mb; its load fails, serving ones are untouched."""


def used_memory_probe(device: str) -> tuple[str, Callable[[], int]]:
    """(what it measures, a function returning used bytes) for `device`: the GPU's used memory for "cuda[:N]"
    when a CUDA runtime loads, else this process's resident memory."""
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        try:
            cuda_memory_info(index)  # also creates the CUDA context now, so no version's delta includes it
        except EngineError:
            pass
        else:
            return f"gpu:{index}", lambda: _gpu_used(index)
    return "rss", resident_bytes


def _gpu_used(index: int) -> int:
    free, total = cuda_memory_info(index)
    return total - free


def resident_bytes() -> int:
    """This process's resident set size (Linux /proc; 0 where it cannot be read)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def budget_refusal(*, budget_mb: float, held_mb: float, need_mb: float, what: str) -> str | None:
    """Why a version needing `need_mb` does not fit beside `held_mb` already held under `budget_mb` (0 = no budget),
    or None when it fits. `what` says how need_mb was known ("its model file" before loading, "measured" after)."""
    if budget_mb <= 0 or held_mb + need_mb <= budget_mb:
        return None
    return (
        f"memory_budget_mb={budget_mb:g} exceeded: this version needs {need_mb:.0f} MB ({what}) and the loaded "
        f"versions hold {held_mb:.0f} MB; raise memory_budget_mb, unload a version or serve a smaller one"
    )
