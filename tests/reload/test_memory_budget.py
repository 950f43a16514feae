"""memory_budget_mb: a version that would take the loaded versions past it fails to load, with the reason in
`ortserve status`, and the serving versions keep every call (invariant 4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from reload_harness import Registry, status_cli, wait_version_state
from support.server_process import infer_request, running_server, stub_for

from ortserve.service.device_memory import budget_refusal

MODEL = "sentiment"


def test_a_version_past_the_budget_fails_and_v1_keeps_serving(file_registry: Registry, bundle: Callable[..., Path],
                                                              tmp_path: Path) -> None:
    reg = file_registry
    reg.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    # ~60 MB of embeddings: past a 40 MB budget on its model file alone, whatever v1 measured.
    big = bundle(2, vocab_size=30522, hidden=512, heads=2, intermediate=64)
    assert (big / "model.onnx").stat().st_size > 50 * 2**20
    with running_server([*reg.server_args(tmp_path / "cache"), "--memory-budget-mb", "40",
                         "--max-loaded-versions", "2"]) as server:
        v1 = status_cli(server.address)["models"][MODEL]["versions"]["v1"]
        assert v1["state"] == "ready" and 0 <= v1["memory_mb"] < 40

        reg.publish(MODEL, "v2", big, cli=False)
        reg.route(MODEL, v1=50, v2=50)
        info = wait_version_state(server.address, MODEL, "v2", "failed")
        error = info["versions"]["v2"]["error"]
        assert "memory_budget_mb=40 exceeded" in error and "model file" in error, error

        channel, stub = stub_for(server.address)
        with channel:
            served = {stub.ModelInfer(infer_request(["good movie"], model=MODEL, routing_key=f"k{i}"),
                                      timeout=10).model_version for i in range(40)}
        assert served == {"v1"}
        status = status_cli(server.address)["models"][MODEL]
        assert status["routable"] == ["v1"] and "v2" in (status["last_error"] or "")


@pytest.mark.parametrize(
    ("budget", "held", "need", "fits"),
    [(0, 10_000, 10_000, True), (100, 40, 60, True), (100, 40, 61, False), (100, 0, 101, False)],
)
def test_budget_refusal(budget: float, held: float, need: float, fits: bool) -> None:
    refusal = budget_refusal(budget_mb=budget, held_mb=held, need_mb=need, what="measured")
    assert (refusal is None) == fits
    if refusal:
        assert f"memory_budget_mb={budget:g} exceeded" in refusal and f"{need:.0f} MB (measured)" in refusal
