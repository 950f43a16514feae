"""The `registry` CLI as the importer's tests run it: a real subprocess, offline, one torch thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.hf_checkpoints import OFFLINE


def run_registry(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`registry ARGS` in a subprocess of the installed package; one torch thread, as the suite's other processes
    share the two cores (torch's OpenMP threads spin-wait for each other under that load)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTSERVE_", "CONSUL_HTTP"))}
    env.update(OFFLINE, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "ortserve.registry.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


SMALL_BATCHES = ("--max-batch-size", "4", "--default-timeout-ms", "0", "--max-padding-ratio", "1.5")
"""Server arguments for serving imports: concurrent calls get split across batches and merged into them."""
