"""What a Python front end's call does after its answer, made cheaper without changing a byte: V2 REST's JSON floats
(written from a float64 array, as they were from Python floats) and a call's record (its line and metrics, run after
the reply is written, which a scrape still sees)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import orjson

from ortserve.service.config import Settings
from ortserve.service.data_plane import DataPlane
from ortserve.service.inference import InferReply
from ortserve.service.metrics import Metrics
from ortserve.service.rest import write_reply


def _floats() -> np.ndarray:
    """float32 values across the whole range: every exponent, subnormals, signed zeros, the extremes, non-finite."""
    rng = np.random.default_rng(59)
    mantissas = rng.uniform(1, 2, 20000) * rng.choice([-1, 1], 20000)
    spread = (mantissas * 2.0 ** rng.integers(-149, 128, 20000)).astype(np.float32)
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.1, 1e-45, -1e-45, 1.1754944e-38, 3.4028235e38, -3.4028235e38,
                        1e-7, 1e-5, 1e-4, 123456789.0, 1e15, 1e16, 1e17, np.nan, np.inf, -np.inf], np.float32)
    with np.errstate(over="ignore"):
        return np.concatenate([spread, special, (rng.standard_normal(384) / 20).astype(np.float32)])


def test_v2_rest_json_floats_are_the_python_floats_bytes() -> None:
    values = _floats()
    reply = InferReply(request_id="r", model="m", version="1", id="x",
                       tensors=[("EMBEDDING", "FP32", (1, values.size), True, values.tobytes())], token_count=3)
    body = write_reply(reply, False).body
    # The rule before: each value as a Python float (float32 widened), written by orjson.
    expected = orjson.dumps({"model_name": "m", "model_version": "1", "id": "x", "outputs": [
        {"name": "EMBEDDING", "datatype": "FP32", "shape": [1, values.size], "data": values.tolist()}]})
    assert body == expected
    binary = write_reply(reply, True)  # the binary extension: the raw bytes after the JSON header, as before
    assert binary.body.endswith(values.tobytes())


def test_a_record_queued_after_a_reply_runs_after_the_step_and_a_scrape_waits_for_it() -> None:
    pool = ThreadPoolExecutor(1)
    plane = DataPlane(Settings(max_loaded_versions=1), Metrics(), tokenize_pool=pool)
    ran: list[str] = []

    async def call() -> None:
        plane.start(asyncio.get_running_loop())
        plane.after_reply(lambda: ran.append(threading.current_thread().name))
        assert ran == []  # not inside the step that answered
        await asyncio.to_thread(plane.flush)  # another thread (the scrape's) waits until it ran
        assert ran == [threading.main_thread().name]  # on the loop's thread
        plane.after_reply(lambda: ran.append("second"))
        plane.flush()  # on the loop's own thread: no wait (it runs after this step)
        assert ran[-1] != "second"
        await asyncio.sleep(0)
        assert ran[-1] == "second"

    try:
        asyncio.run(call())
    finally:
        plane.close()
        pool.shutdown()
