"""The Consul stand-in checked against Consul's documented KV/txn semantics, through py-consul.

Each test names the behaviour from hashicorp/consul website/content/api-docs/{kv,txn}.mdx and
features/blocking.mdx that it pins down.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import consul
import pytest
from consul.exceptions import ClientError
from ortserve_devtools import consul_standin
from ortserve_devtools.consul_standin import ConsulStandin, parse_wait


def client(s: ConsulStandin, token: str | None = None, dc: str | None = None) -> consul.Consul:
    c = consul.Consul(host="127.0.0.1", port=s.port, dc=dc)
    c.token = token  # py-consul would otherwise take CONSUL_HTTP_TOKEN from the environment
    return c


def raw(s: ConsulStandin, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://{s.address}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_missing_key_is_404_with_index(standin: ConsulStandin) -> None:
    status, headers, _ = raw(standin, "GET", "/v1/kv/nope")
    assert status == 404 and int(headers["X-Consul-Index"]) >= 1
    index, data = client(standin).kv.get("nope")
    assert data is None and int(index) >= 1


def test_entry_fields_and_indexes(standin: ConsulStandin) -> None:
    c = client(standin)
    assert c.kv.put("a/k", b"v1", flags=7) is True
    index, entry = c.kv.get("a/k")
    assert entry["Value"] == b"v1" and entry["Flags"] == 7 and entry["LockIndex"] == 0
    assert entry["CreateIndex"] == entry["ModifyIndex"] == int(index)
    c.kv.put("a/k", b"v2")
    _, entry2 = c.kv.get("a/k")
    assert entry2["CreateIndex"] == entry["CreateIndex"] and entry2["ModifyIndex"] > entry["ModifyIndex"]


def test_cas_semantics(standin: ConsulStandin) -> None:
    c = client(standin)
    assert c.kv.put("k", b"1", cas=0) is True
    assert c.kv.put("k", b"2", cas=0) is False  # cas=0: only if absent; body false, HTTP 200
    _, e = c.kv.get("k")
    assert c.kv.put("k", b"3", cas=e["ModifyIndex"] + 1) is False
    assert c.kv.put("k", b"3", cas=e["ModifyIndex"]) is True
    status, _, body = raw(standin, "PUT", "/v1/kv/k?cas=1", b"x")
    assert status == 200 and body == b"false"


def test_recurse_keys_separator_raw(standin: ConsulStandin) -> None:
    c = client(standin)
    for k in ("p/a", "p/b/c", "p/b/d", "q/x"):
        c.kv.put(k, k.encode())
    index, entries = c.kv.get("p/", recurse=True)
    assert [e["Key"] for e in entries] == ["p/a", "p/b/c", "p/b/d"]
    assert int(index) == max(e["ModifyIndex"] for e in entries)  # latest ModifyIndex in the prefix
    _, keys = c.kv.get("p/", keys=True)
    assert keys == ["p/a", "p/b/c", "p/b/d"]
    _, folded = c.kv.get("p/", keys=True, separator="/")
    assert folded == ["p/a", "p/b/"]
    status, headers, body = raw(standin, "GET", "/v1/kv/p/a?raw")
    assert status == 200 and body == b"p/a" and "X-Consul-Index" in headers
    assert c.kv.get("zzz/", recurse=True)[1] is None  # empty prefix: 404


def test_blocking_query_waits_then_returns_unchanged(standin: ConsulStandin) -> None:
    c = client(standin)
    c.kv.put("b/k", b"1")
    index, _ = c.kv.get("b/", recurse=True)
    start = time.monotonic()
    again, _ = c.kv.get("b/", recurse=True, index=index, wait="500ms")
    elapsed = time.monotonic() - start
    assert 0.45 <= elapsed < 0.5 * (1 + 1 / 16) + 0.5  # wait plus at most wait/16 jitter
    assert again == index  # a return does not mean a change


def test_blocking_query_wakes_on_change_in_prefix_only(standin: ConsulStandin) -> None:
    c = client(standin)
    c.kv.put("b/k", b"1")
    index, _ = c.kv.get("b/", recurse=True)
    writer = client(standin)
    threading.Timer(0.2, lambda: writer.kv.put("other/x", b"x")).start()
    threading.Timer(0.6, lambda: writer.kv.put("b/k2", b"2")).start()
    start = time.monotonic()
    new_index, entries = c.kv.get("b/", recurse=True, index=index, wait="10s")
    elapsed = time.monotonic() - start
    assert 0.5 <= elapsed < 3  # the write outside the prefix did not wake it
    assert int(new_index) > int(index) and len(entries) == 2


def test_delete_bumps_prefix_index_via_tombstone(standin: ConsulStandin) -> None:
    c = client(standin)
    c.kv.put("t/a", b"1")
    c.kv.put("t/b", b"2")
    index, _ = c.kv.get("t/", recurse=True)
    threading.Timer(0.2, lambda: client(standin).kv.delete("t/b")).start()
    new_index, entries = c.kv.get("t/", recurse=True, index=index, wait="10s")
    assert int(new_index) > int(index) and [e["Key"] for e in entries] == ["t/a"]


def test_delete_cas_and_recurse(standin: ConsulStandin) -> None:
    c = client(standin)
    c.kv.put("d/a", b"1")
    c.kv.put("d/b", b"2")
    _, e = c.kv.get("d/a")
    assert c.kv.delete("d/a", cas=0) is False  # needs an index > 0
    assert c.kv.delete("d/a", cas=e["ModifyIndex"] + 5) is False
    assert c.kv.delete("d/a", cas=e["ModifyIndex"]) is True
    assert c.kv.delete("d/", recurse=True) is True
    assert c.kv.get("d/", recurse=True)[1] is None


def test_txn_success_and_rollback(standin: ConsulStandin) -> None:
    c = client(standin)
    c.kv.put("x/k", b"1")
    _, e = c.kv.get("x/k")

    def kv(verb: str, key: str, value: bytes | None = None, index: int | None = None) -> dict:
        op: dict = {"Verb": verb, "Key": key}
        if value is not None:
            op["Value"] = base64.b64encode(value).decode()
        if index is not None:
            op["Index"] = index
        return {"KV": op}

    result = c.txn.put([kv("check-index", "x/k", index=e["ModifyIndex"]), kv("set", "x/n", b"n"),
                        kv("get", "x/k")])
    assert result["Errors"] is None and len(result["Results"]) == 3
    assert base64.b64decode(result["Results"][2]["KV"]["Value"]) == b"1"
    with pytest.raises(ClientError, match=r"^409") as info:
        c.txn.put([kv("set", "x/m", b"m"), kv("check-not-exists", "x/k")])
    errors = json.loads(str(info.value).split(" ", 1)[1])["Errors"]
    assert errors[0]["OpIndex"] == 1 and "exists" in errors[0]["What"]
    assert c.kv.get("x/m")[1] is None  # rolled back
    _, n = c.kv.get("x/n")
    c.txn.put([kv("delete-cas", "x/n", index=n["ModifyIndex"]), kv("cas", "x/new", b"v", index=0)])
    assert c.kv.get("x/n")[1] is None and c.kv.get("x/new")[1]["Value"] == b"v"
    status, _, body = raw(standin, "PUT", "/v1/txn", json.dumps([kv("get", "x/k")] * 129).encode())
    assert status == 413 and b"128" in body


def test_value_limit_is_413(standin: ConsulStandin) -> None:
    c = client(standin)
    assert c.kv.put("big", b"x" * (512 * 1024)) is True  # exactly the limit is fine
    with pytest.raises(ClientError, match=r"^413"):
        c.kv.put("big", b"x" * (512 * 1024 + 1))


def test_acl_token_required(tmp_path: Path) -> None:
    with ConsulStandin(token="s3cret") as s:
        with pytest.raises(consul.ACLPermissionDenied):
            client(s).kv.get("k")
        with pytest.raises(consul.ACLPermissionDenied):
            client(s, token="wrong").kv.put("k", b"v")
        assert client(s, token="s3cret").kv.put("k", b"v") is True
        status, _, _ = raw(s, "GET", "/v1/kv/k", headers={"Authorization": "Bearer s3cret"})
        assert status == 200


def test_datacenter_and_no_leader(standin: ConsulStandin) -> None:
    assert client(standin, dc="dc1").kv.put("k", b"v") is True
    with pytest.raises(consul.ConsulException, match="No path to datacenter"):
        client(standin, dc="elsewhere").kv.get("k")
    standin.no_leader = True
    with pytest.raises(consul.ConsulException, match="500 No cluster leader"):
        client(standin).kv.get("k")
    standin.no_leader = False
    assert client(standin).kv.get("k")[1]["Value"] == b"v"


def test_index_reset_goes_backwards(standin: ConsulStandin) -> None:
    c = client(standin)
    for i in range(5):
        c.kv.put(f"r/{i}", b"v")
    before, _ = c.kv.get("r/", recurse=True)
    # A restore while a query is blocked wakes it, and the index it reports has gone backwards.
    threading.Timer(0.2, lambda: standin.reset_indexes(1)).start()
    start = time.monotonic()
    after, entries = c.kv.get("r/", recurse=True, index=before, wait="10s")
    assert time.monotonic() - start < 3
    assert int(after) < int(before) and len(entries) == 5


def test_parse_wait() -> None:
    assert parse_wait("10s") == 10 and parse_wait("5m") == 300 and parse_wait("1m30s") == 90
    assert parse_wait("250ms") == 0.25 and parse_wait("2h") == 600  # capped at 10 minutes
    with pytest.raises(ValueError):
        parse_wait("soon")


def _start(port: int, data: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, consul_standin.__file__, "--port", str(port), "--data", str(data)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert "listening" in proc.stdout.readline()
    return proc


def test_runs_as_a_process_and_persists_across_sigkill(tmp_path: Path) -> None:
    port, data = consul_standin.free_port(), tmp_path / "kv.json"
    proc = _start(port, data)
    try:
        c = consul.Consul(host="127.0.0.1", port=port)
        c.token = None
        assert c.kv.put("p/k", b"kept") is True
        index, _ = c.kv.get("p/k")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    proc = _start(port, data)
    try:
        again, entry = c.kv.get("p/k")
        assert entry["Value"] == b"kept" and again == index
    finally:
        proc.kill()
        proc.wait(timeout=10)
