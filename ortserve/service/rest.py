"""KServe V2 over HTTP/REST (`http_port`, default 8000): the protocol's REST transport beside gRPC, for curl, probes,
gateways and `tritonclient.http`. Every call goes the one Python path (`inference.Inference`): the same C++ wire
rules and messages, routing, batcher, admission and record as gRPC.

    GET  /v2/health/live, /v2/health/ready              200, or 400 when not
    GET  /v2                                             server metadata
    GET  /v2/models/{model}[/versions/{v}]               model metadata
    GET  /v2/models/{model}[/versions/{v}]/ready         200, or 400 when not
    POST /v2/models/{model}[/versions/{v}]/infer         JSON tensors, or the binary tensor extension

Binary extension: the `Inference-Header-Content-Length` header gives the JSON header's length; an input with the
parameter `binary_data_size` takes that many bytes of what follows (a BYTES tensor as 4-byte little-endian lengths,
each followed by its bytes); an output with `binary_data: true` (or the request parameter `binary_data_output`) is
answered the same way. Errors map as the protocol maps them, with `{"error": message}`: 400 bad request, 404 unknown
model or version, 413 past `max_message_bytes`, 415 a body labelled as neither JSON nor binary, 429 (queue full,
deadline unmeetable) and 503 (loading, shutting down) with `Retry-After`, 504 past the deadline, 500 with the
request id. A call's deadline: the header `x-request-timeout-ms` or the V2 `timeout` parameter (the shorter), else
the server's `default_timeout_ms` (the batcher's; the same budget a gRPC call without a deadline gets).

The port's own limits, for every route on it (the client APIs' too): a body must arrive within
`http_body_timeout_s` (else 408 and the connection closes), at most `http_max_connections` connections are open
(one more is answered 503 and closed), and with API keys (`api_keys.py`) every route but the probes asks for one
(401 in the route's API's error shape). A client that goes mid-call is one info line and a count
(`ortserve_http_connections_lost`), never an error.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import ssl
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np
import orjson
import structlog
from aiohttp import web

from ortserve import __version__
from ortserve.service.api_keys import REFUSAL, ApiKeys, http_key, is_http_probe
from ortserve.service.errors import InvalidArgument, ResourceExhausted, ServiceError, TooManyTexts, Unavailable
from ortserve.service.handlers import EXTENSIONS
from ortserve.service.inference import CallFailed, InferCall, Inference, InferReply, Param
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics

log = structlog.get_logger("ortserve.http")
HEADER_LENGTH = "Inference-Header-Content-Length"
TIMEOUT_HEADER = "x-request-timeout-ms"
"""A call's deadline over HTTP, in milliseconds from its arrival (the V2 body's `timeout` parameter also works)."""
STATUS = {"INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503,
          "DEADLINE_EXCEEDED": 504, "CANCELLED": 499, "INTERNAL": 500}
_LEN = struct.Struct("<I")
LINGER_S = 1.0
"""How long a connection is kept after an answer to a body the server did not read, draining it, before it closes."""


class BodyNotRead(Exception):
    """A request body that did not arrive: past max_message_bytes (413), past http_body_timeout_s (408), or its
    client gone (499, an answer nobody reads)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class RestServer:
    """An aiohttp server on the event loop, beside the gRPC one; `start`, then `stop` at shutdown."""

    def __init__(self, manager: ModelManager, inference: Inference, metrics: Metrics, *, host: str, port: int,
                 max_body_bytes: int, shutdown_grace_s: float, body_timeout_s: float, max_connections: int,
                 keys: ApiKeys, tls: ssl.SSLContext | None = None) -> None:
        self._manager = manager
        self._inference = inference
        self._metrics = metrics
        self._host, self._port, self._tls, self._grace_s = host, port, tls, shutdown_grace_s
        self._max_body = max_body_bytes
        self._body_timeout_s, self._max_connections, self._keys = body_timeout_s, max_connections, keys
        self.accepting = True
        # No middleware a call does not need (aiohttp then calls the route's handler directly): the key check only
        # with API keys; a bug's 500 is each route's own (_no_trace_leaks here, text_calls.api_route for the APIs).
        self.app = web.Application(client_max_size=max_body_bytes,
                                   middlewares=[self._check_key] if keys.required else [])
        for path in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            self.app.router.add_get(path, _no_trace_leaks(self._model_metadata))
            self.app.router.add_get(path + "/ready", _no_trace_leaks(self._model_ready))
            self.app.router.add_post(path + "/infer", _no_trace_leaks(self._infer))
        self.app.router.add_get("/v2/health/live", _no_trace_leaks(self._live))
        self.app.router.add_get("/v2/health/ready", _no_trace_leaks(self._ready))
        self.app.router.add_get("/v2", _no_trace_leaks(self._server_metadata))
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> int:
        # lingering_time: after an answer to a body it did not read (408, 413), what is left is read (so the client
        # sees the answer, not a reset) for at most LINGER_S before the connection closes (aiohttp's default: 10 s).
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=self._grace_s,
                                     lingering_time=LINGER_S)
        await self._runner.setup()
        site = _CappedSite(self._runner, self._host, self._port, ssl_context=self._tls, reuse_port=False,
                           max_connections=self._max_connections, refused=self._metrics.http_connections_refused)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # the bound port (0 picks one)
        self.port = int(sockets[0].getsockname()[1]) if sockets else self._port
        return self.port

    async def stop(self) -> None:
        """Closes the port, then lets in-flight calls finish within the shutdown grace."""
        self.accepting = False
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- the port's limits ------------------------------------------------------------------------

    @web.middleware
    async def _check_key(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """With API keys, every route but the probes asks for one; refused: 401 in the route's API's shape (its
        handler's `unauthorized`, text_calls.api_route), else V2's {"error"}. The key is never logged."""
        if (not self._keys.required or (self._keys.probes_open and is_http_probe(request.path))
                or self._keys.accepts(http_key(request.headers))):
            return await handler(request)
        self._metrics.unauthenticated.labels("http").inc()
        refuse = getattr(request.match_info.handler, "unauthorized", None)
        response = refuse() if refuse is not None else _json({"error": REFUSAL}, 401)
        response.headers["WWW-Authenticate"] = 'Bearer realm="ortserve"'
        return response

    async def read_body(self, request: web.Request) -> bytes:
        """The request's body, within max_message_bytes and http_body_timeout_s; BodyNotRead otherwise (408 and
        413 close the connection: what is left of the body is never read)."""
        try:
            if request.content.is_eof():  # it has all arrived (a small body does with its headers): no wait to bound
                return await request.read()
            async with asyncio.timeout(self._body_timeout_s or None):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BodyNotRead(413, f"request body is larger than max_message_bytes ({self._max_body} bytes)") from None
        except TimeoutError:
            self._metrics.http_connections_lost.labels("timeout").inc()
            log.info("http_body_timeout", path=request.path, timeout_s=self._body_timeout_s)
            raise BodyNotRead(408, f"the request body did not arrive within http_body_timeout_s "
                                   f"({self._body_timeout_s:g} s)") from None
        except ConnectionError:  # aiohttp's "Connection lost" as the client goes mid-body: its outcome, not ours
            self._metrics.http_connections_lost.labels("reset").inc()
            log.info("http_client_gone", path=request.path)
            raise BodyNotRead(499, "the client closed the connection before its body arrived") from None

    # ---- health and metadata ----------------------------------------------------------------------

    async def _live(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.accepting and self._manager.ready_for_traffic() else 400)

    async def _model_ready(self, request: web.Request) -> web.Response:
        model, version = request.match_info["model"], request.match_info.get("version", "")
        return web.Response(status=200 if self.accepting and self._manager.model_ready(model, version) else 400)

    async def _server_metadata(self, request: web.Request) -> web.Response:
        return _json({"name": "ortserve", "version": __version__, "extensions": list(EXTENSIONS)})

    async def _model_metadata(self, request: web.Request) -> web.Response:
        try:
            d = self._inference.describe(request.match_info["model"], request.match_info.get("version", ""))
        except ServiceError as e:
            return _error(e, "")
        return _json({"name": d.name, "versions": d.versions, "platform": d.platform,
                      "inputs": [{"name": n, "datatype": t, "shape": s} for n, t, s in d.inputs],
                      "outputs": [{"name": n, "datatype": t, "shape": s} for n, t, s in d.outputs],
                      "parameters": d.parameters})

    # ---- inference --------------------------------------------------------------------------------

    async def _infer(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not self.accepting:  # a kept-alive connection's call after shutdown began
            return _error(Unavailable("the server is shutting down; retry on another replica"), "")
        refused = content_type_refusal(headers.get("content-type", ""))
        if refused:
            return _json({"error": refused}, 415)
        try:
            body = await self.read_body(request)
        except BodyNotRead as e:
            return closing(_json({"error": e.message}, e.status))
        try:
            call, binary_outputs = parse_infer(request.match_info["model"], request.match_info.get("version", ""),
                                               body, headers, started)
        except InvalidArgument as e:
            return _error(e, headers.get("x-request-id", ""))
        try:
            reply = await self._inference.infer(call)
        except CallFailed as failed:
            return _error(failed.error, failed.request_id)
        return write_reply(reply, binary_outputs)


def closing(response: web.Response) -> web.Response:
    """`response`, after which its connection closes (a body left unread cannot be skipped)."""
    response.force_close()
    return response


class _CappedSite(web.TCPSite):
    """aiohttp's TCP site, with at most `max_connections` connections open (0: no cap): one more is answered 503
    with Retry-After and closed, before its request is read."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *, max_connections: int, refused: Any,
                 **options: Any) -> None:
        super().__init__(runner, host, port, **options)
        self._max_connections, self._refused = max_connections, refused

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner (TCPSite.start does the same first)
        server = self._runner.server
        assert server is not None
        cap, refused = self._max_connections, self._refused

        def protocol() -> asyncio.BaseProtocol:
            if cap and len(server.connections) >= cap:
                refused.inc()
                return _Refusal()
            return server()

        self._server = await asyncio.get_running_loop().create_server(
            protocol, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


class _Refusal(asyncio.Protocol):
    """A connection past http_max_connections: 503 and close, whatever it sends."""

    BODY = orjson.dumps({"error": "too many open connections to this server (http_max_connections); retry shortly"})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(  # type: ignore[attr-defined]  # a stream transport (uvloop's is no asyncio.WriteTransport)
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(self.BODY), self.BODY))
        transport.close()


def _no_trace_leaks(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A V2 route's handler: a bug reaching it is logged with its trace; the caller gets 500 with a line, never the
    trace (the client APIs' routes do the same in their own shape: text_calls.api_route)."""

    @functools.wraps(handler)
    async def route(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise  # aiohttp's own answers
        except Exception:
            log.exception("http_request_failed", method=request.method, path=request.path)
            return _json({"error": "internal error"}, 500)

    return route


BODY_TYPES = ("application/json", "application/octet-stream", "application/x-www-form-urlencoded")
"""What an infer body may be labelled (or nothing, as tritonclient.http sends): JSON, the binary extension, and curl's
default for -d, whose body is still the JSON it was given."""


def content_type_refusal(content_type: str) -> str:
    """Why a body of this Content-Type is not an infer request ("" when it may be)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if not media or media in BODY_TYPES or media.endswith("+json"):
        return ""
    return (f"Content-Type {media!r} is not an inference request: send application/json (JSON tensors), or "
            f"application/octet-stream with {HEADER_LENGTH} (the binary tensor extension)")


def parse_infer(model: str, version: str, body: bytes, headers: Mapping[str, str],
                started: float) -> tuple[InferCall, set[str] | bool]:
    """The body as a call, and which outputs the reply sends binary (a set of names, or True for all). The JSON
    representation's own rules (JSON, its fields' types, the binary sections) are checked here; what the call may
    carry, by the wire rules in `Inference.infer`."""
    binary = b""
    header_length = headers.get(HEADER_LENGTH.lower())
    if header_length is not None:
        if not header_length.isdigit() or int(header_length) > len(body):
            raise InvalidArgument(f"{HEADER_LENGTH} is {header_length!r}, but the body is {len(body)} bytes: it "
                                  "must be the length of the JSON header at the body's start")
        body, binary = body[: int(header_length)], body[int(header_length):]
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidArgument(f"the request body is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise InvalidArgument("the request body must be a JSON object with \"inputs\"")
    parameters = _object(doc.get("parameters", {}), "parameters")
    inputs, raw_contents, offset = [], [], 0
    for i, tensor in enumerate(_array(doc.get("inputs", []), "inputs")):
        tensor = _object(tensor, f"inputs[{i}]")
        name, datatype = _string(tensor.get("name", ""), f"inputs[{i}].name"), tensor.get("datatype", "")
        shape = tensor.get("shape", [])
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                  and -(2**63) <= d < 2**63 for d in shape):
            raise InvalidArgument(f"inputs[{i}].shape must be an array of integers, got {json.dumps(shape)[:80]} "
                                  "(each an int64, as V2's shape)")
        size = _object(tensor.get("parameters", {}), f"inputs[{i}].parameters").get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise InvalidArgument(f"inputs[{i}] binary_data_size {size!r} does not fit the {len(binary) - offset} "
                                      "bytes left after the JSON header")
            inputs.append((name, str(datatype), shape, "data" in tensor, []))  # both: the wire rules refuse it
            raw_contents.append(binary[offset: offset + size])
            offset += size
        elif datatype != "BYTES":
            inputs.append((name, str(datatype), shape, "data" in tensor, []))  # the wire rules name the datatype
        else:
            elements = []
            for j, element in enumerate(_flatten(tensor.get("data", []))):
                if not isinstance(element, str):
                    raise InvalidArgument(f"inputs[{i}].data[{j}] must be a string (a BYTES element), got "
                                          f"{json.dumps(element)[:40]}")
                elements.append(element.encode("utf-8", "surrogatepass"))
            inputs.append((name, str(datatype), shape, "data" in tensor, elements))
    if offset != len(binary):
        raise InvalidArgument(f"{len(binary) - offset} bytes after the JSON header belong to no input's "
                              "binary_data_size")
    outputs: list[tuple[str, Param, Param]] = []
    binary_outputs: set[str] | bool = bool(parameters.get("binary_data_output", False))
    for i, out in enumerate(_array(doc.get("outputs", []), "outputs")):
        out = _object(out, f"outputs[{i}]")
        name = _string(out.get("name", ""), f"outputs[{i}].name")
        out_params = _object(out.get("parameters", {}), f"outputs[{i}].parameters")
        wants_binary = out_params.get("binary_data", False) is True or binary_outputs is True
        if wants_binary and isinstance(binary_outputs, set):
            binary_outputs.add(name)
        elif wants_binary and binary_outputs is False:
            binary_outputs = {name}
        outputs.append((name, _param(out_params, "classification"), ("bool_param", wants_binary)))
    timeout_us = parameters.get("timeout")
    if timeout_us is not None and (not isinstance(timeout_us, int) or isinstance(timeout_us, bool) or timeout_us < 1):
        raise InvalidArgument(f"request parameter 'timeout' must be a positive integer of microseconds, got "
                              f"{json.dumps(timeout_us)}")
    budgets = [timeout_us / 1e6] if timeout_us is not None else []
    budgets += header_timeout_s(headers)
    call = InferCall(model=model, version=version, id=str(doc.get("id", "")), inputs=inputs, outputs=outputs,
                     raw_input_contents=raw_contents, scores=_param(parameters, "scores"),
                     routing_key=_param(parameters, "routing_key"), aggregation=_param(parameters, "aggregation"),
                     priority=_param(parameters, "priority"), prompt_name=_param(parameters, "prompt_name"),
                     dimensions=_param(parameters, "dimensions"),
                     embedding_type=_param(parameters, "embedding_type"), top_k=_param(parameters, "top_k"),
                     threshold=_param(parameters, "threshold"), headers=headers,
                     deadline=started + min(budgets) if budgets else None, transport="http")
    return call, binary_outputs


def header_timeout_s(headers: Mapping[str, str]) -> list[float]:
    """The call's time budget from TIMEOUT_HEADER, in seconds ([] when absent): a stock HTTP client's way to send a
    deadline (the V2 body's `timeout` parameter is the other; the shorter wins)."""
    raw = headers.get(TIMEOUT_HEADER)
    if raw is None:
        return []
    try:
        ms = int(raw.strip())
    except ValueError:
        ms = 0
    if ms < 1:
        raise InvalidArgument(f"header '{TIMEOUT_HEADER}' must be a positive integer of milliseconds, got "
                              f"{raw[:40]!r}")
    return [ms / 1000]


def write_reply(reply: InferReply, binary_outputs: set[str] | bool) -> web.Response:
    outputs, sections = [], []
    for name, datatype, shape, raw, payload in reply.tensors:
        out: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(shape)}
        binary = binary_outputs is True or (isinstance(binary_outputs, set) and name in binary_outputs)
        if binary:
            data = payload if raw else _raw(datatype, payload)
            out["parameters"] = {"binary_data_size": len(data)}
            sections.append(data)
        elif datatype == "FP32" and raw:
            # As float64: orjson writes a numpy float64 as it writes a Python float (the same shortest digits),
            # without a Python float per value.
            out["data"] = np.frombuffer(payload, dtype="<f4").astype(np.float64)
        elif datatype in _NUMPY:
            out["data"] = np.frombuffer(payload, dtype=_NUMPY[datatype]).tolist() if raw else list(payload)
        else:
            elements = _split(payload) if raw else list(payload)
            out["data"] = [e.decode("utf-8", "replace") for e in elements]
        outputs.append(out)
    header = orjson.dumps({"model_name": reply.model, "model_version": reply.version, "id": reply.id,
                           "outputs": outputs}, option=orjson.OPT_SERIALIZE_NUMPY)
    extra = {"x-request-id": reply.request_id, "x-model-version": reply.version}
    if not sections:
        return web.Response(body=header, content_type="application/json", headers=extra)
    return web.Response(body=header + b"".join(sections), content_type="application/octet-stream",
                        headers={**extra, HEADER_LENGTH: str(len(header))})


def http_status(error: ServiceError) -> int:
    """The HTTP status of a call's error, every HTTP API's: STATUS by its gRPC code, 413 for too many texts."""
    return 413 if isinstance(error, TooManyTexts) else STATUS.get(error.code.name, 500)


def error_headers(status: int, retry_after_s: float | None, request_id: str) -> dict[str, str]:
    """An HTTP error's headers, every HTTP API's: the request id, and Retry-After (whole seconds, at least 1) from a
    refusal's drain time, else 1 for a 503."""
    headers = {"x-request-id": request_id} if request_id else {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    elif status == 503:
        headers["Retry-After"] = "1"
    return headers


def _error(error: ServiceError, request_id: str) -> web.Response:
    status = http_status(error)
    retry_after_s = error.retry_after_s if isinstance(error, ResourceExhausted) else None
    return _json({"error": error.message}, status, error_headers(status, retry_after_s, request_id))


def _json(doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(doc), status=status, content_type="application/json", headers=headers)


def _param(params: Mapping[str, Any], key: str) -> Param:
    """A JSON parameter as the wire rules take an InferParameter."""
    if key not in params:
        return None
    value = params[key]
    if isinstance(value, bool):
        return "bool_param", value
    if isinstance(value, int):
        return "int64_param", value  # of any size: the wire rules judge its range (engine_ext ReadInteger)
    if isinstance(value, float):
        return "double_param", value
    if isinstance(value, str):
        return "string_param", value
    return None, None


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where} must be a JSON object")
    return value


def _array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgument(f"{where} must be a JSON array")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{where} must be a string")
    return value


def _flatten(data: Any) -> list[Any]:
    """A tensor's data, nested as its shape or flat, in row-major order."""
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    for item in data:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


_NUMPY = {"FP32": "<f4", "INT64": "<i8", "INT8": "i1", "UINT8": "u1"}
"""The reply's numeric datatypes, as little-endian numpy dtypes (the binary extension's layout)."""


def _raw(datatype: str, payload: list[Any]) -> bytes:
    if datatype in _NUMPY:
        return np.asarray(payload, dtype=_NUMPY[datatype]).tobytes()
    return b"".join(_LEN.pack(len(e)) + e for e in payload)


def _split(buffer: bytes) -> list[bytes]:
    elements, offset = [], 0
    while offset < len(buffer):
        (size,) = _LEN.unpack_from(buffer, offset)
        elements.append(buffer[offset + 4: offset + 4 + size])
        offset += 4 + size
    return elements


def server_tls(cert: bytes, key: bytes, client_ca: bytes | None) -> ssl.SSLContext:
    """The gRPC port's TLS for the REST one: the same certificate and key, and client certificates when set."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="ortserve-tls-") as tmp:  # ssl loads chains from files only
        paths = {}
        for name, data in (("cert.pem", cert), ("key.pem", key)):
            paths[name] = os.path.join(tmp, name)
            with open(os.open(paths[name], os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                f.write(data)
        context.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    if client_ca:
        context.load_verify_locations(cadata=client_ca.decode())
        context.verify_mode = ssl.CERT_REQUIRED
    return context
