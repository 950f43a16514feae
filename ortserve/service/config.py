"""The server's settings: one typed object, layered defaults → file → ORTSERVE_* env → CLI flags.

Every field's docstring is its `--help` text. `load_settings` names the setting and where its
bad value came from, so a misconfigured pod fails at start with a message an operator can act on.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_origin, get_type_hints


class ConfigError(ValueError):
    pass


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class Settings:
    # -- network
    host: str = _doc("Address the gRPC port binds to.", default="0.0.0.0")
    port: int = _doc("gRPC port (KServe V2, health, reflection, admin status).", default=8001)
    http_port: int = _doc(
        "KServe V2 HTTP/REST port beside gRPC, on the same address (0: none). Same calls, same answers (README, "
        "Calling it over HTTP).", default=8000
    )
    metrics_host: str = _doc("Address the Prometheus metrics port binds to.", default="0.0.0.0")
    metrics_port: int = _doc("HTTP port for /metrics (0 picks a free port).", default=8002)
    metrics: bool = _doc("Serve Prometheus metrics.", default=True)
    max_message_bytes: int = _doc("Largest gRPC message, or REST request body, accepted or sent (16 MiB: a call of "
                                  "2,048 texts, or its 2,048 embeddings of 1,024 floats).",
                                  default=16 * 1024 * 1024)
    max_header_bytes: int = _doc(
        "Largest header block (gRPC metadata) a call may send; above Envoy's default 60 KiB, so that what a mesh"
        " forwards is never refused here.", default=64 * 1024
    )
    http_body_timeout_s: float = _doc(
        "Longest an HTTP request body may take to arrive, from the call's start; past it the call is answered 408 "
        "and its connection closed, so a client that stalls mid-body holds no handler. 0: no limit.",
        default=30.0)
    http_max_connections: int = _doc(
        "Most open connections the HTTP port keeps; one more is answered 503 (Retry-After) and closed, so stalled "
        "or idle clients cannot take every socket and file descriptor. 0: no cap.",
        default=1024)
    api_key: tuple[str, ...] = _doc(
        "API keys a call must send (HTTP `Authorization: Bearer KEY`, or `api-key`/`x-api-key`; gRPC "
        "`authorization: Bearer KEY` metadata), on every route and RPC of both front ends, the admin status "
        "included; none: no key asked. Several allowed (key rotation). Prefer ORTSERVE_API_KEY or api_key_file "
        "to a flag, which other users of the host can read. docs/serving.md, API keys.",
        default=())
    api_key_file: str = _doc("A file of API keys, one a line (blank lines and # comments skipped), added to api_key.",
                             default="")
    api_key_probes: bool = _doc(
        "With API keys, health, liveness and readiness (HTTP /v2/health/*, model ready; gRPC health, ServerLive, "
        "ServerReady, ModelReady) and /metrics answer without a key, as kubelet and Prometheus call them; off: "
        "they ask for one too.", default=True)
    tls_cert: str = _doc("PEM server certificate; with tls_key turns TLS on.", default="")
    tls_key: str = _doc("PEM private key of tls_cert.", default="")
    tls_client_ca: str = _doc("PEM CA bundle; when set, clients must present a cert it signed (mTLS).", default="")
    # -- what to serve
    registry: str = _doc(
        "Registry URL (consul://host:8500?prefix=ortserve/ or file:///path); serve what it says.", default=""
    )
    artifacts: str = _doc("Artifact store URL for registry bundles (default: beside a file registry).", default="")
    artifact_cache: str = _doc("Local directory for fetched, verified bundles.", default="")
    models: tuple[str, ...] = _doc("Only serve these registry models (default: all).", default=())
    model_name: str = _doc("Model name for a local --bundle.", default="classifier")
    model_version: str = _doc("Version name for a local --bundle.", default="1")
    bundle: str = _doc("Serve this local bundle directory instead of a registry.", default="")
    # -- requests and batching
    max_texts_per_request: int = _doc(
        "Most texts one call may carry (2,048: OpenAI's limit; LangChain sends 1,000 a call). The batcher runs a big "
        "call in batches of max_batch_size, so its memory is its texts and answers, never all its activations.",
        default=2048)
    max_batch_size: int = _doc("Most texts in one engine run.", default=32)
    max_queue_delay_ms: float = _doc("Longest a text may be passed over by length-bucketing.", default=10.0)
    max_padding_ratio: float = _doc(
        "Padded/real tokens allowed in one batch (>= 1.0). On a CPU padding costs as much as real work: 1.05 over a "
        "48-text window served 4-8 percent more texts/s than 1.15 over 24 (docs/benchmarks.md).",
        default=1.05,
    )
    max_queue_items: int = _doc(
        "Most texts queued per version (tokenized, in memory) before RESOURCE_EXHAUSTED, whatever the deadlines. "
        "Within it, a call is admitted when the queued and running work plus its own (its tokens after truncation, "
        "as its runs pad them) should finish within three quarters of the time left of its budget (its deadline, "
        "else default_timeout_ms; estimated from the engine's recent padded tokens/s), and refused at once "
        "otherwise (with Retry-After / grpc-retry-pushback-ms).",
        default=4096,
    )
    default_timeout_ms: float = _doc(
        "The time budget of a call that sends none (no gRPC deadline, V2 'timeout' parameter or "
        "x-request-timeout-ms header), sized for batch clients: it is admitted by it and answered "
        "DEADLINE_EXCEEDED (504) if still queued when it runs out; 0: no time bound (max_queue_items alone). 600 s is "
        "how long the OpenAI SDK waits by default; 30 s refused 2,048-text MiniLM calls outright on a busy 2-core "
        "machine (each ~30 s of work there), and max_queue_items bounds the queue well before 600 s.",
        default=600000.0,
    )
    max_batch_tokens: int = _doc("Most padded tokens (texts x longest) in one batch.", default=1024)
    bulk_min_texts: int = _doc(
        "A call of this many texts or more is bulk (an indexing job's): its texts always queue and are batched only "
        "while no interactive call's are waiting, so a search query beside a bulk job waits for at most one short "
        "run per lane, not for the job; 0: every call is interactive. A call's `priority` request parameter "
        "('interactive' or 'bulk') overrides its size.",
        default=256,
    )
    bulk_batch_tokens: int = _doc(
        "Most padded tokens in one batch of bulk texts (a text longer than this runs alone): what an interactive "
        "call may wait for behind a bulk job, per lane. On a CPU small runs cost bulk little.",
        default=256,
    )
    interactive_lane_ms: float = _doc(
        "While an interactive call arrived within this many ms, bulk runs leave one lane (engine_concurrency) to the "
        "interactive class, so a query beside a bulk job finds a lane free instead of waiting for a bulk run; bulk "
        "texts/s beside queries is then that of one lane fewer, and unchanged without queries. 0: bulk runs take "
        "every lane.", default=1000.0)
    sort_window: int = _doc(
        "Only the oldest this-many queued texts are sorted by length into the next batch: bounds how long "
        "a text of an unusual length waits (0 sorts the whole queue: a little more throughput under overload, "
        "a P99 a fifth higher).",
        default=48,
    )
    batch_overhead_tokens: int = _doc(
        "Fixed cost of one engine run in tokens' worth of work: n texts in one batch may waste up to "
        "(n-1) x this in padding (0 on CPUs, where padding costs as much as real work).",
        default=0,
    )
    engine_concurrency: int = _doc(
        "Batches running at once per version. Above 1 (and intra_op_threads above 1), queued batches run on "
        "a second, one-thread session of the model, one per core, while a request that finds the engine "
        "idle still runs on all intra_op_threads (docs/benchmarks.md). Set it to the cores the engine may use.",
        default=2,
    )
    tokenizer: str = _doc(
        "auto (the engine's C++ WordPiece when it reproduces the bundle's tokenizer.json, else Hugging Face "
        "tokenizers), native (fail the load when it cannot) or hf.",
        default="auto",
    )
    frontend: str = _doc(
        "auto (native when the engine was built with gRPC C++, else python), native (a grpc++ server in the same "
        "process owns the port and serves ModelInfer for models the C++ tokenizer runs, with the C++ batcher; "
        "every other call goes to the Python server on a private unix socket) or python (grpc.aio serves every "
        "call). README, Front ends.",
        default="auto",
    )
    tokenizer_threads: int = _doc(
        "Threads tokenizing requests the event loop does not (long ones, and all of them with the hf tokenizer).",
        default=1,
    )
    # -- engine
    device: str = _doc("cpu, cuda or cuda:N (falls back to cpu with one log line).", default="cpu")
    intra_op_threads: int = _doc("ONNX Runtime intra-op threads per engine run (0 = ORT default).", default=2)
    inter_op_threads: int = _doc("ONNX Runtime inter-op threads per engine.", default=1)
    allow_spinning: bool = _doc(
        "ORT's intra-op threads spin between the operators of a run instead of sleeping (a lone call's run "
        "skips a wake-up per operator; docs/benchmarks.md).",
        default=True,
    )
    spin_between_runs: bool = _doc(
        "With allow_spinning, keep spinning after a run returns (ORT's own default): the idle threads then take "
        "the cores the front end and the other lane need. Off stops them when the last run returns.",
        default=False,
    )
    graph_optimization_level: str = _doc("disable, basic, extended or all.", default="all")
    # -- GPU
    gpu_memory_limit_mb: int = _doc(
        "Cap on each CUDA session's ONNX Runtime arena (gpu_mem_limit, grown as requested), MB: a batch that needs "
        "more fails for memory and, with gpu_oom_fallback, reruns on CPU. 0 = no cap.",
        default=0,
    )
    memory_budget_mb: int = _doc(
        "Most memory all loaded versions together may hold on the serving device, MB: GPU memory with --device cuda "
        "(cudaMemGetInfo around each load and warm-up), else the process's resident memory. A load that would pass "
        "it fails (FAILED in `ortserve status`, with the reason) and serving versions are untouched. 0 = no budget.",
        default=0,
    )
    cuda_graphs: bool = _doc(
        "On CUDA, capture one CUDA graph per batch shape at warm-up and replay it after (with shape_buckets). A "
        "model whose nodes ONNX Runtime cannot all place on the GPU runs without graphs, logged.",
        default=False,
    )
    cudnn_conv_algo_search: str = _doc("cuDNN algorithm search on CUDA: exhaustive, heuristic or default.",
                                       default="exhaustive")
    shape_buckets: str = _doc(
        "auto (on with --device cuda), on or off: pad each batch up to the bucket_rows x bucket_tokens ladder, so "
        "the GPU sees a few shapes, each warmed up (and graph-captured) before traffic.",
        default="auto",
    )
    bucket_rows: tuple[int, ...] = _doc("Batch sizes of the shape ladder, ascending.", default=(1, 2, 4, 8, 16, 32, 64))
    bucket_tokens: tuple[int, ...] = _doc(
        "Sequence lengths of the shape ladder, ascending; capped per model at its max_seq_len, always the top rung.",
        default=(16, 32, 64, 128),
    )
    gpu_oom_fallback: str = _doc(
        "off, lazy or warm: a batch that runs out of GPU memory is rerun on a CPU session of the same version "
        "(created on first need, or kept loaded), counted in ortserve_gpu_fallback_total and logged as "
        "gpu_oom_fallback; batches then stay on CPU for gpu_fallback_cooldown_s before the GPU is tried again.",
        default="lazy",
    )
    gpu_fallback_cooldown_s: float = _doc("How long batches stay on CPU after a GPU out-of-memory.", default=30.0)
    cpu_arena_limit_mb: int = _doc(
        "Cap on ONNX Runtime's CPU arena, MB: one arena shared by every CPU session (weights included); a batch "
        "that needs more fails for memory and, with gpu_oom_fallback, reruns on an uncapped CPU session. 0 = "
        "each session its own uncapped arena.",
        default=0,
    )
    event_loop: str = _doc(
        "auto (uvloop when installed), uvloop or asyncio. uvloop cuts the per-call cost of the event loop, "
        "which shares the CPU with the engine.",
        default="auto",
    )
    # -- lifecycle
    verify_outputs: str = _doc(
        "enforce, warn or off: after warm-up, a version answers its bundle's reference texts through the batcher on "
        "its device and is compared with the stored answers by the rule its precision implies (docs/serving.md). "
        "enforce: a version that differs is FAILED and takes no traffic; warn: it serves, logged and counted.",
        default="enforce",
    )
    max_loaded_versions: int = _doc("Versions kept loaded per model (weighted ones always are).", default=3)
    drain_timeout_s: float = _doc("Longest a retired version waits for its in-flight calls.", default=30.0)
    rollout_step_s: float = _doc(
        "How often this server writes its figures of a running rollout (`registry rollout`) to the registry and "
        "tries to step it (one server wins each step); 0: never.", default=5.0)
    shadow_keep_texts: bool = _doc(
        "Keep the texts of the shadow copies that disagree most (`ortserve status` shows them); off: only their "
        "request ids and figures, so no caller's text is held beyond its call.", default=False)
    shutdown_grace_s: float = _doc("On SIGTERM, time in-flight calls get to finish.", default=20.0)
    # -- operations
    latency_slo_p99_ms: float = _doc(
        "The P99 objective for ModelInfer (server time, decode to reply), in ms. The server does not act on it: it "
        "exports it as ortserve_latency_slo_p99_seconds, which the alert OrtserveLatencyOverSLO compares with the "
        "P99 of ortserve_request_duration_seconds (deploy/prometheus).",
        default=250.0,
    )
    # -- logs and traces
    otlp_endpoint: str = _doc(
        "OTLP/gRPC collector (host:port, plaintext; https://host:port for TLS) to export each call's spans to, "
        "parented to the caller's traceparent or B3 headers; '' = no traces. Needs the extra ortserve[tracing].",
        default="",
    )
    trace_sample_ratio: float = _doc(
        "Share of calls without a caller's sampling decision that are traced (by trace id, so replicas agree).",
        default=1.0,
    )
    request_log_sample: float = _doc(
        "Share of answered calls under latency_slo_p99_ms that get a `request` log line (by request id); failed and "
        "slower calls always get one, and metrics and traces count every call. 1 logs every call (a line per call "
        "wrote 57 MB in a 30 s load run and cost throughput; docs/benchmarks.md).",
        default=0.01,
    )
    log_level: str = _doc("debug, info, warning or error.", default="info")
    log_format: str = _doc("json (one object per line) or console (for people).", default="json")

    def validate(self) -> Settings:
        checks: list[tuple[str, bool, str]] = [
            ("port", 0 <= self.port <= 65535, "a TCP port 0..65535"),
            ("metrics_port", 0 <= self.metrics_port <= 65535, "a TCP port 0..65535"),
            ("http_port", 0 <= self.http_port <= 65535, "a TCP port 0..65535 (0: no REST port)"),
            ("trace_sample_ratio", 0.0 <= self.trace_sample_ratio <= 1.0, "a share in 0..1"),
            ("max_message_bytes", self.max_message_bytes >= 1024, ">= 1024"),
            ("max_header_bytes", self.max_header_bytes >= 1024, ">= 1024"),
            ("http_body_timeout_s", self.http_body_timeout_s >= 0, ">= 0"),
            ("http_max_connections", self.http_max_connections >= 0, ">= 0"),
            ("api_key", all(k and k.strip() == k and k.isprintable() for k in self.api_key),
             "keys of printable characters without spaces around them"),
            ("max_texts_per_request", self.max_texts_per_request >= 1, ">= 1"),
            ("max_batch_size", self.max_batch_size >= 1, ">= 1"),
            ("max_queue_delay_ms", self.max_queue_delay_ms >= 0, ">= 0"),
            ("max_padding_ratio", self.max_padding_ratio >= 1.0, ">= 1.0"),
            ("max_queue_items", self.max_queue_items >= 1, ">= 1"),
            ("default_timeout_ms", self.default_timeout_ms >= 0, ">= 0"),
            ("max_batch_tokens", self.max_batch_tokens >= 1, ">= 1"),
            ("bulk_min_texts", self.bulk_min_texts >= 0, ">= 0"),
            ("bulk_batch_tokens", self.bulk_batch_tokens >= 1, ">= 1"),
            ("interactive_lane_ms", self.interactive_lane_ms >= 0, ">= 0"),
            ("sort_window", self.sort_window >= 0, ">= 0"),
            ("batch_overhead_tokens", self.batch_overhead_tokens >= 0, ">= 0"),
            ("engine_concurrency", self.engine_concurrency >= 1, ">= 1"),
            ("tokenizer_threads", self.tokenizer_threads >= 1, ">= 1"),
            ("intra_op_threads", self.intra_op_threads >= 0, ">= 0"),
            ("inter_op_threads", self.inter_op_threads >= 0, ">= 0"),
            ("max_loaded_versions", self.max_loaded_versions >= 1, ">= 1"),
            ("gpu_memory_limit_mb", self.gpu_memory_limit_mb >= 0, ">= 0"),
            ("memory_budget_mb", self.memory_budget_mb >= 0, ">= 0"),
            ("cpu_arena_limit_mb", self.cpu_arena_limit_mb >= 0, ">= 0"),
            ("gpu_fallback_cooldown_s", self.gpu_fallback_cooldown_s >= 0, ">= 0"),
            (
                "cudnn_conv_algo_search",
                self.cudnn_conv_algo_search in ("exhaustive", "heuristic", "default"),
                "one of exhaustive, heuristic, default",
            ),
            ("shape_buckets", self.shape_buckets in ("auto", "on", "off"), "one of auto, on, off"),
            ("bucket_rows", _ladder(self.bucket_rows), "ascending positive integers"),
            ("bucket_tokens", _ladder(self.bucket_tokens), "ascending positive integers"),
            ("gpu_oom_fallback", self.gpu_oom_fallback in ("off", "lazy", "warm"), "one of off, lazy, warm"),
            ("verify_outputs", self.verify_outputs in ("enforce", "warn", "off"), "one of enforce, warn, off"),
            ("drain_timeout_s", self.drain_timeout_s >= 0, ">= 0"),
            ("rollout_step_s", self.rollout_step_s >= 0, ">= 0"),
            ("shutdown_grace_s", self.shutdown_grace_s >= 0, ">= 0"),
            ("latency_slo_p99_ms", self.latency_slo_p99_ms > 0, "> 0"),
            ("request_log_sample", 0.0 <= self.request_log_sample <= 1.0, "a share in 0..1"),
            (
                "graph_optimization_level",
                self.graph_optimization_level in ("disable", "basic", "extended", "all"),
                "one of disable, basic, extended, all",
            ),
            (
                "device",
                self.device == "cpu"
                or self.device == "cuda"
                or (self.device.startswith("cuda:") and self.device[5:].isdigit()),
                "cpu, cuda or cuda:N",
            ),
            ("event_loop", self.event_loop in ("auto", "uvloop", "asyncio"), "one of auto, uvloop, asyncio"),
            ("tokenizer", self.tokenizer in ("auto", "native", "hf"), "one of auto, native, hf"),
            ("frontend", self.frontend in ("auto", "native", "python"), "one of auto, native, python"),
            (
                "log_level",
                self.log_level in ("debug", "info", "warning", "error"),
                "one of debug, info, warning, error",
            ),
            ("log_format", self.log_format in ("json", "console"), "json or console"),
            ("tls_key", bool(self.tls_cert) == bool(self.tls_key), "set together with tls_cert"),
            ("tls_client_ca", not self.tls_client_ca or bool(self.tls_cert), "used only with tls_cert"),
            ("bundle", not (self.bundle and self.registry), "either --bundle or --registry, not both"),
        ]
        for name, ok, expected in checks:
            if not ok:
                shown = "(not shown)" if name in SECRET else repr(getattr(self, name))  # keys never reach a log
                raise ConfigError(f"invalid setting {name}={shown}: expected {expected}")
        return self


SECRET = frozenset({"api_key"})
"""Settings whose values no message shows."""


def default(name: str) -> Any:
    """A setting's default, for the few structures that carry a setting of their own (e.g. BatchPolicy)."""
    found = {f.name: f.default for f in fields(Settings)}
    if name not in found:
        raise KeyError(f"no setting {name!r}")
    return found[name]


