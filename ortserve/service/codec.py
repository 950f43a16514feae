"""KServe V2 protobuf messages <-> a transport-neutral call (`inference.InferCall`, `InferReply`), for the grpc.aio
front end. No rule lives here: the C++ wire rules decide what a call may carry and what its reply holds (the same for
every front end); this module only reads the message's fields and writes the reply's tensors into a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.service.inference import InferCall, InferReply, Param


def call_from(request: pb.ModelInferRequest, headers: Mapping[str, str], deadline: float | None) -> InferCall:
    """The message as a call; `headers` lower-case (gRPC metadata keys are), `deadline` on time.monotonic()."""
    return InferCall(
        model=request.model_name, version=request.model_version, id=request.id,
        inputs=[(t.name, t.datatype, list(t.shape), t.HasField("contents"), list(t.contents.bytes_contents))
                for t in request.inputs],
        outputs=[(out.name, param(out.parameters, "classification"), param(out.parameters, "binary_data"))
                 for out in request.outputs],
        raw_input_contents=list(request.raw_input_contents),
        scores=param(request.parameters, "scores"), routing_key=param(request.parameters, "routing_key"),
        aggregation=param(request.parameters, "aggregation"), priority=param(request.parameters, "priority"),
        prompt_name=param(request.parameters, "prompt_name"), dimensions=param(request.parameters, "dimensions"),
        embedding_type=param(request.parameters, "embedding_type"), top_k=param(request.parameters, "top_k"),
        threshold=param(request.parameters, "threshold"), headers=headers, deadline=deadline, transport="grpc")


def reply_message(reply: InferReply) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name=reply.model, model_version=reply.version, id=reply.id)
    for name, datatype, shape, raw, payload in reply.tensors:
        out = response.outputs.add(name=name, datatype=datatype, shape=list(shape))
        if raw:
            response.raw_output_contents.append(payload)
        elif datatype == "FP32":
            out.contents.fp32_contents.extend(payload)
        elif datatype == "INT64":
            out.contents.int64_contents.extend(payload)
        elif datatype == "INT8":  # V2 keeps INT8 in int_contents, UINT8 in uint_contents
            out.contents.int_contents.extend(payload)
        elif datatype == "UINT8":
            out.contents.uint_contents.extend(payload)
        else:
            out.contents.bytes_contents.extend(payload)
    return response


def param(params: Any, key: str) -> Param:
    """None when the key is absent, else (the set oneof field or None, its value)."""
    if key not in params:
        return None
    value = params[key]
    choice = value.WhichOneof("parameter_choice")
    return choice, getattr(value, choice) if choice else None
