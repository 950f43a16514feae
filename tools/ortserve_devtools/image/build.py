"""`scripts/dev image build`: deploy/Dockerfile built with no network on mmdebstrap bases, then its size report."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

from ortserve_devtools.checkout import ROOT
from ortserve_devtools.image import bases, build_inputs
from ortserve_devtools.image.podman import LIMIT_FLAGS, ImageError, Log, ensure_tools, podman_stream
from ortserve_devtools.image.size_report import SizeReport, image_report

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def default_tag(root: Path = ROOT) -> str:
    """localhost/ortserve:<the package's version>: the tag the stable release's manifests name (ortserve:0.1.0)."""
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    return f"localhost/ortserve:{version}"


def build_arguments(runtime_base: str, builder_base: str, tag: str) -> list[str]:
    """`podman build` arguments: --network none proves the build reads nothing but the context and the bases."""
    return ["build", "--network", "none", *LIMIT_FLAGS, "--file", str(DOCKERFILE),
            "--build-arg", f"PYTHON_IMAGE={runtime_base}", "--build-arg", f"BUILDER_IMAGE={builder_base}",
            "--build-arg", "PIP_NO_INDEX=1", "--tag", tag, str(ROOT)]


def build(log: Log, *, tag: str, workdir: Path, rebuild_base: bool, install_tools: bool) -> SizeReport:
    ensure_tools(log, install=install_tools)
    workdir.mkdir(parents=True, exist_ok=True)
    runtime_base, builder_base = bases.make_bases(workdir, log, rebuild=rebuild_base)
    build_inputs.fill(log)
    build_log = workdir / "build.log"
    build_log.write_text("")
    log(f"podman build --network none {DOCKERFILE.relative_to(ROOT)} -> {tag} (output in {build_log})")
    started = time.monotonic()
    status = podman_stream(build_arguments(runtime_base, builder_base, tag), build_log)
    if status != 0:
        tail = build_log.read_text(errors="replace").splitlines()[-15:]
        raise ImageError(f"podman build exited {status}; the end of {build_log}:\n  " + "\n  ".join(tail))
    log(f"built {tag} in {time.monotonic() - started:.0f} s")
    report = image_report(tag)
    for line in report.lines():
        log(line)
    return report
