"""The suite's own tooling: the quick tier's paths, how files spread over xdist's workers, the timing report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from ortserve_devtools.suite_schedule import QUICK_TIER, SHARED, unit_of, unit_order
from ortserve_devtools.suite_timing import SuiteTiming

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", [*QUICK_TIER, *SHARED])
def test_every_path_the_tiers_and_units_name_exists(path: str) -> None:
    assert (ROOT / path).exists(), f"{path} is named in suite_schedule.py but is gone"


def test_files_sharing_session_fixtures_are_one_unit_and_the_others_their_own() -> None:
    for path, unit in SHARED.items():  # each file is the unit it names, whatever its test
        assert unit_of(f"{path}::test_x[python]") == unit_of(f"{path}::test_y[native]") == unit
    assert len(set(SHARED.values())) < len(SHARED)  # a unit holds several files
    assert unit_of("tests/service/test_rest.py::test_x[native]") == "tests/service/test_rest.py"


def test_long_runs_start_first_then_the_shared_units_then_the_rest_in_collection_order() -> None:
    shared = next(iter(SHARED.values()))
    rank = unit_order(["a.py", shared, "b.py", "slow.py", "a.py", "c.py"], slow_units={"slow.py"})
    assert sorted(rank, key=rank.__getitem__) == ["slow.py", shared, "a.py", "b.py", "c.py"]


class _Report:
    def __init__(self, nodeid: str, when: str, duration: float, outcome: str = "passed", worker: str = "") -> None:
        self.nodeid, self.when, self.duration, self.outcome = nodeid, when, duration, outcome
        if worker:  # as xdist's controller sets it: the WorkerController, its gateway named gw0, gw1...
            self.node = SimpleNamespace(gateway=SimpleNamespace(id=worker))


def test_the_timing_report_sums_each_test_s_phases_by_file_and_room(tmp_path: Path) -> None:
    timing = SuiteTiming(tmp_path / "t.json", workers=2)
    for nodeid, when, seconds in [("tests/a/test_x.py::t1", "setup", 2.0), ("tests/a/test_x.py::t1", "call", 1.0),
                                  ("tests/a/test_x.py::t2", "call", 0.5), ("tests/b/test_y.py::t", "call", 4.0),
                                  ("tests/test_z.py::t", "teardown", 0.25)]:
        timing.add(_Report(nodeid, when, seconds))  # type: ignore[arg-type]
    summary = timing.summary()
    assert summary["tests"] == {"tests/b/test_y.py::t": 4.0, "tests/a/test_x.py::t1": 3.0,
                                "tests/a/test_x.py::t2": 0.5, "tests/test_z.py::t": 0.25}
    assert summary["files"] == {"tests/b/test_y.py": 4.0, "tests/a/test_x.py": 3.5, "tests/test_z.py": 0.25}
    assert summary["rooms"] == {"tests/b": 4.0, "tests/a": 3.5, "tests": 0.2}
    assert summary["workers"] == 2 and summary["test_s"] == 7.8
    assert summary["by_worker"]["main"]["test_s"] == 7.8  # no xdist node on the reports


def test_the_timing_report_says_when_each_worker_ended(tmp_path: Path) -> None:
    timing = SuiteTiming(tmp_path / "t.json", workers=2)
    timing.add(_Report("tests/test_a.py::t", "call", 2.0, worker="gw1"))  # type: ignore[arg-type]
    timing.add(_Report("tests/test_b.py::t", "call", 1.0, worker="gw0"))  # type: ignore[arg-type]
    timing.add(_Report("tests/test_b.py::u", "call", 0.5, worker="gw0"))  # type: ignore[arg-type]
    by_worker = timing.summary()["by_worker"]
    assert list(by_worker) == ["gw0", "gw1"]
    assert by_worker["gw0"]["test_s"] == 1.5 and by_worker["gw1"]["test_s"] == 2.0
    assert 0 <= by_worker["gw1"]["ended_s"] <= by_worker["gw0"]["ended_s"]  # gw0's report came last


def test_a_run_writes_its_timings_and_names_the_slowest(tmp_path: Path) -> None:
    """A real pytest run on two workers, of a file that loads the plugins as tests/conftest.py does."""
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["ortserve_devtools.suite_timing", "ortserve_devtools.suite_schedule"]\n')
    (tmp_path / "test_one.py").write_text("import time\n\ndef test_slow():\n    time.sleep(0.3)\n\n"
                                          "def test_fast():\n    pass\n")
    (tmp_path / "test_two.py").write_text("def test_other():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadfile", "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "tools"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"timings: {tmp_path / 'build' / 'test-timings.json'}" in done.stdout  # a short run says only where
    report = json.loads((tmp_path / "build" / "test-timings.json").read_text())
    assert report["workers"] == 2 and next(iter(report["tests"])) == "test_one.py::test_slow"
    assert report["tests"]["test_one.py::test_slow"] >= 0.3
    assert set(report["by_worker"]) == {"gw0", "gw1"}  # a file each
    assert sum(w["test_s"] for w in report["by_worker"].values()) == pytest.approx(report["test_s"], abs=0.2)
