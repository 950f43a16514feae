"""A call of texts from a client API (OpenAI, Cohere/Jina, TEI) run as a KServe V2 ModelInfer.

The client APIs on the HTTP port (`openai_api`, `cohere_api`, `tei_api`) only translate: each reads its own JSON,
names the model, and hands the texts here, where they become an `inference.InferCall` (TEXT, and TEXT_PAIR for a
reranker) run by `Inference.infer`, the one Python path every V2 call takes:

    client JSON  ->  TextCalls.choose (the model)  ->  TextCalls.run: InferCall -> Inference.infer (wire rules,
      routing by x-routing-key, lease, admission and deadline, the batcher, the `request` line, metrics, trace)
      ->  the reply's tensor as numpy  ->  client JSON

So a client API's call is routed, admitted, batched, timed out, logged and traced as a V2 call is, and is refused
with the same status (rest.http_status, the one map from a call's status to HTTP); each API only words the error in its
own shape (`ApiError`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import structlog
from aiohttp import web
from tokenizers import Tokenizer

from ortserve import engine_ext
from ortserve.bundle import tokenizer as bundle_tokenizer
from ortserve.service.api_keys import REFUSAL
from ortserve.service.config import Settings
from ortserve.service.errors import ResourceExhausted, ServiceError, Unavailable
from ortserve.service.inference import (
    INPUT_NAME,
    PAIR_INPUT,
    CallFailed,
    InferCall,
    Inference,
    InferReply,
    Param,
)
from ortserve.service.instance import ModelInstance
from ortserve.service.manager import ModelManager
from ortserve.service.rest import BodyNotRead, RestServer, closing, error_headers, header_timeout_s, http_status
from ortserve.service.served_output import ServedOutput

log = structlog.get_logger("ortserve.http")

KINDS = {"INVALID_ARGUMENT": "invalid_request", "NOT_FOUND": "not_found", "RESOURCE_EXHAUSTED": "overloaded",
         "UNAVAILABLE": "unavailable", "DEADLINE_EXCEEDED": "timeout", "CANCELLED": "cancelled",
         "INTERNAL": "internal"}
"""A call's status as the kind of error every API words in its own shape (`ApiError.kind`); "too_large",
"body_timeout", "client_gone" and "unauthorized" too."""
BODY_KINDS = {413: "too_large", 408: "body_timeout", 499: "client_gone"}
"""The kind of a body that did not arrive (rest.BodyNotRead), by its status."""


REPLY_DTYPES = {"FP32": "<f4", "INT8": "i1", "UINT8": "u1", "INT64": "<i8"}
"""A reply tensor's datatype as numpy reads its raw bytes or its contents (INT64: a sparse embedding's indices and
counts)."""


class ApiError(Exception):
    """A client API call that ends with an HTTP error: its status (rest.http_status's, or 413 for a body past
    max_message_bytes), the message, the kind (KINDS) and the request field it names, if any."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request", param: str | None = None,
                 retry_after_s: float | None = None, request_id: str = "", closes: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param
        self.closes = closes  # the connection closes after the answer (a body left unread)
        self.retry_after_s = retry_after_s
        self.request_id = request_id

    @classmethod
    def invalid(cls, message: str, param: str | None = None) -> ApiError:
        return cls(400, message, param=param)

    @classmethod
    def of(cls, error: ServiceError, request_id: str = "", param: str | None = None) -> ApiError:
        """The V2 call's error, with the status a V2 REST call gets for it."""
        retry = error.retry_after_s if isinstance(error, ResourceExhausted) else None
        return cls(http_status(error), error.message, kind=KINDS.get(error.code.name, "internal"),
                   param=param, retry_after_s=retry, request_id=request_id)

    def headers(self) -> dict[str, str]:
        """Retry-After and the request id, as V2 REST sends them (rest.error_headers)."""
        return error_headers(self.status, self.retry_after_s, self.request_id)

    def response(self, body: Any) -> web.Response:
        response = json_response(body, self.status, self.headers())
        return closing(response) if self.closes else response


