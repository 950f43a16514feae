"""KServe V2 tensors <-> Python values for text classification (pure functions, no I/O).

Input `TEXT`: BYTES, shape [N] or [N, 1], elements in `contents.bytes_contents` or in
`raw_input_contents` (each element a 4-byte little-endian length, then the bytes).
Output `LOGITS`: FP32 [N, labels], returned as raw little-endian bytes (what tritonclient and
KServe clients read by default), or in `contents.fp32_contents` when the caller asks for it with
the output parameter `binary_data=false`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.service.errors import InvalidArgument

INPUT_NAME = "TEXT"
OUTPUT_NAME = "LOGITS"
_LEN = struct.Struct("<I")


def decode_texts(request: pb.ModelInferRequest, *, max_texts: int) -> list[str]:
    """Return the request's texts, or raise InvalidArgument naming the field that is wrong."""
    names = [t.name for t in request.inputs]
    if INPUT_NAME not in names:
        raise InvalidArgument(f"missing input '{INPUT_NAME}' (BYTES [N]); got inputs {names or 'none'}")
    extra = sorted(set(names) - {INPUT_NAME})
    if extra or len(names) != 1:
        raise InvalidArgument(f"unexpected inputs {extra or names}: this model takes only '{INPUT_NAME}'")
    tensor = request.inputs[0]
    if tensor.datatype != "BYTES":
        raise InvalidArgument(f"input '{INPUT_NAME}' has datatype {tensor.datatype or '(empty)'}, expected BYTES")
    shape = list(tensor.shape)
    if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
        raise InvalidArgument(f"input '{INPUT_NAME}' has shape {shape}, expected [N] or [N, 1]")
    count = shape[0]
    if count < 1:
        raise InvalidArgument(f"input '{INPUT_NAME}' has shape {shape}: send at least one text")
    if count > max_texts:
        raise InvalidArgument(
            f"input '{INPUT_NAME}' has {count} texts, more than the maximum of {max_texts} per request; "
            "split it into several requests"
        )

    if request.raw_input_contents:
        if tensor.HasField("contents"):
            raise InvalidArgument(f"input '{INPUT_NAME}' sets both contents and raw_input_contents")
        if len(request.raw_input_contents) != 1:
            raise InvalidArgument(
                f"raw_input_contents has {len(request.raw_input_contents)} entries, expected 1 (one per input)"
            )
        elements = split_raw_bytes(request.raw_input_contents[0])
    else:
        elements = list(tensor.contents.bytes_contents)

    if len(elements) != count:
        raise InvalidArgument(f"input '{INPUT_NAME}' has shape {shape} but carries {len(elements)} elements")
    texts = []
    for i, raw in enumerate(elements):
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise InvalidArgument(
                f"input '{INPUT_NAME}' element {i} is not valid UTF-8 ({e.reason} at byte {e.start})"
            ) from None
    return texts


def split_raw_bytes(buffer: bytes) -> list[bytes]:
    """Split a V2 raw BYTES buffer into its elements, checking every length prefix."""
    elements: list[bytes] = []
    view = memoryview(buffer)
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise InvalidArgument(
                f"raw_input_contents for '{INPUT_NAME}': truncated length prefix at byte {offset} "
                f"(buffer is {len(view)} bytes)"
            )
        (size,) = _LEN.unpack_from(view, offset)
        offset += 4
        if offset + size > len(view):
            raise InvalidArgument(
                f"raw_input_contents for '{INPUT_NAME}': element {len(elements)} declares {size} bytes "
                f"but only {len(view) - offset} remain"
            )
        elements.append(bytes(view[offset : offset + size]))
        offset += size
    return elements


def join_raw_bytes(elements: Sequence[bytes]) -> bytes:
    """The inverse of split_raw_bytes (used by clients and tests)."""
    return b"".join(_LEN.pack(len(e)) + e for e in elements)


def wants_raw_output(request: pb.ModelInferRequest) -> bool:
    """Raw output unless the caller asked for `binary_data=false` on LOGITS."""
    for out in request.outputs:
        param = out.parameters.get("binary_data")
        if param is not None and param.WhichOneof("parameter_choice") == "bool_param":
            return param.bool_param
    return True


def check_requested_outputs(request: pb.ModelInferRequest) -> None:
    for out in request.outputs:
        if out.name != OUTPUT_NAME:
            raise InvalidArgument(f"unknown output '{out.name}' requested; this model returns '{OUTPUT_NAME}'")


def encode_logits(response: pb.ModelInferResponse, logits: np.ndarray, *, raw: bool) -> pb.ModelInferResponse:
    logits = np.ascontiguousarray(logits, dtype="<f4")
    out = response.outputs.add(name=OUTPUT_NAME, datatype="FP32", shape=list(logits.shape))
    if raw:
        response.raw_output_contents.append(logits.tobytes())
    else:
        out.contents.fp32_contents.extend(logits.ravel().tolist())
    return response


def string_parameter(params: object, key: str) -> str | None:
    """A string request parameter, or None when absent; other types are an error naming the key."""
    param = params.get(key)  # type: ignore[attr-defined]
    if param is None:
        return None
    if param.WhichOneof("parameter_choice") != "string_param":
        raise InvalidArgument(f"request parameter '{key}' must be a string")
    return param.string_param
