"""The benchmark is tools/ortserve_devtools/bench (`scripts/dev bench ...`), not in the ortserve package."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT
