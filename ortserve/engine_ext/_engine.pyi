"""
ONNX Runtime engine (C++). Import ortserve.engine_ext, not this module.
"""

from collections.abc import Mapping, Sequence
import os
from typing import Annotated

import numpy
from numpy.typing import NDArray

from ortserve.engine_ext import (
    EngineClosedError as EngineClosedError,
    EngineError as EngineError,
    InputError as InputError,
    ModelLoadError as ModelLoadError,
    NonFiniteOutputError as NonFiniteOutputError,
    OutOfMemoryError as OutOfMemoryError
)


def ort_version() -> str:
    """Version of the loaded ONNX Runtime library."""

def openvino_cpu_capabilities() -> str:
    """
    OpenVINO's OPTIMIZATION_CAPABILITIES for the CPU ("FP32 BF16 INT8 ..."); loads OpenVINO. Raises ModelLoadError where it is not installed.
    """

def openvino_streams(threads: int, cores: int) -> int:
    """
    How many OpenVINO streams a bf16 engine of `threads` threads per run gets on `cores` cores.
    """

def bf16_refusal(capabilities: str, compiled: str) -> str:
    """
    Why a CPU cannot serve bf16 (OpenVINO's capabilities, the compiled model's precision hint), or "".
    """

def library_path() -> str:
    """Path of the loaded ONNX Runtime library."""

def cuda_memory_info(device: int) -> tuple[int, int]:
    """
    (free, total) bytes of GPU `device`'s memory (cudaMemGetInfo, whole device). Raises EngineError when no CUDA runtime can be loaded.
    """

class TensorInfo:
    """Name, numpy dtype and shape (-1 = dynamic) of a model tensor."""

    @property
    def name(self) -> str: ...

    @property
    def dtype(self) -> str: ...

    @property
    def shape(self) -> list[int]: ...

    def __repr__(self) -> str: ...

class EngineOptions:
    """
    How a session runs: each field a setting of service/config.Settings under the same name, defaulting to its default there (the server builds one from its Settings).
    """

    def __init__(self, *, intra_op_threads: int = 2, inter_op_threads: int = 1, graph_optimization_level: str = 'all', device: str = 'cpu', allow_spinning: bool = True, spin_between_runs: bool = False, check_finite: bool = True, gpu_memory_limit_mb: int = 0, cudnn_conv_algo_search: str = 'exhaustive', cuda_graphs: bool = False, cpu_arena_limit_mb: int = 0, gpu_oom_fallback: str = 'lazy', gpu_fallback_cooldown_s: float = 30.0, precision: str = 'fp32') -> None: ...

    @property
    def intra_op_threads(self) -> int: ...

    @intra_op_threads.setter
    def intra_op_threads(self, arg: int, /) -> None: ...

    @property
    def inter_op_threads(self) -> int: ...

    @inter_op_threads.setter
    def inter_op_threads(self, arg: int, /) -> None: ...

    @property
    def graph_optimization_level(self) -> str: ...

    @graph_optimization_level.setter
    def graph_optimization_level(self, arg: str, /) -> None: ...

    @property
    def device(self) -> str: ...

    @device.setter
    def device(self, arg: str, /) -> None: ...

    @property
    def allow_spinning(self) -> bool: ...

    @allow_spinning.setter
    def allow_spinning(self, arg: bool, /) -> None: ...

    @property
    def spin_between_runs(self) -> bool: ...

    @spin_between_runs.setter
    def spin_between_runs(self, arg: bool, /) -> None: ...

    @property
    def check_finite(self) -> bool: ...

    @check_finite.setter
    def check_finite(self, arg: bool, /) -> None: ...

    @property
    def gpu_memory_limit_mb(self) -> int: ...

    @gpu_memory_limit_mb.setter
    def gpu_memory_limit_mb(self, arg: int, /) -> None: ...

    @property
    def cudnn_conv_algo_search(self) -> str: ...

    @cudnn_conv_algo_search.setter
    def cudnn_conv_algo_search(self, arg: str, /) -> None: ...

    @property
    def cuda_graphs(self) -> bool: ...

    @cuda_graphs.setter
    def cuda_graphs(self, arg: bool, /) -> None: ...

    @property
    def cpu_arena_limit_mb(self) -> int: ...

    @cpu_arena_limit_mb.setter
    def cpu_arena_limit_mb(self, arg: int, /) -> None: ...

    @property
    def gpu_oom_fallback(self) -> str: ...

    @gpu_oom_fallback.setter
    def gpu_oom_fallback(self, arg: str, /) -> None: ...

    @property
    def gpu_fallback_cooldown_s(self) -> float: ...

    @gpu_fallback_cooldown_s.setter
    def gpu_fallback_cooldown_s(self, arg: float, /) -> None: ...

    @property
    def precision(self) -> str: ...

    @precision.setter
    def precision(self, arg: str, /) -> None: ...

    def __copy__(self) -> EngineOptions: ...

