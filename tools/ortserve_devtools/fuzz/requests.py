"""Hypothesis strategies for hostile KServe V2 ModelInfer calls.

`infer_requests()` draws ModelInferRequest messages: mostly a well-formed call for model "classifier" (one BYTES
input TEXT, shape [N] or [N, 1], texts in contents.bytes_contents or in one raw_input_contents buffer of 4-byte
little-endian length prefixes) with zero or more defects applied (wrong names, datatypes, shapes negative or huge,
broken length prefixes, invalid UTF-8, extra inputs and outputs, parameters of every type), and sometimes a request
built with no structure at all. `request_bodies()` draws serialised bodies for a generic unary call: a drawn
request's bytes mutated (bit flips, truncation, insertion, deletion, duplication, varint overwrites) or random bytes.

Everything is drawn from hypothesis choices only, so a failing call shrinks to a small one and a fixed seed gives the
same calls on every machine.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from hypothesis import strategies as st

from ortserve.proto import grpc_service_pb2 as pb

MODEL = "classifier"
INPUT = "TEXT"
OUTPUT = "LOGITS"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1

# Words of the tiny BERT bundle's vocabulary (ortserve_devtools.wordpiece_tokenizer) and special tokens, so drawn texts
# reach known ids, continuation pieces and added-token matching, not only [UNK].
_WORDS = ["the", "movie", "was", "great", "good", "bad", "plot", "##s", "##ing", "[CLS]", "[SEP]", "[PAD]", "[UNK]",
          "[MASK]", "a", "not", "!", ",", "."]
# Code points that make a tokenizer work: accents (NFD + strip), CJK (spaced), controls (dropped), spaces of every
# kind, case mappings that change length, punctuation of every script, a noncharacter, the top of Unicode.
_TRICKY = ["é", "É", "ǅ", "İ", "ß", "ﬃ", "Å", "e\u0301", "\u0300\u0301\u0302", "中文", "日本語", "한국어", "\u3000",
           "\u00a0", "\u200b", "\u2028", "\t", "\r\n", "\x00", "\x7f", "\ufeff", "\ufffd", "\U0010ffff", "\U0001f600",
           "¿", "…", "\u0e01\u0e34", "ﷺ", "\ud7a3", "Ⅻ"]
# Byte strings that are not UTF-8 (the codec must refuse them): lone continuation, overlong, surrogate, past
# U+10FFFF, truncated sequences, 0xFF.
_NOT_UTF8 = [b"\x80", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf",
             b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe\xff", b"\xe2\x82", b"\xf0\x9f\x98",
             b"ok\xc3", b"\xc3(", b"\xf8\x88\x80"]

_LE32 = struct.Struct("<I")


def join_raw(elements: Sequence[bytes]) -> bytes:
    """A V2 raw BYTES buffer: each element as a 4-byte little-endian length, then its bytes."""
    return b"".join(_LE32.pack(len(e)) + e for e in elements)


# ---- values ----------------------------------------------------------------------------------------------------


def _repeated(piece: st.SearchStrategy[bytes], most: int) -> st.SearchStrategy[bytes]:
    """A long byte string without drawing every byte (hypothesis' buffer stays small): a piece times a count."""
    return st.builds(lambda b, n: b * n, piece, st.integers(1, most))


def utf8_texts() -> st.SearchStrategy[bytes]:
    """Valid UTF-8 texts, from empty to past the bundle's max_seq_len in tokens and past the message limit in bytes."""
    words = st.lists(st.sampled_from(_WORDS + _TRICKY), max_size=12).map(" ".join)
    return st.one_of(
        words.map(str.encode),
        st.text(max_size=24).map(str.encode),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=8).map(str.encode),
        _repeated(words.map(lambda w: (w + " ").encode()), 400),
        _repeated(st.sampled_from(["x", "中", "é", "a" * 101, "!"]).map(str.encode), 2_000),
    )


def elements() -> st.SearchStrategy[bytes]:
    """One BYTES element: mostly valid UTF-8, sometimes not, sometimes arbitrary bytes."""
    not_utf8 = st.builds(lambda a, bad, b: a + bad + b, utf8_texts(), st.sampled_from(_NOT_UTF8),
                         st.text(max_size=4).map(str.encode))
    return st.one_of(utf8_texts(), utf8_texts(), utf8_texts(), not_utf8, st.binary(max_size=16))


def names(*usual: str) -> st.SearchStrategy[str]:
    """A tensor or model name: the expected ones most of the time, else near misses and arbitrary text."""
    odd = st.sampled_from(["", "text", "TEXT ", "TEXT\x00", "LOGITS", "INPUT", "PROBS", "CLASSES", "../etc", "é" * 3])
    return st.one_of(*(st.just(u) for u in usual), odd, st.text(max_size=12))


