"""One model version's compute: tokenizer + sessions + manifest, synchronous and thread-safe.

Owned by a LoadedVersion. No asyncio here. `text_model` is what the C++ batcher runs the version's batches on;
`run` sends one batch through it the same way (warm-up, tests), and `tokenize` is the HF tokenizer's path (the
C++ WordPiece tokenizes inside the batcher). Both tokenizers and the engine release the GIL.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ortserve.bundle import model_files
from ortserve.bundle.cpu import CpuInfo, cpu_info
from ortserve.bundle.manifest import BundleManifest, load_manifest
from ortserve.engine_ext import Engine, EngineOptions, TextModel
from ortserve.service.config import Settings
from ortserve.service.served_output import ServedOutput
from ortserve.service.tokenization import BundleTokenizer, TokenEncoding, TokenizerChoice, open_tokenizer

REQUIRED_INPUTS = ("input_ids", "attention_mask")
OPTIONAL_INPUTS = ("token_type_ids",)
T = TypeVar("T")
WARMUP_TEXTS = (
    "a short warm-up sentence",
    "a somewhat longer warm-up sentence that exercises a wider batch with padding in it",
)


class ModelFormatError(ValueError):
    """The bundle's graph or tokenizer does not fit the bundle contract (bundle/manifest.py)."""


@dataclass(frozen=True)
class InstanceOptions:
    """How a version's compute is assembled, every field from Settings (`instance_options`, the one place): no
    defaults of its own."""

    engine: Any
    """engine_ext.EngineOptions of its sessions (each field a setting, by the same name)."""
    narrow_engine: bool
    """Also open a one-thread session of the same model, for batches that run side by side (`narrow_engine_pays`)."""
    shape_buckets: str
    """auto (on when the session runs on CUDA), on or off (config.Settings.shape_buckets)."""
    bucket_rows: tuple[int, ...]
    bucket_tokens: tuple[int, ...]


def engine_options(settings: Settings) -> Any:
    """The sessions' options (engine_ext.EngineOptions) from the settings of the same names."""
    return EngineOptions(
        intra_op_threads=settings.intra_op_threads, inter_op_threads=settings.inter_op_threads,
        graph_optimization_level=settings.graph_optimization_level, device=settings.device,
        allow_spinning=settings.allow_spinning, spin_between_runs=settings.spin_between_runs,
        gpu_memory_limit_mb=settings.gpu_memory_limit_mb, cudnn_conv_algo_search=settings.cudnn_conv_algo_search,
        cuda_graphs=settings.cuda_graphs, cpu_arena_limit_mb=settings.cpu_arena_limit_mb,
        gpu_oom_fallback=settings.gpu_oom_fallback, gpu_fallback_cooldown_s=settings.gpu_fallback_cooldown_s,
    )


def instance_options(settings: Settings) -> InstanceOptions:
    """A version's options from the settings: the server, the benchmark's engine-alone limit and the tests."""
    return InstanceOptions(
        engine=engine_options(settings),
        narrow_engine=narrow_engine_pays(intra_op_threads=settings.intra_op_threads,
                                         engine_concurrency=settings.engine_concurrency),
        shape_buckets=settings.shape_buckets, bucket_rows=settings.bucket_rows, bucket_tokens=settings.bucket_tokens,
    )


@dataclass(frozen=True)
class ShapeLadder:
    """The (rows, tokens) rungs a version's batches are padded up to; empty tuples pad nothing."""

    rows: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()

    def shapes(self) -> list[tuple[int, int]]:
        """Every rung pair: the shapes a version warms up (and captures a CUDA graph for) before traffic."""
        return [(r, t) for r in self.rows for t in self.tokens]


def shape_ladder(options: InstanceOptions, *, device: str, max_seq_len: int) -> ShapeLadder:
    """The version's ladder: token rungs above max_seq_len dropped and max_seq_len itself the top rung (a model's
    positions end there); none unless buckets are on, or auto and the session runs on CUDA."""
    on = options.shape_buckets == "on" or (options.shape_buckets == "auto" and device.startswith("cuda"))
    if not on:
        return ShapeLadder()
    tokens = (*(t for t in options.bucket_tokens if t < max_seq_len), max_seq_len)
    return ShapeLadder(rows=tuple(options.bucket_rows), tokens=tokens)


