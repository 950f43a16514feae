"""deploy/build-inputs: what the offline build reads instead of the network (deploy/build-inputs/README.md).

wheels/ holds a wheel for every requirement of `pip install .` (the package's dependencies and its build backend),
made with `pip wheel` on this host, which reaches the package index; ort-headers/ holds the ONNX Runtime headers that
scripts/fetch_ort_headers.sh extracts from Debian's package.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from ortserve_devtools.checkout import ROOT
from ortserve_devtools.image.podman import ImageError, Log


def requirements(pyproject: Path) -> list[str]:
    """The package's dependencies and the build system's requirements, as pip reads them."""
    data = tomllib.loads(pyproject.read_text())
    return [*data["project"]["dependencies"], *data["build-system"]["requires"]]


def fill(log: Log, *, root: Path = ROOT) -> None:
    """Makes inputs/wheels afresh (exactly what resolves today) and the ORT headers if they are missing."""
    inputs = root / "deploy" / "build-inputs"
    wheels = inputs / "wheels"
    started = time.monotonic()
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    reqs = requirements(root / "pyproject.toml")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), *reqs],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ImageError(f"pip wheel exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    made = sorted(wheels.glob("*.whl"))
    size = sum(w.stat().st_size for w in made)
    log(f"build inputs: {len(made)} wheels, {size / 1e6:.0f} MB, for {len(reqs)} requirements "
        f"({time.monotonic() - started:.1f} s) in {wheels.relative_to(root)}")
    started = time.monotonic()
    done = subprocess.run([str(root / "scripts" / "fetch_ort_headers.sh"), str(inputs / "ort-headers")],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ImageError(f"fetch_ort_headers.sh exited {done.returncode}: {done.stderr.strip()[-800:]}")
    log(f"build inputs: ONNX Runtime headers in {Path(done.stdout.strip()).relative_to(root)} "
        f"({time.monotonic() - started:.1f} s)")