def json_response(doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """`doc` as JSON; numpy arrays in it are written as arrays of numbers (float32 in its shortest form)."""
    return web.Response(body=orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), status=status,
                        content_type="application/json", headers=headers)


Handler = Callable[..., Awaitable[web.Response]]


def api_route(error_body: Callable[[ApiError], Any]) -> Callable[[Handler], Handler]:
    """A client API's handler (a function or method whose last argument is the request): an ApiError is answered in
    that API's shape (`error_body`); a bug is logged with its trace and answered 500 in that shape, never with the
    trace."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def handle(*args: Any) -> web.Response:
            request: web.Request = args[-1]
            try:
                return await handler(*args)
            except ApiError as e:
                return e.response(error_body(e))
            except web.HTTPException:
                raise
            except Exception:
                log.exception("http_request_failed", method=request.method, path=request.path)
                e = ApiError(500, "internal error", kind="internal")
                return e.response(error_body(e))

        def unauthorized() -> web.Response:
            """The API's 401 (rest.RestServer._check_key answers it before the handler runs)."""
            e = ApiError(401, REFUSAL, kind="unauthorized")
            return e.response(error_body(e))

        handle.unauthorized = unauthorized  # type: ignore[attr-defined]
        return handle

    return wrap


@dataclass(frozen=True)
class ServedModel:
    """What a client API needs to know of a served model (its first routed version's manifest)."""

    name: str
    output: ServedOutput
    max_seq_len: int
    precision: str
    instance: ModelInstance

    @property
    def reranker(self) -> bool:
        return bool(self.output.score)



@dataclass(frozen=True)
class Answer:
    """A V2 call's answer: the output's values (float32 [texts, columns]; int8 or uint8 for a compact
    embedding_type), who answered, the request id, and the tokens the model read (special tokens included, after
    truncation, each text after the call's prompt: the APIs' usage, as the batcher counted them)."""

    values: np.ndarray
    model: str
    version: str
    request_id: str
    token_count: int


@dataclass(frozen=True)
class SparseAnswer:
    """A sparse embedding model's V2 answer: each text's kept entries, (vocabulary columns int64 ascending, weights
    float32), who answered and the request id."""

    entries: list[tuple[np.ndarray, np.ndarray]]
    model: str
    version: str
    request_id: str


