"""ONNX Runtime inference engine (C++ extension ``_engine``), re-exported with type hints.

Importing this package binds the engine to the ONNX Runtime shared library that the installed
``onnxruntime`` (or ``onnxruntime-gpu``, same import name) wheel ships in ``onnxruntime/capi``. The
engine is compiled against ORT's C API headers but not linked to the library, so it works with any
ORT release at least as new as those headers (1.21). ``ORTSERVE_ONNXRUNTIME_LIB`` overrides the path,
e.g. for a custom ORT build.

    engine = Engine("model.onnx", EngineOptions(intra_op_threads=2))
    logits = engine.run({"input_ids": ids, "attention_mask": mask})["logits"]
    engine.close()

A version at precision ``bf16`` (``EngineOptions(precision="bf16")``) runs on OpenVINO instead, from the installed
``openvino`` wheel's C library (``ORTSERVE_OPENVINO_LIB`` overrides it), loaded by the first such engine;
``bf16_refusal`` says why a CPU cannot (``openvino_cpu_capabilities``).

``WordPiece`` (see ``load_wordpiece``) is the native BERT tokenizer, equal to HF tokenizers' ids.
``route_bucket`` and ``Split`` choose a call's version (the canary bucket and the weights' layout over it), for both
front ends. The wire rules of a ModelInfer (``prepare_call``: request id, trace context, ``decode_call``
and routing key in one order; ``check_outputs``, ``prompted_texts``, ``encode_outputs``, ``pushback_ms``,
``parse_trace_context``, ``quantize_embeddings``: an embedding's compact types; ``sparse_entries``: a sparse
embedding's kept weights; ``WireError``) are the C++ ones
both front ends and both transports use;
``classification_top_k`` is the classification extension's top-k (a softmax, or for a multi-label classifier a
sigmoid per label).
``Frontend`` (when ``HAS_FRONTEND``) is the native gRPC front end: ModelInfer served natively, the rest
proxied to the Python server.
``ServedVersion`` is one version on the batcher (every ModelInfer, both front ends), built from a ``TextModel``
(sessions, tokenizer, output) and ``BatcherSettings``; its batches run on ``Lanes``, are reported through an
``EventSink`` (``BatchEvent``, ``RequestEvent``, ``ShadowEvent``; ``ShadowTokenize``, a copy for Python to tokenize)
and answer the event loop through ``Completions`` (a ``SubmittedCall`` each) or a blocking caller through a
``Ticket``. ``choose_batch`` (over a ``BatchPolicy``), ``split_rows``, ``bucket_shape``, ``Throughput``,
``admission_refusal``, ``call_tokens``, ``next_run`` and ``pick_lane`` are the batcher's pure decisions, bound for
their tests.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ortserve.engine_ext import _engine
from ortserve.engine_ext.wordpiece import UnsupportedTokenizer, load_wordpiece

_LIBRARY_ENV = "ORTSERVE_ONNXRUNTIME_LIB"


def _find_onnxruntime_library() -> Path:
    """Path of libonnxruntime.so* inside the installed onnxruntime package (without importing it)."""
    override = os.environ.get(_LIBRARY_ENV)
    if override:
        return Path(override)
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "ortserve.engine_ext needs the ONNX Runtime library: pip install onnxruntime "
            f"(or onnxruntime-gpu), or set {_LIBRARY_ENV} to a libonnxruntime.so path"
        )
    searched: list[str] = []
    for location in spec.submodule_search_locations:
        capi = Path(location) / "capi"
        searched.append(str(capi))
        # Sorted so the pick is stable; libonnxruntime_providers_*.so do not match this pattern.
        candidates = sorted(capi.glob("libonnxruntime.so*"))
        if candidates:
            return candidates[0]
    raise ImportError(
        f"no libonnxruntime.so* in {', '.join(searched)}; reinstall onnxruntime "
        f"or set {_LIBRARY_ENV} to a libonnxruntime.so path"
    )


_OPENVINO_ENV = "ORTSERVE_OPENVINO_LIB"


def _find_openvino_library() -> str:
    """Path of libopenvino_c.so* in the installed openvino package (not imported), or "" where there is none: the
    bf16 precision then refuses its versions with what to install."""
    override = os.environ.get(_OPENVINO_ENV)
    if override:
        return override
    spec = importlib.util.find_spec("openvino")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidates = sorted((Path(location) / "libs").glob("libopenvino_c.so*"))
        if candidates:
            return str(candidates[0])
    return ""


try:
    _engine._init(str(_find_onnxruntime_library()))
    _engine._set_openvino_library(_find_openvino_library())
except _engine.EngineError as error:
    raise ImportError(f"ortserve.engine_ext: {error}") from error

Engine = _engine.Engine
EngineOptions = _engine.EngineOptions
TensorInfo = _engine.TensorInfo
EngineError = _engine.EngineError
ModelLoadError = _engine.ModelLoadError
InputError = _engine.InputError
NonFiniteOutputError = _engine.NonFiniteOutputError
EngineClosedError = _engine.EngineClosedError
OutOfMemoryError = _engine.OutOfMemoryError
ort_version = _engine.ort_version
openvino_cpu_capabilities = _engine.openvino_cpu_capabilities
bf16_refusal = _engine.bf16_refusal
openvino_streams = _engine.openvino_streams
library_path = _engine.library_path
cuda_memory_info = _engine.cuda_memory_info
WordPiece = _engine.WordPiece
wordpiece_tables_version = _engine.wordpiece_tables_version
longest_first = _engine.longest_first
route_bucket = _engine.route_bucket
ROUTE_BUCKETS: int = _engine.ROUTE_BUCKETS
Split = _engine.Split
DecodedCall = _engine.DecodedCall
WireError = _engine.WireError
WireTooManyTexts = _engine.WireTooManyTexts
decode_call = _engine.decode_call
PreparedCall = _engine.PreparedCall
prepare_call = _engine.prepare_call
VersionOutput = _engine.VersionOutput
check_outputs = _engine.check_outputs
prompted_texts = _engine.prompted_texts
encode_outputs = _engine.encode_outputs
quantize_embeddings = _engine.quantize_embeddings
sparse_entries = _engine.sparse_entries
pushback_ms = _engine.pushback_ms
parse_trace_context = _engine.parse_trace_context
Routes = _engine.Routes
StartedCall = _engine.StartedCall
start_call = _engine.start_call
TEXT_INPUT: str = _engine.TEXT_INPUT
PAIR_INPUT: str = _engine.PAIR_INPUT
SCORE_OUTPUT: str = _engine.SCORE_OUTPUT
CLASSIFIER_OUTPUT: str = _engine.CLASSIFIER_OUTPUT
EMBEDDING_OUTPUT: str = _engine.EMBEDDING_OUTPUT
ENTITIES_OUTPUT: str = _engine.ENTITIES_OUTPUT
TOKEN_LOGITS_OUTPUT: str = _engine.TOKEN_LOGITS_OUTPUT
TOKEN_OFFSETS_OUTPUT: str = _engine.TOKEN_OFFSETS_OUTPUT
CHARS_READ_OUTPUT: str = _engine.CHARS_READ_OUTPUT
SPARSE_INDICES_OUTPUT: str = _engine.SPARSE_INDICES_OUTPUT
SPARSE_VALUES_OUTPUT: str = _engine.SPARSE_VALUES_OUTPUT
SPARSE_COUNTS_OUTPUT: str = _engine.SPARSE_COUNTS_OUTPUT
TOP_K_PARAM: str = _engine.TOP_K_PARAM  # a sparse embedding's most entries per text
THRESHOLD_PARAM: str = _engine.THRESHOLD_PARAM  # a sparse embedding's least weight kept (exclusive)
MAX_REQUEST_ID_BYTES: int = _engine.MAX_REQUEST_ID_BYTES
EventSink = _engine.EventSink
Lanes = _engine.Lanes
ServedVersion = _engine.ServedVersion
TextModel = _engine.TextModel
BatcherSettings = _engine.BatcherSettings
Completions = _engine.Completions
SubmittedCall = _engine.SubmittedCall
BatchEvent = _engine.BatchEvent
RequestEvent = _engine.RequestEvent
ShadowEvent = _engine.ShadowEvent
ShadowTokenize = _engine.ShadowTokenize
Ticket = _engine.Ticket
BatchPolicy = _engine.BatchPolicy
Throughput = _engine.Throughput
choose_batch = _engine.choose_batch
choose_next = _engine.choose_next
bucket_shape = _engine.bucket_shape
split_rows = _engine.split_rows
admission_refusal = _engine.admission_refusal
call_tokens = _engine.call_tokens
ADMISSION_DEADLINE_SHARE: float = _engine.ADMISSION_DEADLINE_SHARE
next_run = _engine.next_run
pick_lane = _engine.pick_lane
classification_top_k = _engine.classification_top_k
aggregate_entities = _engine.aggregate_entities
AGGREGATIONS: tuple[str, ...] = _engine.AGGREGATIONS  # a token classifier's strategies, the default first
EMBEDDING_TYPES: tuple[str, ...] = _engine.EMBEDDING_TYPES  # an embedding's embedding_type values, float first
HAS_FRONTEND: bool = _engine.HAS_FRONTEND
FRONTEND_MISSING: str = _engine.FRONTEND_MISSING  # why the native gRPC front end was not built; "" when it was
if HAS_FRONTEND:
    Frontend = _engine.Frontend

__all__ = [
    "ADMISSION_DEADLINE_SHARE",
    "AGGREGATIONS",
    "CHARS_READ_OUTPUT",
    "CLASSIFIER_OUTPUT",
    "EMBEDDING_OUTPUT",
    "EMBEDDING_TYPES",
    "ENTITIES_OUTPUT",
    "FRONTEND_MISSING",
    "HAS_FRONTEND",
    "MAX_REQUEST_ID_BYTES",
    "PAIR_INPUT",
    "ROUTE_BUCKETS",
    "SCORE_OUTPUT",
    "SPARSE_COUNTS_OUTPUT",
    "SPARSE_INDICES_OUTPUT",
    "SPARSE_VALUES_OUTPUT",
    "TEXT_INPUT",
    "THRESHOLD_PARAM",
    "TOKEN_LOGITS_OUTPUT",
    "TOKEN_OFFSETS_OUTPUT",
    "TOP_K_PARAM",
    "BatchEvent",
    "BatchPolicy",
    "BatcherSettings",
    "Completions",
    "DecodedCall",
    "Engine",
    "EngineClosedError",
    "EngineError",
    "EngineOptions",
    "EventSink",
    "InputError",
    "Lanes",
    "ModelLoadError",
    "NonFiniteOutputError",
    "OutOfMemoryError",
    "PreparedCall",
    "RequestEvent",
    "Routes",
    "ServedVersion",
    "ShadowEvent",
    "ShadowTokenize",
    "Split",
    "StartedCall",
    "SubmittedCall",
    "TensorInfo",
    "TextModel",
    "Throughput",
    "Ticket",
    "UnsupportedTokenizer",
    "VersionOutput",
    "WireError",
    "WireTooManyTexts",
    "WordPiece",
    "admission_refusal",
    "aggregate_entities",
    "bf16_refusal",
    "bucket_shape",
    "call_tokens",
    "check_outputs",
    "choose_batch",
    "choose_next",
    "classification_top_k",
    "cuda_memory_info",
    "decode_call",
    "encode_outputs",
    "library_path",
    "load_wordpiece",
    "longest_first",
    "next_run",
    "openvino_cpu_capabilities",
    "openvino_streams",
    "ort_version",
    "parse_trace_context",
    "pick_lane",
    "prepare_call",
    "prompted_texts",
    "pushback_ms",
    "quantize_embeddings",
    "route_bucket",
    "sparse_entries",
    "split_rows",
    "start_call",
    "wordpiece_tables_version",
]
