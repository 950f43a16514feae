"""Send fuzzed ModelInfer bodies to a server over real gRPC and check every answer.

What holds for any body, however hostile:
- the status is one a client can act on: OK, INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED; never INTERNAL or
  UNKNOWN (a bug on the server's side), never UNAVAILABLE (the server went away), never DEADLINE_EXCEEDED (the
  call hung past its deadline), and no Python traceback in the message;
- an OK answer is for a body that parses as a ModelInferRequest with valid UTF-8 texts; its FP32 outputs are
  [texts, labels], finite, and (with an `expected` function) equal to what the model gives for those texts; its
  BYTES outputs (the classification extension) are [texts, k <= labels] of "score:index:label", distinct classes in
  range, the best one the model's best;
- afterwards (`check_health`) the server is alive, answers a fixed call with the same logits as before, and its RSS
  stayed within a stated bound of the baseline.
"""

from __future__ import annotations

import math
import os
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
import numpy as np

from ortserve.proto import grpc_service_pb2 as pb

Metadata = tuple[tuple[str, str | bytes], ...]
METHOD = "/inference.GRPCInferenceService/ModelInfer"
ALLOWED = frozenset({grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                     grpc.StatusCode.RESOURCE_EXHAUSTED})
FIXED_TEXTS = ("the fixed request", "a second, longer text about the plot of a movie that was not good")
MiB = 1024 * 1024
_LE32 = struct.Struct("<I")


class Finding(AssertionError):
    """An answer that breaks a rule above; the message says which, for which body."""


@dataclass
class Answer:
    code: grpc.StatusCode
    details: str
    seconds: float
    body: bytes  # the serialised ModelInferResponse when OK, else b""


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def texts_of(request: pb.ModelInferRequest) -> list[str]:
    """The texts an OK answer must be for (raises if the request carries none that a server may accept)."""
    if len(request.inputs) != 1 or request.inputs[0].name != "TEXT":
        raise ValueError("not exactly one input TEXT")
    tensor = request.inputs[0]
    if request.raw_input_contents:
        buf, elements, at = request.raw_input_contents[0], [], 0
        while at < len(buf):
            (size,) = _LE32.unpack_from(buf, at)  # raises struct.error on a truncated prefix
            if at + 4 + size > len(buf):
                raise ValueError("length prefix overruns the buffer")
            elements.append(buf[at + 4 : at + 4 + size])
            at += 4 + size
    else:
        elements = list(tensor.contents.bytes_contents)
    if not tensor.shape or tensor.shape[0] != len(elements):
        raise ValueError("shape does not match the elements")
    return [e.decode("utf-8") for e in elements]