def _ladder(values: tuple[int, ...]) -> bool:
    return all(v >= 1 for v in values) and all(a < b for a, b in itertools.pairwise(values))


_HINTS = get_type_hints(Settings)


def _coerce(name: str, raw: Any, source: str) -> Any:
    kind = _HINTS[name]
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("not a boolean (true/false)")
        if kind is int:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError("not an integer")
            return int(raw)
        if kind is float:
            return float(raw)
        if get_origin(kind) is tuple:
            items = [raw] if isinstance(raw, str) else list(raw)
            # "a,b", repeated flags (["a", "b"]) and TOML lists all work
            texts = [part.strip() for item in items for part in str(item).split(",") if part.strip()]
            if kind.__args__[0] is int:
                if any(isinstance(i, bool) or (isinstance(i, float) and not i.is_integer()) for i in items):
                    raise ValueError("not a list of integers")
                return tuple(int(t) for t in texts)
            return tuple(texts)
        if kind is str:
            if not isinstance(raw, str | int | float):
                raise ValueError("not a string")
            return str(raw)
    except (TypeError, ValueError) as e:
        shown = "(not shown)" if name in SECRET else repr(raw)
        raise ConfigError(f"invalid setting {name} (from {source}): {shown}: {e}") from None
    raise AssertionError(f"unhandled setting type {kind}")


