"""One store contract, run against FileStore, ConsulStore->stand-in and (when CONSUL_HTTP_ADDR is
set) ConsulStore->a real Consul agent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from ortserve.registry.store import Store, StoreRefused, check_op, delete_op, put_op


def test_get_missing_is_none(store: Store) -> None:
    assert store.get("models/m/routing") is None
    assert store.list("models/") == []


def test_put_cas_zero_only_creates(store: Store) -> None:
    assert store.put("models/m/versions/v1", b"one", cas=0)
    assert not store.put("models/m/versions/v1", b"two", cas=0)
    entry = store.get("models/m/versions/v1")
    assert entry is not None and entry.value == b"one"
    assert entry.modify_index >= 1 and entry.create_index == entry.modify_index


def test_put_cas_on_modify_index(store: Store) -> None:
    store.put("k/a", b"1")
    first = store.get("k/a")
    assert first is not None
    assert not store.put("k/a", b"stale", cas=first.modify_index + 1000)
    assert store.put("k/a", b"2", cas=first.modify_index)
    second = store.get("k/a")
    assert second is not None and second.value == b"2"
    assert second.modify_index > first.modify_index
    assert second.create_index == first.create_index
    # The old index is now stale: a writer that read before the update loses.
    assert not store.put("k/a", b"3", cas=first.modify_index)
    assert store.get("k/a").value == b"2"  # type: ignore[union-attr]


def test_list_is_prefix_scoped_and_sorted(store: Store) -> None:
    for key in ("models/m/versions/v2", "models/m/versions/v1", "models/m/routing", "models/mm/routing"):
        assert store.put(key, key.encode())
    keys = [e.key for e in store.list("models/m/")]
    assert keys == ["models/m/routing", "models/m/versions/v1", "models/m/versions/v2"]
    assert [e.value for e in store.list("models/m/versions/")] == [b"models/m/versions/v1",
                                                                   b"models/m/versions/v2"]


def test_binary_values_round_trip(store: Store) -> None:
    blob = bytes(range(256)) * 3
    assert store.put("bin/x", blob)
    assert store.get("bin/x").value == blob  # type: ignore[union-attr]


def test_delete_with_and_without_cas(store: Store) -> None:
    store.put("d/x", b"1")
    entry = store.get("d/x")
    assert entry is not None
    assert not store.delete("d/x", cas=entry.modify_index + 1000)
    assert store.get("d/x") is not None
    assert store.delete("d/x", cas=entry.modify_index)
    assert store.get("d/x") is None
    assert store.delete("d/x")  # absent: still fine
    # A deleted key can be created again with cas=0.
    assert store.put("d/x", b"again", cas=0)


def test_txn_is_all_or_nothing(store: Store) -> None:
    store.put("t/existing", b"e")
    assert not store.txn([put_op("t/a", b"a", cas=0), put_op("t/b", b"b", cas=0),
                          check_op("t/existing", 999_999)])
    assert store.get("t/a") is None and store.get("t/b") is None
    existing = store.get("t/existing")
    assert existing is not None
    assert store.txn([put_op("t/a", b"a", cas=0), put_op("t/b", b"b", cas=0),
                      check_op("t/existing", existing.modify_index)])
    a, b = store.get("t/a"), store.get("t/b")
    assert a is not None and b is not None
    assert a.modify_index == b.modify_index  # one write, one index


def test_txn_check_not_exists_and_delete_cas(store: Store) -> None:
    store.put("t/x", b"x")
    assert not store.txn([check_op("t/x", 0), put_op("t/y", b"y")])
    assert store.get("t/y") is None
    x = store.get("t/x")
    assert x is not None
    assert not store.txn([delete_op("t/x", cas=x.modify_index + 1000)])
    assert store.txn([delete_op("t/x", cas=x.modify_index), check_op("t/y", 0)])
    assert store.get("t/x") is None


def test_value_too_large_is_refused(store: Store) -> None:
    with pytest.raises(StoreRefused, match=r"512|524288"):
        store.put("big/x", b"x" * (512 * 1024 + 1))
    with pytest.raises(StoreRefused):
        store.txn([put_op("big/x", b"x" * (512 * 1024 + 1))])
    assert store.get("big/x") is None


def test_watch_index_zero_returns_at_once(store: Store) -> None:
    store.put("w/m/a", b"1")
    start = time.monotonic()
    index, entries = store.watch("w/m/", 0, 5)
    assert time.monotonic() - start < 2
    assert index >= 1
    assert [e.key for e in entries] == ["w/m/a"]


def test_watch_empty_prefix_index_is_at_least_one(store: Store) -> None:
    index, entries = store.watch("w/nothing/", 0, 1)
    assert index >= 1 and entries == []


def test_watch_times_out_with_current_state(store: Store) -> None:
    store.put("w/m/a", b"1")
    index, _ = store.watch("w/m/", 0, 1)
    start = time.monotonic()
    again, entries = store.watch("w/m/", index, 0.6)
    elapsed = time.monotonic() - start
    assert 0.5 <= elapsed < 5
    assert again == index and [e.value for e in entries] == [b"1"]


def test_watch_wakes_on_change_from_another_handle(store: Store, reopen: Callable[[Store], Store]) -> None:
    store.put("w/m/a", b"1")
    index, _ = store.watch("w/m/", 0, 1)
    other = reopen(store)
    timer = threading.Timer(0.3, lambda: other.put("w/m/b", b"2"))
    timer.start()
    start = time.monotonic()
    new_index, entries = store.watch("w/m/", index, 10)
    timer.join()
    assert time.monotonic() - start < 5
    assert new_index > index
    assert [e.key for e in entries] == ["w/m/a", "w/m/b"]


def test_watch_ignores_other_prefixes_and_sees_deletes(store: Store, reopen: Callable[[Store], Store]) -> None:
    store.put("w/m/a", b"1")
    index, _ = store.watch("w/m/", 0, 1)
    store.put("w/other/x", b"x")
    start = time.monotonic()
    same, _ = store.watch("w/m/", index, 0.6)
    assert time.monotonic() - start >= 0.5  # a change elsewhere did not wake it
    assert same == index
    other = reopen(store)
    timer = threading.Timer(0.2, lambda: other.delete("w/m/a"))
    timer.start()
    after, entries = store.watch("w/m/", index, 10)
    timer.join()
    assert after > index and entries == []


def test_watch_wakes_when_an_empty_prefix_gets_its_first_key(store: Store, reopen: Callable[[Store], Store]) -> None:
    index, entries = store.watch("w/new/", 0, 1)
    assert entries == []
    other = reopen(store)
    timer = threading.Timer(0.2, lambda: other.put("w/new/k", b"v"))
    timer.start()
    after, entries = store.watch("w/new/", index, 10)
    timer.join()
    assert after > index and [e.key for e in entries] == ["w/new/k"]


def test_invalid_keys_are_refused(store: Store) -> None:
    for key in ("", "/abs", "a/../b", "a//b", "a/./b"):
        with pytest.raises(StoreRefused):
            store.put(key, b"x")
