"""The native front end's Python side (`frontend = "native"`): owns the grpc++ server on the public port.

The C++ front end (`engine_ext/src/dataplane/frontend.cc`) owns the public port. It serves ModelInfer itself for every
version that runs on the C++ tokenizer, submitting into the version's batcher (the one every call uses,
`data_plane`), and passes every other call (the other inference RPCs, admin status, ModelInfer for other versions,
and any call the wire rules refuse, which the Python server answers with the same rules' message) to the Python
server on a private unix socket. It routes by the data plane's route table (`engine_ext.Routes`, which the manager
replaces on every swap and the Python front end's calls read too) and runs each call through the one C++ call path
(`call_path.h`: route, check, lease, reply). Its calls' records go to the data plane's event sink, which logs and
counts them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ortserve import engine_ext
from ortserve.service.api_keys import ApiKeys
from ortserve.service.config import Settings
from ortserve.service.metrics import Metrics


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
    def __init__(self, settings: Settings, metrics: Metrics, events: Any, routes: Any, *, backend: str,
                 tls: tuple[bytes, bytes, bytes | None] | None = None, keys: ApiKeys | None = None) -> None:
        """`events`: the data plane's EventSink; `routes`: its Routes; `tls`: PEM certificate chain, key and
        optional client CA (app.tls_pem), or None for plaintext."""
        check_available()
        self._frontend = engine_ext.Frontend(
            f"{settings.host}:{settings.port}",
            backend,
            events=events,
            routes=routes,
            max_message_bytes=settings.max_message_bytes,
            max_header_bytes=settings.max_header_bytes,
            max_texts_per_request=settings.max_texts_per_request,
            tls_cert=tls[0] if tls else None,
            tls_key=tls[1] if tls else None,
            tls_client_ca=tls[2] if tls else None,
            api_keys=keys.keys if keys is not None else [],
            probes_open=keys.probes_open if keys is not None else True,
        )
        metrics.in_flight.add_source(lambda: self._frontend.in_flight)
        metrics.counter_source("ortserve_frontend_passthrough", "ModelInfer calls the native front end passed on to "
                               "the Python server, by reason.", "reason", self.passthrough)

    def start(self) -> int:
        """Bind the public port and start serving; returns the port."""
        return int(self._frontend.start())

    def passthrough(self) -> dict[str, int]:
        """ModelInfer calls passed on to the Python server so far, by reason (every reason listed)."""
        return {str(reason): int(count) for reason, count in self._frontend.passthrough().items()}

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