@dataclass
class FuzzTarget:
    """One server under fuzz: where it listens, its process (for liveness and RSS), the model's label count, and
    optionally `expected(texts) -> logits` to check OK answers against."""

    address: str
    pid: int | None = None
    labels: int = 2
    deadline_s: float = 10.0
    expected: Callable[[Sequence[str]], np.ndarray] | None = None
    atol: float = 1e-4
    alive: Callable[[], bool] | None = None
    own_connection: bool = False  # not grpc's shared subchannel: a TCP connection no other target in-process uses
    calls: int = 0
    codes: dict[str, int] = field(default_factory=dict)
    last_failure: bytes | None = None
    _channel: grpc.Channel | None = None

    def __post_init__(self) -> None:
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        if self.own_connection:
            options.append(("grpc.use_local_subchannel_pool", 1))
        self._channel = grpc.insecure_channel(self.address, options=options)
        self._call = self._channel.unary_unary(METHOD)  # no serializers: bytes go out as they are

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    # ---- one call ----------------------------------------------------------------------------------------------

    def send(self, body: bytes, metadata: Metadata = ()) -> Answer:
        start = time.monotonic()
        try:
            reply = self._call(body, timeout=self.deadline_s, metadata=metadata or None)
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            reply, code, details = b"", e.code(), e.details() or ""
        self.calls += 1
        self.codes[code.name] = self.codes.get(code.name, 0) + 1
        return Answer(code, details, time.monotonic() - start, reply)

    def fuzz(self, body: bytes, metadata: Metadata = ()) -> Answer:
        """Send one body and check its answer; raises Finding (and keeps the body in last_failure)."""
        answer = self.send(body, metadata)
        try:
            self.check(body, answer)
        except Finding:
            self.last_failure = body
            raise
        return answer

    def fuzz_request(self, request: pb.ModelInferRequest, metadata: Metadata = ()) -> Answer:
        return self.fuzz(request.SerializeToString(), metadata)

    def check(self, body: bytes, answer: Answer) -> None:
        where = f"{answer.code.name} after {answer.seconds:.2f} s for a {len(body)}-byte body {body[:120]!r}"
        if answer.code not in ALLOWED:
            died = "" if self.is_alive() else "; the server process is gone"
            raise Finding(f"{where}: {answer.details!r}{died}")
        if answer.seconds > self.deadline_s + 1.0:
            raise Finding(f"{where}: answered past the {self.deadline_s} s deadline")
        if "Traceback" in answer.details:
            raise Finding(f"{where}: a traceback in the status message: {answer.details!r}")
        if answer.code == grpc.StatusCode.OK:
            self._check_ok(body, answer, where)

    def _check_ok(self, body: bytes, answer: Answer, where: str) -> None:
        try:
            request = pb.ModelInferRequest.FromString(body)
            texts = texts_of(request)
        except Exception as e:
            raise Finding(f"{where}: OK for a body without valid texts ({e})") from None
        response = pb.ModelInferResponse.FromString(answer.body)
        if not response.outputs:
            raise Finding(f"{where}: OK without outputs")
        want = self.expected(texts) if self.expected is not None else None
        for index, out in enumerate(response.outputs):
            if out.datatype == "FP32":
                logits = _fp32_output(response, index)
                if logits.shape != (len(texts), self.labels):
                    raise Finding(f"{where}: {out.name} shape {logits.shape}, expected {(len(texts), self.labels)}")
                if not np.isfinite(logits).all():
                    raise Finding(f"{where}: {out.name} not finite: {logits}")
                if want is not None and not np.allclose(logits, want, atol=self.atol, rtol=0):
                    raise Finding(f"{where}: {out.name} {logits.tolist()} differ from the model's {want.tolist()}")
            elif out.datatype == "BYTES":
                self._check_classes(response, index, len(texts), want, where)
            else:
                raise Finding(f"{where}: output {out.name} has datatype {out.datatype}")

    def _check_classes(self, response: pb.ModelInferResponse, index: int, rows: int, want: np.ndarray | None,
                       where: str) -> None:
        """The classification extension's output: BYTES [rows, k] of "score:index:label", best class first."""
        out = response.outputs[index]
        if len(out.shape) != 2 or out.shape[0] != rows or not 1 <= out.shape[1] <= self.labels:
            raise Finding(f"{where}: classification output {out.name} has shape {list(out.shape)} for {rows} texts")
        if response.raw_output_contents:
            elements = _split(response.raw_output_contents[index])
        else:
            elements = list(out.contents.bytes_contents)
        if len(elements) != rows * out.shape[1]:
            raise Finding(f"{where}: classification output {out.name} has {len(elements)} elements")
        for row in range(rows):
            classes = []
            for element in elements[row * out.shape[1] : (row + 1) * out.shape[1]]:
                try:
                    score, cls, _label = element.decode("utf-8").split(":", 2)
                    float(score)
                    classes.append(int(cls))
                except ValueError:
                    raise Finding(f"{where}: classification element {element!r} is not score:index:label") from None
            if any(not 0 <= c < self.labels for c in classes) or len(set(classes)) != len(classes):
                raise Finding(f"{where}: classification classes {classes} out of range or repeated")
            if want is not None:
                ranked = np.sort(want[row])[::-1]
                if (len(ranked) < 2 or ranked[0] - ranked[1] > self.atol) and classes[0] != int(np.argmax(want[row])):
                    raise Finding(f"{where}: best class {classes[0]}, the model's logits {want[row].tolist()}")

    # ---- the server as a whole ---------------------------------------------------------------------------------

    def is_alive(self) -> bool:
        if self.alive is not None:
            return self.alive()
        if self.pid is None:
            return True
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def rss(self) -> int | None:
        """Resident memory of the server process in bytes (None when its pid is unknown)."""
        return None if self.pid is None else _rss_bytes(self.pid)

    def fixed_logits(self) -> np.ndarray:
        request = pb.ModelInferRequest(model_name="classifier")
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(FIXED_TEXTS)]).contents.bytes_contents.extend(
            t.encode() for t in FIXED_TEXTS)
        answer = self.send(request.SerializeToString())
        if answer.code != grpc.StatusCode.OK:
            raise Finding(f"the fixed call got {answer.code.name}: {answer.details!r}")
        return logits_of(pb.ModelInferResponse.FromString(answer.body))

    def warm_up(self, max_texts: int, *, rounds: int = 3) -> None:
        """Calls at the request limits, so the engine's arenas and the batcher's buffers reach their working size
        before a baseline RSS is taken."""
        words = " ".join(["movie", "plot", "中", "é"] * 200)
        for _ in range(rounds):
            request = pb.ModelInferRequest(model_name="classifier")
            tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[max_texts])
            tensor.contents.bytes_contents.extend(words.encode() for _ in range(max_texts))
            self.fuzz_request(request)
            self.fixed_logits()

    def check_health(self, baseline_logits: np.ndarray, baseline_rss: int | None, rss_bound: int) -> int | None:
        """The rules for the server as a whole, after fuzzing; returns the RSS now."""
        if not self.is_alive():
            raise Finding("the server process is gone")
        logits = self.fixed_logits()
        if not np.allclose(logits, baseline_logits, atol=1e-6, rtol=0):
            raise Finding(f"the fixed call's logits changed: {baseline_logits.tolist()} -> {logits.tolist()}")
        rss = self.rss()
        if rss is not None and baseline_rss is not None and rss - baseline_rss > rss_bound:
            raise Finding(f"RSS grew by {(rss - baseline_rss) / MiB:.1f} MiB ({baseline_rss / MiB:.0f} -> "
                          f"{rss / MiB:.0f} MiB), over the {rss_bound / MiB:.0f} MiB bound")
        return rss

    def summary(self) -> str:
        codes = ", ".join(f"{k} {v}" for k, v in sorted(self.codes.items(), key=lambda kv: -kv[1]))
        return f"{self.calls} calls ({codes})"