class Engine:
    """One ONNX Runtime session; run() is thread-safe and releases the GIL."""

    def __init__(self, path: str | os.PathLike, options: EngineOptions | None = None) -> None:
        """
        One session of the model at `path`, run as `options` say (EngineOptions; its defaults are the settings').
        """

    @property
    def inputs(self) -> list[TensorInfo]: ...

    @property
    def outputs(self) -> list[TensorInfo]: ...

    @property
    def device(self) -> str: ...

    @property
    def runtime(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def cuda_graphs(self) -> bool: ...

    @property
    def cuda_graphs_refused(self) -> str: ...

    @property
    def oom_errors(self) -> int: ...

    @property
    def fallback_runs(self) -> int: ...

    @property
    def cooldown_left_s(self) -> float: ...

    @property
    def has_fallback(self) -> bool: ...

    def take_fallback_events(self) -> list:
        """
        The runs that failed for memory since the last call, oldest first: dicts of unix_s, shape (the first input's), reason (ORT's error), answered (the CPU session answered it) and error (why not).
        """

    def run(self, feeds: dict) -> dict:
        """Run all outputs for feeds {input name: numpy array}."""

    def close(self) -> None:
        """
        Refuse new runs, wait for in-flight ones, release the session. Idempotent.
        """

    def __enter__(self) -> object: ...

    def __exit__(self, *args) -> None: ...

    def __repr__(self) -> str: ...

def longest_first(first: int, second: int, budget: int) -> tuple[int, int]:
    """
    Tokens of each text of a pair that HF's longest-first truncation keeps.
    """

def wordpiece_tables_version() -> str:
    """
    The tokenizers release the native WordPiece's Unicode tables were probed from.
    """

class WordPiece:
    """Native BERT WordPiece tokenizer; encode() releases the GIL."""

    def __init__(self, vocab: Sequence[str], *, unk_id: int, cls_id: int, sep_id: int, added_tokens: Sequence[tuple[str, int]], max_len: int, continuing_subword_prefix: str = '##', max_input_chars_per_word: int = 100, clean_text: bool = True, handle_chinese_chars: bool = True, strip_accents: bool = True, lowercase: bool = True) -> None: ...

    def encode(self, texts: object) -> list:
        """Ids of each text: [CLS], at most max_len - 2 tokens, [SEP]."""

    def encode_pairs(self, texts: object, pairs: object) -> list:
        """
        (ids, start of the second text) of each pair: [CLS] a [SEP] b [SEP], longest-first truncated to max_len.
        """

    def encode_spans(self, texts: object) -> list:
        """
        (ids, spans, chars_read) per text: encode()'s ids; spans, int64 [T, 4] rows of start, end (HF's offsets,
        in code points of the str; (0, 0) for [CLS]/[SEP]), is_subword (transformers' rule: continues a word), special (HF's
        special_tokens_mask); chars_read, the whole text's length, or where the last kept non-special token ends
        when truncation cut tokens.
        """

    def token_to_id(self, token: str) -> int | None: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def unk_id(self) -> int: ...

    @property
    def cls_id(self) -> int: ...

    @property
    def sep_id(self) -> int: ...

    @property
    def max_len(self) -> int: ...

    def __repr__(self) -> str: ...

class BatchPolicy:
    """The batch policy's settings (batch_policy.h; for the tests)."""

    def __init__(self, *, max_batch_size: int = 32, max_queue_delay_s: float = 0.01, max_padding_ratio: float = 1.05, batch_overhead_tokens: int = 0, max_batch_tokens: int = 1024, sort_window: int = 48, bulk_batch_tokens: int = 256) -> None: ...

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

    @property
    def bulk_batch_tokens(self) -> int: ...

def choose_batch(pending: Sequence[tuple[int, float]], now: float, policy: BatchPolicy) -> list[int]:
    """
    ChooseBatch over (length, enqueued_at) pairs: the indices of the next batch, shortest first.
    """

def choose_next(pending: Sequence[tuple[int, float, bool]], now: float, policy: BatchPolicy, shadow: Sequence[bool] = []) -> list[int]:
    """
    ChooseNext over (length, enqueued_at, bulk) triples (`shadow`: empty, or a flag per text, a shadow copy's text, bulk too): the next batch, interactive texts before bulk ones before shadow ones (bulk and shadow runs within bulk_batch_tokens); indices, shortest first.
    """

def split_rows(lengths: Sequence[int], policy: BatchPolicy) -> list[tuple[int, int]]:
    """
    A lone call's rows (token counts, in order) as [begin, end) runs within max_batch_size rows and max_batch_tokens padded tokens: the batcher's one rule for a lone call's runs.
    """

def bucket_shape(rows: int, tokens: int, bucket_rows: Sequence[int], bucket_tokens: Sequence[int]) -> tuple[int, int]:
    """
    (rows, tokens) padded up to the shape ladder's smallest rungs that hold them; a value past the top rung stays as it is. The one padding rule of every run.
    """

class Throughput:
    """
    The rate the queue drains at, which admission turns queued work into a wait with (batch_policy.h; the batcher observes padded tokens; for the tests).
    """

    def __init__(self) -> None: ...

    def observe(self, texts: int, busy_s: float) -> None: ...

    def wait_s(self, texts_ahead: int) -> float: ...

    @property
    def texts_per_s(self) -> float: ...

ADMISSION_DEADLINE_SHARE: float = 0.75

def call_tokens(lengths: Sequence[int], policy: BatchPolicy, bucket_rows: Sequence[int] = [], bucket_tokens: Sequence[int] = []) -> int:
    """
    The padded tokens the engine runs for rows of these token counts alone: SplitRows' runs, each padded to its longest row and up to the shape ladder. A call's work as admission counts it.
    """

def admission_refusal(*, closed: bool, queued_texts: int, queued_tokens: int, running_tokens: int, tokens_per_s: float, texts: int, tokens: int, left_s: float | None, max_queue_items: int, default_budget: bool = False, queued_bulk_texts: int = 0, queued_bulk_tokens: int = 0, bulk: bool = False) -> object:
    """
    Admission over a plain snapshot of the queue: (code name, message, retry_after_s) for a call of `texts` texts and `tokens` padded tokens with `left_s` left of its time budget (None: no time bound; `default_budget`: the server's default, the call sent no deadline), or None to admit it.
    """

def next_run(*, in_flight: int, wide_running: bool, on_lanes: int, pending: int, queued: bool, engine_concurrency: int, lanes: int, has_narrow: bool, queue_behind_at: int) -> str | None:
    """
    The session of the next run ("wide" or "narrow"), or None while the engine has no room for it: a queued batch (queued=True) or a lone call, over a plain snapshot of the version's runs.
    """

def pick_lane(version_batches: Sequence[int], all_batches: Sequence[int]) -> int:
    """
    The lane for the next batch: fewest of this version's batches, then fewest of every version's, then the lowest index.
    """

class RequestEvent:
    """One ModelInfer the native front end answered (its log line)."""

    @property
    def request_id(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> str:
        """"" when none was chosen"""

    @property
    def route(self) -> str:
        """"pin", "bucket N" or "\""""

    @property
    def texts(self) -> int: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def queue_s(self) -> float: ...

    @property
    def tokenize_s(self) -> float: ...

    @property
    def engine_s(self) -> float: ...

    @property
    def total_s(self) -> float: ...

    @property
    def status(self) -> str:
        """gRPC status code name"""

    @property
    def error(self) -> str:
        """the message sent to the caller, "" on OK"""

    @property
    def ended_unix(self) -> float:
        """when the reply went out (seconds since the epoch)"""

    @property
    def trace_id(self) -> str:
        """the caller's trace (32 hex digits), "" when none"""

    @property
    def parent_span_id(self) -> str:
        """the caller's span (16 hex digits), "" when none"""

    @property
    def sampled(self) -> int:
        """the caller's sampling decision: 1, 0, or -1 when none"""

    @property
    def tracestate(self) -> str: ...

class BatchEvent:
    """One engine run of the batcher."""

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def texts(self) -> int: ...

    @property
    def padded_tokens(self) -> int: ...

    @property
    def real_tokens(self) -> int: ...

    @property
    def engine_s(self) -> float: ...

    @property
    def lane(self) -> str:
        """"wide" (the multi-threaded session) or "narrow\""""

class ShadowEvent:
    """
    One shadow copy: the live answer and the shadow version's to the same texts (shadow_copy.h).
    """

    @property
    def request_id(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def stable(self) -> str:
        """the version that answered the caller"""

    @property
    def candidate(self) -> str:
        """the shadow version"""

    @property
    def stable_status(self) -> str:
        """gRPC status code name"""

    @property
    def candidate_status(self) -> str:
        """gRPC status code name"""

    @property
    def candidate_error(self) -> str: ...

    @property
    def rows(self) -> int: ...

    @property
    def stable_columns(self) -> int: ...

    @property
    def candidate_columns(self) -> int: ...

    @property
    def stable_values(self) -> bytes:
        """float32 rows x stable_columns, row-major (empty unless OK)"""

    @property
    def candidate_values(self) -> bytes:
        """float32 rows x candidate_columns, row-major (empty unless OK)"""

    @property
    def stable_engine_s(self) -> float: ...

    @property
    def candidate_engine_s(self) -> float: ...

    @property
    def candidate_queue_s(self) -> float: ...

    @property
    def texts(self) -> list[str]:
        """the call's texts when the route keeps them, else empty"""

    @property
    def per_token(self) -> bool:
        """token classifiers: the entities are compared, not the values"""

    @property
    def stable_entities(self) -> list:
        """
        [(row, start, end, label)]: the live answer's entities (simple aggregation)
        """

    @property
    def candidate_entities(self) -> list:
        """
        [(row, start, end, label)]: the shadow version's entities (simple aggregation)
        """

class ShadowTokenize:
    """
    A shadow copy to a version on HF tokenizers: tokenize its texts with that version's tokenizer and submit_ids, or fail it (dropped unread, it gives its lease back).
    """

    @property
    def model(self) -> str: ...

    @property
    def candidate(self) -> str:
        """the shadow version, whose tokenizer reads the texts"""

    @property
    def texts(self) -> list[str]:
        """what the shadow version reads (after its prompt)"""

    @property
    def pairs(self) -> list[str]:
        """each text's second text, or empty"""

    def submit_ids(self, ids: object, seconds: Sequence[int] = [], tokens: object | None = None) -> bool:
        """
        The copy's rows (one int64 array a text; `seconds`: where each pair's second text begins; `tokens`: a token classifier's [(spans, chars_read)]) into the shadow version's batcher, the lowest class. False when it was submitted or failed already.
        """

    def fail(self, message: str, dropped: bool = False) -> bool:
        """
        Ends the copy untried: dropped (no room to tokenize it) or failed (its texts could not be tokenized).
        """

class EventSink:
    """Bounded queue of request and batch records from the native path."""

    def __init__(self, capacity: int = 65536) -> None: ...

    def drain(self, max: int = 512, timeout_s: float = 0.2) -> list:
        """
        Up to max records (RequestEvent, BatchEvent, ShadowEvent or ShadowTokenize), waiting up to timeout_s for the first. Empty on timeout or once closed.
        """

    def close(self) -> None:
        """Wakes drain() for good; later records drop."""

    @property
    def dropped(self) -> int: ...

    @property
    def pushed(self) -> int:
        """Records accepted so far (not dropped)."""

    @property
    def closed(self) -> bool: ...

class Lanes:
    """Lane threads shared by every version, plus wide-run threads."""

    def __init__(self, lanes: int, wide_threads: int) -> None: ...

    @property
    def lanes(self) -> int: ...

    def stop(self) -> None:
        """Runs what is queued, then joins the threads."""

    def pause(self) -> None:
        """
        No thread starts a new task until resume() (tests: hold the engine busy deterministically).
        """

    def resume(self) -> None: ...

def batcher_defaults() -> dict:
    """
    The C++ structs' own defaults, under service/config.Settings' names and units (a test holds them equal).
    """

class BatcherSettings:
    """
    Every batching setting, built from service/config.Settings (batcher_settings()).
    """

    def __init__(self, *, max_batch_size: int, max_queue_delay_s: float, max_padding_ratio: float, batch_overhead_tokens: int, max_batch_tokens: int, sort_window: int, max_queue_items: int, default_timeout_s: float, engine_concurrency: int, bulk_min_texts: int = 256, bulk_batch_tokens: int = 256, interactive_lane_s: float = 1.0) -> None: ...

    @property
    def policy(self) -> BatchPolicy: ...

    @property
    def max_queue_items(self) -> int: ...

    @property
    def default_timeout_s(self) -> float: ...

    @property
    def engine_concurrency(self) -> int: ...

    @property
    def bulk_min_texts(self) -> int: ...

    @property
    def interactive_lane_s(self) -> float: ...

class TextModel:
    """What one version's batches run on: sessions, tokenizer, output."""

    def __init__(self, *, wide: Engine, narrow: Engine | None, tokenizer: WordPiece | None, output: str, columns: int, pad_id: int, token_types: bool, bucket_rows: Sequence[int] = [], bucket_tokens: Sequence[int] = [], token_columns: int = 0) -> None: ...

    def run(self, ids: object, narrow: bool = False, seconds: Sequence[int] = []) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]:
        """
        One batch through the engine, padded as the batcher pads every run (GIL released): the output float32 [rows, columns] for token-id rows (int64 arrays; `seconds`: where each pair's second text begins, 0 for one text). For warm-up and tests.
        """

    @property
    def output(self) -> str: ...

    @property
    def columns(self) -> int: ...

    @property
    def token_columns(self) -> int:
        """
        Labels per token of a token classifier (each row then holds columns / token_columns tokens); 0: a row per text.
        """

    @property
    def tokenizes(self) -> bool:
        """
        Whether the batcher tokenizes texts itself (the C++ WordPiece) or takes token ids.
        """

class Completions:
    """
    Answers for an event loop: watch `fd` with loop.add_reader, then drain().
    """

    def __init__(self) -> None: ...

    @property
    def fd(self) -> int: ...

    def drain(self) -> list:
        """
        Every answer queued so far: [(token, (code name, message, output float32 [n, columns] | None, timings))], oldest first; a start_call's has the reply's tensors (encode_outputs') as its output.
        """

class SubmittedCall:
    """A call submitted with a completion token."""

    def cancel(self) -> None:
        """
        The caller went away: its queued texts leave the queue; answers CANCELLED unless done already.
        """

class Ticket:
    """One submitted call of a ServedVersion."""

    def cancel(self) -> None:
        """
        The client went away: its queued texts leave the queue; answers CANCELLED unless done already.
        """

    def wait(self, timeout_s: float | None = None) -> tuple:
        """
        The call's (code, message, logits | None, timings); TimeoutError if not done.
        """

    @property
    def done(self) -> bool: ...

class ServedVersion:
    """One loaded version on the batcher."""

    def __init__(self, model: str, version: str, *, text_model: TextModel, settings: BatcherSettings, lanes: Lanes, events: EventSink) -> None: ...

    def submit_async(self, texts: object, timeout_s: float | None, completions: Completions, token: int, pairs: object | None = None, bulk: bool | None = None) -> SubmittedCall:
        """
        Tokenize (GIL released) and queue; the answer arrives in `completions` under `token`. `pairs`: one second text per text (a cross-encoder's), or None; `bulk`: the call's priority, None: by its size.
        """

    def submit_ids_async(self, ids: object, timeout_s: float | None, completions: Completions, token: int, tokenize_s: float = 0.0, seconds: Sequence[int] = [], bulk: bool | None = None) -> SubmittedCall:
        """
        Queue texts tokenized by the caller (one int64 array per text; `seconds`: per pair where its second text begins, or empty); the answer arrives in `completions`.
        """

    def infer(self, texts: object, timeout_s: float | None = None, pairs: object | None = None) -> tuple:
        """
        Blocking: (code name, message, output float32 [n, columns] | None, {tokenize_s, queue_s, engine_s, batch_size, retry_after_s, tokens}).
        """

    def submit(self, texts: object, timeout_s: float | None = None, run_here: bool = False, pairs: object | None = None, bulk: bool | None = None, shadow: bool = False) -> Ticket:
        """
        Queue the call and return its Ticket at once; run_here: a lone call on the wide session runs on this thread first (GIL released), as the gRPC front end's calls do; shadow: a shadow copy (Batcher::SubmitShadow: the lowest class, dropped when the shadow queue is full).
        """

    def refusal(self, texts: int, timeout_s: float | None, bulk: bool | None = None) -> object:
        """
        (code name, message, retry_after_s) that submitting `texts` texts of one token each would be answered at once as the queue stands, or None when they would be admitted: a check before tokenizing them elsewhere (submitting checks again, with their tokens).
        """

    @property
    def queue_depth(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def tokens_per_s(self) -> float:
        """
        The rate admission counts with: padded tokens the engine ran per busy second, recent runs weighted most (0 before any run ended).
        """

    @property
    def model(self) -> str: ...

    @property
    def version(self) -> str: ...

    def acquire(self) -> bool:
        """Take a lease; False once drain() started."""

    def release(self) -> None: ...

    def drain(self, timeout_s: float) -> bool:
        """
        Stop new leases; wait up to timeout_s for the in-flight ones; True when none is left.
        """

    def close(self) -> None:
        """
        Refuse new calls, answer queued ones UNAVAILABLE, wait for running batches. Idempotent.
        """

ROUTE_BUCKETS: int = 10000

def route_bucket(model: str, routing_key: str) -> int:
    """
    Canary bucket 0..9999 of a routing key: BLAKE2b (8-byte digest) of 'model NUL routing_key', big-endian, mod 10000; the same in every process and after restarts.
    """

def blake2b_digest(data: bytes, digest_size: int) -> bytes:
    """
    Unkeyed BLAKE2b of data with a digest_size-byte (1..64) digest, as hashlib.blake2b(data, digest_size=...).digest().
    """

class Split:
    """Weights laid out over the buckets (route.h): oldest version lowest."""

    @staticmethod
    def of(weighted: Sequence[tuple[str, int]]) -> Split:
        """[(version, percent)] oldest first; zero weights own no bucket."""

    def pick(self, bucket: int) -> str | None:
        """The version owning bucket, or None."""

    @property
    def order(self) -> list[str]:
        """Versions with weight, oldest first."""

    @property
    def upper(self) -> list[int]:
        """Exclusive upper bucket of each."""

    def __eq__(self, arg: Split, /) -> bool: ...

    def __repr__(self) -> str: ...

def classification_top_k(scores: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], labels: Sequence[str], k: int, probabilities: bool = False, multi_label: bool = False) -> list:
    """
    Per row of scores (float32 [N, len(labels)]), its min(k, labels) best classes as b'score:index:label', best first; probabilities: softmax of the row, or with multi_label a sigmoid per label (classification.h).
    """

AGGREGATIONS: tuple = ('simple', 'first', 'average', 'max', 'none')

def aggregate_entities(logits: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], spans: list, labels: Sequence[str], aggregation: str, ignore: Sequence[str] = ['O']) -> list:
    """
    Token classification's entities (entities.h): logits float32 [tokens, labels], spans [(start, end, is_subword, special)] -> [(label, score, start, end, token index or -1)], as transformers' TokenClassificationPipeline aggregates.
    """

class VersionOutput:
    """
    What a loaded version takes and answers, as the wire rules read it (route.h): built once per version from its kind's spec and manifest (service/served_output.py), read by both front ends.
    """

    def __init__(self, kind: str, output: str, *, labels: Sequence[str] = [], multi_label: bool = False, pairs: bool = False, score: str = '', prompts: Mapping[str, str] = {}, widths: Sequence[int] = [], also: Sequence[str] = [], per_token: bool = False, ranges: Mapping[int, Sequence[float]] = {}, sparse: bool = False) -> None:
        """
        kind (for messages), output (the default reply output's name), labels, multi_label, pairs (takes TEXT_PAIR), score (a reranker's activation), prompts {name: text}, widths (an embedding's, its own first), also (the outputs a call may ask for besides output), per_token (a row per token), ranges {width: starts then ends, 2 x width floats} (an embedding's calibrated ranges, for int8 and uint8), sparse (a sparse embedding's vocabulary weights: replies carry the kept entries).
        """

    @property
    def kind(self) -> str: ...

    @property
    def output(self) -> str: ...

    @property
    def labels(self) -> list[str]: ...

    @property
    def also(self) -> list[str]: ...

    @property
    def per_token(self) -> bool: ...

    @property
    def sparse(self) -> bool: ...

    @property
    def ranges(self) -> dict[int, list[float]]: ...

TEXT_INPUT: str = 'TEXT'

PAIR_INPUT: str = 'TEXT_PAIR'

SCORE_OUTPUT: str = 'SCORE'

CLASSIFIER_OUTPUT: str = 'LOGITS'

EMBEDDING_OUTPUT: str = 'EMBEDDING'

ENTITIES_OUTPUT: str = 'ENTITIES'

TOKEN_LOGITS_OUTPUT: str = 'TOKEN_LOGITS'

TOKEN_OFFSETS_OUTPUT: str = 'TOKEN_OFFSETS'

CHARS_READ_OUTPUT: str = 'CHARS_READ'

SPARSE_INDICES_OUTPUT: str = 'SPARSE_INDICES'

SPARSE_VALUES_OUTPUT: str = 'SPARSE_VALUES'

SPARSE_COUNTS_OUTPUT: str = 'SPARSE_COUNTS'

TOP_K_PARAM: str = 'top_k'

THRESHOLD_PARAM: str = 'threshold'

MAX_REQUEST_ID_BYTES: int = 256

EMBEDDING_TYPE_PARAM: str = 'embedding_type'

EMBEDDING_TYPES: tuple = ('float', 'int8', 'uint8', 'binary', 'ubinary')

def quantize_embeddings(values: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], type: str, ranges: Sequence[float] | None = None) -> tuple:
    """
    The wire rules' compact embedding (embedding_types.h) of float32 [rows, columns]: (bytes, datatype, columns of the reply), one byte a value; ranges: starts then ends (int8, uint8).
    """