class TextCalls:
    """Texts to a served model through `Inference.infer`; owned by the event loop (every method runs on it)."""

    def __init__(self, rest: RestServer, inference: Inference, manager: ModelManager, *, settings: Settings) -> None:
        self._rest = rest
        self._inference = inference
        self._manager = manager
        self.settings = settings
        self._first_served: dict[str, int] = {}
        """Unix time each model was first seen served here (OpenAI's `created`); guarded by the loop."""
        self._described: tuple[object, dict[str, ServedModel]] = (None, {})
        """The route table the served models were described from, and each named one's ServedModel (a call that
        names a served model costs a dict look-up, not a sort and a description); owned by the loop, renewed when the
        manager swaps the table."""

    # ---- the request ------------------------------------------------------------------------------------

    async def read_json(self, request: web.Request) -> dict[str, Any]:
        """The body as a JSON object, or ApiError: 503 while shutting down, 413 past max_message_bytes, 400 not a
        JSON object."""
        if not self._rest.accepting:
            raise ApiError.of(Unavailable("the server is shutting down; retry on another replica"))
        try:
            body = await self._rest.read_body(request)
        except BodyNotRead as e:
            raise ApiError(e.status, e.message, kind=BODY_KINDS[e.status], closes=True) from None
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise ApiError.invalid(f"the request body is not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise ApiError.invalid("the request body must be a JSON object")
        return doc

    # ---- models -----------------------------------------------------------------------------------------

    def served_names(self) -> list[str]:
        """The models with a routable version, by name; each one's first-seen time recorded."""
        names = sorted(self._manager.route_table.models)
        now = int(time.time())
        for name in names:
            self._first_served.setdefault(name, now)
        return names

    def first_served(self, name: str) -> int:
        return self._first_served.get(name, int(time.time()))

    def choose(self, named: Any, *, param: str = "model") -> ServedModel:
        """The model a call names (a string), or, when it names none, the one model this server serves. ApiError:
        404 an unknown name, 503 one still loading, 400 none named where several are served (listing them)."""
        if named is not None and not isinstance(named, str):
            raise ApiError.invalid(f"'{param}' must be a string, the served model's name", param)
        table, described = self._described
        if named and table is self._manager.route_table and named in described:
            return described[named]
        served = self.served_names()
        wanted = sorted(set(self._manager.wanted_models()) | set(served))
        listing = ", ".join(repr(n) for n in wanted) or "none yet"
        if named:
            if named in served:
                return self._describe_routed(named)
            if named in wanted:
                raise ApiError.of(Unavailable(self._manager.not_ready_reason(named)), param=param)
            raise ApiError(404, f"model '{named}' is not served here; served models: {listing}", kind="not_found",
                           param=param)
        if len(wanted) == 1:
            return self.choose(wanted[0], param=param)
        if not wanted:
            raise ApiError.of(Unavailable("no model is loaded yet; retry shortly"), param=param)
        raise ApiError.invalid(f"this server serves several models ({listing}): name one in '{param}'", param)

    def _describe_routed(self, name: str) -> ServedModel:
        """`describe(name)`, kept for the route table in force until the manager swaps it."""
        table = self._manager.route_table
        if self._described[0] is not table:
            self._described = (table, {})
        served = self._described[1][name] = self.describe(name)
        return served

    def describe(self, name: str, version: str = "") -> ServedModel:
        """The served model by its version `version` (else its first routed one). ApiError 503 when it has none
        left (retired between the table read and here)."""
        route = self._manager.route_table.models.get(name)
        loaded = None if route is None else (route.versions.get(version) or next(iter(route.versions.values()),
                                                                                  None))
        instance = None if loaded is None else loaded.instance
        if instance is None:
            raise ApiError.of(Unavailable(self._manager.not_ready_reason(name)))
        manifest = instance.manifest
        return ServedModel(name=name, output=instance.served, max_seq_len=manifest.max_seq_len,
                           precision=manifest.precision, instance=instance)

    # ---- the call ---------------------------------------------------------------------------------------

    async def run(self, request: web.Request, served: ServedModel, texts: Sequence[str], *,
                  pairs: Sequence[str] | None = None, output: str | None = None,
                  embedding: EmbeddingParams | None = None) -> Answer:
        """`texts` (with `pairs`: TEXT_PAIR, [1] or one per text) as one V2 call to the model, with the request's
        x-request-id, x-routing-key, trace headers and x-request-timeout-ms, and `embedding`'s prompt_name and
        dimensions and embedding_type as its request parameters (the wire rules check and apply them, as for any V2
        call); its `output` (else the model's default one) as float32 [texts, columns] (a compact embedding_type's as
        int8 or uint8)."""
        inputs = [(INPUT_NAME, "BYTES", [len(texts)], True, _utf8(texts))]
        if pairs is not None:
            inputs.append((PAIR_INPUT, "BYTES", [len(pairs)], True, _utf8(pairs)))
        wanted = embedding or EmbeddingParams()
        reply = await self._infer(request, served, inputs, outputs=[] if output is None else [(output, None, None)],
                                  prompt_name=wanted.prompt_param(), dimensions=wanted.dimensions_param(),
                                  embedding_type=wanted.embedding_type_param())
        _, _, shape, _, _ = reply.tensors[0]
        return Answer(values=_values(reply.tensors[0]).reshape(shape[0], -1), model=reply.model,
                      version=reply.version, request_id=reply.request_id, token_count=reply.token_count)

    async def run_sparse(self, request: web.Request, served: ServedModel, texts: Sequence[str], *,
                         bounds: SparseBounds, prompt_name: str | None = None) -> SparseAnswer:
        """`texts` as one V2 call to a sparse embedding model with `bounds` (top_k, threshold) and `prompt_name` as
        its request parameters (the wire rules check and apply them, sparse_entries.h): each text's entries, split
        by SPARSE_COUNTS."""
        reply = await self._infer(request, served, [(INPUT_NAME, "BYTES", [len(texts)], True, _utf8(texts))],
                                  prompt_name=EmbeddingParams(prompt_name=prompt_name).prompt_param(),
                                  top_k=bounds.top_k_param(), threshold=bounds.threshold_param())
        tensors = {tensor[0]: _values(tensor) for tensor in reply.tensors}
        ends = np.cumsum(tensors[engine_ext.SPARSE_COUNTS_OUTPUT])
        starts = ends - tensors[engine_ext.SPARSE_COUNTS_OUTPUT]
        indices, values = tensors[engine_ext.SPARSE_INDICES_OUTPUT], tensors[engine_ext.SPARSE_VALUES_OUTPUT]
        return SparseAnswer(entries=[(indices[a:b], values[a:b]) for a, b in zip(starts, ends, strict=True)],
                            model=reply.model, version=reply.version, request_id=reply.request_id)

    async def _infer(self, request: web.Request, served: ServedModel, inputs: list[Any], **params: Any) -> InferReply:
        """One V2 call of `inputs` to the model with `params` (InferCall's fields), with the request's
        x-request-id, x-routing-key, trace headers and x-request-timeout-ms; its InferReply, or ApiError naming the
        body field a wire rule refused."""
        started = time.monotonic()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            budgets = header_timeout_s(headers)
        except ServiceError as e:
            raise ApiError.of(e) from None
        call = InferCall(model=served.name, inputs=inputs, headers=headers,
                         deadline=started + min(budgets) if budgets else None, transport="http", **params)
        try:
            return await self._inference.infer(call)
        except CallFailed as failed:
            raise ApiError.of(failed.error, failed.request_id, param=named_param(failed.error.message)) from None



def _values(tensor: tuple[str, str, Any, bool, Any]) -> np.ndarray:
    """A reply tensor's values, flat: its raw bytes or its contents, as its datatype reads."""
    _, datatype, _, raw, payload = tensor
    dtype = REPLY_DTYPES.get(datatype, "<f4")
    return np.frombuffer(payload, dtype=dtype) if raw else np.asarray(payload, dtype=dtype)


def texts_of(value: Any, param: str, *, allow_empty_text: bool = True) -> tuple[list[str], bool]:
    """A string or an array of strings as the texts, and whether it was one string. ApiError 400 otherwise (token
    ids included: the server tokenizes), or for no texts at all."""
    if isinstance(value, str):
        texts, single = [value], True
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        texts, single = value, False
    elif isinstance(value, list) and value and all(
            isinstance(t, int) or (isinstance(t, list) and all(isinstance(i, int) for i in t)) for t in value):
        raise ApiError.invalid(f"'{param}' holds token ids, which this server does not take: send the texts (it "
                               "tokenizes them with the model's own tokenizer; LangChain's OpenAIEmbeddings: "
                               "check_embedding_ctx_length=False)", param)
    else:
        raise ApiError.invalid(f"'{param}' must be a string or an array of strings", param)
    if not texts:
        raise ApiError.invalid(f"'{param}' is empty: send at least one text", param)
    if not allow_empty_text:
        for i, text in enumerate(texts):
            if not text:
                raise ApiError.invalid(f"'{param}' holds an empty string" + ("" if single else f" at index {i}"),
                                       param)
    return texts, single


def boolean(doc: Mapping[str, Any], key: str, default: bool) -> bool:
    value = doc.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError.invalid(f"'{key}' must be true or false", key)
    return value


def positive_int(doc: Mapping[str, Any], key: str) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError.invalid(f"'{key}' must be a positive integer", key)
    return value


@dataclass(frozen=True)
class EmbeddingParams:
    """An embedding call's `prompt_name` and `dimensions`, as JSON typed them; the V2 wire rules check them against
    the version (a prompt it keeps, a width it was trained for) and apply them, for every API and front end alike."""

    prompt_name: str | None = None
    dimensions: int | None = None
    embedding_type: str | None = None
    """A compact type ("int8", "uint8", "binary", "ubinary"; the wire rules check it); None: float."""

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> EmbeddingParams:
        """The body's `prompt_name` (a string) and `dimensions` (a positive integer); ApiError 400 another type."""
        name = doc.get("prompt_name")
        if name is not None and not isinstance(name, str):
            raise ApiError.invalid(f"'prompt_name' must be a string, the name of one of the model's prompts, got "
                                   f"{orjson.dumps(name).decode()[:40]}", "prompt_name")
        return cls(prompt_name=name, dimensions=positive_int(doc, "dimensions"))

    def prompt_param(self) -> Param:
        return None if self.prompt_name is None else ("string_param", self.prompt_name)

    def dimensions_param(self) -> Param:
        return None if self.dimensions is None else ("int64_param", self.dimensions)

    def embedding_type_param(self) -> Param:
        return None if self.embedding_type is None else ("string_param", self.embedding_type)


@dataclass(frozen=True)
class SparseBounds:
    """A sparse embedding call's `top_k` and `threshold` as JSON typed them; the V2 wire rules check their ranges
    and apply them (sparse_entries.h), for every API and front end alike."""

    top_k: Any = None
    threshold: Any = None

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> SparseBounds:
        """The body's `top_k` (an integer) and `threshold` (a number); ApiError 400 another type (the wire rules
        judge their ranges)."""
        top_k, threshold = doc.get("top_k"), doc.get("threshold")
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool)):
            raise ApiError.invalid(f"'top_k' must be an integer >= 1 (the most weights kept per text), got "
                                   f"{orjson.dumps(top_k).decode()[:40]}", "top_k")
        if threshold is not None and (not isinstance(threshold, int | float) or isinstance(threshold, bool)):
            raise ApiError.invalid(f"'threshold' must be a number >= 0 (the least weight kept, exclusive), got "
                                   f"{orjson.dumps(threshold).decode()[:40]}", "threshold")
        return cls(top_k=top_k, threshold=threshold)

    def top_k_param(self) -> Param:
        return None if self.top_k is None else ("int64_param", self.top_k)

    def threshold_param(self) -> Param:
        return None if self.threshold is None else ("double_param", float(self.threshold))


