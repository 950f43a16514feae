"""The KV store contract that the registry CLI and the watcher are written against.

Keys are relative to the store's prefix ("models/m/routing"). Every entry carries the index of
the write that last modified it (`modify_index`); check-and-set writes compare against it:

    entry = store.get(key)                       # None when absent
    ok = store.put(key, new_bytes, cas=entry.modify_index if entry else 0)
    if not ok: re-read, re-validate, retry       # someone else wrote first

`watch(prefix, index, wait_s)` blocks until something under the prefix changed past `index` or the
wait ran out, and returns the current state either way (a return does not mean a change). The
returned index is always >= 1; it may be lower than the one passed in when the store was reset
(a restarted Consul agent), in which case the returned state is a fresh full read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

TxnVerb = Literal["set", "cas", "check-index", "check-not-exists", "delete", "delete-cas"]
MAX_TXN_OPS = 64  # Consul allows 128; the registry never needs more than a handful


class StoreError(Exception):
    """Base of every store failure; the message is one line and names the store."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or has no leader; the CLI exits 3, the watcher backs off."""


class StoreRefused(StoreError):
    """The store answered but refused: ACL denied, value too large, bad request."""


@dataclass(frozen=True)
class Entry:
    key: str
    value: bytes
    modify_index: int
    create_index: int


@dataclass(frozen=True)
class TxnOp:
    """One operation of an atomic `Store.txn`; build them with the helpers below."""

    verb: TxnVerb
    key: str
    value: bytes = b""
    index: int = 0


def put_op(key: str, value: bytes, cas: int | None = None) -> TxnOp:
    """Write; with `cas` only if the key's modify index equals it (0: only if absent)."""
    return TxnOp("set", key, value) if cas is None else TxnOp("cas", key, value, cas)


def check_op(key: str, index: int) -> TxnOp:
    """Fail the txn unless the key is unchanged since `index` (0: unless the key is absent)."""
    return TxnOp("check-not-exists", key) if index == 0 else TxnOp("check-index", key, index=index)


def delete_op(key: str, cas: int | None = None) -> TxnOp:
    return TxnOp("delete", key) if cas is None else TxnOp("delete-cas", key, index=cas)


class Store(Protocol):
    def describe(self) -> str:
        """A short human name for messages (never includes a token)."""
        ...

    def get(self, key: str) -> Entry | None: ...

    def list(self, prefix: str) -> list[Entry]:
        """Every entry whose key starts with `prefix`, sorted by key."""
        ...

    def put(self, key: str, value: bytes, cas: int | None = None) -> bool:
        """False when the check-and-set failed (nothing written)."""
        ...

    def delete(self, key: str, cas: int | None = None) -> bool:
        """False when the check-and-set failed; deleting an absent key without cas is True."""
        ...

    def txn(self, ops: list[TxnOp]) -> bool:
        """All ops apply or none do; False on a failed check (a conflict), nothing written."""
        ...

    def watch(self, prefix: str, index: int, wait_s: float) -> tuple[int, list[Entry]]:
        """Block until the prefix changed past `index` or `wait_s` passed; see the module docstring."""
        ...

    def close(self) -> None: ...


def check_key(key: str) -> str:
    """Keys are relative, '/'-separated, with no empty, '.' or '..' segment (they become paths)."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise StoreRefused(f"invalid store key {key!r}")
    if any(p in ("", ".", "..") for p in key.split("/")):
        raise StoreRefused(f"invalid store key {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """A list/watch prefix: empty, or a key, optionally ending in '/'."""
    if prefix:
        check_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix
