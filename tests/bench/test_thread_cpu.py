"""The bench's split of the server's CPU by thread: the engine's named threads against the rest."""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from ortserve_devtools.bench.server_cpu import engine_thread_share, thread_cpu_seconds

from ortserve.service.os_threads import name_os_thread

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread CPU and names come from Linux's /proc")


def _burn(seconds: float) -> int:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return threading.get_native_id()


def test_pool_threads_carry_their_python_name_to_the_os() -> None:
    with ThreadPoolExecutor(1, thread_name_prefix="ortserve-lane7", initializer=name_os_thread) as pool:
        tid = pool.submit(_burn, 0.0).result()
        name, _cpu = thread_cpu_seconds(os.getpid())[tid]
    assert name == "ortserve-lane7_"  # "ortserve-lane7_0", cut to the 15 bytes Linux keeps


def test_only_engine_threads_count_as_engine() -> None:
    with ThreadPoolExecutor(1, thread_name_prefix="ortserve-lane0", initializer=name_os_thread) as lane, \
            ThreadPoolExecutor(1, thread_name_prefix="ortserve-tok", initializer=name_os_thread) as other:
        lane.submit(_burn, 0.0).result(), other.submit(_burn, 0.0).result()  # both threads exist before
        before = thread_cpu_seconds(os.getpid())
        lane_burn, other_burn = lane.submit(_burn, 0.3), other.submit(_burn, 0.3)
        lane_burn.result(), other_burn.result()
        after = thread_cpu_seconds(os.getpid())
    used = engine_thread_share(before, after)
    assert used is not None and 0.2 <= used <= 0.5  # the lane's 0.3 s (clock ticks), not the other thread's


def test_no_engine_threads_is_none() -> None:
    snapshot = {1: ("python", 1.0), 2: ("grpc_global_tim", 0.5)}
    assert engine_thread_share(snapshot, snapshot) is None
    assert engine_thread_share({}, {3: ("ortserve-wide0", 0.25)}) == 0.25  # a thread born in the window
