"""Start `ortserve serve` as its own process for a run, find its ports, wait until the model is ready.

The server's stdout (one JSON log line per request at the default level) goes to a file, not a
pipe: reading a pipe would cost the benchmark process CPU on the same two cores, and an unread
pipe would stall the server once full.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

import ortserve
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc


class ServerStartError(RuntimeError):
    """The server exited or did not become ready; the message carries its last log lines."""


class ServedProcess:
    """One ortserve process on loopback with free ports. Owned by the benchmark's main thread."""

    def __init__(self, *, bundle: Path, model: str, log_path: Path, extra_args: Sequence[str] = ()) -> None:
        self.bundle = bundle
        self.model = model
        self.log_path = log_path
        self.args = [
            sys.executable, "-m", "ortserve.service.cli", "serve", "--bundle", str(bundle), "--model-name", model,
            "--host", "127.0.0.1", "--port", "0", "--metrics-host", "127.0.0.1", "--metrics-port", "0",
            "--http-port", "0",
            *extra_args,
        ]
        self.port = 0
        self.metrics_port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self, timeout_s: float = 120.0) -> None:
        # The server imports the same ortserve as this process (source tree or installed package).
        root = str(Path(ortserve.__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout_s
        while not self.port:
            self._check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"server did not log server_started within {timeout_s:.0f} s{self._tail()}")
            self._scan_log()
            time.sleep(0.05)
        self._wait_model_ready(deadline)

    def _scan_log(self) -> None:
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and event.get("event") == "server_started":
                self.port = int(event["port"])
                self.metrics_port = int(event.get("metrics_port") or 0)
                return

    def _wait_model_ready(self, deadline: float) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            while True:
                self._check_alive()
                try:
                    if stub.ModelReady(pb.ModelReadyRequest(name=self.model), timeout=2).ready:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerStartError(f"model {self.model!r} not ready before the timeout{self._tail()}")
                time.sleep(0.1)

    def _check_alive(self) -> None:
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            raise ServerStartError(f"server exited with status {code} while starting{self._tail()}")

    def _tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"; its last log lines ({self.log_path}):\n  " + "\n  ".join(text)

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process so far (all threads), from /proc."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def thread_cpu_seconds(self) -> dict[int, tuple[str, float]]:
        """Per thread of the server: (name, user + system CPU so far), from /proc; {} where it cannot be read."""
        return thread_cpu_seconds(self.pid)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(5)


ENGINE_THREAD_PREFIXES = ("ortserve-lane", "ortserve-wide", "ortserve-engine")
"""The threads that call the engine: the native batcher's lane and wide threads, the Python front end's lane and
lone-run pools. ORT's own pool threads of the wide session are unnamed and count with the rest of the server
(under load, batches run on the lanes' one-thread sessions, which have no pool)."""


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Per thread of `pid`: (name, user + system CPU so far) from /proc/PID/task; threads that ended are absent."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        # comm is in parentheses and may hold spaces or ')': the fields after the last ')' are fixed.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def engine_thread_share(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> float | None:
    """CPU seconds the engine's threads (ENGINE_THREAD_PREFIXES) used between two snapshots; None when no such
    thread exists (a server other than ortserve's native front end, or /proc unreadable)."""
    used, found = 0.0, False
    for tid, (name, cpu) in after.items():
        if name.startswith(ENGINE_THREAD_PREFIXES):
            found = True
            used += cpu - before.get(tid, (name, 0.0))[1]
    return used if found else None
