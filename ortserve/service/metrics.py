"""Prometheus metrics, in a registry owned by one Server (so tests can run several in a process).

Request-path metrics are updated by the handlers and the batcher observer; state that already has
an owner (queue depth, loaded versions, routing weights) is read from the manager at scrape time
by a collector instead of being copied into gauges that could drift.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from ortserve.registry.rollout import LATENCY_BOUNDS_S


class BatchRecord(Protocol):
    """One engine run (engine_ext.BatchEvent)."""

    texts: int
    padded_tokens: int
    real_tokens: int
    engine_s: float
    lane: str


_LATENCY_BUCKETS = LATENCY_BOUNDS_S  # one set of bounds: a rollout's figures are read from these series
_BATCH_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # First collector of the registry: whatever reports asynchronously (the native front end's event thread)
        # catches up before the series are read, so a scrape after a reply sees that reply.
        self._before_scrape: list[Callable[[], None]] = []
        r.register(_BeforeScrape(self._before_scrape))
        self.requests = Counter(
            "ortserve_requests", "ModelInfer calls by outcome.", ["model", "version", "code"], registry=r
        )
        self.texts = Counter("ortserve_texts", "Texts classified.", ["model", "version"], registry=r)
        self.request_seconds = Histogram(
            "ortserve_request_duration_seconds",
            "ModelInfer time in the server, decode to reply.",
            ["model", "version"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "ortserve_queue_duration_seconds",
            "Time a request's texts waited for the engine.",
            ["model", "version"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokenize_seconds = Histogram(
            "ortserve_tokenize_duration_seconds",
            "Tokenization per request.",
            ["model", "version"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.engine_seconds = Histogram(
            "ortserve_engine_duration_seconds",
            "Engine time per batch.",
            ["model", "version"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "ortserve_batch_size", "Texts per engine run.", ["model", "version"], buckets=_BATCH_BUCKETS, registry=r
        )
        self.padding_ratio = Histogram(
            "ortserve_batch_padding_ratio",
            "Padded tokens / real tokens per batch.",
            ["model", "version"],
            buckets=(1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2, 3, 5),
            registry=r,
        )
        self.engine_runs = Counter(
            "ortserve_engine_runs",
            "Engine runs by lane: wide (the multi-threaded session, idle engine) or narrow (one-thread "
            "session, runs side by side under load).",
            ["model", "version", "lane"],
            registry=r,
        )
        self.in_flight = InFlight()
        gauge = Gauge("ortserve_inflight_requests", "ModelInfer calls being served.", registry=r)
        gauge.set_function(self.in_flight.value)
        self.reloads = Counter("ortserve_reloads", "Version loads by result.", ["model", "result"], registry=r)
        self.verify = Counter(
            "ortserve_version_verify",
            "Load-time checks of a version's answers to its bundle's reference texts, by result: passed, failed, "
            "unverified (the bundle has none) or skipped (verify_outputs off).",
            ["model", "version", "result"],
            registry=r,
        )
        self.load_seconds = Histogram(
            "ortserve_load_duration_seconds",
            "Fetch + verify + load + warm-up of one version.",
            ["model"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.swaps = Counter("ortserve_route_swaps", "Route table changes.", ["model"], registry=r)
        self.swap_seconds = Histogram(
            "ortserve_swap_duration_seconds",
            "From a desired-state change to the route-table swap (loads included).",
            ["model"],
            buckets=(0.001, 0.01, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self._by_version: dict[tuple[str, str], VersionMetrics] = {}  # event-loop owned cache
        self.watcher_connected = Gauge(
            "ortserve_registry_connected", "1 while the registry watch is healthy, 0 while it backs off.", registry=r
        )
        self.http_connections_lost = Counter(
            "ortserve_http_connections_lost",
            "HTTP calls whose client went before its body arrived: reason reset (it closed or reset the connection) "
            "or timeout (the body took longer than http_body_timeout_s: 408).",
            ["reason"], registry=r)
        self.http_connections_refused = Counter(
            "ortserve_http_connections_refused", "HTTP connections answered 503 and closed past http_max_connections.",
            registry=r)
        self.unauthenticated = Counter(
            "ortserve_unauthenticated", "Calls refused for a missing or wrong API key, by transport (http, grpc; the "
            "native front end's own ModelInfer refusals are not counted here).", ["transport"], registry=r)
        self.shadow_calls = Counter(
            "ortserve_shadow_calls", "Shadow copies of live calls by outcome: compared (both answered), dropped (the "
            "shadow version had no room: the lowest class), failed (the shadow version answered an error), "
            "stable_failed (the live call failed: nothing to compare).", ["model", "stable", "candidate", "outcome"],
            registry=r)
        self.shadow_judged = Counter(
            "ortserve_shadow_judged",
            "Items the shadow comparison judged (decisive rows, vectors, rankings, entities).",
            ["model", "stable", "candidate"], registry=r)
        self.shadow_agreed = Counter(
            "ortserve_shadow_agreed", "Judged items on which the shadow version answered as the live one.",
            ["model", "stable", "candidate"], registry=r)
        self.shadow_ranked = Counter(
            "ortserve_shadow_ranked_calls", "Compared reranker calls (each one judged ranking).",
            ["model", "stable", "candidate"], registry=r)
        self.shadow_concordance = Counter(
            "ortserve_shadow_concordance", "Sum over compared reranker calls of the share of candidate pairs both "
            "versions order alike (over ortserve_shadow_ranked_calls: the mean).", ["model", "stable", "candidate"],
            registry=r)
        self.shadow_engine_seconds = Histogram(
            "ortserve_shadow_engine_duration_seconds", "Engine time of the shadowed calls on each side (role stable: "
            "the live call, candidate: its copy), the same calls on both.", ["model", "stable", "candidate", "role"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.latency_slo = Gauge(
            "ortserve_latency_slo_p99_seconds",
            "The configured P99 objective of ModelInfer (latency_slo_p99_ms), for alerts to compare with.",
            registry=r,
        )

    def for_version(self, model: str, version: str) -> VersionMetrics:
        """The per-version series of the request path, looked up once (`labels()` is not free)."""
        key = (model, version)
        found = self._by_version.get(key)
        if found is None:
            found = self._by_version[key] = VersionMetrics(
                ok=self.requests.labels(model, version, "OK"),
                texts=self.texts.labels(model, version),
                request_seconds=self.request_seconds.labels(model, version),
                queue_seconds=self.queue_seconds.labels(model, version),
                tokenize_seconds=self.tokenize_seconds.labels(model, version),
            )
        return found

    def batch_observer(self, model: str, version: str) -> Callable[[BatchRecord], None]:
        engine = self.engine_seconds.labels(model, version)
        size = self.batch_size.labels(model, version)
        padding = self.padding_ratio.labels(model, version)
        runs = {lane: self.engine_runs.labels(model, version, lane) for lane in ("wide", "narrow")}

        def observe(run: BatchRecord) -> None:
            runs[run.lane].inc()
            engine.observe(run.engine_s)
            size.observe(run.texts)
            padding.observe(run.padded_tokens / max(1, run.real_tokens))

        return observe

    def before_scrape(self, hook: Callable[[], None]) -> None:
        self._before_scrape.append(hook)

    def counter_source(self, name: str, doc: str, label: str, read: Callable[[], dict[str, int]]) -> None:
        """A counter whose owner keeps the counts (`read` returns {label value: count}), read on each scrape."""
        self.registry.register(_CounterSource(name, doc, label, read))

    def watch_manager(self, status: Callable[[], dict[str, Any]]) -> None:
        self.registry.register(_ManagerCollector(status))

    def serve(self, host: str, port: int, *, authorized: Callable[[str | None], bool] | None = None) -> Any:
        """/metrics on host:port (a server with `server_port` and `shutdown()`); with `authorized`, a scrape whose
        Authorization header it refuses is answered 401 (api_key_probes off: Prometheus sends its bearer token)."""
        if authorized is None:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
            return server
        app = make_wsgi_app(self.registry)

        def guarded(environ: dict[str, Any], start_response: Any) -> Any:
            if authorized(environ.get("HTTP_AUTHORIZATION")):
                return app(environ, start_response)
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Bearer realm="ortserve"'),
                                                 ("Content-Type", "text/plain")])
            return [b"this server asks for an API key: send 'Authorization: Bearer <key>'\n"]

        server = make_server(host, port, guarded, ThreadingWSGIServer, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, name="ortserve-metrics", daemon=True).start()
        return server


class _QuietHandler(WSGIRequestHandler):
    """No access line on stderr per scrape (prometheus_client's own server is as quiet)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class InFlight:
    """ModelInfer calls in progress: the Python handler's count (loop thread) plus any other counter added with
    `add_source` (the native front end's), summed at scrape time rather than copied."""

    def __init__(self) -> None:
        self._count = 0
        self._sources: list[Callable[[], int]] = []

    def inc(self) -> None:
        self._count += 1

    def dec(self) -> None:
        self._count -= 1

    def add_source(self, source: Callable[[], int]) -> None:
        self._sources.append(source)

    def value(self) -> float:
        return float(self._count + sum(source() for source in self._sources))


@dataclass(frozen=True, slots=True)
class VersionMetrics:
    ok: Any
    texts: Any
    request_seconds: Any
    queue_seconds: Any
    tokenize_seconds: Any


class _BeforeScrape(Collector):
    def __init__(self, hooks: list[Callable[[], None]]) -> None:
        self._hooks = hooks

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for hook in self._hooks:
            hook()
        return iter(())

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # registering must not call collect() (no hook is installed yet)


class _CounterSource(Collector):
    def __init__(self, name: str, doc: str, label: str, read: Callable[[], dict[str, int]]) -> None:
        self._name, self._doc, self._label, self._read = name, doc, label, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._doc, labels=[self._label])
        for value, count in self._read().items():
            family.add_metric([value], count)
        yield family

    def describe(self) -> Iterator[CounterMetricFamily]:
        return iter(())  # nothing to read before the owner is running