def _read_file(path: str) -> Mapping[str, Any]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if p.suffix in (".yaml", ".yml"):
            import yaml  # only needed for YAML configs

            data = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except Exception as e:
        raise ConfigError(f"cannot parse config file {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table of settings")
    data = data.get("ortserve", data)
    return data


def load_settings(
    *, file: str = "", env: Mapping[str, str] | None = None, flags: Mapping[str, Any] | None = None
) -> Settings:
    names = {f.name for f in fields(Settings)}
    values: dict[str, Any] = {}
    if file:
        for key, raw in _read_file(file).items():
            key = key.replace("-", "_")
            if key not in names:
                raise ConfigError(f"unknown setting {key!r} in {file}")
            values[key] = _coerce(key, raw, file)
    for key, raw in (os.environ if env is None else env).items():
        if key.startswith("ORTSERVE_"):
            name = key[len("ORTSERVE_") :].lower()
            if name in names:
                values[name] = _coerce(name, raw, key)
    for key, raw in (flags or {}).items():
        if raw is not None:
            values[key] = _coerce(key, raw, "--" + key.replace("_", "-"))
    return Settings(**values).validate()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, documented from the field docstrings; unset flags stay None."""
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        kind = _HINTS[f.name]
        default = f.default
        help_text = f"{f.metadata['doc']} (default: {default!r}; env ORTSERVE_{f.name.upper()})"
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif get_origin(kind) is tuple:
            parser.add_argument(flag, action="append", default=None, metavar="NAME", help=help_text)
        else:
            parser.add_argument(flag, default=None, metavar=f.name.split("_")[-1].upper(), help=help_text)


def flags_from(namespace: argparse.Namespace) -> dict[str, Any]:
    return {f.name: getattr(namespace, f.name, None) for f in fields(Settings)}
