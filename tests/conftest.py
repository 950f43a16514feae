"""Suite-wide fixtures: a tiny real BERT bundle (built in seconds), the front ends, and a real server process on it.

`frontend` runs a test once per front end: the Python one (grpc.aio) and the native one (grpc++ with the C++
batcher). The native one is skipped only where the engine was built without gRPC C++; `scripts/bootstrap dev`
installs what it needs, and tests/dataplane/test_frontend_build.py fails when gRPC C++ is there but the front end
was not built, so a CI run cannot skip it silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.server_process import ServerProcess, running_server

# Where the suite's minutes go (the slowest tests, files and rooms at the end of a run, all of them in
# build/test-timings.json), and how its files spread over pytest-xdist's workers (docs/testing.md).
pytest_plugins = ["ortserve_devtools.suite_timing", "ortserve_devtools.suite_schedule"]

# Subprocesses (`python -m ortserve...`, `python -c ...`) must import the installed package, not the
# source tree they happen to run in: without this, `-m` and `-c` put the working directory (the repo
# root, which has no compiled engine) first on sys.path.
os.environ["PYTHONSAFEPATH"] = "1"
# Tests read every call's `request` line (served.events("request")); servers sample them by default.
os.environ["ORTSERVE_REQUEST_LOG_SAMPLE"] = "1"


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("bundles") / "tiny"
    build_tiny_bundle(dest, seed=0)
    return dest


def _frontend_params() -> list[object]:
    from ortserve import engine_ext

    skip_native = pytest.mark.skipif(not engine_ext.HAS_FRONTEND,
                                     reason=f"native front end not built: {engine_ext.FRONTEND_MISSING}")
    return ["python", pytest.param("native", marks=skip_native)]


@pytest.fixture(scope="session", params=_frontend_params())
def frontend(request: pytest.FixtureRequest) -> str:
    """The front end a server under test runs: pass `["--frontend", frontend]` to running_server."""
    return str(request.param)


@pytest.fixture(scope="session")
def server(tiny_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    """One shared server per front end on the tiny bundle, its REST port open; tests that need special settings start
    their own."""
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend,
                         "--max-texts-per-request", "16", "--max-message-bytes", "65536"], http=True) as s:
        yield s
