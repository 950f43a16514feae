"""Run `ortserve serve` as a real process (the tools' launcher, ortserve_devtools.server_process) and talk to it over
loopback gRPC."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import grpc
from ortserve_devtools.server_process import ServerProcess
from support.v2_tensors import join_raw_bytes

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc


@contextmanager
def running_server(args: Sequence[str], *, env: dict[str, str] | None = None, ready: bool = True,
                   http: bool = False) -> Iterator[ServerProcess]:
    """A server whose log is kept in memory (pipes); ready (or only started), stopped on the way out."""
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


@contextmanager
def serving_published(store: Path, bundles: Mapping[str, Path], args: Sequence[str] = (), *,
                      http: bool = False) -> Iterator[ServerProcess]:
    """Each bundle published as its model's v1 (weight 100) to a file registry at `store`, and a server on that
    registry (`args` added) with every one of those models ready."""
    from ortserve.registry.artifacts import ArtifactStore
    from ortserve.registry.filestore import FileStore
    from ortserve.registry.publishing import publish

    files, artifacts = FileStore(store), ArtifactStore(store / "artifacts")
    for model, bundle in bundles.items():
        publish(files, artifacts, model=model, version="v1", bundle_dir=bundle, weight=100)
    with running_server(["--registry", store.as_uri(), *args], ready=False, http=http) as server:
        for model in bundles:
            server.wait_ready(model=model, timeout=180)
        yield server


def set_parameters(request: pb.ModelInferRequest, params: Mapping[str, Any]) -> pb.ModelInferRequest:
    """V2 request parameters from Python values: str -> string_param, bool -> bool_param, float -> double_param,
    int -> int64_param."""
    for name, value in params.items():
        if isinstance(value, str):
            request.parameters[name].string_param = value
        elif isinstance(value, bool):
            request.parameters[name].bool_param = value
        elif isinstance(value, float):
            request.parameters[name].double_param = value
        else:
            request.parameters[name].int64_param = value
    return request


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