def dims() -> st.SearchStrategy[int]:
    """One shape entry: small, negative, or at the edges of int64."""
    edges = [INT64_MIN, INT64_MAX, INT64_MIN + 1, -1, 0, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 10**12, 2**62]
    return st.one_of(st.integers(-3, 20), st.sampled_from(edges), st.integers(INT64_MIN, INT64_MAX))


def parameter_values() -> st.SearchStrategy[pb.InferParameter]:
    def make(kind: str, value: object) -> pb.InferParameter:
        param = pb.InferParameter()
        if kind != "unset":
            setattr(param, kind, value)
        return param

    return st.one_of(
        st.builds(make, st.just("bool_param"), st.booleans()),
        st.builds(make, st.just("int64_param"), st.one_of(st.integers(-2, 20), st.integers(INT64_MIN, INT64_MAX))),
        st.builds(make, st.just("string_param"), st.one_of(st.text(max_size=12), st.sampled_from(["", "a" * 300]))),
        st.builds(make, st.just("double_param"), st.floats(allow_nan=True, allow_infinity=True)),
        st.builds(make, st.just("uint64_param"), st.integers(0, UINT64_MAX)),
        st.just(make("unset", None)),
    )


def parameters(*keys: str) -> st.SearchStrategy[dict[str, pb.InferParameter]]:
    return st.dictionaries(st.one_of(st.sampled_from(keys), st.text(max_size=8)), parameter_values(), max_size=3)


_REQUEST_KEYS = ("routing_key", "scores", "priority", "timeout", "sequence_id", "binary_data_output", "classification")
_OUTPUT_KEYS = ("binary_data", "classification")


def _set_parameters(target: object, params: dict[str, pb.InferParameter]) -> None:
    for key, value in params.items():
        target.parameters[key].CopyFrom(value)  # type: ignore[attr-defined]


# ---- structured requests ---------------------------------------------------------------------------------------

Defect = Callable[[pb.ModelInferRequest], None]


@st.composite
def _defects(draw: st.DrawFn) -> list[Defect]:
    """What to break in a well-formed call: each a function that edits the request in place."""
    out: list[Defect] = []
    for kind in draw(st.lists(st.sampled_from(_DEFECT_KINDS), max_size=3)):
        out.append(draw(_DEFECTS[kind]))
    return out


def _tensor(request: pb.ModelInferRequest) -> pb.ModelInferRequest.InferInputTensor | None:
    return request.inputs[0] if request.inputs else None


def _rename(name: str) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        if (t := _tensor(r)) is not None:
            t.name = name
    return apply


def _datatype(datatype: str) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        if (t := _tensor(r)) is not None:
            t.datatype = datatype
    return apply


def _reshape(shape: list[int]) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        if (t := _tensor(r)) is not None:
            t.shape[:] = shape
    return apply


def _bump_count(delta: int) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        if (t := _tensor(r)) is not None and t.shape:
            t.shape[0] = max(INT64_MIN, min(INT64_MAX, t.shape[0] + delta))
    return apply


def _break_raw(how: str, position: float, value: int, tail: bytes) -> Defect:
    """Corrupt raw_input_contents[0] (adding one if the call has none): a length prefix overwritten, the buffer
    truncated mid-prefix or mid-element, bytes appended, or the whole buffer replaced."""
    def apply(r: pb.ModelInferRequest) -> None:
        if not r.raw_input_contents:
            t = _tensor(r)
            elements = list(t.contents.bytes_contents) if t is not None else [b"x"]
            if t is not None:
                t.ClearField("contents")
            r.raw_input_contents.append(join_raw(elements))
        buf = bytearray(r.raw_input_contents[0])
        at = int(position * len(buf))
        if how == "prefix":  # the first length prefix declares `value` bytes
            buf[0:4] = _LE32.pack(value & 0xFFFFFFFF)
        elif how == "truncate":
            del buf[at:]
        elif how == "append":
            buf += tail
        elif how == "cut":
            del buf[at : at + 1 + len(tail)]
        elif how == "replace":
            buf = bytearray(tail)
        r.raw_input_contents[0] = bytes(buf)
    return apply


def _add_input(name: str, datatype: str, shape: list[int], raw: bytes | None) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        t = r.inputs.add(name=name, datatype=datatype, shape=shape)
        if raw is None:
            t.contents.bytes_contents.append(b"extra")
        else:
            r.raw_input_contents.append(raw)
    return apply


