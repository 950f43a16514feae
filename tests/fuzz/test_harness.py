"""The fuzz harness's rules catch what they claim to (ortserve_devtools.fuzz.harness), without an ortserve server: a
fuzz run that passes means something only if a bad answer would have failed it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent import futures

import grpc
import numpy as np
import pytest
from ortserve_devtools.fuzz.harness import Answer, Finding, FuzzTarget, MiB, logits_of, texts_of
from ortserve_devtools.fuzz.requests import join_raw, mutate

from ortserve.proto import grpc_service_pb2 as pb

LOGITS = np.array([[0.5, -1.0], [2.0, 0.25]], dtype=np.float32)


def _request(texts: list[bytes], *, raw: bool = False) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="classifier")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)])
    if raw:
        request.raw_input_contents.append(join_raw(texts))
    else:
        tensor.contents.bytes_contents.extend(texts)
    return request


def _response(logits: np.ndarray, *, raw: bool = True) -> bytes:
    response = pb.ModelInferResponse(model_name="classifier")
    out = response.outputs.add(name="LOGITS", datatype="FP32", shape=list(logits.shape))
    if raw:
        response.raw_output_contents.append(logits.astype("<f4").tobytes())
    else:
        out.contents.fp32_contents.extend(logits.ravel().tolist())
    return response.SerializeToString()


def _ok(body: bytes) -> Answer:
    return Answer(grpc.StatusCode.OK, "", 0.01, body)


@pytest.fixture
def offline() -> Iterator[FuzzTarget]:
    """A target whose checks run on hand-made answers (the channel is never used)."""
    target = FuzzTarget("127.0.0.1:1", None, expected=lambda texts: LOGITS[: len(texts)])
    yield target
    target.close()


@pytest.mark.parametrize("code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED])
def test_statuses_that_are_the_servers_fault_are_findings(offline: FuzzTarget, code: grpc.StatusCode) -> None:
    with pytest.raises(Finding, match=code.name):
        offline.check(b"\x01", Answer(code, "boom", 0.01, b""))


@pytest.mark.parametrize("code", [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                                  grpc.StatusCode.RESOURCE_EXHAUSTED])
def test_refusals_the_caller_can_act_on_pass(offline: FuzzTarget, code: grpc.StatusCode) -> None:
    offline.check(b"\x01", Answer(code, "input 'TEXT' has shape [-1]", 0.01, b""))


def test_a_traceback_or_a_late_answer_is_a_finding(offline: FuzzTarget) -> None:
    with pytest.raises(Finding, match="traceback"):
        offline.check(b"", Answer(grpc.StatusCode.INVALID_ARGUMENT, "Traceback (most recent call last)", 0.0, b""))
    with pytest.raises(Finding, match="past the"):
        offline.check(b"", Answer(grpc.StatusCode.INVALID_ARGUMENT, "x", offline.deadline_s + 2, b""))


@pytest.mark.parametrize("raw_in", [False, True])
@pytest.mark.parametrize("raw_out", [False, True])
def test_ok_with_the_models_logits_passes(offline: FuzzTarget, raw_in: bool, raw_out: bool) -> None:
    body = _request([b"a", "\u00e9".encode()], raw=raw_in).SerializeToString()
    offline.check(body, _ok(_response(LOGITS, raw=raw_out)))


def test_ok_with_other_logits_or_shape_is_a_finding(offline: FuzzTarget) -> None:
    body = _request([b"a", b"b"]).SerializeToString()
    with pytest.raises(Finding, match="differ from the model"):
        offline.check(body, _ok(_response(LOGITS + 0.01)))
    with pytest.raises(Finding, match="shape"):
        offline.check(body, _ok(_response(LOGITS[:1])))
    with pytest.raises(Finding, match="not finite"):
        offline.check(body, _ok(_response(np.full((2, 2), np.nan, np.float32))))
    with pytest.raises(Finding, match="without outputs"):
        offline.check(body, _ok(pb.ModelInferResponse().SerializeToString()))


@pytest.mark.parametrize("body", [
    _request([b"ok", b"\xff"]).SerializeToString(),  # not UTF-8
    _request([b"ab"], raw=True).SerializeToString()[:-1],  # does not parse
    b"\x0a\x05ab",
], ids=["not utf-8", "truncated", "garbage"])
def test_ok_for_a_body_without_valid_texts_is_a_finding(offline: FuzzTarget, body: bytes) -> None:
    with pytest.raises(Finding, match="without valid texts"):
        offline.check(body, _ok(_response(LOGITS)))


def test_texts_of_checks_length_prefixes() -> None:
    request = _request([b"ab", b"c"], raw=True)
    assert texts_of(request) == ["ab", "c"]
    request.raw_input_contents[0] = b"\x09\x00\x00\x00ab"
    with pytest.raises(ValueError, match="overruns"):
        texts_of(request)
    request.raw_input_contents[0] = join_raw([b"ab"]) + b"\x01"
    with pytest.raises(Exception):  # noqa: B017  (struct.error: a truncated prefix)
        texts_of(request)


def test_logits_of_checks_the_raw_size() -> None:
    response = pb.ModelInferResponse.FromString(_response(LOGITS))
    response.raw_output_contents[0] = response.raw_output_contents[0][:-4]
    with pytest.raises(Finding, match="bytes for shape"):
        logits_of(response)


def test_mutations_are_deterministic_and_do_what_they_say() -> None:
    body = bytes(range(20))
    assert mutate(body, [("truncate", 0.5, b"")]) == body[:10]
    assert mutate(body, [("insert", 0.0, b"xy")]) == b"xy" + body
    assert mutate(body, [("delete", 0.5, b"")]) == body[:10] + body[11:]
    assert mutate(body, [("flip", 0.0, b"\x02")]) == b"\x04" + body[1:]
    assert mutate(body, [("varint", 1.0 - 1e-9, b"\x01")]).endswith(b"\xff" * 9 + b"\x01" + body[-1:])
    ops = [("duplicate", 0.3, b"ab"), ("set", 0.9, b"\x04")]
    assert mutate(body, ops) == mutate(body, ops)
    assert mutate(b"", [("flip", 0.5, b"\x01"), ("set", 0.1, b"")]) == b""


def test_rss_growth_past_the_bound_is_a_finding() -> None:
    target = FuzzTarget("127.0.0.1:1", os.getpid())
    target.fixed_logits = lambda: LOGITS  # type: ignore[method-assign]
    rss = target.rss()
    assert rss is not None and rss > 0
    target.check_health(LOGITS, rss, 64 * MiB)
    with pytest.raises(Finding, match="RSS grew"):
        target.check_health(LOGITS, rss - 100 * MiB, 64 * MiB)
    with pytest.raises(Finding, match="logits changed"):
        target.check_health(LOGITS + 1, rss, 64 * MiB)
    target.close()


def test_a_server_that_fails_is_caught_over_real_grpc() -> None:
    """A stand-in server answering INTERNAL for one body: fuzz() raises and keeps that body for the report."""

    def infer(body: bytes, context: grpc.ServicerContext) -> bytes:
        if b"boom" in body:
            context.abort(grpc.StatusCode.INTERNAL, "internal error")
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = FuzzTarget(f"127.0.0.1:{port}", None)
    try:
        assert target.fuzz(b"fine").code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(Finding, match="INTERNAL"):
            target.fuzz(b"a boom body")
        assert target.last_failure == b"a boom body"
        assert target.codes == {"INVALID_ARGUMENT": 1, "INTERNAL": 1}
    finally:
        target.close()
        server.stop(0)


def _classes(rows: list[list[str]], *, raw: bool) -> bytes:
    response = pb.ModelInferResponse(model_name="classifier")
    out = response.outputs.add(name="LOGITS", datatype="BYTES", shape=[len(rows), len(rows[0])])
    elements = [e.encode() for row in rows for e in row]
    if raw:
        response.raw_output_contents.append(join_raw(elements))
    else:
        out.contents.bytes_contents.extend(elements)
    return response.SerializeToString()


@pytest.mark.parametrize("raw", [False, True])
def test_classification_outputs_are_checked(offline: FuzzTarget, raw: bool) -> None:
    body = _request([b"a", b"b"]).SerializeToString()  # the model's best: class 0, then class 0
    offline.check(body, _ok(_classes([["0.5:0:neg", "-1.0:1:pos"], ["2.0:0:neg", "0.25:1:pos"]], raw=raw)))
    offline.check(body, _ok(_classes([["0.5:0:neg"], ["2.000000:0:neg"]], raw=raw)))
    with pytest.raises(Finding, match="best class"):
        offline.check(body, _ok(_classes([["0.5:1:pos"], ["2.0:0:neg"]], raw=raw)))
    with pytest.raises(Finding, match="out of range or repeated"):
        offline.check(body, _ok(_classes([["0.5:0:neg", "0.5:0:neg"], ["2.0:0:neg", "1:1:pos"]], raw=raw)))
    with pytest.raises(Finding, match="score:index:label"):
        offline.check(body, _ok(_classes([["0.5-0-neg"], ["2.0:0:neg"]], raw=raw)))
    with pytest.raises(Finding, match="shape"):
        offline.check(body, _ok(_classes([["0.5:0:neg"]], raw=raw)))