def narrow_engine_pays(*, intra_op_threads: int, engine_concurrency: int) -> bool:
    """Whether side-by-side batches get a one-thread session: only when several run at once and the main
    session is not one thread already. The server and the benchmark's engine-alone limit both ask this."""
    return engine_concurrency > 1 and intra_op_threads != 1


class ModelInstance:
    def __init__(
        self,
        *,
        engine: Engine,
        tokenizer: BundleTokenizer,
        manifest: BundleManifest,
        narrow: Engine | None = None,
        ladder: ShapeLadder | None = None,
        bundle_dir: Path | None = None,
    ) -> None:
        self.engine = engine
        self.bundle_dir = bundle_dir
        """Where the version's files are (its reference answers among them); None for a classifier built in memory."""
        self.ladder = ladder or ShapeLadder()
        """Batches are padded up to it (`run`), and `warm_up` runs each of its shapes."""
        self.memory_mb: float | None = None
        """What loading and warming this version took on its device (set by the loader that measured it)."""
        self.narrow = narrow
        """A one-thread session of the same graph: several of its runs share the cores without waiting on
        each other, where runs of a multi-threaded session stall at every operator for a preempted thread."""
        self.tokenizer = tokenizer
        self.manifest = manifest
        self.labels = tuple(manifest.labels)
        names = {t.name for t in engine.inputs}
        missing = [n for n in REQUIRED_INPUTS if n not in names]
        extra = sorted(names - set(REQUIRED_INPUTS) - set(OPTIONAL_INPUTS))
        if missing or extra:
            raise ModelFormatError(
                f"model inputs {sorted(names)} do not fit the bundle contract: "
                f"missing {missing}, unexpected {extra}"
            )
        self.kind = manifest.kind
        """"classifier" (logits over `labels`), "embedding" (a vector per text) or "token-classifier" (logits over
        `labels` per token)."""
        self.served = ServedOutput.of(manifest)
        """What it takes and answers, as every API and both front ends' wire rules read it."""
        self.output = manifest.output_name
        """The graph output every call gets, float32 [texts, columns] ([texts, tokens, labels] per token)."""
        self.columns = manifest.columns * manifest.max_seq_len if manifest.per_token else manifest.columns
        """Values per text the batcher answers: a token classifier's are max_seq_len rows of its labels, its tokens'
        first (zeros after)."""
        if self.output not in {t.name for t in engine.outputs}:
            raise ModelFormatError(f"model has no '{self.output}' output (outputs: {[t.name for t in engine.outputs]})")
        self.text_model = TextModel(
            wide=engine, narrow=narrow, tokenizer=tokenizer.native, output=self.output, columns=self.columns,
            pad_id=tokenizer.pad_id, token_types="token_type_ids" in names, bucket_rows=list(self.ladder.rows),
            bucket_tokens=list(self.ladder.tokens), token_columns=manifest.columns if manifest.per_token else 0,
        )
        """The sessions, tokenizer and padding rule the C++ batcher runs this version's batches with."""

    @property
    def kind_shown(self) -> str:
        """"classifier", "embedding", "classifier of pairs" (TEXT + TEXT_PAIR -> LOGITS), "reranker" (-> SCORE) or
        "token classifier" (-> ENTITIES), "sparse embedding model" (-> SPARSE_INDICES, SPARSE_VALUES)."""
        if self.manifest.per_token:
            return "token classifier"
        if self.manifest.spec.sparse:
            return "sparse embedding model"
        if self.manifest.score_activation:
            return "reranker"
        return "classifier of pairs" if self.manifest.pairs else self.kind

    @classmethod
    def load(
        cls,
        bundle_dir: str | Path,
        options: InstanceOptions,
        *,
        tokenizer: TokenizerChoice = "auto",
        opener: Executor | None = None,
    ) -> ModelInstance:
        """Open the bundle's tokenizer (`tokenization.open_tokenizer`) and sessions. With `opener`, the narrow
        session opens there while this thread opens the wide one (a third less load time on two cores).
        `opener` must be long-lived: glibc gives each new thread its own malloc arena, so a thread per load
        keeps growing the process's memory."""
        bundle = Path(bundle_dir)
        manifest = load_manifest(bundle)
        model_files.check_present(bundle, manifest)  # ONNX Runtime reads model.onnx.data beside model.onnx by path
        bundle_tokenizer = open_tokenizer(bundle / "tokenizer.json", manifest.max_seq_len, tokenizer,
                                          pairs=manifest.pairs, tokens=manifest.per_token,
                                          pair_template=manifest.pair_template)

        def open_engine(threads: int) -> Engine:
            session = copy.copy(options.engine)
            session.intra_op_threads = threads
            session.precision = manifest.precision  # bf16 runs on OpenVINO, refused where the CPU has no bf16
            return Engine(str(bundle / "model.onnx"), session)

        pending: Future[Engine] | None = None
        if options.narrow_engine and options.engine.device == "cpu":
            pending = opener.submit(open_engine, 1) if opener is not None else _done(open_engine, 1)
        engine: Engine | None = None
        narrow: Engine | None = None
        try:
            engine = open_engine(options.engine.intra_op_threads)
            narrow = pending.result() if pending is not None else None
            ladder = shape_ladder(options, device=engine.device, max_seq_len=manifest.max_seq_len)
            return cls(engine=engine, tokenizer=bundle_tokenizer, manifest=manifest, narrow=narrow, ladder=ladder,
                       bundle_dir=bundle)
        except BaseException:
            if pending is not None:  # wait for it even when the wide session failed: never leak a session
                with contextlib.suppress(BaseException):
                    pending.result().close()
            if engine is not None:
                engine.close()
            raise

    def tokenize(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids per text (int64), truncated to max_seq_len; never empty."""
        return self.tokenizer.encode(texts)

    def tokenize_pairs(self, texts: Sequence[str], pairs: Sequence[str]) -> tuple[list[np.ndarray], list[int]]:
        """Token ids per pair (one row each, as the bundle's tokenizer makes a pair) and where each second text
        begins (token type 1 from there; 0: the graph's pair has no types). Only for a bundle of pairs."""
        if self.tokenizer.encode_pairs is None:
            raise ModelFormatError("this version does not take pairs of texts")
        return self.tokenizer.encode_pairs(texts, pairs)

    def tokenize_tokens(self, texts: Sequence[str]) -> list[TokenEncoding]:
        """Each text's ids and its tokens' spans (a token classifier's; `tokenization.TokenEncoding`)."""
        if self.tokenizer.encode_tokens is None:
            raise ModelFormatError("this version does not classify tokens")
        return self.tokenizer.encode_tokens(texts)

    def tokenize_rows(self, texts: Sequence[str], pairs: Sequence[str] | None = None
                      ) -> tuple[list[np.ndarray], list[int], list[TokenEncoding] | None]:
        """The rows the batcher takes as ids for this version: (ids per row, where each pair's second text begins
        (empty without pairs), a token classifier's encodings with their spans (else None))."""
        if self.manifest.per_token:
            encodings = self.tokenize_tokens(texts)
            return [encoding.ids for encoding in encodings], [], encodings
        if pairs is None:
            return self.tokenize(texts), [], None
        ids, seconds = self.tokenize_pairs(texts, pairs)
        return ids, seconds, None

    def tokenizes_inline(self, texts: Sequence[str]) -> bool:
        """Whether `tokenize(texts)` is cheap enough for the event loop (see `tokenization.INLINE_MAX_CHARS`)."""
        return self.tokenizer.inline(texts)

    def run(self, token_ids: Sequence[np.ndarray], *, narrow: bool = False,
            seconds: Sequence[int] = ()) -> np.ndarray:
        """The output float32 [len(token_ids), columns] of one batch, padded as the batcher pads every run (to its
        longest text, then up to the shape ladder); `narrow` runs it on the one-thread session when there is one;
        `seconds`: where each pair's second text begins (`tokenize_pairs`)."""
        return self.text_model.run([np.asarray(ids, dtype=np.int64) for ids in token_ids], narrow, list(seconds))

    def warm_up(self, *, opener: Executor | None = None) -> None:
        """Run a real padded batch on each session: proves the graph runs and pays ORT's first-run costs up
        front. With `opener`, the narrow session warms there meanwhile. With a shape ladder, then every shape of
        it three times: the first run of a shape allocates, the second captures its CUDA graph, the third replays
        it, so no caller pays for either."""
        token_ids = self.tokenize(WARMUP_TEXTS)
        self._warm_sessions(token_ids, opener)
        filler = np.asarray(token_ids[0], dtype=np.int64)
        for rows, tokens in self.ladder.shapes():
            ids = np.resize(filler, tokens)  # the warm-up sentence repeated to the rung's length
            for _ in range(3):
                self.run([ids] * rows)

    def _warm_sessions(self, token_ids: list[np.ndarray], opener: Executor | None) -> None:
        narrow: Future[np.ndarray] | None = None
        if self.narrow is not None:
            narrow = (opener.submit(self.run, token_ids, narrow=True) if opener is not None
                      else _done(self.run, token_ids, narrow=True))
        try:
            self.run(token_ids)
        except BaseException:
            if narrow is not None:  # let it finish before the caller closes the sessions; report the wide error
                with contextlib.suppress(BaseException):
                    narrow.result()
            raise
        if narrow is not None:
            narrow.result()

    def describe(self) -> dict[str, Any]:
        """What `ortserve status` shows of this version: its kind (what it takes and returns: classifier, embedding,
        classifier of pairs, reranker), and its compute: device, precision, memory, graphs, fallbacks."""
        engine = self.engine
        info: dict[str, Any] = {"kind": self.kind_shown, "device": engine.device, "precision": self.manifest.precision,
                                "runtime": engine.runtime}
        if self.manifest.optimization is not None:
            info["optimization"] = self.manifest.optimization.level
        if self.manifest.precision == "fp16" and not engine.device.startswith("cuda"):
            # It answers, but ORT's CPU provider converts the weights back: slower than the FP32 bundle.
            info["precision_note"] = "FP16 graph on CPU: runs as FP32 with FP16-rounded weights; serve FP32 on CPUs"
        elif self.manifest.precision == "int8" and (note := int8_note(self.manifest)):
            info["precision_note"] = note
        if self.memory_mb is not None:
            info["memory_mb"] = round(self.memory_mb, 1)
        if self.ladder.rows or self.ladder.tokens:
            info["shape_buckets"] = {"rows": list(self.ladder.rows), "tokens": list(self.ladder.tokens)}
        if engine.device.startswith("cuda"):
            info["cuda_graphs"] = engine.cuda_graphs
            if engine.cuda_graphs_refused:
                info["cuda_graphs_refused"] = engine.cuda_graphs_refused
        if engine.oom_errors or engine.fallback_runs:
            info.update(oom_errors=engine.oom_errors, fallback_runs=engine.fallback_runs,
                        cooldown_left_s=round(engine.cooldown_left_s, 1))
        return info

    def close(self) -> None:
        self.engine.close()
        if self.narrow is not None:
            self.narrow.close()


@functools.cache
def _cpu() -> CpuInfo:
    return cpu_info()


def int8_note(manifest: BundleManifest) -> str:
    """What an operator should know about an int8 version on this CPU ("" when nothing): full 8-bit weights (a
    bundle optimised before the form was recorded) may saturate without VNNI or AMX; on such a CPU int8 is no
    faster than FP32 in any form."""
    cpu = _cpu()
    legacy = manifest.optimization is None or manifest.optimization.quantization is None
    if legacy and not cpu.int8_exact_8bit:
        return (f"int8 with full 8-bit weights on a CPU without VNNI or AMX ({cpu.describe()}): its products can "
                "saturate and answer differently; re-optimise the source bundle (7-bit weights are exact everywhere)")
    if not cpu.int8_exact_8bit:
        return f"int8 on a CPU without VNNI or AMX ({cpu.describe()}): exact, but about as fast as FP32"
    return ""


def _done(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """`fn` called here and now, as a finished Future (its result or its exception)."""
    future: Future[T] = Future()
    try:
        future.set_result(fn(*args, **kwargs))
    except BaseException as e:
        future.set_exception(e)
    return future
