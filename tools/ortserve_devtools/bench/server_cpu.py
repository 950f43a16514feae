"""Where a served process's CPU went, from /proc: the whole process, each thread, the engine's threads.
(The process itself is started by ortserve_devtools.server_process, the launcher every script shares.)"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process `pid` so far (all threads), from /proc; nan where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


ENGINE_THREAD_PREFIXES = ("ortserve-lane", "ortserve-wide", "ortserve-engine")
"""The threads that call the engine: the native batcher's lane and wide threads, the Python front end's lane and
lone-run pools. ORT's own pool threads of the wide session are unnamed and count with the rest of the server
(under load, batches run on the lanes' one-thread sessions, which have no pool)."""


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Per thread of `pid`: (name, user + system CPU so far) from /proc/PID/task; threads that ended are absent."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        # comm is in parentheses and may hold spaces or ')': the fields after the last ')' are fixed.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def engine_thread_share(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> float | None:
    """CPU seconds the engine's threads (ENGINE_THREAD_PREFIXES) used between two snapshots; None when no such
    thread exists (a server other than ortserve's native front end, or /proc unreadable)."""
    used, found = 0.0, False
    for tid, (name, cpu) in after.items():
        if name.startswith(ENGINE_THREAD_PREFIXES):
            found = True
            used += cpu - before.get(tid, (name, 0.0))[1]
    return used if found else None
