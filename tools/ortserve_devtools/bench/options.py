"""What scripts/dev bench serve and the scripts built on its pieces (scripts/dev soak) share on their command lines."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ortserve-bench"
"""Where the MiniLM demo bundle is built once, and scripts/dev bench serve's server logs go (`--cache-dir`)."""


def minilm_demo_bundle(cache_dir: Path, say: Callable[[str], None]) -> Path:
    """The MiniLM sentiment demo bundle at cache_dir/minilm-demo, built there the first time (about a minute; the
    demo extra's weights). ValueError, OSError or ImportError when it cannot be built."""
    dest = cache_dir / "minilm-demo"
    if not all((dest / f).is_file() for f in ("model.onnx", "tokenizer.json", "manifest.json")):
        say(f"building the MiniLM demo bundle into {dest} (once)")
        from ortserve_devtools.bert_bundle import build_minilm_bundle

        build_minilm_bundle(dest)
    return dest


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the empty ones ("(default: None)" says nothing)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []):
            return action.help
        return super()._get_help_string(action)
