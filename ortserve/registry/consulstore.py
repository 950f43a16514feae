"""ConsulStore: the store contract on Consul KV through py-consul's sync client.

Keys are stored under the address's prefix. Failures map to the store errors:
  connection refused / timeout / TLS failure, HTTP 5xx ("No cluster leader")  -> StoreUnavailable
  HTTP 403 ("Permission denied"), 413 / values over 512 KB, other 4xx         -> StoreRefused
A failed check-and-set is not an error: put/delete/txn return False.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import consul
import requests
from consul.callback import CB

from ortserve.registry.address import ConsulAddress
from ortserve.registry.store import (
    MAX_TXN_OPS,
    Entry,
    StoreError,
    StoreRefused,
    StoreUnavailable,
    TxnOp,
    check_key,
    check_prefix,
)

MAX_VALUE_BYTES = 512 * 1024  # Consul's default limits.kv_max_value_size
MAX_WAIT_S = 600.0  # Consul's -max-query-time


class ConsulStore:
    """Thread-safe as far as requests' Session is (one client per store; the CLI uses one thread)."""

    def __init__(self, address: ConsulAddress) -> None:
        self.address = address
        self._prefix = address.prefix
        self._client = consul.Consul(host=address.host, port=address.port, scheme=address.scheme,
                                     dc=address.dc, verify=address.verify, cert=address.cert,
                                     connections_timeout=address.timeout_s)
        # py-consul lets CONSUL_HTTP_TOKEN override an explicit token; the address already resolved
        # URL-then-env, so set it here to make that order hold.
        self._client.token = address.token

    def describe(self) -> str:
        return self.address.describe()

    def close(self) -> None:
        self._client.http.session.close()

    def get(self, key: str) -> Entry | None:
        check_key(key)
        _index, data = self._call(lambda: self._client.kv.get(self._prefix + key))
        return self._entry(data) if data else None

    def list(self, prefix: str) -> list[Entry]:
        check_prefix(prefix)
        _index, data = self._call(lambda: self._client.kv.get(self._prefix + prefix, recurse=True))
        return sorted((self._entry(d) for d in data or []), key=lambda e: e.key)

    def watch(self, prefix: str, index: int, wait_s: float) -> tuple[int, list[Entry]]:
        check_prefix(prefix)
        full = self._prefix + prefix
        wait_ms = int(min(MAX_WAIT_S, max(0.001, wait_s)) * 1000)
        # index 0 makes py-consul send a plain read (no wait), which is what a reset asks for.
        raw_index, data = self._call(lambda: self._client.kv.get(
            full, recurse=True, index=index if index > 0 else None, wait=f"{wait_ms}ms"))
        new_index = _as_index(raw_index)
        if 0 < new_index < index:
            # The index went backwards (snapshot restore, restarted -dev agent): start over from a
            # plain read so the caller gets a full, fresh state and an index valid on this agent.
            raw_index, data = self._call(lambda: self._client.kv.get(full, recurse=True))
            new_index = _as_index(raw_index)
        # Index 0 would make the next blocking call return at once (a busy loop); 1 is always safe.
        return max(1, new_index), sorted((self._entry(d) for d in data or []), key=lambda e: e.key)

    def put(self, key: str, value: bytes, cas: int | None = None) -> bool:
        check_key(key)
        self._check_size(key, value)
        return bool(self._call(lambda: self._client.kv.put(self._prefix + key, value, cas=cas)))

    def delete(self, key: str, cas: int | None = None) -> bool:
        check_key(key)
        return bool(self._call(lambda: self._client.kv.delete(self._prefix + key, cas=cas)))

    def txn(self, ops: list[TxnOp]) -> bool:
        if not ops:
            return True
        if len(ops) > MAX_TXN_OPS:
            raise StoreRefused(f"{self.describe()}: transaction has {len(ops)} operations (max {MAX_TXN_OPS})")
        payload = []
        for op in ops:
            check_key(op.key)
            self._check_size(op.key, op.value)
            kv: dict[str, Any] = {"Verb": op.verb, "Key": self._prefix + op.key}
            if op.verb in ("set", "cas"):
                kv["Value"] = base64.b64encode(op.value).decode()
            if op.verb in ("cas", "check-index", "delete-cas"):
                kv["Index"] = op.index
            payload.append({"KV": kv})
        params = [("dc", self.address.dc)] if self.address.dc else []
        # py-consul's txn.put sends neither the token header nor dc, so call its HTTP layer directly.
        try:
            self._call(lambda: self._client.http.put(CB.json(), "/v1/txn", params=params,
                                                     data=json.dumps(payload),
                                                     headers=self._client.prepare_headers()))
        except _TxnRolledBack as e:
            if "permission denied" in e.body.lower():
                raise StoreRefused(f"{self.describe()}: permission denied (check the ACL token)") from None
            return False
        return True

    # -- internals ----------------------------------------------------------------------------------

    def _entry(self, data: dict[str, Any]) -> Entry:
        key = data["Key"]
        rel = key[len(self._prefix):] if key.startswith(self._prefix) else key
        return Entry(key=rel, value=data.get("Value") or b"", modify_index=int(data["ModifyIndex"]),
                     create_index=int(data["CreateIndex"]))

    def _check_size(self, key: str, value: bytes) -> None:
        if len(value) > MAX_VALUE_BYTES:
            raise StoreRefused(f"{self.describe()}: value for {key} is {len(value)} bytes "
                               f"(Consul's limit is {MAX_VALUE_BYTES})")

    def _call(self, fn: Any) -> Any:
        where = self.describe()
        try:
            return fn()
        except requests.exceptions.SSLError as e:
            raise StoreUnavailable(f"{where}: TLS failure ({_short(e)})") from None
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as e:
            raise StoreUnavailable(f"{where}: unreachable ({type(e).__name__})") from None
        except consul.ACLPermissionDenied:
            raise StoreRefused(f"{where}: permission denied (check the ACL token)") from None
        except consul.ConsulException as e:
            text = _short(e)
            code = text.split(" ", 1)[0]
            if code == "409":
                raise _TxnRolledBack(text) from None
            if code.startswith("5"):
                raise StoreUnavailable(f"{where}: agent error {text}") from None
            if code == "413":
                raise StoreRefused(f"{where}: request too large ({text})") from None
            raise StoreRefused(f"{where}: refused ({text})") from None
        except requests.exceptions.RequestException as e:
            raise StoreUnavailable(f"{where}: request failed ({_short(e)})") from None


class _TxnRolledBack(StoreError):
    """HTTP 409 from /v1/txn: the transaction was rolled back (its body says why)."""

    def __init__(self, body: str) -> None:
        super().__init__(body)
        self.body = body


def _as_index(raw: Any) -> int:
    # py-consul returns X-Consul-Index as a str.
    try:
        return int(raw)
    except (TypeError, ValueError):
        return 0


def _short(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else type(e).__name__
