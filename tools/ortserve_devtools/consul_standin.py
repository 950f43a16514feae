"""A Consul KV stand-in (a fake): the KV and txn HTTP API with Consul's documented semantics.

No Consul binary can be installed here, so tests run the registry against this instead; the
contract suite also runs against a real agent when CONSUL_HTTP_ADDR is set. Follows
website/content/api-docs/{kv,txn}.mdx and features/blocking.mdx of hashicorp/consul:

- one raft-like index, bumped by every write; every KV response carries X-Consul-Index
  (single key: its ModifyIndex, or the store index when missing; ?recurse/?keys: the highest
  ModifyIndex under the prefix, tombstones of deleted keys included, else the store index)
- blocking reads: ?index=N&wait=10s wait until that index moves past N or the wait (default 5m,
  max 10m, plus up to wait/16 jitter) runs out
- entries: CreateIndex, ModifyIndex, LockIndex, Flags, Key, Value (base64), Session
- PUT ?cas= (0: only if absent) ?flags=, body "true"/"false"; DELETE ?recurse ?cas (>0)
- GET ?recurse ?keys (+&separator=) ?raw; 404 with the index header when nothing matches
- PUT /v1/txn: verbs set, cas, get, get-tree, check-index, check-not-exists, delete, delete-tree,
  delete-cas; 200 {"Results"} or 409 {"Errors": [{"OpIndex", "What"}]}; at most 128 ops
- values over 512 KB: 413; ACL (when `token` is set): 403 "Permission denied" without it
- ?dc= other than the configured datacenter: 500 "No path to datacenter"
- fault knobs: `no_leader` (500 "No cluster leader"), `delay_s`, `reset_indexes()` (the index
  goes backwards as after a snapshot restore), `restart()` semantics via a new process

Run it as a process:  python tools/ortserve_devtools/consul_standin.py --port 8500 [--data FILE] [--token T]
                      (StandinProcess: killable and restartable on its port with its data, for fault drills)
or in-process:        with ConsulStandin() as consul: consul.address  ->  "127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

MAX_VALUE_BYTES = 512 * 1024
MAX_TXN_OPS = 128
DEFAULT_WAIT_S = 300.0
MAX_WAIT_S = 600.0
_DURATION = re.compile(r"([\d.]+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_wait(text: str) -> float:
    """Go duration ("10s", "5m", "1m30s", "250ms"); bare numbers are seconds, capped at 10 min."""
    if re.fullmatch(r"\d+", text):
        seconds = float(text)
    else:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"invalid wait {text!r}")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    return min(seconds, MAX_WAIT_S)


@dataclass
class KVEntry:
    Key: str
    Value: bytes
    Flags: int
    CreateIndex: int
    ModifyIndex: int
    LockIndex: int = 0
    Session: str | None = None

    def to_api(self, *, with_value: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"Key": self.Key, "Flags": self.Flags, "CreateIndex": self.CreateIndex,
                               "ModifyIndex": self.ModifyIndex, "LockIndex": self.LockIndex}
        out["Value"] = base64.b64encode(self.Value).decode() if with_value and self.Value else None
        if self.Session:
            out["Session"] = self.Session
        return out


class TxnFailed(Exception):
    def __init__(self, op_index: int, what: str) -> None:
        super().__init__(what)
        self.op_index = op_index
        self.what = what


class KVState:
    """The data, guarded by `cond` (every write notifies blocked readers)."""

    def __init__(self, data_file: Path | None = None) -> None:
        self.cond = threading.Condition()
        self.index = 1  # a fresh agent's index is already past 0
        self.entries: dict[str, KVEntry] = {}
        self.tombstones: dict[str, int] = {}  # deleted key -> index of the delete
        self.epoch = 0  # bumped by reset_indexes: a restore wakes every blocked query
        self.data_file = data_file
        if data_file and data_file.exists():
            self._load(data_file)

    # -- reads (caller holds cond) -------------------------------------------------------------------

    def key_index(self, key: str) -> int:
        entry = self.entries.get(key)
        return entry.ModifyIndex if entry else self.index

    def prefix_index(self, prefix: str) -> int:
        highest = max((e.ModifyIndex for k, e in self.entries.items() if k.startswith(prefix)), default=0)
        highest = max([highest, *(i for k, i in self.tombstones.items() if k.startswith(prefix))])
        return highest or self.index

    def under(self, prefix: str) -> list[KVEntry]:
        return [self.entries[k] for k in sorted(self.entries) if k.startswith(prefix)]

    # -- writes (caller holds cond) ------------------------------------------------------------------

    def apply_txn(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Checks every op against a scratch copy, then commits all at one new index."""
        scratch = dict(self.entries)
        tombs: dict[str, int] = {}
        new_index = self.index + 1
        results: list[dict[str, Any]] = []
        wrote = False
        for i, op in enumerate(ops):
            kv = op.get("KV")
            if not isinstance(kv, dict):
                raise TxnFailed(i, "only KV operations are supported by this stand-in")
            verb, key = kv.get("Verb"), kv.get("Key", "")
            index = int(kv.get("Index") or 0)
            current = scratch.get(key)
            if verb in ("set", "cas"):
                if verb == "cas":
                    if index == 0 and current is not None:
                        raise TxnFailed(i, f'failed to set key "{key}", index is stale')
                    if index != 0 and (current is None or current.ModifyIndex != index):
                        raise TxnFailed(i, f'failed to set key "{key}", index is stale')
                value = base64.b64decode(kv.get("Value") or "")
                entry = KVEntry(Key=key, Value=value, Flags=int(kv.get("Flags") or 0),
                                CreateIndex=current.CreateIndex if current else new_index,
                                ModifyIndex=new_index, LockIndex=current.LockIndex if current else 0)
                scratch[key] = entry
                tombs.pop(key, None)
                results.append({"KV": entry.to_api(with_value=False)})
                wrote = True
            elif verb in ("get", "get-tree"):
                found = [current] if verb == "get" and current else (
                    [scratch[k] for k in sorted(scratch) if k.startswith(key)] if verb == "get-tree" else [])
                if verb == "get" and current is None:
                    raise TxnFailed(i, f'key "{key}" doesn\'t exist')
                results.extend({"KV": e.to_api()} for e in found)
            elif verb == "check-index":
                if current is None:
                    raise TxnFailed(i, f'key "{key}" doesn\'t exist')
                if current.ModifyIndex != index:
                    raise TxnFailed(i, f'current modify index {current.ModifyIndex} != {index}')
                results.append({"KV": current.to_api(with_value=False)})
            elif verb == "check-not-exists":
                if current is not None:
                    raise TxnFailed(i, f'key "{key}" exists')
            elif verb in ("delete", "delete-cas", "delete-tree"):
                if verb == "delete-cas" and (current is None or current.ModifyIndex != index):
                    raise TxnFailed(i, f'failed to delete key "{key}", index is stale')
                doomed = [k for k in scratch if k.startswith(key)] if verb == "delete-tree" else (
                    [key] if current else [])
                for k in doomed:
                    del scratch[k]
                    tombs[k] = new_index
                wrote = True
            else:
                raise TxnFailed(i, f"unknown KV verb {verb!r}")
        if wrote:
            self.entries = scratch
            self.tombstones.update(tombs)
            self.index = new_index
            self._persist()
            self.cond.notify_all()
        return results

    def reset_indexes(self, to: int = 1) -> None:
        """Index goes backwards (snapshot restore): renumber every entry at or below `to`."""
        self.index = max(1, to)
        for e in self.entries.values():
            e.CreateIndex = min(e.CreateIndex, self.index)
            e.ModifyIndex = min(e.ModifyIndex, self.index)
        self.tombstones.clear()
        self.epoch += 1
        self._persist()
        self.cond.notify_all()

    def _persist(self) -> None:
        if not self.data_file:
            return
        doc = {"index": self.index,
               "entries": [{**asdict(e), "Value": base64.b64encode(e.Value).decode()} for e in self.entries.values()]}
        tmp = self.data_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.data_file)

    def _load(self, path: Path) -> None:
        doc = json.loads(path.read_text())
        self.index = int(doc["index"])
        for raw in doc["entries"]:
            raw["Value"] = base64.b64decode(raw["Value"])
            self.entries[raw["Key"]] = KVEntry(**raw)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    # -- plumbing ------------------------------------------------------------------------------------

    def _send(self, code: int, body: bytes | str | Any, *, index: int | None = None,
              content_type: str = "application/json") -> None:
        if not isinstance(body, bytes | str):
            body = json.dumps(body)
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if index is not None:
            self.send_header("X-Consul-Index", str(index))
            self.send_header("X-Consul-KnownLeader", "true")
            self.send_header("X-Consul-LastContact", "0")
        self.end_headers()
        self.wfile.write(data)

    def _text(self, code: int, text: str) -> None:
        self._send(code, text, content_type="text/plain; charset=utf-8")

    def _parse(self) -> tuple[str, dict[str, str]]:
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        return urllib.parse.unquote(parts.path), query

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _guard(self, query: dict[str, str]) -> bool:
        """Faults, ACL and datacenter checks shared by every endpoint; False when answered."""
        srv = self.server
        if srv.delay_s:
            time.sleep(srv.delay_s)
        if srv.no_leader:
            self._text(500, "No cluster leader")
            return False
        if srv.token is not None:
            auth = self.headers.get("Authorization", "")
            given = self.headers.get("X-Consul-Token") or (auth[7:] if auth.startswith("Bearer ") else None) \
                or query.get("token")
            if given != srv.token:
                self._text(403, "Permission denied")
                return False
        if "dc" in query and query["dc"] != srv.datacenter:
            self._text(500, "No path to datacenter")
            return False
        return True

    # -- endpoints -----------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path, q = self._parse()
        if path == "/v1/status/leader":
            self._send(200, '"127.0.0.1:8300"')
            return
        if not path.startswith("/v1/kv/"):
            self._text(404, f"Invalid URL path: not a recognized HTTP API endpoint: {path}")
            return
        if not self._guard(q):
            return
        key = path[len("/v1/kv/"):]
        listing = "recurse" in q or "keys" in q
        state = self.server.state
        try:
            wait_s = parse_wait(q["wait"]) if "wait" in q else DEFAULT_WAIT_S
            min_index = int(q.get("index", "0") or 0)
        except ValueError as e:
            self._text(400, str(e))
            return
        wait_s += random.uniform(0, wait_s / 16)
        deadline = time.monotonic() + wait_s
        with state.cond:
            def current() -> int:
                return state.prefix_index(key) if listing else state.key_index(key)

            epoch = state.epoch
            while min_index > 0 and current() <= min_index and state.epoch == epoch \
                    and not self.server.closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                state.cond.wait(min(remaining, 0.5))
            index = current()
            if "keys" in q:
                names = [e.Key for e in state.under(key)]
                sep = q.get("separator")
                if sep:
                    folded = []
                    for name in names:
                        cut = name.find(sep, len(key))
                        name = name[: cut + len(sep)] if cut >= 0 else name
                        if name not in folded:
                            folded.append(name)
                    names = folded
                body: Any = names or None
            elif "recurse" in q:
                body = [e.to_api() for e in state.under(key)] or None
            else:
                entry = state.entries.get(key)
                body = entry if entry else None
        if body is None:
            self._send(404, b"", index=index, content_type="text/plain")
        elif "raw" in q and isinstance(body, KVEntry):
            self._send(200, body.Value, index=index, content_type="text/plain")
        elif isinstance(body, KVEntry):
            self._send(200, [body.to_api()], index=index)
        else:
            self._send(200, body, index=index)

    def do_PUT(self) -> None:
        path, q = self._parse()
        body = self._body()
        if not self._guard(q):
            return
        if path == "/v1/txn":
            self._txn(body)
            return
        if not path.startswith("/v1/kv/"):
            self._text(404, f"Invalid URL path: not a recognized HTTP API endpoint: {path}")
            return
        key = path[len("/v1/kv/"):]
        if len(body) > MAX_VALUE_BYTES:
            self._text(413, f"Request body({len(body)} bytes) too large, max size: {MAX_VALUE_BYTES} bytes. "
                            f"See https://developer.hashicorp.com/consul/docs/agent/config/config-files#kv_max_value_size.")
            return
        if "acquire" in q or "release" in q:
            self._text(400, "sessions are not supported by this stand-in")
            return
        op: dict[str, Any] = {"Verb": "set", "Key": key, "Value": base64.b64encode(body).decode(),
                              "Flags": int(q.get("flags", "0") or 0)}
        if "cas" in q:
            op.update(Verb="cas", Index=int(q["cas"]))
        self._apply_one(op)

    def do_DELETE(self) -> None:
        path, q = self._parse()
        self._body()
        if not self._guard(q):
            return
        if not path.startswith("/v1/kv/"):
            self._text(404, f"Invalid URL path: not a recognized HTTP API endpoint: {path}")
            return
        key = path[len("/v1/kv/"):]
        state = self.server.state
        op: dict[str, Any] = {"Verb": "delete-tree" if "recurse" in q else "delete", "Key": key}
        if "cas" in q:
            cas = int(q["cas"])
            if cas <= 0:  # Consul: "a 0 index will not delete the key"
                with state.cond:
                    self._send(200, "false", index=state.index)
                return
            op.update(Verb="delete-cas", Index=cas)
        self._apply_one(op)

    def _apply_one(self, op: dict[str, Any]) -> None:
        """One KV write as Consul's /v1/kv answers it: 200 "true", or "false" when its check failed."""
        state = self.server.state
        with state.cond:
            try:
                state.apply_txn([{"KV": op}])
                ok = True
            except TxnFailed:
                ok = False
            index = state.index
        self._send(200, "true" if ok else "false", index=index)

    def _txn(self, body: bytes) -> None:
        try:
            ops = json.loads(body or b"[]")
            if not isinstance(ops, list):
                raise ValueError("expected a JSON array of operations")
        except ValueError as e:
            self._text(400, f"Failed to parse body: {e}")
            return
        if len(ops) > MAX_TXN_OPS:
            self._text(413, f"Transaction contains too many operations ({len(ops)} > {MAX_TXN_OPS})")
            return
        for op in ops:
            value = (op.get("KV") or {}).get("Value") if isinstance(op, dict) else None
            if value and len(base64.b64decode(value)) > MAX_VALUE_BYTES:
                self._text(413, f"Value for key {op['KV'].get('Key')!r} is too large "
                                f"({len(base64.b64decode(value))} > {MAX_VALUE_BYTES} bytes)")
                return
        state = self.server.state
        with state.cond:
            try:
                results = state.apply_txn(ops)
            except TxnFailed as e:
                self._send(409, {"Results": None, "Errors": [{"OpIndex": e.op_index, "What": e.what}]},
                           index=state.index)
                return
            index = state.index
        self._send(200, {"Results": results, "Errors": None}, index=index)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], state: KVState, *, token: str | None, datacenter: str,
                 verbose: bool) -> None:
        super().__init__(addr, _Handler)
        self.state = state
        self.token = token
        self.datacenter = datacenter
        self.verbose = verbose
        self.no_leader = False
        self.delay_s = 0.0
        self.closing = False


class ConsulStandin:
    """In-process stand-in on a loopback port; a context manager. Fault knobs are attributes."""

    def __init__(self, *, port: int = 0, token: str | None = None, datacenter: str = "dc1",
                 data_file: str | Path | None = None, verbose: bool = False) -> None:
        self.state = KVState(Path(data_file) if data_file else None)
        self._server = _Server(("127.0.0.1", port), self.state, token=token, datacenter=datacenter,
                               verbose=verbose)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, prefix: str = "ortserve/", **params: str) -> str:
        query = urllib.parse.urlencode({"prefix": prefix, **params})
        return f"consul://{self.address}?{query}"

    @property
    def no_leader(self) -> bool:
        return self._server.no_leader

    @no_leader.setter
    def no_leader(self, value: bool) -> None:
        self._server.no_leader = value

    @property
    def delay_s(self) -> float:
        return self._server.delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        self._server.delay_s = value

    def reset_indexes(self, to: int = 1) -> None:
        with self.state.cond:
            self.state.reset_indexes(to)

    def start(self) -> ConsulStandin:
        # A short poll interval keeps stop() (which waits for one poll) fast in tests.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="consul-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.closing = True
        with self.state.cond:
            self.state.cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> ConsulStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StandinProcess:
    """The stand-in as its own process (`python tools/ortserve_devtools/consul_standin.py --port N --data FILE`):
    `kill()` is a crash, and `start()` again comes back on the same port with the same data."""

    def __init__(self, data_file: Path, *, port: int = 0, log_path: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.data_file = data_file
        self.port = port or free_port()
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> StandinProcess:
        # Standard library only: it runs as a file, from wherever the checkout is.
        command = [sys.executable, str(Path(__file__).resolve()), "--port", str(self.port),
                   "--data", str(self.data_file)]
        with contextlib.ExitStack() as files:
            log: IO[bytes] | int = (files.enter_context(open(self.log_path, "ab")) if self.log_path
                                    else subprocess.DEVNULL)
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                where = f" (log: {self.log_path})" if self.log_path else ""
                raise RuntimeError(f"the Consul stand-in exited with {self.proc.returncode}{where}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"the Consul stand-in did not listen on {self.address} within {timeout_s:.0f} s")

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, its connections drop."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Consul KV stand-in (a fake) for tests")
    p.add_argument("--port", type=int, default=8500, help="0 picks a free port")
    p.add_argument("--data", type=Path, help="persist the KV here so a restarted process keeps it")
    p.add_argument("--token", help="require this ACL token (403 Permission denied otherwise)")
    p.add_argument("--datacenter", default="dc1")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    standin = ConsulStandin(port=args.port, token=args.token, datacenter=args.datacenter, data_file=args.data,
                            verbose=args.verbose)
    print(f"consul stand-in listening on {standin.address}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        standin._server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