def sparse_entries(values: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], top_k: int = 0, threshold: float = 0.0) -> tuple:
    """
    The wire rules' sparse embedding entries (sparse_entries.h) of float32 [rows, columns] weights: (int64 [entries, 2] of (row, column), float32 [entries]), each row's weights above threshold, at most top_k of them (0: no bound), the largest, a tie to the lower column; ascending columns within a row. ValueError for top_k < 0 or a threshold not finite and >= 0.
    """

class WireError(ValueError):
    pass

class WireTooManyTexts(WireError):
    pass

class DecodedCall:
    """A ModelInfer call the wire rules accepted."""

    @property
    def texts(self) -> list: ...

    @property
    def pairs(self) -> object:
        """
        with TEXT_PAIR, each row's second text (TEXT's elements; `texts` then holds each row's query, TEXT_PAIR, read first); None when the call sent none
        """

    @property
    def outputs(self) -> list[tuple[str, int]]:
        """
        [(name, classification k or 0)] as requested; [] = the version's tensor
        """

    @property
    def probabilities(self) -> bool: ...

    @property
    def raw_output(self) -> bool: ...

    @property
    def routing_key(self) -> str:
        """the routing_key parameter; '' when absent"""

    @property
    def bulk(self) -> bool | None:
        """
        the priority parameter: True for bulk, False for interactive, None when absent (the batcher decides by the call's size)
        """

    @property
    def prompt_name(self) -> str | None:
        """the prompt_name parameter; None when absent"""

    @property
    def dimensions(self) -> int:
        """
        the dimensions parameter (the embedding width to truncate to); 0 when absent
        """

    @property
    def embedding_type(self) -> str:
        """the embedding_type parameter ('float' when absent)"""

    @property
    def top_k(self) -> int:
        """the top_k parameter (a sparse embedding's most entries); 0 when absent"""

    @property
    def threshold(self) -> float:
        """
        the threshold parameter (a sparse embedding's least weight kept, exclusive); 0 when absent
        """

