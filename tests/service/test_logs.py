"""Log set-up: what reaches stderr from libraries that log through the standard library."""

from __future__ import annotations

import subprocess
import sys

_EMIT = """
import logging

from ortserve.service.logs import configure_logging

configure_logging(level={level!r})
core = logging.getLogger("grpc._cython.cygrpc")
try:
    raise RuntimeError("Failed execute_batch")
except RuntimeError:
    # What grpc.aio logs when a reply cannot be sent because the call already ended.
    core.exception("ExecuteBatchError raised in core by servicer method [%s]", "/inference.X/ModelInfer")
    core.exception("Unexpected [%s] raised by servicer method [%s]", "RuntimeError", "/inference.X/ModelInfer")
"""


def _stderr(level: str) -> str:
    run = subprocess.run([sys.executable, "-c", _EMIT.format(level=level)], capture_output=True, text=True,
                         timeout=60, check=True)
    return run.stderr


def test_a_reply_to_an_ended_call_is_one_line_without_a_trace() -> None:
    lines = _stderr("info").splitlines()
    assert lines[0] == ("INFO grpc._cython.cygrpc: reply not sent: the call had already ended "
                        "(deadline passed or client gone) [/inference.X/ModelInfer]")
    # Any other error grpc logs keeps its traceback: that one is a fault.
    assert lines[1].startswith("ERROR grpc._cython.cygrpc: Unexpected [RuntimeError]")
    assert lines[2] == "Traceback (most recent call last):"
    assert sum("Traceback" in line for line in lines) == 1


def test_the_line_respects_the_level() -> None:
    assert "reply not sent" not in _stderr("warning")
