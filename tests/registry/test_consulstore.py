"""ConsulStore specifics beyond the shared contract: error mapping, tokens, dc, index sanity."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from ortserve_devtools.consul_standin import ConsulStandin

from ortserve.registry.address import parse_registry_url
from ortserve.registry.connect import open_store
from ortserve.registry.consulstore import ConsulStore
from ortserve.registry.store import StoreRefused, StoreUnavailable, put_op


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed on exit: nothing listens there


def test_unreachable_agent_is_store_unavailable() -> None:
    store = open_store(f"consul://127.0.0.1:{_dead_port()}")
    with pytest.raises(StoreUnavailable, match="unreachable"):
        store.get("models/m/routing")
    with pytest.raises(StoreUnavailable):
        store.txn([put_op("models/m/routing", b"{}")])


def test_no_leader_is_store_unavailable(standin: ConsulStandin) -> None:
    store = open_store(standin.url())
    standin.no_leader = True
    with pytest.raises(StoreUnavailable, match="No cluster leader"):
        store.list("models/")
    with pytest.raises(StoreUnavailable, match="No cluster leader"):
        store.watch("models/", 5, 1)


def test_acl_denied_is_store_refused_and_token_from_url_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    with ConsulStandin(token="t0ken") as s:
        with pytest.raises(StoreRefused, match="permission denied"):
            open_store(s.url()).get("k")
        with pytest.raises(StoreRefused, match="permission denied"):
            open_store(s.url()).txn([put_op("k", b"v")])  # py-consul's txn.put would drop the token
        assert open_store(s.url(token="t0ken")).txn([put_op("k", b"v")])
        monkeypatch.setenv("CONSUL_HTTP_TOKEN", "t0ken")
        assert open_store(s.url()).get("k").value == b"v"  # type: ignore[union-attr]
        # An explicit URL token wins over the environment.
        with pytest.raises(StoreRefused):
            open_store(s.url(token="other")).get("k")


def test_datacenter_is_sent(standin: ConsulStandin) -> None:
    assert open_store(standin.url(dc="dc1")).txn([put_op("k", b"v")])
    with pytest.raises(StoreUnavailable, match="No path to datacenter"):
        open_store(standin.url(dc="far")).get("k")


def test_prefix_isolates_keys(standin: ConsulStandin) -> None:
    a, b = open_store(standin.url(prefix="team-a/")), open_store(standin.url(prefix="team-b"))
    a.put("models/m/routing", b"a")
    assert b.get("models/m/routing") is None
    assert [e.key for e in a.list("models/")] == ["models/m/routing"]
    assert "team-a/models/m/routing" in standin.state.entries


def test_watch_after_index_reset_returns_fresh_state(standin: ConsulStandin) -> None:
    store = open_store(standin.url())
    assert isinstance(store, ConsulStore)
    for i in range(6):
        store.put(f"models/m/versions/v{i}", b"x")
    index, _ = store.watch("models/m/", 0, 1)
    threading.Timer(0.2, lambda: standin.reset_indexes(1)).start()
    start = time.monotonic()
    new_index, entries = store.watch("models/m/", index, 10)
    assert time.monotonic() - start < 5
    assert 1 <= new_index < index and len(entries) == 6
    # The next watch from the reset index blocks normally and sees the next write.
    threading.Timer(0.2, lambda: store.put("models/m/routing", b"{}")).start()
    after, entries = store.watch("models/m/", new_index, 10)
    assert after > new_index and len(entries) == 7


def test_tls_options_are_parsed_into_the_client() -> None:
    address = parse_registry_url("consul+https://consul.internal:8501?ca=/etc/ca.pem&cert=/c.pem&key=/k.pem")
    store = ConsulStore(address)  # type: ignore[arg-type]
    assert store._client.http.base_uri == "https://consul.internal:8501"
    assert store._client.http.verify == "/etc/ca.pem"
    assert store._client.http.cert == ("/c.pem", "/k.pem")