def decode_call(inputs: list, outputs: list, raw_input_contents: list, scores: object | None, routing_key: object | None, max_texts_per_request: int, aggregation: object | None = None, priority: object | None = None, prompt_name: object | None = None, dimensions: object | None = None, embedding_type: object | None = None, top_k: object | None = None, threshold: object | None = None) -> DecodedCall:
    """
    The call's texts and outputs by the wire rules, or WireError naming the first rule it breaks. inputs: [(name, datatype, shape, has_contents, [bytes])]; outputs: [(name, classification, binary_data)]; a parameter: None when absent, else (WhichOneof('parameter_choice'), value).
    """

class PreparedCall:
    """A ModelInfer's first steps (infer_wire.h PrepareCall)."""

    @property
    def request_id(self) -> str: ...

    @property
    def trace(self) -> tuple:
        """
        (trace_id, parent_span_id, sampled, tracestate), as parse_trace_context gives them
        """

    @property
    def call(self) -> DecodedCall:
        """the DecodedCall (empty when refused)"""

    @property
    def routing_key(self) -> str:
        """the canary key ('' when refused)"""

    @property
    def error(self) -> str | None:
        """the INVALID_ARGUMENT message when refused, else None"""

    @property
    def too_many_texts(self) -> bool:
        """refused for more texts than max_texts_per_request (HTTP answers 413)"""

