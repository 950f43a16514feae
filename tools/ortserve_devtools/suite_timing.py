"""Where the suite's minutes go: a pytest plugin that sums each test's setup, call and teardown by test, by file and
by room (tests/<room>/), prints the slowest at the end of a run and writes them all to `build/test-timings.json`.

Loaded by the test command (`-p ortserve_devtools.suite_timing` in pyproject's addopts). With pytest-xdist the
reports reach the controller, so the figures are per test, whichever worker ran it; `wall_s` is the run's, and
`by_worker` gives each worker's summed tests and when its last test ended (seconds into the run): a worker that ends
long before the other is the schedule's tail (suite_schedule.py).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

SHOWN = 15
"""How many of the slowest tests and files the terminal summary lists."""
BRIEF_S = 30.0
"""A run shorter than this only says where its timings are."""


class SuiteTiming:
    """Owned by pytest's main process: reports arrive one at a time on its thread."""

    def __init__(self, out: Path, workers: int) -> None:
        self.out, self.workers = out, workers
        self.started = time.monotonic()
        self.by_test: dict[str, float] = defaultdict(float)
        self.outcome: dict[str, str] = {}
        self.worker_test_s: dict[str, float] = defaultdict(float)
        self.worker_ended_s: dict[str, float] = {}

    def add(self, report: pytest.TestReport) -> None:
        self.by_test[report.nodeid] += report.duration
        worker = _worker_of(report)
        self.worker_test_s[worker] += report.duration
        self.worker_ended_s[worker] = time.monotonic() - self.started
        if report.when == "call" or report.outcome != "passed":
            self.outcome[report.nodeid] = report.outcome

    def summary(self) -> dict[str, Any]:
        by_file: dict[str, float] = defaultdict(float)
        by_room: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.by_test.items():
            path = nodeid.split("::", 1)[0]
            by_file[path] += seconds
            parts = path.split("/")
            by_room["/".join(parts[:2]) if len(parts) > 2 else parts[0]] += seconds
        ranked = lambda d: dict(sorted(d.items(), key=lambda kv: -kv[1]))  # noqa: E731
        return {"wall_s": round(time.monotonic() - self.started, 1),
                "test_s": round(sum(self.by_test.values()), 1),
                "workers": self.workers,
                "by_worker": {w: {"test_s": round(self.worker_test_s[w], 1),
                                  "ended_s": round(self.worker_ended_s[w], 1)} for w in sorted(self.worker_test_s)},
                "cpu": _cpu_model(),
                "rooms": {k: round(v, 1) for k, v in ranked(by_room).items()},
                "files": {k: round(v, 2) for k, v in ranked(by_file).items()},
                "tests": {k: round(v, 3) for k, v in ranked(self.by_test).items()}}


def _worker_of(report: pytest.TestReport) -> str:
    """The xdist worker that ran it ("gw0"; xdist sets `report.node` on the controller), else "main"."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return str(getattr(gateway, "id", "main"))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its reports go to the controller, which sums them
        return
    out = Path(str(config.rootpath)) / "build" / "test-timings.json"
    workers = int(getattr(config.option, "numprocesses", 0) or 0)  # pytest-xdist's -n, once resolved
    config.pluginmanager.register(_Hooks(SuiteTiming(out, workers)), "ortserve-suite-timing")


class _Hooks:
    def __init__(self, timing: SuiteTiming) -> None:
        self.timing = timing

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.timing.add(report)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        summary = self.timing.summary()
        if not summary["tests"]:
            return
        self.timing.out.parent.mkdir(parents=True, exist_ok=True)
        self.timing.out.write_text(json.dumps(summary, indent=1) + "\n")
        tr = terminalreporter
        if summary["wall_s"] < BRIEF_S:
            tr.write_line(f"timings: {self.timing.out}")
            return
        tr.section("where the time went")
        tr.write_line(f"wall {summary['wall_s']:.0f} s, tests {summary['test_s']:.0f} s summed over"
                      f" {summary['workers'] or 1} worker(s), on {summary['cpu']}"
                      f" (all figures: {self.timing.out})")
        tr.write_line("rooms: " + ", ".join(f"{k} {v:.0f}s" for k, v in summary["rooms"].items()))
        tr.write_line("workers: " + ", ".join(f"{w} ended at {v['ended_s']:.0f} s ({v['test_s']:.0f} s of tests)"
                                              for w, v in summary["by_worker"].items()))
        for title, key in (("slowest files", "files"), ("slowest tests", "tests")):
            tr.write_line(f"{title}:")
            for name, seconds in list(summary[key].items())[:SHOWN]:
                tr.write_line(f"  {seconds:8.1f} s  {name}")
