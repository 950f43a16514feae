"""The committed type stub of the extension is what nanobind.stubgen makes of the built one (scripts/gen_stubs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ortserve import engine_ext

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "ortserve" / "engine_ext" / "_engine.pyi"


@pytest.mark.skipif(not engine_ext.HAS_FRONTEND,
                    reason="the committed stub describes the extension built with the native front end")
def test_the_committed_stub_is_current(tmp_path: Path) -> None:
    fresh = tmp_path / "_engine.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "ortserve.engine_ext._engine", "-o",
                    str(fresh)], check=True, cwd=tmp_path, timeout=120)
    assert fresh.read_text() == COMMITTED.read_text(), "stale: run scripts/gen_stubs after changing a binding"