class _ManagerCollector(Collector):
    def __init__(self, status: Callable[[], dict[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[GaugeMetricFamily]:
        loaded = GaugeMetricFamily(
            "ortserve_version_loaded", "1 per version by lifecycle state.", labels=["model", "version", "state"]
        )
        weight = GaugeMetricFamily(
            "ortserve_routing_weight_percent", "Routing weight in force.", labels=["model", "version"]
        )
        depth = GaugeMetricFamily("ortserve_queue_depth", "Texts queued per version.", labels=["model", "version"])
        memory = GaugeMetricFamily(
            "ortserve_version_memory_bytes", "What loading and warming a version took on its device.",
            labels=["model", "version", "device"],
        )
        # Read off each version's engine (it owns the counts); they restart at 0 when a version reloads.
        fallback = CounterMetricFamily(
            "ortserve_gpu_fallback", "Batches a CPU session answered because the GPU ran out of memory (the rerun "
            "and those sent to CPU during the cool-down).", labels=["model", "version"],
        )
        oom = CounterMetricFamily(
            "ortserve_gpu_oom", "Engine runs that failed for memory.", labels=["model", "version"]
        )
        for model, info in self._status()["models"].items():
            for version, v in info["versions"].items():
                loaded.add_metric([model, version, v["state"]], 1)
                depth.add_metric([model, version], v.get("queue_depth", 0))
                if "memory_mb" in v:
                    memory.add_metric([model, version, v["device"]], v["memory_mb"] * 1024 * 1024)
                if str(v.get("device", "")).startswith("cuda") or "fallback_runs" in v:
                    fallback.add_metric([model, version], v.get("fallback_runs", 0))
                    oom.add_metric([model, version], v.get("oom_errors", 0))
            for version, w in info["routing"].items():
                weight.add_metric([model, version], w)
        yield loaded
        yield weight
        yield depth
        yield memory
        yield fallback
        yield oom
