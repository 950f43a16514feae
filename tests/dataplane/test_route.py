"""The route both front ends use (route.h): BLAKE2b against hashlib, the canary bucket against its definition
(hashlib's BLAKE2b of "model NUL key", 8 bytes, big-endian, mod 10000), and the split's layout over the buckets."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ortserve.engine_ext import ROUTE_BUCKETS, Split, _engine, route_bucket

EXAMPLES = settings(max_examples=500, deadline=None)


def reference_bucket(model: str, routing_key: str) -> int:
    """The bucket's definition, in hashlib's terms."""
    digest = hashlib.blake2b(f"{model}\x00{routing_key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 10_000

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
def test_route_bucket_is_its_definition(model: str, routing_key: str) -> None:
    bucket = route_bucket(model, routing_key)
    assert bucket == reference_bucket(model, routing_key)
    assert 0 <= bucket < ROUTE_BUCKETS == 10_000


@pytest.mark.parametrize(
    ("model", "routing_key"),
    [("", ""), ("m", ""), ("", "k"), ("a\x00b", "c"), ("a", "\x00bc"), ("\U0001f600", "\U0010ffff" * 50)],
)
def test_route_bucket_edge_strings(model: str, routing_key: str) -> None:
    assert route_bucket(model, routing_key) == reference_bucket(model, routing_key)


def test_route_bucket_separates_model_from_key() -> None:
    # Without the NUL, ("ab", "c") and ("a", "bc") would hash the same bytes; find a pair that the NUL splits.
    pairs = [(f"m{i}", f"k{i}") for i in range(50)]
    assert any(route_bucket(m + k[0], k[1:]) != route_bucket(m, k) for m, k in pairs)


def test_route_bucket_rejects_lone_surrogates_like_str_encode() -> None:
    with pytest.raises(UnicodeEncodeError):
        route_bucket("m", "\ud800")


WEIGHTS = st.lists(st.tuples(st.text(min_size=1, max_size=8), st.one_of(st.just(0), st.integers(0, 100))), max_size=6)


def reference_pick(weighted: list[tuple[str, int]], bucket: int) -> str | None:
    """The layout's definition: versions with weight stacked oldest first, each owning weight/total of the buckets,
    the boundary of each the floor of its cumulative share."""
    total = sum(w for _, w in weighted if w > 0)
    acc = 0
    for version, weight in weighted:
        if weight <= 0:
            continue
        acc += weight
        if bucket < acc * ROUTE_BUCKETS // total:
            return version
    return None


@given(weighted=WEIGHTS)
@settings(max_examples=50, deadline=None)
def test_split_is_its_definition_on_every_bucket(weighted: list[tuple[str, int]]) -> None:
    split = Split.of(weighted)
    for bucket in range(ROUTE_BUCKETS + 1):
        assert split.pick(bucket) == reference_pick(weighted, bucket)
    assert list(split.order) == [v for v, w in weighted if w > 0]


def test_the_canary_owns_the_top() -> None:
    split = Split.of([("v1", 80), ("v2", 20)])
    assert (split.pick(7999), split.pick(8000), split.pick(10000)) == ("v1", "v2", None)
    assert list(split.upper) == [8000, 10000] and split == Split.of([("v1", 80), ("v2", 20)])
    assert Split.of([]).pick(0) is None and Split.of([("v1", 0)]).pick(0) is None
