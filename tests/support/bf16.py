"""Whether this machine can run the bf16 precision, for the tests that need one that can (engine, gate, serving).

bf16 needs three things: the `openvino` package (the engine dlopen()s its C library), a CPU with AVX-512 BF16 or AMX
(as /proc/cpuinfo says, `cpu_info().bf16`) and OpenVINO agreeing (BF16 in its CPU OPTIMIZATION_CAPABILITIES, which
is what the engine checks). Where any is missing those tests skip with the reason; the refusal itself is tested on
every machine (tests/registry/test_bf16_every_cpu.py, tests/engine/test_bf16_engine.py).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest


@functools.cache
def bf16_unavailable() -> str:
    """Why bf16 cannot run here, or "" when it can."""
    if importlib.util.find_spec("openvino") is None:
        return "the openvino package is not installed: bf16 runs on OpenVINO"
    if sanitizer := os.environ.get("ORTSERVE_SANITIZER"):
        # Checked before anything loads OpenVINO: the runtime would abort the process, not fail a test.
        return (f"under the {sanitizer} sanitizer (scripts/sanitize): OpenVINO's TBB dlopen()s libtbbbind with "
                "RTLD_DEEPBIND, which sanitizer runtimes refuse; the plain suite runs the bf16 engine")
    from ortserve import engine_ext
    from ortserve.bundle.cpu import cpu_info

    cpu = cpu_info()
    if not cpu.bf16:
        return f"this CPU has no bf16 arithmetic ({cpu.describe()}): bf16 needs AVX-512 BF16 or AMX"
    capabilities = engine_ext.openvino_cpu_capabilities()  # loads OpenVINO: only where a bf16 test is about to run
    if "BF16" not in capabilities.split():
        return f"OpenVINO reports no BF16 for this CPU ({capabilities})"
    return ""


def require_bf16() -> None:
    """Skips the calling test (or fixture) where bf16 cannot run here."""
    if reason := bf16_unavailable():
        pytest.skip(reason)
