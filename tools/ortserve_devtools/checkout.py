"""Where the checkout is, for the tools that read or run its files (scripts/, deploy/, the fuzz corpus, .venv).

Standard library only: the GPU stage and unpack import it on a bare host with no venv.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tools/ortserve_devtools/checkout.py -> the repository root
SCRIPTS = ROOT / "scripts"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
