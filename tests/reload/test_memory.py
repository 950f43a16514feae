"""Invariant 3: old engines are really closed. After 10 full swaps, RSS is within 15% of RSS after the first.

The server keeps one version loaded (--max-loaded-versions 1), so every `registry route` between
two published versions loads one engine and closes the other; a leak of one engine per swap (the
bundle is a 4-layer, 128-wide BERT so that an engine outweighs allocator noise) would exceed 15%.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from reload_harness import Registry, wait_routing, wait_until
from support.server_process import ServerProcess, infer_request, running_server, stub_for

pytestmark = pytest.mark.slow  # RSS over repeated swaps

MODEL = "sentiment"
SIZES = {"hidden": 128, "layers": 4, "heads": 4, "intermediate": 512}
SWAPS = 10


def swap_to(reg: Registry, server: ServerProcess, new: str, old: str) -> None:
    """Route everything to `new`, then wait until the server closed `old` and served a few calls on `new`."""
    closed_before = len([e for e in server.events("version_closed") if e["version"] == old])
    reg.route(MODEL, **{new: 100})
    wait_routing(server.address, MODEL, {new: 100})
    wait_until(lambda: len([e for e in server.events("version_closed") if e["version"] == old]) > closed_before,
               timeout=30, what=f"version_closed for {old}")
    channel, stub = stub_for(server.address)
    with channel:
        for i in range(8):  # let the new engine allocate what serving needs
            reply = stub.ModelInfer(infer_request(["a good movie"] * 4, model=MODEL, routing_key=str(i)), timeout=10)
            assert reply.model_version == new


def test_rss_returns_after_swaps(file_registry: Registry, bundle: Callable[..., Path], tmp_path: Path,
                                 frontend: str) -> None:
    reg = file_registry
    reg.publish(MODEL, "va", bundle(31, **SIZES), weight=100, cli=False)
    reg.publish(MODEL, "vb", bundle(32, **SIZES), cli=False)
    args = [*reg.server_args(tmp_path / "cache"), "--max-loaded-versions", "1", "--frontend", frontend]
    with running_server(args) as server:
        process = psutil.Process(server.proc.pid)
        swap_to(reg, server, "vb", "va")
        first = process.memory_info().rss
        rss = [first]
        current, other = "vb", "va"
        for _ in range(SWAPS):
            swap_to(reg, server, other, current)
            current, other = other, current
            rss.append(process.memory_info().rss)
        loads = len(server.events("version_loaded"))
        closes = len(server.events("version_closed"))
    assert loads == SWAPS + 2 and closes >= SWAPS + 1, (loads, closes)
    mib = [round(r / 2**20, 1) for r in rss]
    assert rss[-1] <= first * 1.15, f"RSS grew from {mib[0]} MiB to {mib[-1]} MiB over {SWAPS} swaps: {mib}"
    print(f"RSS MiB after each swap: {mib}")
