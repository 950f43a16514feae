"""A Python front end's ModelInfer crosses into C++ twice: `engine_ext.start_call` (decode, route, check, lease,
prompt, submit) and the completion queue's drain that hands the loop its encoded reply. Counted on the real
`Inference` over a real data plane and engine (the tiny bundle), with every module-level `engine_ext` call it makes
recorded; a call the data plane leaves to Python (a model it does not route) gets the manager's refusal."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.instances import options

from ortserve import engine_ext
from ortserve.service import inference
from ortserve.service.config import Settings
from ortserve.service.data_plane import DataPlane
from ortserve.service.errors import NotFound
from ortserve.service.inference import CallFailed, InferCall, Inference
from ortserve.service.instance import ModelInstance
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics

MODEL = "classifier"


class CountingModule:
    """engine_ext as `inference` sees it, recording the name of every function called through it."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if not callable(value) or isinstance(value, type):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return value(*args, **kwargs)

        return counted


def _serve(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch,
           calls: Callable[[Inference, CountingModule, list[int]], Any]) -> Any:
    counting = CountingModule(engine_ext)
    monkeypatch.setattr(inference, "engine_ext", counting)
    instance = ModelInstance.load(tiny_bundle, options(intra_op_threads=1), tokenizer="native")
    pool = ThreadPoolExecutor(1)
    plane = DataPlane(Settings(max_loaded_versions=1), Metrics(), tokenize_pool=pool)
    drains: list[int] = []
    answered = plane._answered

    def counted_drain() -> None:  # each wake of the loop drains the completion queue once
        drains.append(1)
        answered()

    plane._answered = counted_drain  # type: ignore[method-assign]

    async def run() -> Any:
        plane.start(asyncio.get_running_loop())
        batcher = plane.version(MODEL, "1", instance)
        plane.routes.set({MODEL: (["1"], [10000], {"1": batcher.native}, {"1": instance.served.wire})})
        manager = ModelManager(factory=None)  # type: ignore[arg-type]  # routes nothing: misses reach its refusal
        try:
            return await calls(Inference(manager, plane, Metrics(), max_texts_per_request=8), counting, drains)
        finally:
            await batcher.close(1.0)

    try:
        return asyncio.run(run())
    finally:
        plane.close()
        pool.shutdown()
        instance.close()


def _call(texts: list[str], model: str = MODEL) -> InferCall:
    return InferCall(model=model, inputs=[("TEXT", "BYTES", [len(texts)], True, [t.encode() for t in texts])],
                     headers={"x-request-id": "crossing-1"})


def test_a_call_crosses_into_cpp_twice(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def calls(infer: Inference, counting: CountingModule, drains: list[int]) -> None:
        texts = ["the movie was great", "ok"]
        reply = await infer.infer(_call(texts))
        assert counting.calls == ["start_call"] and len(drains) == 1
        [(name, datatype, shape, raw, payload)] = reply.tensors
        assert (reply.request_id, reply.version, name, datatype, shape, raw) == ("crossing-1", "1", "LOGITS",
                                                                                 "FP32", (2, 2), True)
        assert np.isfinite(np.frombuffer(payload, "<f4")).all()
        assert reply.token_count == 6 + 4  # [CLS] ... [SEP] each, as the batcher counted them: no third crossing

    _serve(tiny_bundle, monkeypatch, calls)


def test_a_call_left_to_python_gets_the_managers_refusal(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def calls(infer: Inference, counting: CountingModule, drains: list[int]) -> None:
        with pytest.raises(CallFailed) as failed:
            await infer.infer(_call(["hello"], model="nope"))
        assert isinstance(failed.value.error, NotFound) and "unknown model 'nope'" in failed.value.error.message
        assert failed.value.request_id == "crossing-1"
        assert counting.calls == ["start_call", "prepare_call"] and drains == []

    _serve(tiny_bundle, monkeypatch, calls)
