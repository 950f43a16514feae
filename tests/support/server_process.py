"""Run `ortserve serve` as a real process and talk to it over loopback gRPC."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import grpc
from support.prometheus_text import scrape
from support.v2_tensors import join_raw_bytes

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc


def free_port() -> int:
    """A port free now (the REST port takes a number: 0 turns it off)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None, http: bool = False) -> None:
        """`http`: serve the REST port too (on a free port; `http_port`), else none (--http-port 0)."""
        self.args = list(args)
        if "--http-port" not in self.args:
            self.args += ["--http-port", str(free_port()) if http else "0"]
        self.logs: list[dict[str, Any]] = []
        self.raw_lines: list[str] = []
        self.port = 0
        self.metrics_port = 0
        self.http_port = 0
        self._started = threading.Event()
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ortserve.service.cli", "serve", "--host", "127.0.0.1",
             "--metrics-host", "127.0.0.1", "--port", "0", "--metrics-port", "0", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
        )
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw_lines.append(line)
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.logs.append(event)
            if event.get("event") == "server_started":
                self.port = event["port"]
                self.metrics_port = event.get("metrics_port", 0)
                self.http_port = event.get("http_port", 0)
                self._started.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def scrape(self) -> str:
        """The server's /metrics text."""
        return scrape(self.metrics_port)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_started(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self._started.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"server did not start (exit {self.proc.poll()}):\n{''.join(self.stderr_lines[-30:])}"
                    f"{''.join(self.raw_lines[-30:])}"
                )

    def wait_ready(self, timeout: float = 60.0, model: str = "") -> None:
        self.wait_started(timeout)
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited {self.proc.returncode}:\n{''.join(self.stderr_lines[-30:])}")
                try:
                    if model:
                        if stub.ModelReady(pb.ModelReadyRequest(name=model), timeout=2).ready:
                            return
                    elif stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"server not ready in {timeout}s:\n{''.join(self.raw_lines[-20:])}")

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in list(self.logs) if e.get("event") == name]

    def wait_event(self, name: str, timeout: float = 10.0, **match: Any) -> dict[str, Any]:
        """The first `name` event whose fields equal `match` (the log is read by another thread)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events(name):
                if all(event.get(k) == v for k, v in match.items()):
                    return event
            time.sleep(0.02)
        raise AssertionError(f"no {name} event with {match} in {timeout}s")

    def terminate(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def running_server(args: Sequence[str], *, env: dict[str, str] | None = None, ready: bool = True,
                   http: bool = False) -> Iterator[ServerProcess]:
    server = ServerProcess(args, env=env, http=http)
    try:
        if ready:
            server.wait_ready()
        else:
            server.wait_started()
        yield server
    finally:
        with suppress(subprocess.TimeoutExpired):
            server.terminate()


def infer_request(texts: Sequence[str | bytes], *, model: str = "classifier", version: str = "",
                  raw: bool = False, routing_key: str | None = None) -> pb.ModelInferRequest:
    elements = [t.encode() if isinstance(t, str) else t for t in texts]
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(elements)])
    if raw:
        request.raw_input_contents.append(join_raw_bytes(elements))
    else:
        tensor.contents.bytes_contents.extend(elements)
    if routing_key is not None:
        request.parameters["routing_key"].string_param = routing_key
    return request


def ask_classification(request: pb.ModelInferRequest, k: int, *, scores: str | None = None,
                       binary_data: bool | None = None, output: str = "LOGITS") -> pb.ModelInferRequest:
    """`request`, asking for the top k classes of `output` (tritonclient's class_count), optionally with the scores
    parameter."""
    out = request.outputs.add(name=output)
    out.parameters["classification"].int64_param = k
    if binary_data is not None:
        out.parameters["binary_data"].bool_param = binary_data
    if scores is not None:
        request.parameters["scores"].string_param = scores
    return request


def logits_of(response: pb.ModelInferResponse) -> Any:
    import numpy as np

    out = response.outputs[0]
    if response.raw_output_contents:
        return np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(list(out.shape))
    return np.asarray(out.contents.fp32_contents, dtype=np.float32).reshape(list(out.shape))


def stub_for(address: str) -> tuple[grpc.Channel, pb_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(address)
    return channel, pb_grpc.GRPCInferenceServiceStub(channel)


def write_texts(path: Path, texts: Sequence[str]) -> Path:
    path.write_text(json.dumps(list(texts)))
    return path
