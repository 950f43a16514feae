"""The native front end's Python side (`frontend = "native"`): owns the grpc++ server and feeds it the route table.

The C++ front end (`engine_ext/src/frontend.cc`) owns the public port. It serves ModelInfer itself for every model
whose versions all run on the C++ tokenizer, with the C++ batcher (`native_batcher.cc`), and passes every other call
(the other inference RPCs, admin status, ModelInfer for other models, and any request outside its fast path, bad
ones included) to the Python server on a private unix socket, so there is one implementation of every error and of
everything but the hot path. This class is the seam between the two:

- `publish` (manager hook, on the loop): each new route table becomes one immutable C++ snapshot; a version gets
  its `NativeVersion` (its C++ batcher over the same engines and tokenizer) the first time it is routable;
- `retire` (manager hook): a retired version's native calls drain, and its batcher closes, before its engines do;
- a thread drains the C++ event queue into the same `request` log line and Prometheus series the Python handler
  writes (plus `frontend: "native"`), so neither a call nor the engine ever waits for Python.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import structlog

from ortserve import engine_ext
from ortserve.service.batcher import BatchRun
from ortserve.service.config import Settings
from ortserve.service.logs import iso_utc
from ortserve.service.manager import LoadedVersion, RouteTable
from ortserve.service.metrics import Metrics
from ortserve.service.request_log import finish_request, ms

server_log = structlog.get_logger("ortserve.server")


class NativeFrontendUnavailable(RuntimeError):
    """`frontend = "native"` on an engine built without gRPC C++."""


def check_available() -> None:
    if not engine_ext.HAS_FRONTEND:
        raise NativeFrontendUnavailable(
            f"frontend=native needs the engine built with gRPC C++: {engine_ext.FRONTEND_MISSING} "
            "(install libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev pkg-config and rebuild, e.g. "
            "./scripts/bootstrap dev); or use frontend=python"
        )


def resolve_frontend(setting: str) -> tuple[str, str]:
    """The front end to run for the `frontend` setting, and why `auto` chose python ("" otherwise)."""
    if setting == "auto":
        if engine_ext.HAS_FRONTEND:
            return "native", ""
        return "python", f"native front end not built: {engine_ext.FRONTEND_MISSING}"
    return setting, ""


class NativeFrontend:
    def __init__(self, settings: Settings, metrics: Metrics, *, backend: str,
                 tls: tuple[bytes, bytes, bytes | None] | None = None) -> None:
        """`tls`: PEM certificate chain, key and optional client CA (app.tls_pem), or None for plaintext."""
        check_available()
        self._settings = settings
        self._metrics = metrics
        self._events = engine_ext.EventSink()
        # Shared by every version, like the Python server's lane pools: a canary's two versions take turns.
        self._lanes = engine_ext.NativeLanes(settings.engine_concurrency, settings.max_loaded_versions + 1)
        self._versions: dict[LoadedVersion, Any] = {}  # loop thread only
        self._frontend = engine_ext.Frontend(
            f"{settings.host}:{settings.port}",
            backend,
            events=self._events,
            max_message_bytes=settings.max_message_bytes,
            max_texts=settings.max_texts_per_request,
            tls_cert=tls[0] if tls else None,
            tls_key=tls[1] if tls else None,
            tls_client_ca=tls[2] if tls else None,
        )
        self._drainer = threading.Thread(target=self._drain_events, name="ortserve-native-events", daemon=True)
        self._processed = 0  # events handled by the drain thread (it alone writes it)
        self._caught_up = threading.Condition()
        metrics.in_flight.add_source(lambda: self._frontend.in_flight)
        metrics.counter_source("ortserve_frontend_passthrough", "ModelInfer calls the native front end passed on to "
                               "the Python server, by reason.", "reason", self.passthrough)
        metrics.before_scrape(self.flush)

    def start(self) -> int:
        """Bind the public port and start serving; returns the port."""
        self._drainer.start()
        return int(self._frontend.start())

    # ---- manager hooks (loop thread) ------------------------------------------------------------

    def publish(self, table: RouteTable) -> None:
        routes: dict[str, tuple[list[str], list[int], dict[str, Any]]] = {}
        for model, route in table.models.items():
            versions = {name: self._native_version(lv) for name, lv in route.versions.items()}
            if any(v is None for v in versions.values()):
                continue  # a version the C++ tokenizer cannot run: the whole model stays on the Python path
            routes[model] = (list(route.split.order), list(route.split.upper), versions)
        self._frontend.set_routes(routes)

    def passthrough(self) -> dict[str, int]:
        """ModelInfer calls passed on to the Python server so far, by reason (every reason listed)."""
        return {str(reason): int(count) for reason, count in self._frontend.passthrough().items()}

    def queue_depth(self, lv: LoadedVersion) -> int:
        native = self._versions.get(lv)
        return int(native.queue_depth) if native is not None else 0

    async def retire(self, lv: LoadedVersion, timeout_s: float) -> None:
        native = self._versions.pop(lv, None)
        if native is None:
            return
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, native.drain, timeout_s):
            server_log.warning("drain_timeout", model=lv.model, version=lv.version, native_in_flight=native.in_flight)
        await loop.run_in_executor(None, native.close)

    def _native_version(self, lv: LoadedVersion) -> Any | None:
        found = self._versions.get(lv)
        if found is not None:
            return found
        classifier = lv.classifier
        if classifier is None or classifier.tokenizer.native is None:
            return None
        s = self._settings
        assert lv.batcher is not None  # READY versions always have one
        policy = lv.batcher.policy  # the same policy object the Python batcher of this version uses
        native = engine_ext.NativeVersion(
            lv.model,
            lv.version,
            wide=classifier.engine,
            narrow=classifier.narrow,
            tokenizer=classifier.tokenizer.native,
            labels=len(classifier.labels),
            pad_id=classifier.tokenizer.pad_id,
            token_types=classifier.wants_token_types,
            lanes=self._lanes,
            events=self._events,
            max_batch_size=policy.max_batch_size,
            max_queue_delay_s=policy.max_queue_delay_s,
            max_padding_ratio=policy.max_padding_ratio,
            batch_overhead_tokens=policy.batch_overhead_tokens,
            max_batch_tokens=policy.max_batch_tokens,
            sort_window=policy.sort_window,
            max_queue_items=s.max_queue_items,
            max_queue_wait_s=s.max_queue_wait_ms / 1000,
            engine_concurrency=s.engine_concurrency,
            bucket_rows=list(classifier.ladder.rows),
            bucket_tokens=list(classifier.ladder.tokens),
        )
        self._versions[lv] = native
        return native

    # ---- health and shutdown --------------------------------------------------------------------

    def set_health(self, service: str, serving: bool) -> None:
        self._frontend.set_health(service, serving)

    def not_serving(self) -> None:
        """Every health entry NOT_SERVING now and from now on (shutdown), so that a health update still queued
        when the shutdown began (a swap's) cannot turn a draining server ready; `shutdown` does it too."""
        self._frontend.not_serving()

    async def shutdown(self, grace_s: float) -> None:
        """Every service NOT_SERVING at once, no new calls, in-flight ones get up to `grace_s` (blocks a thread)."""
        await asyncio.get_running_loop().run_in_executor(None, self._frontend.shutdown, grace_s)

    def close(self) -> None:
        """After the manager closed every version: stop the lane threads and the event thread."""
        self._lanes.stop()
        self.flush()  # the last calls' log lines: close() drops what was not drained
        self._events.close()
        if self._drainer.is_alive():
            self._drainer.join(timeout=5)
        if self._events.dropped:
            server_log.warning("native_events_dropped", dropped=self._events.dropped)

    # ---- events -> logs and metrics (own thread) ------------------------------------------------

    def flush(self, timeout_s: float = 2.0) -> None:
        """Wait until every event pushed so far is logged and counted (a scrape right after a reply sees it)."""
        target = self._events.pushed
        with self._caught_up:
            self._caught_up.wait_for(lambda: self._processed >= target or not self._drainer.is_alive(), timeout_s)

    def _drain_events(self) -> None:
        observers: dict[tuple[str, str], Any] = {}
        while True:
            events = self._events.drain(512, 0.5)
            if not events:
                if self._events.closed:
                    return
                continue
            for event in events:
                self._handle(event, observers)
            with self._caught_up:
                self._processed += len(events)
                self._caught_up.notify_all()

    def _handle(self, event: tuple[Any, ...], observers: dict[tuple[str, str], Any]) -> None:
        try:
            if event[0] == "request":
                self._log_request(event)
            else:
                _, model, version, texts, padded, real, engine_s, lane = event
                observe = observers.get((model, version))
                if observe is None:
                    observe = observers[(model, version)] = self._metrics.batch_observer(model, version)
                observe(BatchRun(texts, padded, real, engine_s, lane))
        except Exception:  # a bad record must not stop the logs of every later call
            server_log.exception("native_event_failed", event=repr(event)[:200])

    def _log_request(self, event: tuple[Any, ...]) -> None:
        (_, request_id, model, version, route, texts, batch_size, queue_s, tokenize_s, engine_s, total_s,
         status, error, ended_unix) = event
        fields: dict[str, Any] = {"request_id": request_id, "model": model, "version": version or None}
        if route:
            fields["route"] = route
        fields["texts"] = texts
        if status == "OK":
            fields.update(batch_size=batch_size, queue_ms=ms(queue_s), tokenize_ms=ms(tokenize_s),
                          engine_ms=ms(engine_s))
        extra: Mapping[str, Any] = {"error": error} if error else {}
        # Stamped with when the reply went out, not when this thread got to it (a moment later under load).
        finish_request(self._metrics, fields, status, version or "none", total_s, queue_s=queue_s,
                       tokenize_s=tokenize_s, frontend="native", timestamp=iso_utc(ended_unix), **extra)

