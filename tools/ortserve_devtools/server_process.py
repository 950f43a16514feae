"""`ortserve serve` as a child process on loopback: the one launcher of the tests, the bench, the soak, the swap
bench, the fuzz runs and the GPU check.

    server = ServerProcess(["--bundle", str(bundle), "--model-name", "m"], log_path=workdir / "server.log")
    server.wait_ready(model="m")          # server_started logged (ports read from it), then ModelReady
    ... server.address, server.metrics_port, server.events("version_loaded"), server.scrape() ...
    server.stop()                         # SIGTERM, SIGKILL after the timeout; the exit status

Every port is 0 (the server picks one and logs it in `server_started`) unless the arguments name one; the REST port
is off (`--http-port 0`) unless `http=True` or the arguments name it. The child imports the ortserve this process
imported (its directory goes first on PYTHONPATH) and writes its log unbuffered; given `python=`, that interpreter
runs it with its own install instead (an A/B against another checkout's .venv).

Where the log goes is the caller's choice:
- `log_path=None` (the tests): stdout and stderr are pipes, read by two threads; every stdout line is kept
  (`raw_lines`) and parsed (`logs`), stderr in `stderr_lines`.
- `log_path=FILE` (the bench, the soak, the GPU check): stdout and stderr go to the file, which costs the caller no
  CPU under load and never stalls the server; `logs` is filled from the file when asked (`events`, `wait_*`),
  without the per-call `request` lines (a long run writes hundreds of MB of them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

import ortserve
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve_devtools.consul_standin import free_port

__all__ = ["ServerLog", "ServerProcess", "ServerStartError", "child_env", "free_port", "start_until_ready"]


class ServerStartError(RuntimeError):
    """The server exited, or did not start or become ready in time; the message carries its last log lines."""


def child_env(extra: Mapping[str, str] | None = None, *, paths: Sequence[Path | str] = (),
              own_install: bool = False) -> dict[str, str]:
    """This process's environment for a child that imports the same ortserve (source tree or installed package),
    with `paths` after it on PYTHONPATH, output unbuffered, then `extra`. `own_install`: the child is another
    interpreter that imports its own ortserve, so no PYTHONPATH of ours (nor `paths`)."""
    if own_install:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    else:
        root = str(Path(ortserve.__file__).resolve().parent.parent)
        pythonpath = [root, *map(str, paths), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in pythonpath if p)}
    return {**env, "PYTHONUNBUFFERED": "1", **(extra or {})}


class ServerLog:
    """Follows a server's log file for its non-request lines (lifecycle, registry), read incrementally: the
    `request` lines are skipped without parsing. `poll` may be called from any thread (guarded by `_lock`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._offset = 0
        self._lock = threading.Lock()

    def poll(self) -> list[dict[str, Any]]:
        """Reads what was appended since the last call; returns the new events."""
        with self._lock:
            new: list[dict[str, Any]] = []
            try:
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except OSError:
                return new
            end = chunk.rfind(b"\n") + 1
            self._offset += end
            for line in chunk[:end].splitlines():
                if b'"event":"request"' in line:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict) and "event" in event:
                    new.append(event)
            self.events.extend(new)
            return new


