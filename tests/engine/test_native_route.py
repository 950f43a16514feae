"""The native route helpers against their Python references: BLAKE2b against hashlib, the canary bucket
against service/router.bucket, and the split pick against router.Split.pick."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import _engine, route_bucket
from ortserve.service import router

EXAMPLES = settings(max_examples=500, deadline=None)

# Lengths around the 128-byte block boundary, where the last-block handling differs.
EDGE_LENGTHS = (0, 1, 63, 64, 127, 128, 129, 255, 256, 257, 384, 1000)

# Every code point a str can encode to UTF-8 (no lone surrogates), weighted towards NUL and the astral planes.
TEXT = st.text(
    alphabet=st.one_of(
        st.characters(blacklist_categories=("Cs",)),
        st.sampled_from(["\x00", "\U0001f600", "\U00010000", "\U0010ffff", "\u00e9", "\u4e2d"]),
    ),
    max_size=200,
)


@given(data=st.binary(max_size=600), digest_size=st.integers(1, 64))
@EXAMPLES
def test_blake2b_equals_hashlib(data: bytes, digest_size: int) -> None:
    assert _engine.blake2b_digest(data, digest_size) == hashlib.blake2b(data, digest_size=digest_size).digest()


@pytest.mark.parametrize("length", EDGE_LENGTHS)
@pytest.mark.parametrize("digest_size", range(1, 65))
def test_blake2b_block_edges_every_digest_size(length: int, digest_size: int) -> None:
    data = bytes((7 * i + length) % 256 for i in range(length))
    assert _engine.blake2b_digest(data, digest_size) == hashlib.blake2b(data, digest_size=digest_size).digest()


def test_blake2b_rfc7693_abc_vector() -> None:
    # RFC 7693 appendix A: BLAKE2b-512("abc").
    expected = bytes.fromhex(
        "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
        "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"
    )
    assert _engine.blake2b_digest(b"abc", 64) == expected


def test_blake2b_digest_size_is_a_parameter_not_a_truncation() -> None:
    assert _engine.blake2b_digest(b"abc", 32) != _engine.blake2b_digest(b"abc", 64)[:32]


@pytest.mark.parametrize("digest_size", [-1, 0, 65, 1000])
def test_blake2b_rejects_digest_sizes_outside_1_to_64(digest_size: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.64"):
        _engine.blake2b_digest(b"abc", digest_size)


@given(model=TEXT, routing_key=TEXT)
@EXAMPLES
def test_route_bucket_equals_router_bucket(model: str, routing_key: str) -> None:
    bucket = route_bucket(model, routing_key)
    assert bucket == router.bucket(model, routing_key)
    assert 0 <= bucket < _engine.ROUTE_BUCKETS == router.BUCKETS


@pytest.mark.parametrize(
    ("model", "routing_key"),
    [("", ""), ("m", ""), ("", "k"), ("a\x00b", "c"), ("a", "\x00bc"), ("\U0001f600", "\U0010ffff" * 50)],
)
def test_route_bucket_edge_strings(model: str, routing_key: str) -> None:
    assert route_bucket(model, routing_key) == router.bucket(model, routing_key)


def test_route_bucket_separates_model_from_key() -> None:
    # Without the NUL, ("ab", "c") and ("a", "bc") would hash the same bytes; find a pair that the NUL splits.
    pairs = [(f"m{i}", f"k{i}") for i in range(50)]
    assert any(route_bucket(m + k[0], k[1:]) != route_bucket(m, k) for m, k in pairs)


def test_route_bucket_rejects_lone_surrogates_like_str_encode() -> None:
    with pytest.raises(UnicodeEncodeError):
        router.bucket("m", "\ud800")
    with pytest.raises(UnicodeEncodeError):
        route_bucket("m", "\ud800")


WEIGHTS = st.lists(st.tuples(st.text(min_size=1, max_size=8), st.one_of(st.just(0), st.integers(0, 100))), max_size=6)
BUCKETS = st.one_of(st.integers(0, router.BUCKETS - 1), st.integers(-(2**31), 2**31 - 1))


@given(weighted=WEIGHTS, buckets=st.lists(BUCKETS, min_size=1, max_size=20))
@EXAMPLES
def test_split_pick_equals_router_split(weighted: list[tuple[str, int]], buckets: list[int]) -> None:
    split = router.Split.of(weighted)
    for bucket in buckets:
        assert _engine.split_pick(list(split.order), list(split.upper), bucket) == split.pick(bucket)


@given(weighted=WEIGHTS)
@settings(max_examples=50, deadline=None)
def test_split_pick_every_bucket(weighted: list[tuple[str, int]]) -> None:
    split = router.Split.of(weighted)
    order, upper = list(split.order), list(split.upper)
    for bucket in range(-1, router.BUCKETS + 1):
        assert _engine.split_pick(order, upper, bucket) == split.pick(bucket)


def test_split_pick_canary_owns_the_top() -> None:
    split = router.Split.of([("v1", 80), ("v2", 20)])
    assert _engine.split_pick(list(split.order), list(split.upper), 7999) == "v1"
    assert _engine.split_pick(list(split.order), list(split.upper), 8000) == "v2"
    assert _engine.split_pick(list(split.order), list(split.upper), 10000) is None
    assert _engine.split_pick([], [], 0) is None


def test_split_pick_rejects_unequal_lengths() -> None:
    with pytest.raises(ValueError, match="order has 2 versions but upper has 1"):
        _engine.split_pick(["a", "b"], [10000], 0)
