"""The composition root: settings → metrics, data plane, factory, manager, servicer → one grpc.aio server.

Also owns health, reflection, the admin status RPC, the desired-state source and graceful
shutdown. It holds no serving logic of its own.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.registry.desired import DesiredModel, DesiredState, DesiredVersion
from ortserve.service import cohere_api, openai_api, tei_api
from ortserve.service.api_keys import ApiKeys, KeyInterceptor, bearer
from ortserve.service.assembly import ArtifactFetcher, VersionFactory
from ortserve.service.config import Settings
from ortserve.service.data_plane import DataPlane
from ortserve.service.handlers import InferenceServicer, add_inference_service
from ortserve.service.inference import Inference
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics
from ortserve.service.native_frontend import NativeFrontend, resolve_frontend
from ortserve.service.os_threads import name_os_thread
from ortserve.service.request_log import LogSampling
from ortserve.service.rest import RestServer, server_tls
from ortserve.service.shadow import ShadowBook
from ortserve.service.text_calls import TextCalls
from ortserve.service.tracing import Tracing

log = structlog.get_logger("ortserve.server")

INFERENCE_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
ADMIN_STATUS_METHOD = "/ortserve.admin.v1.Admin/Status"
LIVENESS_SERVICE = "liveness"
"""Health service name that stays SERVING while the process runs (for liveness probes);
the overall "" entry means ready (for readiness probes)."""
CLIENT_APIS = (openai_api, cohere_api, tei_api)
"""The client APIs served on the HTTP port beside V2 (docs/client_apis.md)."""

# A desired-state source runs until cancelled, handing each new DesiredState to `apply`.
StateSource = Callable[[Callable[[DesiredState], None], Metrics], Awaitable[None]]


def bundle_source(settings: Settings) -> StateSource:
    """The desired state for `ortserve serve --bundle DIR`: one model, one version, all traffic."""

    async def run(apply: Callable[[DesiredState], None], metrics: Metrics) -> None:
        version = DesiredVersion(settings.model_version, bundle_dir=settings.bundle)
        model = DesiredModel(settings.model_name, {version.version: version}, {version.version: 100})
        apply(DesiredState({model.model: model}))
        await asyncio.Event().wait()

    return run


class ListenError(Exception):
    """A port the server was told to listen on cannot be had; the message names the setting and the address."""

    def __init__(self, setting: str, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address} (--{setting.replace('_', '-')}): {reason}")


class Server:
    def __init__(self, settings: Settings, *, source: StateSource, fetch: ArtifactFetcher | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.metrics.latency_slo.set(settings.latency_slo_p99_ms / 1000)
        self.keys = ApiKeys.of(settings)
        self._source = source
        self._tokenize_pool = ThreadPoolExecutor(settings.tokenizer_threads, thread_name_prefix="ortserve-tok",
                                                 initializer=name_os_thread)
        self.tracing = Tracing(settings.otlp_endpoint, sample_ratio=settings.trace_sample_ratio) \
            if settings.otlp_endpoint else None
        sampling = LogSampling(share=settings.request_log_sample, slow_s=settings.latency_slo_p99_ms / 1000)
        self.plane = DataPlane(settings, self.metrics, tokenize_pool=self._tokenize_pool, tracing=self.tracing,
                               sampling=sampling)
        # Long-lived, so that its malloc arena is reused by every load (a thread per load grew memory).
        self._opener_pool = ThreadPoolExecutor(1, thread_name_prefix="ortserve-opener")
        factory = VersionFactory(settings, self.plane, fetch=fetch, opener=self._opener_pool)
        # frontend=native: the grpc++ front end owns the public port; this grpc.aio server answers what it passes
        # on, on a unix socket in a private directory.
        self.native: NativeFrontend | None = None
        self._backend_dir = ""
        self.frontend, self._frontend_fallback = resolve_frontend(settings.frontend)
        if self.frontend == "native":
            self._backend_dir = tempfile.mkdtemp(prefix="ortserve-")
            self.native = NativeFrontend(settings, self.metrics, self.plane.events, self.plane.routes,
                                         backend=self._backend_address(), tls=tls_pem(settings), keys=self.keys)
        self.manager = ModelManager(
            factory,
            max_loaded_versions=settings.max_loaded_versions,
            drain_timeout_s=settings.drain_timeout_s,
            observer=self._on_lifecycle,
            routes=self.plane.routes,
            shadow_texts=settings.shadow_keep_texts,
        )
        self.shadows = ShadowBook(self.metrics, served=self.manager.served_output)
        self.plane.shadows = self.shadows
        self.inference = Inference(self.manager, self.plane, self.metrics,
                                   max_texts_per_request=settings.max_texts_per_request, tracing=self.tracing,
                                   sampling=sampling)
        self.servicer = InferenceServicer(self.manager, self.inference)
        self.rest = RestServer(self.manager, self.inference, self.metrics, host=settings.host,
                               port=settings.http_port, max_body_bytes=settings.max_message_bytes,
                               shutdown_grace_s=settings.shutdown_grace_s,
                               body_timeout_s=settings.http_body_timeout_s,
                               max_connections=settings.http_max_connections, keys=self.keys,
                               tls=server_tls(*tls_pem(settings)) if settings.tls_cert else None) \
            if settings.http_port else None
        if self.rest is not None:  # the client APIs on the same port: each call a V2 ModelInfer (text_calls.py)
            calls = TextCalls(self.rest, self.inference, self.manager, settings=settings)
            for api in CLIENT_APIS:
                api.add_routes(self.rest.app, calls)
        self.health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._source_task: asyncio.Task[None] | None = None
        self._fallback_task: asyncio.Task[None] | None = None
        self._metrics_http: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self.metrics_port = 0

    async def start(self) -> None:
        s = self.settings
        self._loop = asyncio.get_running_loop()
        self.plane.start(self._loop)
        server = grpc.aio.server(
            interceptors=[KeyInterceptor(self.keys, self.metrics)] if self.keys.required else [],
            options=[
                ("grpc.so_reuseport", 0),  # on by default in grpcio: a port clash must fail, not share
                ("grpc.max_receive_message_length", s.max_message_bytes),
                ("grpc.max_send_message_length", s.max_message_bytes),
                ("grpc.max_metadata_size", s.max_header_bytes),
                ("grpc.absolute_max_metadata_size", s.max_header_bytes),
            ]
        )
        add_inference_service(self.servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        server.add_generic_rpc_handlers([_admin_handler(self._status_json)])
        reflection.enable_server_reflection(
            (INFERENCE_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            server,
        )
        address = f"{s.host}:{s.port}"
        try:
            if self.native is not None:
                server.add_insecure_port(self._backend_address())  # private: only the native front end connects
            elif s.tls_cert:
                self.port = _bound(server.add_secure_port, address, _tls_credentials(s))
            else:
                self.port = _bound(server.add_insecure_port, address)
            await self._set_health("", serving=False)
            await self._set_health(LIVENESS_SERVICE, serving=True)
            await server.start()
            self._server = server
            if self.native is not None:
                try:
                    self.port = self.native.start()
                except RuntimeError as e:  # the C++ side's message names the address too: keep its reason
                    raise ListenError("port", address, str(e).rpartition(" (")[2].rstrip(")") or str(e)) from None
            if self.rest is not None:
                try:
                    await self.rest.start()
                except OSError as e:
                    raise ListenError("http_port", f"{s.host}:{s.http_port}", e.strerror or str(e)) from None
            if s.metrics:
                self.metrics.watch_manager(self._status_threadsafe)
                try:
                    keys = self.keys
                    closed = keys.required and not keys.probes_open  # /metrics asks for a key too
                    self._metrics_http = self.metrics.serve(
                        s.metrics_host, s.metrics_port,
                        authorized=(lambda header: keys.accepts(bearer(header))) if closed else None)
                except OSError as e:
                    raise ListenError("metrics_port", f"{s.metrics_host}:{s.metrics_port}",
                                      e.strerror or str(e)) from None
                self.metrics_port = self._metrics_http.server_port
        except ListenError:
            await self._abandon_start(server)
            raise
        self._source_task = asyncio.create_task(self._source(self.manager.apply, self.metrics))
        self._source_task.add_done_callback(self._source_ended)
        self._fallback_task = asyncio.create_task(self._log_fallbacks())
        log.info(
            "server_started",
            port=self.port,
            metrics_port=self.metrics_port,
            # Every port this process listens on, so none comes as a surprise (the metrics default is 8002).
            http_port=self.rest.port if self.rest is not None else 0,
            listening={"grpc": f"{s.host}:{self.port}",
                       **({"http": f"{s.host}:{self.rest.port}"} if self.rest is not None else {}),
                       **({"metrics": f"{s.metrics_host}:{self.metrics_port}"} if self._metrics_http else {})},
            tracing=s.otlp_endpoint or None,
            tls=bool(s.tls_cert),
            mtls=bool(s.tls_client_ca),
            frontend=self.frontend,
            **({"frontend_fallback": self._frontend_fallback} if self._frontend_fallback else {}),
        )

    async def stop(self, grace_s: float | None = None) -> None:
        """Invariant 8: NOT_SERVING at once, refuse new calls, let in-flight ones finish, close engines."""
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        started = time.monotonic()
        self.servicer.accepting = False
        if self.rest is not None:
            self.rest.accepting = False
        if self.native is not None:
            self.native.not_serving()  # its probes are answered on its own threads: flip them first
        await self.health.enter_graceful_shutdown()
        log.info("shutdown_started", grace_s=grace)
        if self._source_task is not None:
            self._source_task.cancel()
        if self._fallback_task is not None:
            self._fallback_task.cancel()
        if self.native is not None:
            # The public port first: its in-flight calls (and the calls it passed on) finish within the grace.
            await self.native.shutdown(grace)
            grace = max(0.0, grace - (time.monotonic() - started))
        # Both ports close at once; their in-flight calls finish within the grace.
        await asyncio.gather(*([self._server.stop(grace)] if self._server is not None else []),
                             *([self.rest.stop()] if self.rest is not None else []))
        await self.manager.close()
        self.plane.close()
        if self.tracing is not None:
            self.tracing.close()  # after the last call's record: its spans go too
        if self.native is not None:
            self._remove_backend_dir()
        self._tokenize_pool.shutdown(wait=False)
        self._opener_pool.shutdown(wait=True)  # idle by now: the manager waited for its loads
        if self._metrics_http is not None:
            self._metrics_http.shutdown()
        log.info("shutdown_complete", took_s=round(time.monotonic() - started, 3))

    async def _abandon_start(self, server: grpc.aio.Server) -> None:
        """Undo what start() did before a port failed: no thread, socket or engine object outlives it."""
        await server.stop(0)
        if self.rest is not None:
            await self.rest.stop()
        self.plane.close()
        if self.native is not None:
            self._remove_backend_dir()
        for pool in (self._tokenize_pool, self._opener_pool):
            pool.shutdown(wait=True)

    async def serve_until_signal(self) -> None:
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("signal_received")
        await self.stop()

    async def _log_fallbacks(self, every_s: float = 1.0) -> None:
        """One `gpu_oom_fallback` line per engine run that ran out of memory, read off the engines (which record
        them on whichever thread ran the batch, never taking the GIL for it)."""
        while True:
            await asyncio.sleep(every_s)
            self.log_fallbacks()

    def log_fallbacks(self) -> None:
        for model, version, instance in self.manager.loaded_instances():
            for event in instance.engine.take_fallback_events():
                log.warning(
                    "gpu_oom_fallback", model=model, version=version, device=instance.engine.device,
                    shape=event["shape"], answered_on_cpu=event["answered"], reason=event["reason"],
                    cooldown_s=self.settings.gpu_fallback_cooldown_s,
                    **({"error": event["error"]} if event["error"] else {}),
                )

    def _source_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("state_source_failed", error=repr(task.exception()))

    def _on_lifecycle(self, event: str, model: str, version: str, **fields: Any) -> None:
        # A version serving despite answers that differ (verify_outputs=warn) is worth a warning.
        level = log.warning if event == "loaded" and fields.get("verify") == "failed" else log.info
        level(f"version_{event}", model=model, version=version, **fields)
        if fields.get("verify"):
            self.metrics.verify.labels(model, version, fields["verify"]).inc()
        if event == "loaded":
            self.metrics.reloads.labels(model, "success").inc()
            self.metrics.load_seconds.labels(model).observe(fields.get("load_s", 0.0))
        elif event == "failed":
            self.metrics.reloads.labels(model, "failure").inc()
            asyncio.get_running_loop().create_task(self._update_health())
        elif event == "swapped":
            self.metrics.swaps.labels(model).inc()
            self.metrics.swap_seconds.labels(model).observe(fields.get("took_s", 0.0))
            asyncio.get_running_loop().create_task(self._update_health())

    async def _update_health(self) -> None:
        wanted = self.manager.wanted_models()
        for model in set(wanted) | set(self.manager.served_models()):
            await self._set_health(model, serving=self.manager.model_ready(model))
        ready = self.manager.ready_for_traffic()
        await self._set_health("", serving=ready)
        await self._set_health(INFERENCE_SERVICE, serving=ready)

    async def _set_health(self, service: str, *, serving: bool) -> None:
        """Health is answered where the public port is: the Python servicer, or the native front end's own."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        await self.health.set(service, status)
        if self.native is not None and self.servicer.accepting:
            self.native.set_health(service, serving)

    def _backend_address(self) -> str:
        return f"unix:{self._backend_dir}/backend.sock"

    def _remove_backend_dir(self) -> None:
        if self._backend_dir:
            shutil.rmtree(self._backend_dir, ignore_errors=True)

    def _status_json(self) -> bytes:
        s = self.settings
        serving = {"registry": s.registry} if s.registry else {"bundle": s.bundle}
        frontend: dict[str, Any] = {"kind": self.frontend}
        if self.native is not None:
            frontend["passthrough"] = self.native.passthrough()
        status = self.manager.status()
        for model, pairs in self.shadows.status().items():
            if model in status["models"]:
                status["models"][model]["shadow_figures"] = pairs
        return json.dumps({**status, "serving": serving, "frontend": frontend}, sort_keys=True).encode()

    def _status_threadsafe(self) -> dict[str, Any]:
        """The manager is owned by the loop; the metrics thread asks the loop for a snapshot."""
        assert self._loop is not None

        async def snapshot() -> dict[str, Any]:
            return self.manager.status()

        return asyncio.run_coroutine_threadsafe(snapshot(), self._loop).result(timeout=5)


