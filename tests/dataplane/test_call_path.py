"""The call path (call_path.h) as the Python front end takes it, `engine_ext.start_call`: one crossing prepares,
routes, checks, leases, prompts and submits a call, and its answer comes back through Completions as the reply's
tensors, with the lease released. What the data plane does not serve it leaves to Python, leasing nothing, with the
reason the native front end counts; what the rules refuse it refuses with their message. A real engine on the tiny
bundle, real lanes, the real completion queue."""

from __future__ import annotations

import select
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.instances import options

from ortserve.engine_ext import (
    BatcherSettings,
    Completions,
    EventSink,
    Lanes,
    Routes,
    ServedVersion,
    check_outputs,
    decode_call,
    encode_outputs,
    prepare_call,
    route_bucket,
    start_call,
)
from ortserve.service.inference import CALL_HEADERS, Started
from ortserve.service.instance import ModelInstance
from ortserve.service.served_output import ServedOutput

MODEL = "classifier"
MAX_TEXTS = 8


@dataclass
class Plane:
    instance: ModelInstance
    hf_instance: ModelInstance
    lanes: Lanes
    version: Any  # ServedVersion on the C++ tokenizer
    hf_version: Any  # ServedVersion on HF tokenizers: its texts come as ids
    completions: Any
    routes: Any
    wire: Any


@pytest.fixture(scope="module")
def plane(tiny_bundle: Path) -> Iterator[Plane]:
    instance = ModelInstance.load(tiny_bundle, options(intra_op_threads=1), tokenizer="native")
    hf_instance = ModelInstance.load(tiny_bundle, options(intra_op_threads=1), tokenizer="hf")
    lanes = Lanes(1, 2)
    sink = EventSink()
    settings = BatcherSettings(
        max_batch_size=32, max_queue_delay_s=0.002, max_padding_ratio=1.3, batch_overhead_tokens=0,
        max_batch_tokens=1024, sort_window=24, max_queue_items=256, default_timeout_s=0.0, engine_concurrency=1,
    )
    version = ServedVersion(MODEL, "1", text_model=instance.text_model, settings=settings, lanes=lanes, events=sink)
    hf_version = ServedVersion(MODEL, "hf", text_model=hf_instance.text_model, settings=settings, lanes=lanes,
                               events=sink)
    wire = ServedOutput.of(instance.manifest).wire
    routes = Routes()
    routes.set({MODEL: (["1"], [10000], {"1": version, "hf": hf_version}, {"1": wire, "hf": wire})})
    yield Plane(instance, hf_instance, lanes, version, hf_version, Completions(), routes, wire)
    for served in (version, hf_version):
        served.close()
    lanes.stop()
    instance.close()
    hf_instance.close()


def _inputs(texts: list[str]) -> list[Any]:
    return [("TEXT", "BYTES", [len(texts)], True, [t.encode() for t in texts])]


def start(plane: Plane, texts: list[str], *, version: str = "", model: str = MODEL, outputs: Any = (),
          token: int = 1, inline_chars: int | None = None, timeout_s: float | None = 10.0,
          **headers: str) -> Started:
    names = {name.replace("-", "_"): name for name in CALL_HEADERS}
    values = {names[key]: value for key, value in headers.items()}
    return Started(*start_call(plane.routes, model, version, _inputs(texts), list(outputs), [], None, None,
                               MAX_TEXTS, None, None, None, None, None,
                               tuple(values.get(n, "") for n in CALL_HEADERS),
                               timeout_s, plane.completions, token, inline_chars))


def answer(plane: Plane, token: int) -> tuple[str, str, Any, dict[str, float]]:
    """The answer queued under `token` (waits on the completion queue's eventfd, as the event loop does)."""
    while True:
        ready, _, _ = select.select([plane.completions.fd], [], [], 10)
        assert ready, "no answer within 10 s"
        for queued, result in plane.completions.drain():
            assert queued == token
            return result


def test_a_started_call_is_answered_with_the_reply_the_rules_encode_and_its_lease_back(plane: Plane) -> None:
    texts = ["the movie was great", "ok"]
    started = start(plane, texts, token=7, x_request_id="call-1", x_routing_key="user-9")
    assert started.error is None and started.passed is None and started.call is not None
    assert (started.request_id, started.version, started.texts, started.tokenize) == ("call-1", "1", 2, None)
    assert started.route == f"bucket {route_bucket(MODEL, 'user-9')}"
    code, message, tensors, timings = answer(plane, 7)
    assert (code, message) == ("OK", "") and timings["batch_size"] >= 1
    values = plane.instance.run(plane.instance.tokenize(texts))
    expected = encode_outputs(decode_call(_inputs(texts), [], [], None, None, MAX_TEXTS), plane.wire,
                              np.ascontiguousarray(values, dtype=np.float32))
    [(name, datatype, shape, raw, payload)] = tensors
    assert (name, datatype, shape, raw) == expected[0][:4]
    np.testing.assert_allclose(np.frombuffer(payload, "<f4").reshape(shape),
                               np.frombuffer(expected[0][4], "<f4").reshape(shape), atol=1e-5)
    assert plane.version.in_flight == 0


