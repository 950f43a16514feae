"""The benchmark lives in scripts/ (scripts/bench + scripts/bench_lib), not in the ortserve package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT
