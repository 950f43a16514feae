"""API keys (`api_key`, `api_key_file`, ORTSERVE_API_KEY): who may call this server, on every HTTP route and gRPC
method of both front ends (the admin status included), where mTLS or a mesh's policy does not already decide.

    HTTP   Authorization: Bearer KEY (what the OpenAI, Cohere, HF and LangChain SDKs send), or api-key / x-api-key
           -> 401 in the route's API's error shape, with WWW-Authenticate: Bearer
    gRPC   authorization: Bearer KEY metadata -> UNAUTHENTICATED

Probes (health, liveness, readiness) and /metrics stay open unless `api_key_probes` is off. A key is compared in
constant time (hmac.compare_digest against every key; engine_ext's api_keys.h on the native front end) and is never
logged: no log line, error or status reply carries what a caller sent.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc

from ortserve.service.config import ConfigError, Settings
from ortserve.service.metrics import Metrics

REFUSAL = "this server asks for an API key: send 'Authorization: Bearer <key>'"
GRPC_REFUSAL = "this server asks for an API key: send the metadata 'authorization: Bearer <key>'"
HTTP_PROBES = ("/v2/health/live", "/v2/health/ready")
"""HTTP paths that are probes (model readiness, /v2/models/{m}[/versions/{v}]/ready, is one too: `is_http_probe`)."""
GRPC_PROBES = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
                         "/inference.GRPCInferenceService/ServerLive", "/inference.GRPCInferenceService/ServerReady",
                         "/inference.GRPCInferenceService/ModelReady"})
GRPC_OPEN = frozenset({"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                       "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"})
"""Reflection lists the KServe V2 schema, which is public; the native front end answers it natively, unkeyed."""


class ApiKeys:
    """The keys a call must present (none: every call may); immutable, shared by every transport."""

    def __init__(self, keys: Iterable[str], *, probes_open: bool = True) -> None:
        self._keys = tuple(k.encode() for k in keys)
        self.probes_open = probes_open

    @classmethod
    def of(cls, settings: Settings) -> ApiKeys:
        """`api_key` and the keys of `api_key_file` (one a line; blank lines and # comments skipped)."""
        keys = list(settings.api_key)
        if settings.api_key_file:
            try:
                text = Path(settings.api_key_file).read_text()
            except OSError as e:
                raise ConfigError(f"cannot read api_key_file {settings.api_key_file}: {e.strerror}") from None
            found = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            if not found:
                raise ConfigError(f"api_key_file {settings.api_key_file} holds no key")
            keys += found
        return cls(keys, probes_open=settings.api_key_probes)

    @property
    def required(self) -> bool:
        return bool(self._keys)

    @property
    def keys(self) -> list[str]:
        """The keys, for the native front end (which compares them in C++)."""
        return [k.decode() for k in self._keys]

    def accepts(self, presented: str | None) -> bool:
        """Whether `presented` is a key; every key is compared (in constant time), so the answer's time says
        nothing of which key, or which part of one, a guess matched."""
        if not self._keys:
            return True
        got = (presented or "").encode("utf-8", "surrogatepass")
        accepted = False
        for key in self._keys:
            accepted |= hmac.compare_digest(got, key)
        return accepted and bool(got)


def bearer(authorization: str | None) -> str | None:
    """The key of an `Authorization: Bearer KEY` value (the scheme in any case); None without one."""
    if authorization is None:
        return None
    scheme, _, key = authorization.strip().partition(" ")
    return key.strip() if scheme.lower() == "bearer" and key.strip() else None


def http_key(headers: Mapping[str, str]) -> str | None:
    """The key an HTTP call sends: Authorization: Bearer, else api-key (Azure OpenAI's), else x-api-key."""
    return bearer(headers.get("Authorization")) or headers.get("api-key") or headers.get("x-api-key")


def is_http_probe(path: str) -> bool:
    return path in HTTP_PROBES or (path.startswith("/v2/models/") and path.endswith("/ready"))


class KeyInterceptor(grpc.aio.ServerInterceptor):
    """The grpc.aio server's key check, before every method but the probes (and reflection): a refused call is
    answered UNAUTHENTICATED by a handler of the method's own kind, so streams are refused as cleanly as unary calls.
    In native mode this server is the backend: the front end forwards the caller's metadata, so the same check
    holds for every call it passes on."""

    def __init__(self, keys: ApiKeys, metrics: Metrics) -> None:
        self._keys = keys
        self._refused = metrics.unauthenticated.labels("grpc")

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        if method in GRPC_OPEN or (self._keys.probes_open and method in GRPC_PROBES):
            return await continuation(details)
        metadata = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        if self._keys.accepts(bearer(metadata.get("authorization"))):
            return await continuation(details)
        self._refused.inc()
        handler = await continuation(details)
        return _refusing(handler) if handler is not None else handler


def _refusing(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s kind that answers UNAUTHENTICATED without reading the request."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, GRPC_REFUSAL)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, GRPC_REFUSAL)
        yield  # a generator: the method's kind streams its replies

    serde = {"request_deserializer": handler.request_deserializer,
             "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(refuse, **serde)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse_stream, **serde)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse, **serde)
    return grpc.stream_stream_rpc_method_handler(refuse_stream, **serde)
