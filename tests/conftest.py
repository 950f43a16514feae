"""Suite-wide fixtures: a tiny real BERT bundle (built in seconds) and a real server process on it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.server_process import ServerProcess, running_server

from ortserve.devtools.bert_bundle import build_tiny_bundle

# Subprocesses (`python -m ortserve...`, `python -c ...`) must import the installed package, not the
# source tree they happen to run in: without this, `-m` and `-c` put the working directory (the repo
# root, which has no compiled engine) first on sys.path.
os.environ["PYTHONSAFEPATH"] = "1"


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("bundles") / "tiny"
    build_tiny_bundle(dest, seed=0)
    return dest


@pytest.fixture(scope="session")
def server(tiny_bundle: Path) -> Iterator[ServerProcess]:
    """One shared server on the tiny bundle; tests that need special settings start their own."""
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier",
                         "--max-texts-per-request", "16", "--max-message-bytes", "65536"]) as s:
        yield s
