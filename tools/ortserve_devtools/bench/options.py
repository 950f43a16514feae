"""What scripts/dev bench serve and the scripts built on its pieces (scripts/dev soak) share on their command lines."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ortserve-bench"
"""Where the MiniLM demo bundle is built once, and scripts/dev bench serve's server logs go (`--cache-dir`)."""


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the empty ones ("(default: None)" says nothing)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []):
            return action.help
        return super()._get_help_string(action)