def prepare_call(inputs: list, outputs: list, raw_input_contents: list, scores: object | None, routing_key: object | None, max_texts_per_request: int, aggregation: object | None, priority: object | None, prompt_name: object | None, dimensions: object | None, embedding_type: object | None, headers: tuple, top_k: object | None = None, threshold: object | None = None) -> PreparedCall:
    """
    A ModelInfer's first steps in one call, as the native front end takes them: the request id, the trace context, decode_call's call and the routing key; headers: (x-request-id, x-routing-key, traceparent, tracestate, b3, x-b3-traceid, x-b3-spanid, x-b3-sampled, x-b3-flags), '' when absent.
    """

def check_outputs(call: DecodedCall, version: VersionOutput, model: str) -> None:
    """
    WireError unless the call sends TEXT_PAIR exactly when the version takes pairs, every requested output is one it answers, classification only on a classifier's LOGITS, prompt_name one of its prompts and dimensions one of its widths.
    """

def prompted_texts(call: DecodedCall, version: VersionOutput) -> list:
    """
    The texts the model reads for a call check_outputs passed: each after the prompt the call names (its text, then the text), else the texts as sent.
    """

def encode_outputs(call: DecodedCall, version: VersionOutput, values: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], tokens: object | None = None) -> list:
    """
    The reply's outputs for values (float32 [rows, columns]): [(name, datatype, shape, raw, payload)], shape a tuple of dims, payload the raw_output_contents bytes when raw, else the contents (a list of floats, ints or bytes); tokens: a per-token version's [(spans int64 [T, 4] of start, end, is_subword, special; chars_read)] per row, row r of values holding its T tokens' logits first.
    """

