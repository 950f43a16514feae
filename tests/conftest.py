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


QUICK_TIER = (
    # The pure and unit layers: rules, routing, admission, policies, records, manifests, the engine in-process.
    "tests/bench/test_corpus.py", "tests/bench/test_engine_settings.py", "tests/bench/test_prom.py",
    "tests/bundle/", "tests/dataplane/test_admission.py", "tests/dataplane/test_batch_policy.py",
    "tests/dataplane/test_call_path.py", "tests/dataplane/test_frontend_build.py",
    "tests/dataplane/test_lane_choice.py", "tests/dataplane/test_prepare_call.py", "tests/dataplane/test_priority.py",
    "tests/dataplane/test_route.py", "tests/dataplane/test_trace_context.py",
    "tests/deploy/", "tests/devtools/test_entity_head.py",
    "tests/engine/test_engine_run.py", "tests/engine/test_engine_load.py", "tests/engine/test_stubs.py",
    "tests/fuzz/test_harness.py",
    "tests/registry/test_address.py", "tests/registry/test_artifacts.py", "tests/registry/test_bundle.py",
    "tests/registry/test_bundle_tokenizer.py", "tests/registry/test_consulstore.py", "tests/registry/test_cpu.py",
    "tests/registry/test_records.py", "tests/registry/test_references.py",
    "tests/registry/importer/test_checkpoint.py", "tests/registry/importer/test_parity.py",
    "tests/service/test_call_crossings.py", "tests/service/test_instance_load.py", "tests/service/test_logs.py",
    "tests/service/test_manager.py", "tests/service/test_proto.py", "tests/service/test_router.py",
    "tests/service/test_settings_defaults.py", "tests/service/test_tokenization.py", "tests/service/test_verify.py",
    "tests/service/test_version_plan.py", "tests/test_import_direction.py", "tests/test_source_size.py",
    # End to end, once per front end: a real server on loopback gRPC and its calls.
    "tests/service/test_infer.py",
)
"""Paths (files, or rooms ending in /) of the quick tier, `scripts/test --quick`: marked `quick` here."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(QUICK_TIER):
            item.add_marker(pytest.mark.quick)
