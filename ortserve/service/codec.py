"""KServe V2 tensors <-> Python values for text models (pure functions, no I/O).

Input `TEXT`: BYTES, shape [N] or [N, 1], elements in `contents.bytes_contents` or in
`raw_input_contents` (each element a 4-byte little-endian length, then the bytes).
Output, one per model kind (`ServedOutput`): a classifier's `LOGITS` FP32 [N, labels], an embedding model's
`EMBEDDING` FP32 [N, dim]; returned as raw little-endian bytes (what tritonclient and KServe clients read by
default), or in `contents.fp32_contents` when the caller asks for it with the output parameter `binary_data=false`.
Classification extension: `LOGITS` requested with the parameter `classification` = k is answered BYTES [N, min(k,
labels)] of "score:index:label", best first (`classification.top_k`); the request parameter `scores` =
"probabilities" reports softmax probabilities instead of logits.

Checks that need no model run before a version is leased (`decode_texts`, `requested_outputs`, `score_mode`);
`check_outputs` then holds the requested outputs against the leased version's `ServedOutput`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.registry.bundle import BundleManifest
from ortserve.service import classification
from ortserve.service.errors import InvalidArgument

INPUT_NAME = "TEXT"
OUTPUT_NAME = "LOGITS"
EMBEDDING_NAME = "EMBEDDING"
WIRE_OUTPUTS = {"classifier": OUTPUT_NAME, "embedding": EMBEDDING_NAME}
"""The output a model of each kind (`BundleManifest.kind`) answers with."""
_LEN = struct.Struct("<I")
MAX_REQUEST_ID_BYTES = 256
"""The longest `x-request-id` a caller may send (it is echoed in the reply's trailers and logged); the native front
end's kMaxRequestIdBytes (tests/service/test_settings_defaults.py holds the two equal)."""


@dataclass(frozen=True)
class ServedOutput:
    """What one loaded version answers: its output's wire name, its kind and (a classifier) its labels."""

    name: str
    kind: str
    labels: tuple[str, ...]
    columns: int

    @classmethod
    def of(cls, manifest: BundleManifest) -> ServedOutput:
        return cls(name=WIRE_OUTPUTS[manifest.kind], kind=manifest.kind, labels=tuple(manifest.labels),
                   columns=manifest.columns)

    def native_entry(self) -> tuple[str, list[str]]:
        """What the native front end's route table takes per version (`Frontend.set_routes`): (output, labels)."""
        return self.name, list(self.labels)


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    classes: int = 0
    """k of the classification extension; 0: the output tensor itself."""


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
    """Raw output unless the caller asked for `binary_data=false` on a requested output."""
    for out in request.outputs:
        param = out.parameters.get("binary_data")
        if param is not None and param.WhichOneof("parameter_choice") == "bool_param":
            return param.bool_param
    return True


def requested_outputs(request: pb.ModelInferRequest) -> list[RequestedOutput]:
    """The requested outputs (none: the version's output as a tensor), with the checks that need no model: each
    name once, `classification` an integer >= 1."""
    outputs: list[RequestedOutput] = []
    seen: set[str] = set()
    for out in request.outputs:
        if out.name in seen:
            raise InvalidArgument(f"output '{out.name}' is requested twice")
        seen.add(out.name)
        classes = 0
        param = out.parameters.get(classification.CLASSIFICATION)
        if param is not None:
            choice = param.WhichOneof("parameter_choice")
            if choice not in ("int64_param", "uint64_param"):
                raise InvalidArgument(
                    f"output '{out.name}' parameter '{classification.CLASSIFICATION}' must be an integer "
                    f"(int64_param), got {choice or 'no value'}"
                )
            classes = getattr(param, choice)
            if classes < 1:
                raise InvalidArgument(
                    f"output '{out.name}' parameter '{classification.CLASSIFICATION}' must be >= 1 (how many of the "
                    f"best classes to return), got {classes}"
                )
        outputs.append(RequestedOutput(out.name, classes))
    return outputs


def score_mode(request: pb.ModelInferRequest, outputs: Sequence[RequestedOutput]) -> bool:
    """Whether classification strings report probabilities: the request parameter `scores` = "probabilities" (or
    "logits", the default). It applies to classification outputs only."""
    mode = string_parameter(request.parameters, classification.SCORES)
    if mode is None:
        return False
    if mode not in classification.SCORE_MODES:
        raise InvalidArgument(
            f"request parameter '{classification.SCORES}' must be "
            f"{' or '.join(repr(m) for m in classification.SCORE_MODES)}, got {mode!r}"
        )
    if not any(out.classes for out in outputs):
        raise InvalidArgument(
            f"request parameter '{classification.SCORES}' applies to classification outputs: request "
            f"'{OUTPUT_NAME}' with the output parameter '{classification.CLASSIFICATION}' = k"
        )
    return mode == "probabilities"


def check_outputs(outputs: Sequence[RequestedOutput], served: ServedOutput, model: str) -> None:
    """Every requested output is the one this version answers, and classification only on a classifier."""
    for out in outputs:
        if out.name != served.name:
            raise InvalidArgument(
                f"unknown output '{out.name}' requested; model '{model}' ({_a(served.kind)}) has outputs "
                f"['{served.name}']"
            )
        if out.classes and served.kind != "classifier":
            raise InvalidArgument(
                f"output '{out.name}' does not take parameter '{classification.CLASSIFICATION}': model '{model}' is "
                f"{_a(served.kind)}; classification applies to a classifier's '{OUTPUT_NAME}'"
            )


def _a(kind: str) -> str:
    return f"an {kind} model" if kind[0] in "aeiou" else f"a {kind} model"


def encode_outputs(response: pb.ModelInferResponse, values: np.ndarray, served: ServedOutput,
                   outputs: Sequence[RequestedOutput], *, probabilities: bool, raw: bool) -> pb.ModelInferResponse:
    """The reply's outputs: the version's output tensor when none was requested, else each requested one."""
    for out in outputs or [RequestedOutput(served.name)]:
        if out.classes:
            strings = classification.top_k(values, out.classes, served.labels, probabilities=probabilities)
            encode_bytes(response, out.name, strings, raw=raw)
        else:
            encode_fp32(response, out.name, values, raw=raw)
    return response


def encode_fp32(response: pb.ModelInferResponse, name: str, values: np.ndarray, *, raw: bool) -> None:
    values = np.ascontiguousarray(values, dtype="<f4")
    out = response.outputs.add(name=name, datatype="FP32", shape=list(values.shape))
    if raw:
        response.raw_output_contents.append(values.tobytes())
    else:
        out.contents.fp32_contents.extend(values.ravel().tolist())


def encode_bytes(response: pb.ModelInferResponse, name: str, rows: Sequence[Sequence[bytes]], *, raw: bool) -> None:
    """A BYTES [N, k] tensor: raw as length-prefixed elements (what tritonclient reads), else bytes_contents."""
    width = len(rows[0]) if rows else 0
    out = response.outputs.add(name=name, datatype="BYTES", shape=[len(rows), width])
    elements = [element for row in rows for element in row]
    if raw:
        response.raw_output_contents.append(join_raw_bytes(elements))
    else:
        out.contents.bytes_contents.extend(elements)


def check_request_id(request_id: str) -> None:
    """INVALID_ARGUMENT for a caller's `x-request-id` too long to echo (a gRPC client refuses trailers past 16 KiB)."""
    size = len(request_id.encode())
    if size > MAX_REQUEST_ID_BYTES:
        raise InvalidArgument(f"x-request-id is {size} bytes; at most {MAX_REQUEST_ID_BYTES}")


def string_parameter(params: object, key: str) -> str | None:
    """A string request parameter, or None when absent; other types are an error naming the key."""
    param = params.get(key)  # type: ignore[attr-defined]
    if param is None:
        return None
    if param.WhichOneof("parameter_choice") != "string_param":
        raise InvalidArgument(f"request parameter '{key}' must be a string")
    return param.string_param