def parse_trace_context(traceparent: str, tracestate: str, b3: str, b3_trace_id: str, b3_span_id: str, b3_sampled: str, b3_flags: str) -> tuple:
    """
    (trace_id, parent_span_id, sampled, tracestate) of a caller's W3C or B3 trace headers (infer_wire.h); trace_id '' when none is valid, sampled 1, 0 or -1 (none).
    """

def pushback_ms(retry_after_s: float) -> int:
    """
    grpc-retry-pushback-ms of a refusal: the drain time in ms, half to even, at least 1.
    """

class Routes:
    """
    The route table both front ends read: the data plane owns it, the manager replaces it on every swap (set), and a call reads one snapshot, the old table or the new.
    """

    def __init__(self) -> None: ...

    def set(self, routes: dict) -> None:
        """
        Replace the table: {model: (split order, split upper, {version: ServedVersion}[, {version: VersionOutput}])}; a version without a VersionOutput answers LOGITS and passes classification on.
        """

class StartedCall:
    """A ModelInfer start_call routed and leased."""

    def submit_ids(self, ids: object, timeout_s: float | None, tokenize_s: float, seconds: Sequence[int] = [], tokens: object | None = None) -> None:
        """
        A version on HF tokenizers: the texts start_call gave to tokenize, as ids (one int64 array per row; `seconds`: per pair where its second text begins; `tokens`: a token classifier's [(spans int64 [T, 4], chars_read)] per row), into the batcher; the answer arrives as start_call's.
        """

    def cancel(self) -> None:
        """
        The caller went away: its queued texts leave the queue and it is answered CANCELLED unless done already; one never submitted gives its lease back.
        """