WIRE_PARAMS = ("prompt_name", "dimensions", "embedding_type", "top_k", "threshold")
"""The V2 request parameters a client API's body sets by the same name."""


def named_param(message: str) -> str | None:
    """The body field a wire rule's refusal names (`request parameter 'dimensions' ...`), for the API's `param`."""
    return next((name for name in WIRE_PARAMS if f"request parameter '{name}'" in message), None)


@functools.lru_cache(maxsize=16)
def whole_text_tokenizer(path: str) -> Tokenizer:
    """A bundle's tokenizer.json, neither truncating nor padding: every token of a text (TEI's /tokenize, Cohere's
    truncate NONE)."""
    return bundle_tokenizer.load(path, None)


def normalized(values: np.ndarray) -> np.ndarray:
    """Each row at unit L2 length (a zero row stays zero)."""
    norms = np.linalg.norm(values, axis=1, keepdims=True)
    return values / np.where(norms > 0, norms, 1.0)


def probabilities(logits: np.ndarray, served: ServedOutput) -> np.ndarray:
    """A classifier's probabilities as the classification extension's `scores=probabilities` gives them: a sigmoid
    per label for a multi-label classifier or a single label, else the softmax over the labels."""
    if served.multi_label or logits.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _utf8(texts: Sequence[str]) -> list[bytes]:
    return [t.encode("utf-8", "surrogatepass") for t in texts]