def _contents_too() -> Defect:
    """Both contents and raw_input_contents."""
    def apply(r: pb.ModelInferRequest) -> None:
        if (t := _tensor(r)) is not None:
            if not r.raw_input_contents:
                r.raw_input_contents.append(join_raw(list(t.contents.bytes_contents)))
            t.contents.bytes_contents.append(b"also")
    return apply


def _other_contents(field: str, values: list[int]) -> Defect:
    """Typed contents next to (or instead of) the BYTES ones."""
    def apply(r: pb.ModelInferRequest) -> None:
        if (t := _tensor(r)) is not None:
            getattr(t.contents, field).extend(values)
    return apply


def _drop_inputs() -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        del r.inputs[:]
    return apply


def _output(name: str, params: dict[str, pb.InferParameter]) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        _set_parameters(r.outputs.add(name=name), params)
    return apply


def _request_params(params: dict[str, pb.InferParameter]) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        _set_parameters(r, params)
    return apply


def _input_params(params: dict[str, pb.InferParameter]) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        if (t := _tensor(r)) is not None:
            _set_parameters(t, params)
    return apply


def _address(model: str, version: str) -> Defect:
    def apply(r: pb.ModelInferRequest) -> None:
        r.model_name, r.model_version = model, version
    return apply


_DEFECTS: dict[str, st.SearchStrategy[Defect]] = {
    "rename": st.builds(_rename, names()),
    "datatype": st.builds(_datatype, st.one_of(st.sampled_from(["FP32", "INT64", "bytes", "", "STRING", "BYTES\x00"]),
                                               st.text(max_size=6))),
    "reshape": st.builds(_reshape, st.lists(dims(), max_size=4)),
    "count": st.builds(_bump_count, st.one_of(st.integers(-3, 3), st.sampled_from([INT64_MIN, INT64_MAX, 2**32]))),
    "raw": st.builds(_break_raw, st.sampled_from(["prefix", "truncate", "append", "cut", "replace"]),
                     st.floats(0, 1), st.one_of(st.integers(0, 64), st.sampled_from([2**31, 2**32 - 1, 2**32 - 4])),
                     st.binary(max_size=12)),
    "extra input": st.builds(_add_input, names("TEXT", "EXTRA", "TEXT_PAIR"), st.sampled_from(["BYTES", "FP32"]),
                             st.lists(dims(), max_size=2), st.one_of(st.none(), st.binary(max_size=8))),
    "contents too": st.just(_contents_too()),
    "typed contents": st.builds(_other_contents,
                                st.sampled_from(["int_contents", "int64_contents", "uint_contents", "bool_contents"]),
                                st.lists(st.integers(0, 1), min_size=1, max_size=3)),
    "no inputs": st.just(_drop_inputs()),
    "output": st.builds(_output, names("LOGITS", "PROBS"), parameters(*_OUTPUT_KEYS)),
    "request params": st.builds(_request_params, parameters(*_REQUEST_KEYS)),
    "input params": st.builds(_input_params, parameters("binary_data_size", "shape")),
    "address": st.builds(_address, names(MODEL, "nope"), st.sampled_from(["", "1", "2", "v9", "-1", "1 ", "\x00"])),
}
_DEFECT_KINDS = sorted(_DEFECTS)


@st.composite
def wellformed_requests(draw: st.DrawFn, *, max_texts: int = 16) -> pb.ModelInferRequest:
    """A call the server should answer OK (unless the texts are not UTF-8 or too many)."""
    texts = draw(st.lists(elements(), min_size=1, max_size=max_texts + 1))
    request = pb.ModelInferRequest(model_name=MODEL, model_version=draw(st.sampled_from(["", "", "1"])),
                                   id=draw(st.text(max_size=6)))
    shape = [len(texts)] if draw(st.booleans()) else [len(texts), 1]
    tensor = request.inputs.add(name=INPUT, datatype="BYTES", shape=shape)
    if draw(st.booleans()):
        request.raw_input_contents.append(join_raw(texts))
    else:
        tensor.contents.bytes_contents.extend(texts)
    if draw(st.booleans()):
        output = request.outputs.add(name=OUTPUT)
        if draw(st.booleans()):
            output.parameters["binary_data"].bool_param = draw(st.booleans())
        if draw(st.booleans()):  # the classification extension: top k as "score:index:label"
            output.parameters["classification"].int64_param = draw(st.integers(1, 4))
            if draw(st.booleans()):
                request.parameters["scores"].string_param = draw(st.sampled_from(["logits", "probabilities"]))
    if draw(st.booleans()):
        request.parameters["routing_key"].string_param = draw(st.text(max_size=10))
    return request


