"""The fuzzing code lives in scripts/fuzz_lib (shared with scripts/fuzz), imported from scripts/ as bench does."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))