def _split(buffer: bytes) -> list[bytes]:
    elements, at = [], 0
    while at < len(buffer):
        if at + 4 > len(buffer):
            raise Finding(f"raw BYTES output: truncated length prefix at byte {at}")
        (size,) = _LE32.unpack_from(buffer, at)
        if at + 4 + size > len(buffer):
            raise Finding(f"raw BYTES output: element at byte {at} overruns the buffer")
        elements.append(buffer[at + 4 : at + 4 + size])
        at += 4 + size
    return elements


def _fp32_output(response: pb.ModelInferResponse, index: int) -> np.ndarray:
    out = response.outputs[index]
    if len(out.shape) != 2:
        raise Finding(f"{out.name} is FP32 {list(out.shape)}, expected [texts, labels]")
    count = math.prod(out.shape)
    if response.raw_output_contents:
        raw = response.raw_output_contents[index]
        if len(raw) != 4 * count:
            raise Finding(f"{out.name} raw output has {len(raw)} bytes for shape {list(out.shape)}")
        values = np.frombuffer(raw, dtype="<f4")
    else:
        values = np.asarray(out.contents.fp32_contents, dtype=np.float32)
        if values.size != count:
            raise Finding(f"{out.name} has {values.size} values for shape {list(out.shape)}")
    return values.reshape(list(out.shape))


def logits_of(response: pb.ModelInferResponse) -> np.ndarray:
    """LOGITS of a ModelInferResponse, from raw_output_contents or contents.fp32_contents."""
    for index, out in enumerate(response.outputs):
        if out.name == "LOGITS" and out.datatype == "FP32":
            return _fp32_output(response, index)
    raise Finding(f"no FP32 LOGITS output (outputs {[(o.name, o.datatype) for o in response.outputs]})")