class ServerProcess:
    """One `python -m ortserve.service.cli serve` process, started by the constructor. Owned by the thread that
    made it; the log readers (pipe mode) only append to `logs`, `raw_lines` and `stderr_lines`."""

    def __init__(self, args: Sequence[str], *, log_path: Path | None = None, env: Mapping[str, str] | None = None,
                 http: bool = False, cwd: Path | None = None, python: str | None = None) -> None:
        self.args = list(args)
        if not any(a == "--http-port" or a.startswith("--http-port=") for a in self.args):
            self.args += ["--http-port", str(free_port()) if http else "0"]
        self.log_path = log_path
        self.logs: list[dict[str, Any]] = []
        self.raw_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self.port = 0
        self.metrics_port = 0
        self.http_port = 0
        self._started = threading.Event()
        self._follower = ServerLog(log_path) if log_path is not None else None
        if self._follower is not None:
            self.logs = self._follower.events
        command = [python or sys.executable, "-m", "ortserve.service.cli", "serve", "--host", "127.0.0.1", "--port",
                   "0", "--metrics-host", "127.0.0.1", "--metrics-port", "0", *self.args]
        environment = child_env(env, own_install=python is not None)
        if log_path is None:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env=environment, cwd=cwd)
            threading.Thread(target=self._read_stdout, name="server-stdout", daemon=True).start()
            threading.Thread(target=self._read_stderr, name="server-stderr", daemon=True).start()
        else:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "wb") as log:
                self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                             cwd=cwd)

    # ---- where it listens --------------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    # ---- its log ---------------------------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw_lines.append(line)
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                self.logs.append(event)
                self._note(event)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def _note(self, event: dict[str, Any]) -> None:
        if event.get("event") == "server_started" and not self._started.is_set():
            self.port = int(event["port"])
            self.metrics_port = int(event.get("metrics_port") or 0)
            self.http_port = int(event.get("http_port") or 0)
            self._started.set()

    def _read_file(self) -> None:
        if self._follower is not None:
            for event in self._follower.poll():
                self._note(event)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The log's events so far (only `name`'s when given)."""
        self._read_file()
        return [e for e in list(self.logs) if name is None or e.get("event") == name]

    def wait_event(self, name: str, timeout: float = 10.0, **match: Any) -> dict[str, Any]:
        """The first `name` event whose fields equal `match`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events(name):
                if all(event.get(k) == v for k, v in match.items()):
                    return event
            time.sleep(0.02)
        raise AssertionError(f"no {name} event with {match} in {timeout}s")

    def tail(self, lines: int = 30) -> str:
        """The log's last lines (stderr's, then stdout's, in pipe mode), for an error message."""
        if self.log_path is None:
            return "".join(self.stderr_lines[-lines:]) + "".join(self.raw_lines[-lines:])
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"({self.log_path})\n  " + "\n  ".join(text)

    def scrape(self) -> str:
        """The server's /metrics text."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as reply:
            return str(reply.read().decode())

    # ---- readiness -------------------------------------------------------------------------------------------

    def wait_started(self, timeout: float = 60.0) -> None:
        """Until the server logged `server_started` (which sets the ports)."""
        deadline = time.monotonic() + timeout
        while True:
            self._read_file()
            if self._started.wait(0.05):
                return
            if self.proc.poll() is not None:
                self._read_file()
                if self._started.is_set():
                    return
                raise ServerStartError(f"server exited with status {self.proc.returncode} while starting:\n"
                                       f"{self.tail()}")
            if time.monotonic() > deadline:
                raise ServerStartError(f"server did not log server_started within {timeout:.0f} s:\n{self.tail()}")

    def wait_ready(self, timeout: float = 60.0, model: str = "", *, give_up_on: str = "") -> None:
        """`wait_started`, then until ModelReady(`model`) (ServerReady without one) answers true, each within
        `timeout`. `give_up_on`: an event (e.g. `version_failed`) that ends the wait at once."""
        self.wait_started(timeout)
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerStartError(f"server exited with status {self.proc.returncode}:\n{self.tail()}")
                if give_up_on and self.events(give_up_on):
                    raise ServerStartError(f"the server logged {give_up_on}:\n{self.tail(3)}")
                try:
                    if model:
                        if stub.ModelReady(pb.ModelReadyRequest(name=model), timeout=2).ready:
                            return
                    elif stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        what = f"model {model!r}" if model else "server"
        raise ServerStartError(f"{what} not ready in {timeout:.0f} s:\n{self.tail(20)}")

    # ---- the end ---------------------------------------------------------------------------------------------

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; past `timeout` SIGKILL, and TimeoutExpired is raised (a shutdown that hung)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise

    def stop(self, timeout: float = 30.0) -> int:
        """`terminate` that never raises: the exit status (negative: the signal that ended it)."""
        try:
            return self.terminate(timeout)
        except subprocess.TimeoutExpired:
            return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash: no drain, its connections drop."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def start_until_ready(args: Sequence[str], *, model: str, log_path: Path, timeout: float = 120.0,
                      env: Mapping[str, str] | None = None, cwd: Path | None = None,
                      give_up_on: str = "") -> ServerProcess:
    """A `ServerProcess` logging to `log_path` whose `model` is ready; one that is not within `timeout` is stopped
    before the ServerStartError is raised."""
    server = ServerProcess(args, log_path=log_path, env=env, cwd=cwd)
    try:
        server.wait_ready(timeout, model, give_up_on=give_up_on)
    except BaseException:
        server.stop(10)
        raise
    return server
