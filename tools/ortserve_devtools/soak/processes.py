"""The processes of a soak: the `registry` CLI, `ortserve serve --registry` (the tools' launcher,
ortserve_devtools.server_process), the load processes (soak.client), and what the soak reads from the server
(admin status, /proc; its log's lifecycle lines: the launcher's ServerLog). The Consul stand-in's process is
ortserve_devtools.consul_standin.StandinProcess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import grpc

from ortserve_devtools.checkout import ROOT
from ortserve_devtools.server_process import ServerProcess, child_env, start_until_ready

ADMIN_STATUS_METHOD = "/ortserve.admin.v1.Admin/Status"
"""ortserve.service.app.ADMIN_STATUS_METHOD (what `ortserve status` calls); not imported, so that the soak's own
process does not load the engine (tests/scripts/test_soak.py checks that the two agree)."""


def ortserve_env() -> dict[str, str]:
    """The environment for child processes: they import the same ortserve as this one (source tree or installed),
    and tools/ (ortserve_devtools)."""
    return child_env(paths=[ROOT / "tools"])


class RegistryCli:
    """`python -m ortserve.registry.cli --registry URL --artifacts URL ...`, as an operator runs it."""

    def __init__(self, registry_url: str, artifacts: Path) -> None:
        self.registry_url = registry_url
        self.artifacts = artifacts

    def run(self, *args: str, timeout_s: float = 300.0) -> tuple[int, str, float]:
        """(exit status, its stderr + stdout tail, seconds it ran)."""
        cmd = [sys.executable, "-m", "ortserve.registry.cli", "--registry", self.registry_url,
               "--artifacts", self.artifacts.as_uri(), *args]
        started = time.monotonic()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=ortserve_env())
        except subprocess.TimeoutExpired:
            return 124, f"timed out after {timeout_s:.0f} s", time.monotonic() - started
        out = (done.stderr.strip() + "\n" + done.stdout.strip()).strip()
        return done.returncode, out[-2000:], time.monotonic() - started


def start_registry_server(*, registry_url: str, artifacts: Path, cache: Path, model: str, log_path: Path,
                          extra_args: Sequence[str] = (), timeout_s: float = 120.0) -> ServerProcess:
    """`ortserve serve --registry URL` logging to `log_path`, once `model` is ready (stopped, and ServerStartError
    raised, when it is not within `timeout_s`)."""
    return start_until_ready(["--registry", registry_url, "--artifacts", artifacts.as_uri(), "--artifact-cache",
                              str(cache), *extra_args], model=model, log_path=log_path, timeout=timeout_s,
                             env=ortserve_env())


def proc_sample(pid: int) -> dict[str, float] | None:
    """RSS (bytes), open fds, threads and CPU seconds of a process from /proc; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "VmRSS" not in fields:
        return None  # exited: a zombie until its parent reaps it
    rss_kb = int(fields["VmRSS"].split()[0])
    return {"rss_bytes": rss_kb * 1024, "fds": fds, "threads": int(fields["Threads"]),
            "cpu_s": (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")}


class AdminClient:
    """The server's admin status (what `ortserve status --json` prints) and pinned probe calls, on one channel."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self._status = self.channel.unary_unary(ADMIN_STATUS_METHOD, request_serializer=lambda b: b,
                                                response_deserializer=lambda b: b)
        self._infer = self.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                               request_serializer=lambda b: b, response_deserializer=lambda b: b)

    def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        return json.loads(self._status(b"", timeout=timeout_s))

    def infer(self, body: bytes, timeout_s: float = 10.0) -> bytes:
        """One call; a RESOURCE_EXHAUSTED refusal is retried after the server's pushback, as the load's calls are."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._infer(body, timeout=max(0.001, deadline - time.monotonic()))
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                    raise
                pushback = dict(e.trailing_metadata() or ()).get("grpc-retry-pushback-ms")
                time.sleep(min(1.0, max(0.01, int(pushback or 10) / 1000)))

    def close(self) -> None:
        self.channel.close()


class ClientProcess:
    """One soak.client process; commands go to its stdin, answers come back as JSON lines on its stdout."""

    def __init__(self, index: int, *, address: str, model: str, texts_per_request: int, log_path: Path,
                 seed: int) -> None:
        self.index = index
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ortserve_devtools.soak.client", "--address", address, "--model", model,
             "--index", str(index),
             "--texts-per-request", str(texts_per_request), "--seed", str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=ortserve_env(),
        )

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(10)
            raise RuntimeError(f"soak client {self.index} exited with {code} (log: {self._log.name})")
        return json.loads(line)

    def abort(self) -> None:
        """End the open-loop run now (SIGUSR1): the process saves the calls so far and answers as usual."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)

    def close(self) -> None:
        """An idle client exits on its command; one still running a load (the soak was interrupted) is terminated."""
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "exit"})
                self.proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        self._log.close()