def _bound(add_port: Any, address: str, *args: Any) -> int:
    """grpc's add_*_port, with its bind failure as a ListenError."""
    try:
        return int(add_port(address, *args))
    except RuntimeError:
        raise ListenError("port", address, "the address is in use or cannot be bound here") from None


def _admin_handler(status: Callable[[], bytes]) -> grpc.GenericRpcHandler:
    """`ortserve status` reads this: JSON bytes, no schema to keep in step with the manager."""

    async def status_rpc(request: bytes, context: Any) -> bytes:
        return status()

    handler = grpc.unary_unary_rpc_method_handler(
        status_rpc, request_deserializer=lambda b: b, response_serializer=lambda b: b
    )
    return grpc.method_handlers_generic_handler("ortserve.admin.v1.Admin", {"Status": handler})


def tls_pem(s: Settings) -> tuple[bytes, bytes, bytes | None] | None:
    """The PEM certificate chain, key and client CA (None: no mTLS) the settings name; None without TLS."""
    if not s.tls_cert:
        return None

    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    return read(s.tls_cert), read(s.tls_key), read(s.tls_client_ca) if s.tls_client_ca else None


def _tls_credentials(s: Settings) -> grpc.ServerCredentials:
    pem = tls_pem(s)
    assert pem is not None
    cert, key, client_ca = pem
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )
