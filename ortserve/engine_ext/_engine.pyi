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
        check_finite: bool = True,
    ) -> None:
        """Load an ONNX model. graph_optimization_level: "disable" | "basic" | "extended" | "all";
        device: "cpu" | "cuda" | "cuda:N" (falls back to CPU, with one stderr line, when CUDA is
        unavailable). Raises ModelLoadError, or ValueError for a bad option."""
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
    def run(self, feeds: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        """Run every output. Thread-safe; the GIL is released during inference. Raises InputError,
        NonFiniteOutputError, EngineClosedError or EngineError."""
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
        events: Any,
        max_message_bytes: int,
        max_texts: int,
        tls_cert: bytes | None = None,
        tls_key: bytes | None = None,
        tls_client_ca: bytes | None = None,
    ) -> None: ...
    def start(self) -> int:
        """Bind and serve; the bound port. RuntimeError naming the address when it cannot bind."""
    def set_routes(self, routes: dict[str, tuple[list[str], list[int], dict[str, Any]]]) -> None:
        """{model: (split order, split upper, {version: NativeVersion})}, replaced as one snapshot."""
    def set_health(self, service: str, serving: bool) -> None: ...
    def shutdown(self, grace_s: float) -> None:
        """NOT_SERVING at once, stop accepting, in-flight calls get grace_s, then the rest are cancelled."""
    @property
    def in_flight(self) -> int:
        """Native ModelInfer calls in progress."""

def _native_decode(request: bytes, max_texts: int) -> list[str] | None: ...