@st.composite
def unstructured_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    """Inputs, outputs and parameters with no regard for what the model takes."""
    request = pb.ModelInferRequest(model_name=draw(names(MODEL)), model_version=draw(st.text(max_size=4)),
                                   id=draw(st.text(max_size=4)))
    _set_parameters(request, draw(parameters(*_REQUEST_KEYS)))
    for _ in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(name=draw(names(INPUT)), datatype=draw(st.sampled_from(["BYTES", "FP32", "x"])),
                                    shape=draw(st.lists(dims(), max_size=3)))
        tensor.contents.bytes_contents.extend(draw(st.lists(elements(), max_size=3)))
        tensor.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=2)))
    request.raw_input_contents.extend(draw(st.lists(st.binary(max_size=24), max_size=2)))
    for _ in range(draw(st.integers(0, 2))):
        _set_parameters(request.outputs.add(name=draw(names(OUTPUT))), draw(parameters(*_OUTPUT_KEYS)))
    return request


@st.composite
def _broken_requests(draw: st.DrawFn, *, max_texts: int) -> pb.ModelInferRequest:
    request = draw(wellformed_requests(max_texts=max_texts))
    for defect in draw(_defects()):
        defect(request)
    return request


def infer_requests(*, max_texts: int = 16) -> st.SearchStrategy[pb.ModelInferRequest]:
    """Well-formed calls, the same with defects, and unstructured ones; `max_texts` is the server's limit."""
    return st.one_of(wellformed_requests(max_texts=max_texts), _broken_requests(max_texts=max_texts),
                     _broken_requests(max_texts=max_texts), unstructured_requests())


# ---- call metadata ---------------------------------------------------------------------------------------------

Metadata = tuple[tuple[str, str | bytes], ...]


def call_metadata() -> st.SearchStrategy[Metadata]:
    """Headers the front ends read (x-request-id, echoed in the trailers; x-routing-key) and others: empty, odd,
    repeated, long enough to pass the servers' metadata limits; printable ASCII as gRPC requires, bytes for -bin."""
    printable = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
    value = st.one_of(printable, st.builds(lambda v, n: (v or "r") * n, printable, st.integers(1, 9000)))
    key = st.one_of(st.sampled_from(["x-request-id", "x-routing-key", "x-model-version", "x-forwarded-for"]),
                    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12)
                    .filter(lambda k: not k.startswith("grpc-") and k not in {"te", "content-type", "user-agent"}))
    text_header = st.tuples(key.filter(lambda k: not k.endswith("-bin")), value)
    binary_header = st.tuples(st.just("x-trace-bin"), st.binary(max_size=64))
    return st.lists(st.one_of(text_header, text_header, binary_header), max_size=3).map(tuple)


# ---- serialised bodies -----------------------------------------------------------------------------------------

_INTERESTING = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A]


def mutate(body: bytes, ops: Sequence[tuple[str, float, bytes]]) -> bytes:
    """Apply mutations to a serialised message; each op is (kind, position as a fraction, bytes)."""
    buf = bytearray(body)
    for kind, fraction, data in ops:
        at = min(int(fraction * len(buf)), max(len(buf) - 1, 0))
        if kind == "flip" and buf:
            buf[at] ^= 1 << (data[0] % 8 if data else 0)
        elif kind == "set" and buf:
            buf[at] = _INTERESTING[data[0] % len(_INTERESTING)] if data else 0
        elif kind == "insert":
            buf[at:at] = data
        elif kind == "delete":
            del buf[at : at + 1 + len(data)]
        elif kind == "truncate":
            del buf[at:]
        elif kind == "duplicate":
            buf[at:at] = buf[at : at + 1 + 4 * len(data)]
        elif kind == "varint":  # a huge length or tag: ten bytes of continuation, or the top of a varint
            buf[at:at] = b"\xff" * 9 + b"\x01" if not data or data[0] % 2 else b"\xff\xff\xff\xff\x0f"
    return bytes(buf)


_OPS = st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate", "varint"]),
                 st.floats(0, 1, exclude_max=True), st.binary(max_size=6))


def request_bodies(*, max_texts: int = 16) -> st.SearchStrategy[bytes]:
    """Serialised ModelInfer bodies: a drawn request's bytes mutated, or random bytes."""
    mutated = st.builds(lambda r, ops: mutate(r.SerializeToString(), ops),
                        st.one_of(wellformed_requests(max_texts=max_texts), infer_requests(max_texts=max_texts)),
                        st.lists(_OPS, min_size=1, max_size=4))
    return st.one_of(mutated, mutated, mutated, st.binary(max_size=64))
