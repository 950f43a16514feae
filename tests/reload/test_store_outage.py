"""Invariant 7: the registry goes away and comes back; serving never stops and later changes apply.

The Consul stand-in runs as its own process with --data persistence (as an agent keeps its raft
data). It is SIGKILLed, stays down 10 s while a client keeps calling, and is restarted on the same
port; a `registry route` made after the restart must reach the server.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from ortserve_devtools.steady_load import SteadyLoad
from reload_harness import (
    TEXTS,
    Registry,
    make_registry,
    wait_routing,
    wait_until,
    wait_version_state,
)
from support.prometheus_text import metric, scrape
from support.server_process import infer_request, running_server, stub_for

MODEL = "sentiment"
DOWN_S = 10.0


def test_store_outage_keeps_serving_and_picks_up_changes_after(bundle: Callable[..., Path], tmp_path: Path) -> None:
    gen = make_registry("standin", tmp_path)
    reg = next(gen)
    try:
        assert reg.standin is not None
        reg.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
        reg.publish(MODEL, "v2", bundle(2), cli=False)
        with running_server(reg.server_args(tmp_path / "cache")) as server:
            wait_version_state(server.address, MODEL, "v2", "ready")  # published, loaded, not routed

            def connected() -> float:
                return metric(scrape(server.metrics_port), "ortserve_registry_connected")

            wait_until(lambda: connected() == 1, timeout=10, what="ortserve_registry_connected 1")
            with SteadyLoad(server.address, MODEL, texts=TEXTS[:2], concurrency=4, tag="outage") as load:
                reg.standin.kill()
                killed = time.monotonic()
                wait_until(lambda: connected() == 0, timeout=DOWN_S, what="ortserve_registry_connected 0")
                time.sleep(max(0.0, DOWN_S - (time.monotonic() - killed)))
                served_while_down = [o for o in list(load.outcomes) if o.started > killed and o.code == "OK"]
                reg.standin.start()  # same port, same data file
                restarted = time.monotonic()
                reg.route(MODEL, v1=0, v2=100)
                routed = time.monotonic()
                wait_routing(server.address, MODEL, {"v1": 0, "v2": 100}, timeout=30)
                load.first_reply_from("v2", after=routed)
                picked_up = time.monotonic() - routed
                wait_until(lambda: connected() == 1, timeout=10, what="ortserve_registry_connected back to 1")
            assert load.failures() == [], f"{len(load.failures())} failed calls, e.g. {load.failures()[:3]}"
            assert len(served_while_down) > 20, "calls must keep succeeding while the registry is down"
            assert {o.version for o in served_while_down} == {"v1"}
            outages = server.events("registry_unreachable")
            assert outages, "the watcher should have logged the outage"
            print(f"down {restarted - killed:.1f}s, {len(served_while_down)} calls served meanwhile, "
                  f"route picked up {picked_up:.2f}s after `registry route` returned")
    finally:
        gen.close()


def test_sigterm_exits_cleanly_while_the_watcher_waits(file_registry: Registry, bundle, tmp_path: Path,
                                                       frontend: str) -> None:
    """The watcher thread sits in a blocking query when the server stops; it must not keep the stopped server's
    engine objects alive to the interpreter's exit (nanobind would report them leaked)."""
    file_registry.publish("m", "v1", bundle(0), weight=100)
    with running_server([*file_registry.server_args(tmp_path / "cache"), "--frontend", frontend]) as server:
        wait_routing(server.address, "m", {"v1": 100})
        stub_for(server.address)[1].ModelInfer(infer_request(["hello"], model="m"), timeout=10)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 0
        time.sleep(0.2)  # the stderr reader's last lines
    assert not [line for line in server.stderr_lines if "leaked" in line or "Traceback" in line], server.stderr_lines
