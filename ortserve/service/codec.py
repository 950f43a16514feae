"""KServe V2 protobuf messages <-> the C++ wire rules (`engine_ext/src/dataplane/infer_wire.h`), for the Python
front end. No rule lives here: what a ModelInfer may carry, what a caller is told when it may not, how the request id
and the routing key are chosen and what a reply holds are the C++ rules, the same for both front ends; this module
only hands them the request's fields and writes the reply's tensors into the response message.

    call = decode(request, max_texts_per_request=...)          InvalidArgument naming the first rule the call breaks
    check_outputs(call, served, model)             InvalidArgument unless the leased version answers them
    encode(response, call, served, values)         the reply's output tensors
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ortserve import engine_ext
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.registry.bundle import BundleManifest
from ortserve.service.errors import InvalidArgument

INPUT_NAME: str = engine_ext.TEXT_INPUT
WIRE_OUTPUTS: dict[str, str] = {"classifier": engine_ext.CLASSIFIER_OUTPUT, "embedding": engine_ext.EMBEDDING_OUTPUT}
"""The output a model of each kind (`BundleManifest.kind`) answers with."""
MAX_REQUEST_ID_BYTES: int = engine_ext.MAX_REQUEST_ID_BYTES


@dataclass(frozen=True)
class ServedOutput:
    """What one loaded version answers: its kind, its output's wire name and (a classifier) its labels."""

    kind: str
    name: str
    labels: tuple[str, ...]
    columns: int

    @classmethod
    def of(cls, manifest: BundleManifest) -> ServedOutput:
        return cls(kind=manifest.kind, name=WIRE_OUTPUTS[manifest.kind], labels=tuple(manifest.labels),
                   columns=manifest.columns)

    def native_entry(self) -> tuple[str, str, list[str]]:
        """What the native front end's route table takes per version (`Frontend.set_routes`)."""
        return self.kind, self.name, list(self.labels)


def decode(request: pb.ModelInferRequest, *, max_texts_per_request: int) -> Any:
    """The call (`engine_ext.DecodedCall`: texts, outputs, probabilities, raw_output, routing_key)."""
    inputs = [(t.name, t.datatype, list(t.shape), t.HasField("contents"), list(t.contents.bytes_contents))
              for t in request.inputs]
    outputs = [(out.name, _param(out.parameters, "classification"), _param(out.parameters, "binary_data"))
               for out in request.outputs]
    try:
        return engine_ext.decode_call(inputs, outputs, list(request.raw_input_contents),
                                      _param(request.parameters, "scores"), _param(request.parameters, "routing_key"),
                                      max_texts_per_request)
    except engine_ext.WireError as e:
        raise InvalidArgument(str(e)) from None


def check_outputs(call: Any, served: ServedOutput, model: str) -> None:
    try:
        engine_ext.check_outputs(call, served.kind, served.name, list(served.labels), model)
    except engine_ext.WireError as e:
        raise InvalidArgument(str(e)) from None


def encode(response: pb.ModelInferResponse, call: Any, served: ServedOutput, values: np.ndarray) -> None:
    """The reply's outputs for the version's `values` (float32 [texts, columns])."""
    tensors = engine_ext.encode_outputs(call, served.kind, served.name, list(served.labels),
                                        np.ascontiguousarray(values, dtype=np.float32))
    for name, datatype, shape, raw, payload in tensors:
        out = response.outputs.add(name=name, datatype=datatype, shape=list(shape))
        if raw:
            response.raw_output_contents.append(payload)
        elif datatype == "FP32":
            out.contents.fp32_contents.extend(payload)
        else:
            out.contents.bytes_contents.extend(payload)


def _param(params: Any, key: str) -> tuple[str | None, Any] | None:
    """None when the key is absent, else (the set oneof field or None, its value)."""
    if key not in params:
        return None
    param = params[key]
    choice = param.WhichOneof("parameter_choice")
    return choice, getattr(param, choice) if choice else None
