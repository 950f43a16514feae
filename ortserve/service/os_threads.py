"""Python thread names given to the OS as well, so that `top -H`, perf and the benchmark's engine-thread CPU figure
tell the server's threads apart (Python 3.11 keeps them to itself; the native lanes name theirs in C++)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

_PR_SET_NAME = 15
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None


def name_os_thread() -> None:
    """The calling thread's Python name as its OS name (Linux keeps 15 bytes); a no-op elsewhere. A pool
    initializer: ThreadPoolExecutor(..., thread_name_prefix="ortserve-lane0", initializer=name_os_thread)."""
    if _libc is None:
        return
    name = threading.current_thread().name.encode()[:15]
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