def start_call(routes: Routes, model: str, version: str, inputs: list, outputs: list, raw_input_contents: list, scores: object | None, routing_key: object | None, max_texts_per_request: int, aggregation: object | None, priority: object | None, prompt_name: object | None, dimensions: object | None, embedding_type: object | None, headers: tuple, timeout_s: float | None, completions: Completions, token: int, inline_chars: int | None, top_k: object | None = None, threshold: object | None = None) -> tuple:
    """
    A ModelInfer in one crossing (call_path.h): prepare_call's steps, the version (pin, else the split), check_outputs, its lease, the prompt, and the batcher (tokenized here, GIL released). Returns (request_id, trace, error, too_many_texts, passed, version, route, texts, StartedCall | None, tokenize): error the rules' refusal, passed why the data plane left the call to Python (a passthrough reason, or 'long_texts': its texts pass inline_chars characters, None: any, so start it again off the event loop), tokenize the (texts, pairs | None) a version on HF tokenizers needs as ids (StartedCall.submit_ids), else None. A routed call's answer arrives in `completions` under `token` as (code, message, the reply's tensors as encode_outputs gives them | None, timings).
    """

class Frontend:
    """
    grpc++ server on the public port: native ModelInfer, the rest proxied to backend.
    """

    def __init__(self, address: str, backend: str, *, events: object, routes: Routes, max_message_bytes: int, max_header_bytes: int, max_texts_per_request: int, tls_cert: bytes | None = None, tls_key: bytes | None = None, tls_client_ca: bytes | None = None, api_keys: Sequence[str] = [], probes_open: bool = True) -> None: ...

    def start(self) -> int:
        """
        Bind and serve; returns the bound port. RuntimeError naming the address when it cannot bind.
        """

    def set_health(self, service: str, serving: bool) -> None:
        """
        Set a grpc.health.v1 status ('' = the server, also ServerReady); ignored after not_serving().
        """

    def not_serving(self) -> None:
        """
        Every health status NOT_SERVING and ServerReady false from now on (a graceful shutdown's start).
        """

    def shutdown(self, grace_s: float) -> None:
        """
        not_serving(), stop accepting, in-flight calls get grace_s, then the rest are cancelled.
        """

    @property
    def in_flight(self) -> int:
        """Native ModelInfer calls in progress."""

    def passthrough(self) -> dict:
        """
        ModelInfer calls passed on to the Python server so far, {reason: count} (every reason listed).
        """

def native_frontend_defaults() -> dict:
    """
    FrontendOptions' own defaults, under service/config.Settings' names: a test holds them equal.
    """

HAS_FRONTEND: bool = True

FRONTEND_MISSING: str = ''
