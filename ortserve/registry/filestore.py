"""FileStore: the embedded store for one machine, the same key schema as files under a root.

Layout under `root`:
    kv/<key>.json    one JSON envelope per key: {"create_index", "modify_index", "value"|"value_b64"};
                     a deleted key stays as a tombstone {"deleted": true, ...} so that a watch on its
                     prefix sees the delete (as Consul's tombstones do)
    index            the store index, bumped by every write
    lock             fcntl.flock target: shared for reads, exclusive for writes (across processes)
    journal.json     the pending writes of one transaction while it is being applied

Every write, including a single put, goes through the journal: it is written atomically (temp +
fsync + rename) before any key file changes and removed after, and whoever takes the lock next
replays a journal left by a killed writer. So a multi-key transaction is all-or-nothing even
across a SIGKILL, and readers (who hold the shared lock) never see half of one.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ortserve.durable import fsync_dir
from ortserve.registry.pausepoints import pause_point
from ortserve.registry.store import (
    MAX_TXN_OPS,
    Entry,
    StoreRefused,
    StoreUnavailable,
    TxnOp,
    check_key,
    check_prefix,
)

KV_DIR = "kv"
SUFFIX = ".json"
POLL_S = 0.05
# Same limit as Consul so that a record that fits here fits there.
MAX_VALUE_BYTES = 512 * 1024


class FileStore:
    """Thread- and process-safe; every method opens its own lock file descriptor."""

    def __init__(self, root: str | Path, *, poll_s: float = POLL_S) -> None:
        self.root = Path(root).absolute()
        self._kv = self.root / KV_DIR
        self._index_path = self.root / "index"
        self._lock_path = self.root / "lock"
        self._journal_path = self.root / "journal.json"
        self._poll_s = poll_s

    def describe(self) -> str:
        return f"file://{self.root}"

    def close(self) -> None:
        pass

    # -- reads --------------------------------------------------------------------------------------

    def get(self, key: str) -> Entry | None:
        check_key(key)
        with self._locked(exclusive=False) as present:
            if not present:
                return None
            return _live(key, self._read_envelope(key))

    def list(self, prefix: str) -> list[Entry]:
        check_prefix(prefix)
        with self._locked(exclusive=False) as present:
            if not present:
                return []
            return [e for key, env in self._scan(prefix) if (e := _live(key, env)) is not None]

    def watch(self, prefix: str, index: int, wait_s: float) -> tuple[int, list[Entry]]:
        check_prefix(prefix)
        deadline = time.monotonic() + max(0.0, wait_s)
        seen_store_index = -1
        while True:
            store_index = self._read_index_file()
            if store_index != seen_store_index:
                seen_store_index = store_index
                current, entries = self._prefix_state(prefix)
                # Backwards (store replaced) also returns at once: the caller restarts from this state.
                if index <= 0 or current != index:
                    return current, entries
            if time.monotonic() >= deadline:
                return self._prefix_state(prefix)
            time.sleep(min(self._poll_s, max(0.0, deadline - time.monotonic())))

    def _prefix_state(self, prefix: str) -> tuple[int, list[Entry]]:
        with self._locked(exclusive=False) as present:
            if not present:
                return 1, []
            scanned = self._scan(prefix)
            entries = [e for key, env in scanned if (e := _live(key, env)) is not None]
            # Like Consul: the highest modify index in the prefix (tombstones included), else the
            # store index, so that any later write under the prefix is seen as a change.
            highest = max((int(env["modify_index"]) for _, env in scanned), default=0)
            return max(1, highest or self._read_index_file()), entries

    # -- writes -------------------------------------------------------------------------------------

    def put(self, key: str, value: bytes, cas: int | None = None) -> bool:
        op = TxnOp("set", key, value) if cas is None else TxnOp("cas", key, value, cas)
        return self.txn([op])

    def delete(self, key: str, cas: int | None = None) -> bool:
        if cas is not None and cas <= 0:
            return False  # Consul: DELETE ?cas=0 never deletes
        op = TxnOp("delete", key) if cas is None else TxnOp("delete-cas", key, index=cas)
        return self.txn([op])

    def txn(self, ops: list[TxnOp]) -> bool:
        if not ops:
            return True
        if len(ops) > MAX_TXN_OPS:
            raise StoreRefused(f"{self.describe()}: transaction has {len(ops)} operations (max {MAX_TXN_OPS})")
        for op in ops:
            check_key(op.key)
            if len(op.value) > MAX_VALUE_BYTES:
                raise StoreRefused(f"{self.describe()}: value for {op.key} is {len(op.value)} bytes "
                                   f"(limit {MAX_VALUE_BYTES})")
        with self._locked(exclusive=True):
            current = {op.key: _live(op.key, self._read_envelope(op.key)) for op in ops}
            if not all(_check(op, current[op.key]) for op in ops):
                return False
            new_index = max(1, self._read_index_file()) + 1  # 1 is what an empty store reports
            writes: dict[str, dict[str, Any]] = {}
            for op in ops:
                before = current[op.key]
                if op.verb in ("set", "cas"):
                    env = {"create_index": before.create_index if before else new_index,
                           "modify_index": new_index}
                    env.update(_encode_value(op.value))
                    writes[op.key] = env
                    current[op.key] = Entry(op.key, op.value, new_index, int(env["create_index"]))
                elif op.verb in ("delete", "delete-cas"):
                    writes[op.key] = {"deleted": True, "create_index": 0, "modify_index": new_index}
                    current[op.key] = None
            if not writes:
                return True  # only checks
            journal = {"index": new_index, "writes": writes}
            _atomic_write(self._journal_path, json.dumps(journal).encode())
            self._apply(journal)
            return True

    # -- internals ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[bool]:
        """Holds the store lock; yields False for a store that does not exist yet (reads only)."""
        if not exclusive and not self._lock_path.exists():
            yield False
            return
        try:
            if exclusive:
                self._kv.mkdir(parents=True, exist_ok=True)
            # Readers open read-only so a server can watch a store mounted read-only.
            flags = os.O_RDWR | os.O_CREAT if exclusive else os.O_RDONLY
            fd = os.open(self._lock_path, flags, 0o644)
        except OSError as e:
            raise StoreUnavailable(f"{self.describe()}: cannot open store ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if self._journal_path.exists():
                # A writer died mid-transaction: finish it before anyone reads.
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._replay()
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield True
        finally:
            os.close(fd)  # closing releases the flock

    def _replay(self) -> None:
        try:
            journal = json.loads(self._journal_path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            # A journal is renamed into place complete, so an unreadable one was never committed.
            self._journal_path.unlink(missing_ok=True)
            return
        self._apply(journal)

    def _apply(self, journal: dict[str, Any]) -> None:
        """Idempotent: every step replaces a whole file, so replaying after a crash is safe."""
        _atomic_write(self._index_path, str(journal["index"]).encode())
        dirs = {self.root}
        for key, env in journal["writes"].items():
            path = self._path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, json.dumps(env).encode(), sync_dir=False)
            dirs.add(path.parent)
            pause_point("filestore-mid-apply")  # crash tests: die with the txn half applied
        for d in dirs:
            fsync_dir(d)
        self._journal_path.unlink()
        fsync_dir(self.root)

    def _path(self, key: str) -> Path:
        return self._kv / (key + SUFFIX)

    def _read_envelope(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(key).read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise StoreUnavailable(f"{self.describe()}: cannot read {key} ({e})") from None

    def _scan(self, prefix: str) -> list[tuple[str, dict[str, Any]]]:
        """(key, envelope) for every key file under the prefix, tombstones included, sorted."""
        base_dir = self._kv / prefix.rsplit("/", 1)[0] if "/" in prefix else self._kv
        out = []
        for dirpath, _dirs, files in os.walk(base_dir):
            for name in files:
                if not name.endswith(SUFFIX) or name.startswith("."):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), self._kv)[: -len(SUFFIX)]
                key = rel.replace(os.sep, "/")
                if key.startswith(prefix):
                    env = self._read_envelope(key)
                    if env is not None:
                        out.append((key, env))
        out.sort(key=lambda kv: kv[0])
        return out

    def _read_index_file(self) -> int:
        try:
            return int(self._index_path.read_bytes() or b"0")
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as e:
            raise StoreUnavailable(f"{self.describe()}: cannot read the index file ({e})") from None


def _live(key: str, env: dict[str, Any] | None) -> Entry | None:
    if env is None or env.get("deleted"):
        return None
    value = base64.b64decode(env["value_b64"]) if "value_b64" in env else env.get("value", "").encode()
    return Entry(key=key, value=value, modify_index=int(env["modify_index"]),
                 create_index=int(env["create_index"]))


def _encode_value(value: bytes) -> dict[str, str]:
    # Text values stay readable in the file (operators do `cat`); anything else is base64.
    try:
        return {"value": value.decode()}
    except UnicodeDecodeError:
        return {"value_b64": base64.b64encode(value).decode()}


def _check(op: TxnOp, entry: Entry | None) -> bool:
    if op.verb in ("cas", "check-index", "delete-cas"):
        if op.index == 0:
            return entry is None and op.verb != "delete-cas"
        return entry is not None and entry.modify_index == op.index
    if op.verb == "check-not-exists":
        return entry is None
    if op.verb in ("set", "delete"):
        return True
    raise StoreRefused(f"unknown transaction verb {op.verb!r}")


def _atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)
