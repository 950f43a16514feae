"""The caller's trace context (engine_ext.parse_trace_context, the C++ rule both front ends and transports use),
against W3C Trace Context level 1 and the B3 propagation spec, over plain values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ortserve.engine_ext import parse_trace_context

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
NONE = ("", "", -1, "")


def parse(**headers: str) -> tuple[str, str, int, str]:
    names = ("traceparent", "tracestate", "b3", "b3_trace_id", "b3_span_id", "b3_sampled", "b3_flags")
    return tuple(parse_trace_context(*(headers.get(n, "") for n in names)))  # type: ignore[return-value]


W3C = [
    ("sampled", f"00-{TRACE}-{SPAN}-01", (TRACE, SPAN, 1, "")),
    ("not sampled", f"00-{TRACE}-{SPAN}-00", (TRACE, SPAN, 0, "")),
    ("other flags, sampled bit set", f"00-{TRACE}-{SPAN}-03", (TRACE, SPAN, 1, "")),
    ("a later version with more fields", f"cc-{TRACE}-{SPAN}-01-what-the-future-holds", (TRACE, SPAN, 1, "")),
    ("version 00 with more fields", f"00-{TRACE}-{SPAN}-01-extra", NONE),
    ("version ff is invalid", f"ff-{TRACE}-{SPAN}-01", NONE),
    ("upper-case hex", f"00-{TRACE.upper()}-{SPAN}-01", NONE),
    ("all-zero trace id", f"00-{'0' * 32}-{SPAN}-01", NONE),
    ("all-zero span id", f"00-{TRACE}-{'0' * 16}-01", NONE),
    ("short trace id", f"00-{TRACE[:-1]}-{SPAN}-01", NONE),
    ("wrong separators", f"00_{TRACE}_{SPAN}_01", NONE),
    ("not hex", f"00-{TRACE[:-1]}g-{SPAN}-01", NONE),
    ("empty", "", NONE),
]


@pytest.mark.parametrize(("value", "expected"), [c[1:] for c in W3C], ids=[c[0] for c in W3C])
def test_traceparent(value: str, expected: tuple[str, str, int, str]) -> None:
    assert parse(traceparent=value) == expected


def test_tracestate_goes_with_a_valid_traceparent_only() -> None:
    assert parse(traceparent=f"00-{TRACE}-{SPAN}-01", tracestate="congo=t61rcWkgMzE") == (TRACE, SPAN, 1,
                                                                                          "congo=t61rcWkgMzE")
    assert parse(traceparent="garbage", tracestate="congo=t61rcWkgMzE") == NONE


B3_SINGLE = [
    ("trace and span", f"{TRACE}-{SPAN}", (TRACE, SPAN, -1, "")),
    ("sampled", f"{TRACE}-{SPAN}-1", (TRACE, SPAN, 1, "")),
    ("not sampled", f"{TRACE}-{SPAN}-0", (TRACE, SPAN, 0, "")),
    ("debug is sampled", f"{TRACE}-{SPAN}-d", (TRACE, SPAN, 1, "")),
    ("with its parent", f"{TRACE}-{SPAN}-1-05e3ac9a4f6e3b90", (TRACE, SPAN, 1, "")),
    ("64-bit trace id, left-padded", f"a3ce929d0e0e4736-{SPAN}-1", ("0" * 16 + "a3ce929d0e0e4736", SPAN, 1, "")),
    ("upper-case hex is read", f"{TRACE.upper()}-{SPAN.upper()}", (TRACE, SPAN, -1, "")),
    ("a lone deny", "0", ("", "", 0, "")),
    ("a lone accept", "1", ("", "", 1, "")),
    ("a trace id without a span", TRACE, NONE),
    ("a bad span id", f"{TRACE}-xyz-1", NONE),
]


@pytest.mark.parametrize(("value", "expected"), [c[1:] for c in B3_SINGLE], ids=[c[0] for c in B3_SINGLE])
def test_b3_single_header(value: str, expected: tuple[str, str, int, str]) -> None:
    assert parse(b3=value) == expected


def test_b3_multiple_headers() -> None:
    assert parse(b3_trace_id=TRACE, b3_span_id=SPAN, b3_sampled="1") == (TRACE, SPAN, 1, "")
    assert parse(b3_trace_id=TRACE, b3_span_id=SPAN, b3_sampled="false") == (TRACE, SPAN, 0, "")
    assert parse(b3_trace_id=TRACE, b3_span_id=SPAN, b3_flags="1") == (TRACE, SPAN, 1, "")  # debug
    assert parse(b3_trace_id=TRACE, b3_span_id=SPAN) == (TRACE, SPAN, -1, "")
    assert parse(b3_trace_id=TRACE) == NONE  # no span: nothing to parent to
    assert parse(b3_sampled="0") == ("", "", 0, "")


def test_w3c_wins_over_b3_and_single_b3_over_multiple() -> None:
    other = "80f198ee56343ba864fe8b2a57d3eff7"
    assert parse(traceparent=f"00-{TRACE}-{SPAN}-01", b3=f"{other}-e457b5a2e4d86bd1-0")[0] == TRACE
    assert parse(traceparent="invalid", b3=f"{other}-e457b5a2e4d86bd1-0")[0] == other  # falls back
    assert parse(b3=f"{other}-e457b5a2e4d86bd1", b3_trace_id=TRACE, b3_span_id=SPAN)[0] == other


@given(st.text(max_size=80), st.text(max_size=80))
def test_any_header_value_parses_to_a_valid_context_or_none(traceparent: str, b3: str) -> None:
    trace_id, span_id, sampled, _ = parse(traceparent=traceparent, b3=b3)
    assert sampled in (-1, 0, 1)
    assert (trace_id == "") == (span_id == "")
    if trace_id:
        assert len(trace_id) == 32 and set(trace_id) <= set("0123456789abcdef") and trace_id.strip("0")
        assert len(span_id) == 16 and set(span_id) <= set("0123456789abcdef") and span_id.strip("0")
