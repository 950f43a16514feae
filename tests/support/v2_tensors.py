"""KServe V2 raw BYTES buffers as a client builds and reads them: each element a 4-byte little-endian length, then
its bytes. The server's rules for them are the C++ wire rules; this is the caller's side, for tests."""

from __future__ import annotations

import struct
from collections.abc import Sequence

_LEN = struct.Struct("<I")


def join_raw_bytes(elements: Sequence[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(e)) + e for e in elements)


def split_raw_bytes(buffer: bytes) -> list[bytes]:
    """The elements of a well-formed buffer (a reply's); ValueError on a malformed one."""
    elements, offset = [], 0
    while offset < len(buffer):
        if offset + 4 > len(buffer):
            raise ValueError(f"truncated length prefix at byte {offset}")
        (size,) = _LEN.unpack_from(buffer, offset)
        offset += 4
        if offset + size > len(buffer):
            raise ValueError(f"element {len(elements)} overruns the buffer")
        elements.append(buffer[offset : offset + size])
        offset += size
    return elements
