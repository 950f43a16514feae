"""What the smoke asks a running server, as an outside client would: grpc.health.v1, tritonclient, REST, /metrics,
`ortserve status`, and a closed-loop load for the shutdown check.

Inference goes through tritonclient only: it registers its own copy of the KServe `inference` protobuf package, which
cannot share a process with ortserve's generated one, so this process never imports ortserve.proto.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from ortserve_devtools.image.podman import ImageError

STATUS_NAMES = {v: k for k, v in health_pb2.HealthCheckResponse.ServingStatus.items()}


def health(address: str, service: str = "", timeout_s: float = 3.0) -> str:
    """SERVING, NOT_SERVING, ... or the gRPC code's name when the check itself fails."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                              timeout=timeout_s)
        except grpc.RpcError as e:
            return e.code().name
    return STATUS_NAMES[reply.status]


def wait_health(address: str, service: str, want: str, timeout_s: float) -> float:
    """Seconds until health of `service` is `want`."""
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < timeout_s:
        last = health(address, service)
        if last == want:
            return time.monotonic() - started
        time.sleep(0.1)
    raise ImageError(f"health {service!r} on {address} is {last}, not {want}, after {timeout_s:.0f} s")


@dataclass(frozen=True)
class Classified:
    version: str
    classes: list[str]  # "score:index:label" per text: the classification extension's answer


def classify(address: str, model: str, texts: list[str], routing_key: str) -> Classified:
    """One tritonclient call asking for the top class of each text (Triton's classification extension: labels
    from the server), with the routing key as metadata."""
    client = triton.InferenceServerClient(url=address)
    try:
        tensor = triton.InferInput("TEXT", [len(texts)], "BYTES")
        tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
        result = client.infer(model, [tensor], outputs=[triton.InferRequestedOutput("LOGITS", class_count=1)],
                              headers={"x-routing-key": routing_key}, client_timeout=30)
    except triton.InferenceServerException as e:
        raise ImageError(f"tritonclient: {e.status()} {e.message()}") from None
    finally:
        client.close()
    classes = [row[0].decode() for row in result.as_numpy("LOGITS")]
    return Classified(result.get_response(as_json=True)["model_version"], classes)


def classify_rest(port: int, model: str, texts: list[str], routing_key: str) -> Classified:
    """The same question over the REST port (JSON tensors, the classification extension, x-routing-key header)."""
    body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
                       "outputs": [{"name": "LOGITS", "parameters": {"classification": 1}}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "x-routing-key": routing_key})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            doc = json.loads(reply.read())
    except urllib.error.HTTPError as e:
        raise ImageError(f"REST: {e.code} {e.read().decode(errors='replace')[:300]}") from None
    return Classified(doc["model_version"], list(doc["outputs"][0]["data"]))


def versions_for_keys(address: str, model: str, keys: list[str]) -> dict[str, str]:
    """The version that answers each routing key (request parameter routing_key), one call per key."""
    client = triton.InferenceServerClient(url=address)
    tensor = triton.InferInput("TEXT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"good"], dtype=np.object_))
    try:
        return {key: client.infer(model, [tensor], parameters={"routing_key": key}, client_timeout=30)
                .get_response(as_json=True)["model_version"] for key in keys}
    finally:
        client.close()


def scrape(port: int) -> dict[str, float]:
    """`name{label="v",...}` -> value of every sample on http://127.0.0.1:PORT/metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def status_cli(address: str) -> dict[str, object]:
    """`ortserve status --address A --json` with the host's ortserve, from outside the container."""
    ortserve = Path(sys.executable).parent / "ortserve"
    done = subprocess.run([str(ortserve), "status", "--address", address, "--json"], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise ImageError(f"ortserve status exited {done.returncode}: {done.stderr.strip()}")
    return dict(json.loads(done.stdout))


@dataclass(frozen=True)
class Outcome:
    request_id: str  # sent as x-request-id: the server's `request` line carries it
    sent: float
    ended: float
    code: str


class Load:
    """`threads` tritonclient callers in a closed loop until stopped; owned by the smoke's main thread. Times are
    wall clock, as the server's log."""

    def __init__(self, address: str, model: str, *, threads: int, texts: int) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        data = np.array([f"text {i} " .encode() * 12 for i in range(texts)], dtype=np.object_)
        self._threads = [threading.Thread(target=self._run, args=(address, model, data), daemon=True)
                         for _ in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self, address: str, model: str, data: np.ndarray) -> None:
        client = triton.InferenceServerClient(url=address)
        tensor = triton.InferInput("TEXT", [len(data)], "BYTES")
        tensor.set_data_from_numpy(data)
        while not self._stop.is_set():
            request_id = f"smoke-{uuid.uuid4().hex[:16]}"
            sent = time.time()
            try:
                client.infer(model, [tensor], client_timeout=30, headers={"x-request-id": request_id})
                code = "OK"
            except triton.InferenceServerException as e:
                code = str(e.status()).removeprefix("StatusCode.")
            self.outcomes.append(Outcome(request_id, sent, time.time(), code))
            if code != "OK":
                time.sleep(0.01)
        client.close()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(40)