@pytest.mark.parametrize(("call", "passed"), [
    ({"model": "nope"}, "model_not_native"),
    ({"version": "v9"}, "version_not_native"),
])
def test_what_the_data_plane_does_not_serve_is_left_to_python_with_no_lease(plane: Plane, call: dict[str, Any],
                                                                             passed: str) -> None:
    started = start(plane, ["hello"], x_request_id="left-1", **call)
    assert (started.passed, started.error, started.call, started.version, started.tokenize) == (passed, None, None,
                                                                                                 "", None)
    assert started.request_id == "left-1" and started.texts == 1
    assert plane.version.in_flight == 0 and plane.hf_version.in_flight == 0


def test_a_split_that_routes_nowhere_and_a_draining_version_are_left_to_python(tiny_bundle: Path,
                                                                               plane: Plane) -> None:
    routes = Routes()
    routes.set({MODEL: ([], [], {"1": plane.version}, {"1": plane.wire})})
    args = (MODEL, "", _inputs(["x"]), [], [], None, None, MAX_TEXTS, None, None, None, None, None, ("",) * 9, 5.0,
            plane.completions, 1, None)
    assert Started(*start_call(routes, *args)).passed == "no_routable_version"
    instance = ModelInstance.load(tiny_bundle, options(intra_op_threads=1), tokenizer="native")
    settings = BatcherSettings(max_batch_size=8, max_queue_delay_s=0.002, max_padding_ratio=1.3,
                               batch_overhead_tokens=0, max_batch_tokens=1024, sort_window=24, max_queue_items=64,
                               default_timeout_s=0.0, engine_concurrency=1)
    draining = ServedVersion(MODEL, "2", text_model=instance.text_model, settings=settings, lanes=plane.lanes,
                             events=EventSink())
    try:
        assert draining.drain(0.1)
        routes.set({MODEL: (["2"], [10000], {"2": draining}, {"2": plane.wire})})
        assert Started(*start_call(routes, *args)).passed == "version_draining"
    finally:
        draining.close()
        instance.close()


def test_a_refused_call_gets_the_rules_message_and_no_lease(plane: Plane) -> None:
    bad_output = [("EMBEDDING", None, None)]
    started = start(plane, ["hello"], outputs=bad_output)
    decoded = decode_call(_inputs(["hello"]), bad_output, [], None, None, MAX_TEXTS)
    with pytest.raises(ValueError) as refused:
        check_outputs(decoded, plane.wire, MODEL)
    assert started.error == str(refused.value) and started.passed is None and started.call is None
    too_many = start(plane, ["x"] * (MAX_TEXTS + 1), x_request_id="many")
    expected = prepare_call(_inputs(["x"] * (MAX_TEXTS + 1)), [], [], None, None, MAX_TEXTS, None, None, None, None,
                            None, ("many",) + ("",) * 8)
    assert (too_many.error, too_many.too_many_texts, too_many.request_id) == (expected.error, True, "many")
    assert plane.version.in_flight == 0


def test_texts_past_inline_chars_are_left_for_the_tokenizer_pool_counted_in_characters(plane: Plane) -> None:
    assert start(plane, ["é" * 10], inline_chars=10, token=3).passed is None  # 20 bytes, 10 characters
    assert answer(plane, 3)[0] == "OK"
    long = start(plane, ["é" * 6, "ab" * 3], inline_chars=11)
    assert (long.passed, long.call) == ("long_texts", None) and plane.version.in_flight == 0


def test_a_cancelled_call_is_answered_cancelled_and_gives_its_lease_back(plane: Plane) -> None:
    plane.lanes.pause()
    try:
        blocker = start(plane, ["first"], token=10)
        started = start(plane, ["second"], token=11)
        assert blocker.call is not None and started.call is not None
        started.call.cancel()
        code, _, tensors, _ = answer(plane, 11)
        assert code == "CANCELLED" and tensors is None
    finally:
        plane.lanes.resume()
    assert answer(plane, 10)[0] == "OK"
    assert plane.version.in_flight == 0


def test_a_version_on_hf_tokenizers_is_leased_and_takes_the_callers_ids(plane: Plane) -> None:
    texts = ["the movie was great", "ok"]
    started = start(plane, texts, version="hf", token=21)
    assert (started.passed, started.version, started.route) == (None, "hf", "pin")
    assert started.tokenize == (texts, None) and plane.hf_version.in_flight == 1  # leased while Python tokenizes
    started.call.submit_ids(plane.hf_instance.tokenize(texts), 10.0, 0.001)
    code, _, tensors, timings = answer(plane, 21)
    assert code == "OK" and timings["tokenize_s"] == pytest.approx(0.001)
    values = plane.hf_instance.run(plane.hf_instance.tokenize(texts))
    np.testing.assert_allclose(np.frombuffer(tensors[0][4], "<f4").reshape(values.shape), values, atol=1e-5)
    assert plane.hf_version.in_flight == 0
    with pytest.raises(ValueError, match="submitted or cancelled"):
        started.call.submit_ids(plane.hf_instance.tokenize(texts), 10.0, 0.0)


def test_a_call_dropped_before_its_ids_gives_its_lease_back(plane: Plane) -> None:
    cancelled = start(plane, ["never tokenized"], version="hf")
    assert plane.hf_version.in_flight == 1
    cancelled.call.cancel()
    assert plane.hf_version.in_flight == 0
    with pytest.raises(ValueError, match="submitted or cancelled"):
        cancelled.call.submit_ids(plane.hf_instance.tokenize(["never tokenized"]), 10.0, 0.0)
    dropped = start(plane, ["dropped"], version="hf")
    assert plane.hf_version.in_flight == 1
    del dropped  # the Python object was the lease's last holder
    assert plane.hf_version.in_flight == 0
