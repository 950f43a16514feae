"""Type stub for the C++ extension; see engine.h for the behaviour behind each method."""

from collections.abc import Sequence
from os import PathLike
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import NDArray

class EngineError(RuntimeError):
    """Base class of every engine failure."""

class ModelLoadError(EngineError):
    """The model file is missing, unreadable or unusable (message names the path and ORT's reason)."""

class InputError(EngineError, ValueError):
    """The feeds do not match the model's inputs (message names the input and what was expected)."""

class NonFiniteOutputError(EngineError):
    """An output holds NaN or Inf (message names the output and the count); only with check_finite."""

class EngineClosedError(EngineError):
    """run() was called after close()."""

class OutOfMemoryError(EngineError):
    """A run needed more memory than its arena may take, and no CPU fallback answered it."""

class TensorInfo:
    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str:
        """numpy-style element type: "int64", "float32", "bool", ..."""
    @property
    def shape(self) -> list[int]:
        """-1 where the dimension is dynamic."""

class Engine:
    def __init__(
        self,
        path: str | PathLike[str],
        *,
        intra_op_threads: int = 1,
        inter_op_threads: int = 1,
        graph_optimization_level: str = "all",
        device: str = "cpu",
        allow_spinning: bool = False,
        spin_between_runs: bool = False,
        check_finite: bool = True,
        gpu_memory_limit_mb: int = 0,
        cudnn_conv_algo_search: str = "exhaustive",
        cuda_graphs: bool = False,
        cpu_arena_limit_mb: int = 0,
        oom_fallback: str = "off",
        oom_cooldown_s: float = 30.0,
    ) -> None:
        """Load an ONNX model. graph_optimization_level: "disable" | "basic" | "extended" | "all";
        allow_spinning: the pool's threads spin between operators of a run instead of sleeping;
        spin_between_runs: they also keep spinning after run() returns (ORT's default; without it
        they stop the moment the last concurrent run returns);
        device: "cpu" | "cuda" | "cuda:N" (falls back to CPU, with one stderr line, when CUDA is
        unavailable); gpu_memory_limit_mb: cap on the CUDA arena (0 = none); cudnn_conv_algo_search:
        "exhaustive" | "heuristic" | "default"; cuda_graphs: capture a CUDA graph per input shape and replay it
        (ORT may refuse the model: then cuda_graphs is False and cuda_graphs_refused says why);
        cpu_arena_limit_mb: run a CPU session in the process-wide CPU arena capped at this (the first value
        wins; another one is a ValueError); oom_fallback: "off" | "lazy" | "warm", rerun a batch that ran out of
        memory (on CUDA, or in the capped CPU arena) on a CPU session, which then takes every batch for
        oom_cooldown_s. Raises ModelLoadError, or ValueError for a bad option."""
    @property
    def inputs(self) -> list[TensorInfo]: ...
    @property
    def outputs(self) -> list[TensorInfo]: ...
    @property
    def device(self) -> str:
        """What actually runs the model: "cpu" or "cuda:N"."""
    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool:
        """True once close() was called."""
    @property
    def cuda_graphs(self) -> bool:
        """Runs replay a CUDA graph captured per input shape."""
    @property
    def cuda_graphs_refused(self) -> str:
        """Why ORT refused CUDA graphs for this model ("" when they were not asked for or are on)."""
    @property
    def oom_errors(self) -> int:
        """Runs that failed for memory."""
    @property
    def fallback_runs(self) -> int:
        """Batches the CPU fallback session answered."""
    @property
    def cooldown_left_s(self) -> float:
        """Seconds batches still go to the CPU session after the last out-of-memory."""
    @property
    def has_fallback(self) -> bool:
        """A CPU fallback session is loaded."""
    def take_fallback_events(self) -> list[dict[str, Any]]:
        """Out-of-memory runs since the last call, oldest first: unix_s, shape, reason, answered, error."""
    def run(self, feeds: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        """Run every output. Thread-safe; the GIL is released during inference. Raises InputError,
        NonFiniteOutputError, OutOfMemoryError, EngineClosedError or EngineError."""
    def close(self) -> None:
        """Refuse new runs, wait for in-flight ones, release the session. Idempotent."""
    def __enter__(self) -> Engine: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

class WordPiece:
    """Native BERT WordPiece tokenizer (wordpiece.h): HF tokenizers' ids for one tokenizer.json shape.
    Build it with ortserve.engine_ext.load_wordpiece; immutable, so encode() is thread-safe."""

    def __init__(
        self,
        vocab: Sequence[str],
        *,
        unk_id: int,
        cls_id: int,
        sep_id: int,
        pad_id: int,
        added_tokens: Sequence[tuple[str, int]],
        max_len: int,
        continuing_subword_prefix: str = "##",
        max_input_chars_per_word: int = 100,
        clean_text: bool = True,
        handle_chinese_chars: bool = True,
        strip_accents: bool = True,
        lowercase: bool = True,
    ) -> None:
        """vocab[id] is the WordPiece token of id; added_tokens are split off the raw text first.
        max_len counts [CLS] and [SEP]. Raises ValueError for an inconsistent config."""
    def encode(self, texts: Sequence[str]) -> list[NDArray[np.int64]]:
        """One int64 array per text: [CLS], at most max_len - 2 tokens, [SEP]. The GIL is released
        while tokenizing. TypeError for a str or a non-str item."""
    def token_to_id(self, token: str) -> int | None: ...
    @property
    def vocab_size(self) -> int:
        """Distinct tokens of the vocabulary and added tokens (HF's get_vocab_size())."""
    @property
    def pad_id(self) -> int:
        """The id to pad batches with (never used by encode)."""
    @property
    def unk_id(self) -> int: ...
    @property
    def cls_id(self) -> int: ...
    @property
    def sep_id(self) -> int: ...
    @property
    def max_len(self) -> int: ...

class NativeBatchPolicy:
    """service/batch_policy.BatchPolicy in C++ (same fields, defaults and ValueError messages)."""

    def __init__(
        self,
        *,
        max_batch_size: int = 32,
        max_queue_delay_s: float = 0.010,
        max_padding_ratio: float = 1.3,
        batch_overhead_tokens: int = 0,
        max_batch_tokens: int = 1024,
        sort_window: int = 24,
    ) -> None: ...
    @property
    def max_batch_size(self) -> int: ...
    @property
    def max_queue_delay_s(self) -> float: ...
    @property
    def max_padding_ratio(self) -> float: ...
    @property
    def batch_overhead_tokens(self) -> int: ...
    @property
    def max_batch_tokens(self) -> int: ...
    @property
    def sort_window(self) -> int: ...

def bucket_shape(rows: int, tokens: int, bucket_rows: Sequence[int], bucket_tokens: Sequence[int]) -> tuple[int, int]:
    """(rows, tokens) padded up to the ladder's smallest rungs that hold them; past the top rung, unchanged."""

def split_rows(lengths: Sequence[int], policy: NativeBatchPolicy) -> list[tuple[int, int]]:
    """A lone call's rows as [begin, end) runs within max_batch_size rows and max_batch_tokens padded tokens."""

def native_defaults() -> dict[str, float]:
    """The C++ structs' own defaults, under service/config.Settings' names and units."""

def native_frontend_defaults() -> dict[str, int]:
    """FrontendOptions' own defaults, under service/config.Settings' names."""

def cuda_memory_info(device: int) -> tuple[int, int]:
    """(free, total) bytes of GPU `device` (cudaMemGetInfo); EngineError without a CUDA runtime."""

def native_choose_batch(pending: Sequence[tuple[int, float]], now: float, policy: NativeBatchPolicy) -> list[int]:
    """ChooseBatch over (length, enqueued_at) pairs: the indices batch_policy.choose_batch returns."""

class NativeThroughput:
    """service/batch_policy.Throughput in C++."""

    def observe(self, texts: int, seconds: float) -> None: ...
    def wait_s(self, texts_ahead: int) -> float: ...
    @property
    def texts_per_s(self) -> float: ...

class EventSink:
    """Bounded queue of records from the native path; producers never block (a full queue drops and counts)."""

    def __init__(self, capacity: int = 65536) -> None: ...
    def drain(self, max: int = 512, timeout_s: float = 0.2) -> list[tuple[Any, ...]]:
        """Up to max records, waiting (GIL released) up to timeout_s for the first. Records:
        ("request", request_id, model, version, route, texts, batch_size, queue_s, tokenize_s, engine_s, total_s,
        status, error, ended_unix) and ("batch", model, version, texts, padded_tokens, real_tokens, engine_s, lane).
        Empty on timeout or once closed."""
    def close(self) -> None:
        """Wakes drain() for good; later records (and those not drained) count as dropped."""
    @property
    def dropped(self) -> int: ...
    @property
    def pushed(self) -> int:
        """Records accepted so far (not dropped)."""
    @property
    def closed(self) -> bool: ...

class NativeLanes:
    """Threads shared by every NativeVersion: `lanes` one-at-a-time lane threads for queued batches and
    `wide_threads` threads for a lone call's run."""

    def __init__(self, lanes: int, wide_threads: int) -> None: ...
    @property
    def lanes(self) -> int: ...
    def stop(self) -> None:
        """Runs what is queued, then joins the threads (GIL released)."""
    def pause(self) -> None:
        """No thread starts a new task until resume() (tests hold the engine busy with it)."""
    def resume(self) -> None: ...

InferReply = tuple[str, str, NDArray[np.float32] | None, dict[str, float]]

class NativeTicket:
    def cancel(self) -> None:
        """Its queued texts leave the queue; answers CANCELLED unless done already."""
    def wait(self, timeout_s: float | None = None) -> InferReply:
        """(code name, message, logits [n, labels] | None, {tokenize_s, queue_s, engine_s, batch_size,
        retry_after_s}); GIL released while waiting; TimeoutError if not done in time."""
    @property
    def done(self) -> bool: ...

class NativeVersion:
    """One loaded version on the native batcher (service/batcher.Batcher's behaviour in C++). Keeps the
    engines, tokenizer, lanes and sink alive; closes itself when collected."""

    def __init__(
        self,
        model: str,
        version: str,
        *,
        wide: Engine,
        narrow: Engine | None,
        tokenizer: WordPiece,
        labels: int,
        pad_id: int,
        token_types: bool,
        lanes: NativeLanes,
        events: EventSink,
        max_batch_size: int,
        max_queue_delay_s: float,
        max_padding_ratio: float,
        batch_overhead_tokens: int,
        max_batch_tokens: int,
        sort_window: int,
        max_queue_items: int,
        max_queue_wait_s: float,
        engine_concurrency: int,
        bucket_rows: Sequence[int] = ...,
        bucket_tokens: Sequence[int] = ...,
    ) -> None:
        """Raises ValueError for a bad policy or setting."""
    def infer(self, texts: Sequence[str], timeout_s: float | None = None) -> InferReply:
        """Blocking, GIL released. Codes: OK, CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL,
        UNAVAILABLE."""
    def submit(self, texts: Sequence[str], timeout_s: float | None = None, run_here: bool = False) -> NativeTicket:
        """Queue the call; `run_here`: a lone call on the wide session runs on this thread before it returns
        (at most one such run per NativeLanes at a time, none while paused), as the gRPC front end's calls do."""
    @property
    def queue_depth(self) -> int: ...
    @property
    def in_flight(self) -> int:
        """Leases held (acquire() minus release())."""
    @property
    def model(self) -> str: ...
    @property
    def version(self) -> str: ...
    def acquire(self) -> bool:
        """Take a lease; False once drain() started."""
    def release(self) -> None: ...
    def drain(self, timeout_s: float) -> bool:
        """Stop new leases; wait (GIL released) up to timeout_s for none to be held; True when none is."""
    def close(self) -> None:
        """Refuse new calls, answer queued ones UNAVAILABLE, wait for running batches (GIL released)."""

def wordpiece_tables_version() -> str:
    """The tokenizers release the WordPiece Unicode tables were probed from."""
def _init(library_path: str) -> None: ...
def ort_version() -> str: ...
def library_path() -> str: ...

# ---- the native gRPC front end (frontend.h); Frontend exists only when HAS_FRONTEND ----------------------

HAS_FRONTEND: bool
FRONTEND_MISSING: str
"""Why the front end was not built (e.g. grpc++ not found at build time); "" when it was."""

class Frontend:
    """grpc++ server on the public port: ModelInfer served natively, every other call proxied to `backend`."""

    def __init__(
        self,
        address: str,
        backend: str,
        *,
        events: EventSink,
        max_message_bytes: int,
        max_texts: int,
        tls_cert: bytes | None = None,
        tls_key: bytes | None = None,
        tls_client_ca: bytes | None = None,
    ) -> None: ...
    def start(self) -> int:
        """Bind and serve; the bound port. RuntimeError naming the address when it cannot bind."""
    def set_routes(self, routes: dict[str, tuple[list[str], list[int], dict[str, NativeVersion]]]) -> None:
        """{model: (split order, split upper, {version: NativeVersion})}, replaced as one snapshot."""
    def set_health(self, service: str, serving: bool) -> None:
        """Set a grpc.health.v1 status ('' = the server, also ServerReady); ignored after not_serving()."""
    def not_serving(self) -> None:
        """Every health status NOT_SERVING and ServerReady false from now on (a graceful shutdown's start)."""
    def shutdown(self, grace_s: float) -> None:
        """not_serving(), stop accepting, in-flight calls get grace_s, then the rest are cancelled."""
    @property
    def in_flight(self) -> int:
        """Native ModelInfer calls in progress."""
    def passthrough(self) -> dict[str, int]:
        """ModelInfer calls passed on to the Python server so far, {reason: count} (every reason listed)."""

def _native_decode(request: bytes, max_texts: int) -> list[str] | None: ...
