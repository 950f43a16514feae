"""A ModelInfer's first steps (engine_ext.prepare_call, the C++ PrepareCall both front ends take), over plain values:
the request id (the caller's when it fits, checked before the call's contents), the trace context, the decoded call
and the canary key (the routing_key parameter, else x-routing-key, else the request id)."""

from __future__ import annotations

import re
from typing import Any

from ortserve.engine_ext import MAX_REQUEST_ID_BYTES, prepare_call
from ortserve.service.inference import CALL_HEADERS

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
GOOD = [("TEXT", "BYTES", [2], True, [b"a", b"b"])]


def prepare(inputs: list[Any] = GOOD, *, routing_key: Any = None, max_texts: int = 8, **headers: str) -> Any:
    names = {name.replace("-", "_"): name for name in CALL_HEADERS}
    values = {names[key]: value for key, value in headers.items()}
    return prepare_call(inputs, [], [], None, routing_key, max_texts, None, None, None, None, None,
                        tuple(values.get(name, "") for name in CALL_HEADERS))


def test_a_good_call_keeps_the_callers_id_and_trace_and_routes_by_its_key() -> None:
    prepared = prepare(x_request_id="req-1", x_routing_key="user-42", traceparent=f"00-{TRACE}-{SPAN}-01")
    assert prepared.error is None and not prepared.too_many_texts
    assert prepared.request_id == "req-1" and prepared.call.texts == ["a", "b"]
    assert prepared.trace == (TRACE, SPAN, 1, "")
    assert prepared.routing_key == "user-42"


def test_the_routing_key_parameter_wins_and_the_id_is_the_last_resort() -> None:
    assert prepare(routing_key=("string_param", "param-key"), x_routing_key="header-key").routing_key == "param-key"
    anonymous = prepare()
    assert re.fullmatch(r"[0-9a-f]{32}", anonymous.request_id) and anonymous.routing_key == anonymous.request_id
    assert anonymous.trace == ("", "", -1, "")


def test_a_refused_call_still_gets_an_id_and_the_id_rule_comes_first() -> None:
    bad = prepare([("TEXT", "FP32", [1], True, [b"a"])], x_request_id="req-2", b3=f"{TRACE}-{SPAN}-1")
    assert bad.request_id == "req-2" and bad.error is not None and "TEXT" in bad.error
    assert bad.trace == (TRACE, SPAN, 1, "") and bad.routing_key == "" and bad.call.texts == []
    too_long = "x" * (MAX_REQUEST_ID_BYTES + 1)
    both = prepare([("TEXT", "FP32", [1], True, [b"a"])], x_request_id=too_long)
    assert both.error is not None and "x-request-id" in both.error
    assert re.fullmatch(r"[0-9a-f]{32}", both.request_id)  # answered under a fresh id
    many = prepare([("TEXT", "BYTES", [3], True, [b"a", b"b", b"c"])], max_texts=2)
    assert many.too_many_texts and many.error is not None
