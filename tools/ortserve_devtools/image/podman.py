"""The one podman command line of scripts/dev image, the host tools it needs, and a log with the elapsed time.

On these machines (Debian bookworm, root, hybrid cgroups) podman runs only with runc and the cgroupfs manager (crun
refuses the hybrid cgroup layout), with rlimits under the machine's hard limits, and with host networking.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RUNC = "/usr/sbin/runc"
GLOBAL_FLAGS = ("--runtime", RUNC, "--cgroup-manager=cgroupfs")
LIMIT_FLAGS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000")
# Debian packages that provide what scripts/dev image runs on the host.
HOST_TOOLS = {"podman": "podman", RUNC: "runc", "mmdebstrap": "mmdebstrap"}


class ImageError(Exception):
    """A step failed; the message says which and why (exit status 1)."""


class UsageError(Exception):
    """The command line or the host cannot do what was asked (exit status 2)."""


class Log:
    """Prints `[image 12.3s] line` on stdout: every step says what it did and when."""

    def __init__(self, name: str = "image") -> None:
        self.name = name
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, line: str) -> None:
        print(f"[{self.name} {self.elapsed():6.1f}s] {line}", flush=True)


def missing_tools() -> dict[str, str]:
    """{tool: Debian package} for each host tool that is not installed."""
    return {tool: package for tool, package in HOST_TOOLS.items()
            if not (Path(tool).is_file() if tool.startswith("/") else shutil.which(tool))}


def ensure_tools(log: Log, *, install: bool) -> None:
    """Installs the missing host tools with apt-get (as root, when `install`), else names them (UsageError)."""
    missing = missing_tools()
    if not missing:
        return
    packages = sorted(set(missing.values()))
    if not install or os.geteuid() != 0:
        raise UsageError(f"missing {', '.join(sorted(missing))}: run `apt-get install {' '.join(packages)}` as root")
    log(f"installing {' '.join(packages)} with apt-get")
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *packages]):
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ,
                                                                               "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0:
            raise ImageError(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")


def podman_command(*args: str) -> list[str]:
    return ["podman", *GLOBAL_FLAGS, *args]


def podman(*args: str, check: bool = True, timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    """Runs podman and returns its output; a failure raises ImageError with its stderr."""
    command = podman_command(*args)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ImageError(f"podman {' '.join(args[:3])} ran past {timeout_s:.0f} s") from None
    if check and done.returncode != 0:
        raise ImageError(f"podman {' '.join(args[:3])} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    return done


def podman_stream(args: Sequence[str], log_path: Path) -> int:
    """Runs podman with its output appended to `log_path` (a build's hundreds of lines); returns its exit status."""
    with log_path.open("a") as out:
        return subprocess.run(podman_command(*args), stdout=out, stderr=subprocess.STDOUT).returncode


def image_exists(reference: str) -> bool:
    return podman("image", "exists", reference, check=False).returncode == 0


def inspect_image(reference: str) -> dict[str, Any]:
    """`podman image inspect` of one image."""
    (info,) = json.loads(podman("image", "inspect", reference).stdout)
    return dict(info)

