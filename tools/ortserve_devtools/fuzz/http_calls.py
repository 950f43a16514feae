"""Hostile JSON calls to every HTTP route (V2 REST and the client APIs: OpenAI, vLLM classify, Cohere, TEI, the HF
Inference API), and the rules every answer is held to.

`http_calls()` draws a (route, body) pair: the route's well-formed body with any JSON value (nulls, booleans,
integers of any size, 2^63 and 2^64 among them, floats, strings, arrays, objects) put in any of its fields (nested
ones too: V2's parameters, shapes and outputs), a field removed, a body that is any JSON value, or bytes that are not
JSON at all. Bodies are written with the stdlib's json, which writes integers of any size, as a hostile client does.

What holds for every answer (`HttpTarget.check`): the status is 2xx or 4xx (never 5xx: a status the server caused),
a 4xx says why in a JSON body, and no reply carries a Python traceback. `HttpTarget.check_log` holds the server's
log to no traceback and no error line.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

CLASSIFIER, EMBEDDING, SPARSE = "classifier", "embed", "sparse"
"""The models a fuzzed server serves (`serve_models`): the tiny classifier, the tiny embedding model and the tiny
sparse embedding model."""
MODELS = (CLASSIFIER, EMBEDDING, SPARSE)
EDGE_INTEGERS = (0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30,
                 -(10**30), 10**400)
EDGE_FLOATS = (0.0, -0.0, 0.5, 1e308, -1e308, 5e-324, 16.0, 1e30)
Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Route:
    """A JSON route: where it is, a well-formed body, and the fields (paths into the body) a call may break."""

    name: str
    path: str
    body: dict[str, Any]
    fields: tuple[Path_, ...]


def _v2(model: str, parameters: dict[str, Any], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    text = {"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": ["good movie", "bad"]}
    return {"id": "fuzz", "inputs": [text], "parameters": parameters, "outputs": outputs}


_V2_FIELDS: tuple[Path_, ...] = (
    ("id",), ("inputs",), ("inputs", 0), ("inputs", 0, "name"), ("inputs", 0, "datatype"), ("inputs", 0, "shape"),
    ("inputs", 0, "shape", 0), ("inputs", 0, "data"), ("inputs", 0, "data", 0), ("inputs", 0, "parameters"),
    ("inputs", 0, "parameters", "binary_data_size"), ("parameters",), ("parameters", "dimensions"),
    ("parameters", "prompt_name"), ("parameters", "timeout"), ("parameters", "scores"), ("parameters", "priority"),
    ("parameters", "routing_key"), ("parameters", "aggregation"), ("parameters", "binary_data_output"),
    ("parameters", "embedding_type"), ("parameters", "top_k"), ("parameters", "threshold"),
    ("parameters", "classification"), ("outputs",), ("outputs", 0), ("outputs", 0, "name"),
    ("outputs", 0, "parameters"), ("outputs", 0, "parameters", "classification"),
    ("outputs", 0, "parameters", "binary_data"))

ROUTES: tuple[Route, ...] = (
    Route("v2-classifier", f"/v2/models/{CLASSIFIER}/infer",
          _v2(CLASSIFIER, {"scores": "probabilities"}, [{"name": "LOGITS", "parameters": {"classification": 1}}]),
          _V2_FIELDS),
    Route("v2-embed", f"/v2/models/{EMBEDDING}/infer", _v2(EMBEDDING, {"dimensions": 32, "embedding_type": "binary"},
                                                          []), _V2_FIELDS),
    Route("v2-sparse", f"/v2/models/{SPARSE}/infer", _v2(SPARSE, {"top_k": 8, "threshold": 0.25}, []), _V2_FIELDS),
    Route("openai-embeddings", "/v1/embeddings",
          {"input": ["good movie", "bad"], "model": EMBEDDING, "encoding_format": "float", "dimensions": 32},
          (("input",), ("input", 0), ("model",), ("encoding_format",), ("dimensions",), ("prompt_name",), ("user",))),
    Route("openai-classify", "/v1/classify", {"input": ["good movie"], "model": CLASSIFIER},
          (("input",), ("input", 0), ("model",), ("truncate_prompt_tokens",))),
    Route("vllm-classify", "/classify", {"input": "good movie", "model": CLASSIFIER}, (("input",), ("model",))),
    Route("cohere-rerank-v1", "/v1/rerank",
          {"model": CLASSIFIER, "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1, "return_documents": True},
          (("model",), ("query",), ("documents",), ("documents", 0), ("documents", 1), ("documents", 1, "text"),
           ("top_n",), ("return_documents",), ("max_tokens_per_doc",))),
    Route("cohere-rerank-v2", "/v2/rerank", {"model": CLASSIFIER, "query": "q", "documents": ["a"], "top_n": 2},
          (("model",), ("query",), ("documents",), ("documents", 0), ("top_n",), ("return_documents",))),
    Route("cohere-embed-v1", "/v1/embed",
          {"model": EMBEDDING, "texts": ["a", "b"], "input_type": "search_query",
           "embedding_types": ["float", "binary"], "truncate": "END"},
          (("model",), ("texts",), ("texts", 0), ("input_type",), ("embedding_types",), ("embedding_types", 0),
           ("truncate",), ("images",))),
    Route("cohere-embed-v2", "/v2/embed",
          {"model": EMBEDDING, "inputs": [{"content": [{"type": "text", "text": "a"}]}], "input_type": "clustering",
           "embedding_types": ["ubinary", "base64"], "output_dimension": 32, "truncate": "NONE"},
          (("model",), ("texts",), ("inputs",), ("inputs", 0), ("inputs", 0, "content"), ("inputs", 0, "content", 0),
           ("inputs", 0, "content", 0, "text"), ("inputs", 0, "content", 0, "type"), ("input_type",),
           ("embedding_types",), ("embedding_types", 0), ("output_dimension",), ("truncate",), ("max_tokens",),
           ("priority",))),
    Route("tei-embed", "/embed", {"inputs": ["good movie"], "model": EMBEDDING, "normalize": True, "dimensions": 32},
          (("inputs",), ("inputs", 0), ("model",), ("normalize",), ("truncate",), ("truncation_direction",),
           ("prompt_name",), ("dimensions",))),
    Route("tei-embed-sparse", "/embed_sparse",
          {"inputs": ["good movie", "bad"], "model": SPARSE, "top_k": 8, "threshold": 0.25},
          (("inputs",), ("inputs", 0), ("model",), ("truncate",), ("prompt_name",), ("top_k",), ("threshold",))),
    Route("tei-rerank", "/rerank", {"model": CLASSIFIER, "query": "q", "texts": ["a", "b"], "raw_scores": False},
          (("model",), ("query",), ("texts",), ("texts", 0), ("raw_scores",), ("return_text",), ("truncate",))),
    Route("tei-predict", "/predict", {"inputs": "good movie", "model": CLASSIFIER, "raw_scores": False},
          (("inputs",), ("model",), ("raw_scores",), ("truncate",))),
    Route("tei-tokenize", "/tokenize", {"inputs": ["good movie"], "model": CLASSIFIER, "add_special_tokens": True},
          (("inputs",), ("inputs", 0), ("model",), ("add_special_tokens",))),
    Route("tei-root", "/", {"inputs": "good movie", "model": EMBEDDING}, (("inputs",), ("model",), ("dimensions",),
                                                                          ("normalize",), ("query",), ("texts",))),
    Route("hf-task", f"/models/{CLASSIFIER}", {"inputs": "good movie", "parameters": {"top_k": 1}},
          (("inputs",), ("parameters",), ("parameters", "top_k"), ("parameters", "function_to_apply"))),
    Route("hf-feature-extraction", f"/models/{EMBEDDING}/pipeline/feature-extraction",
          {"inputs": "good movie", "normalize": True}, (("inputs",), ("normalize",), ("dimensions",))),
)


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value, integers of any size and the range edges first among them."""
    scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTEGERS), st.integers(),
                        st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=12), st.sampled_from(["", "float", "base64", "softmax", "query", "bulk",
                                                               CLASSIFIER, EMBEDDING, "TEXT", "LOGITS", "BYTES"]))
    return st.recursive(scalars, lambda children: st.one_of(st.lists(children, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), children,
                                                                            max_size=4)), max_leaves=8)


def _set(body: Any, where: Path_, value: Any, *, remove: bool = False) -> Any:
    """`body` with the value at `where` replaced (or removed); a path that no longer fits the body is left alone."""
    body = json.loads(json.dumps(body))
    parent = body
    for step in where[:-1]:
        try:
            parent = parent[step]
        except (KeyError, IndexError, TypeError):
            return body
    last = where[-1]
    try:
        if remove:
            del parent[last]
        else:
            parent[last] = value
    except (KeyError, IndexError, TypeError):
        pass
    return body


@st.composite
def http_calls(draw: st.DrawFn, routes: Sequence[Route] = ROUTES) -> tuple[Route, bytes]:
    """A route and a hostile body for it (see the module's docstring)."""
    route = draw(st.sampled_from(routes))
    how = draw(st.sampled_from(["field", "field", "field", "fields", "remove", "whole", "bytes", "valid"]))
    if how == "bytes":
        raw = json.dumps(route.body).encode()
        cut = draw(st.integers(0, len(raw)))
        return route, draw(st.one_of(st.binary(max_size=64), st.just(raw[:cut]),
                                     st.just(raw[:cut] + b"\xff\xfe" + raw[cut:])))
    if how == "whole":
        body: Any = draw(json_values())
    elif how == "valid":
        body = route.body
    else:
        body = route.body
        for _ in range(draw(st.integers(2, 4)) if how == "fields" else 1):
            where = draw(st.sampled_from(route.fields))
            body = _set(body, where, None, remove=True) if how == "remove" else _set(body, where, draw(json_values()))
    return route, json.dumps(body).encode()


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes
    seconds: float


class HttpFinding(AssertionError):
    """An answer that breaks a rule of the module's docstring; the message says which, for which call."""


@dataclass
class HttpTarget:
    """A server's HTTP port under fuzz, on one kept-alive connection (made again when the server closes it)."""

    host: str
    port: int
    timeout_s: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    _conn: http.client.HTTPConnection | None = None

    def send(self, path: str, body: bytes) -> Reply:
        started = time.monotonic()
        for attempt in (0, 1):  # a connection the server closed after its last answer is made again once
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self._conn.request("POST", path, body=body,
                                   headers={"Content-Type": "application/json", **self.headers})
                response = self._conn.getresponse()
                data = response.read()
                if response.will_close:
                    self.close()
                break
            except (ConnectionError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        self.calls += 1
        self.statuses[response.status] = self.statuses.get(response.status, 0) + 1
        return Reply(response.status, response.getheader("Content-Type", ""), data, time.monotonic() - started)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def fuzz(self, route: Route, body: bytes) -> Reply:
        """Send one call and hold its answer to the rules; raises HttpFinding."""
        reply = self.send(route.path, body)
        self.check(route, body, reply)
        return reply

    @staticmethod
    def check(route: Route, body: bytes, reply: Reply) -> None:
        where = f"{route.name} ({route.path}) answered {reply.status} to {body[:300]!r}: {reply.body[:300]!r}"
        if reply.status >= 500 or reply.status < 200:
            raise HttpFinding(where)
        if b"Traceback" in reply.body or b'File "' in reply.body:
            raise HttpFinding(f"a traceback in the reply: {where}")
        if reply.status >= 400:
            try:
                doc = json.loads(reply.body)
            except ValueError:
                raise HttpFinding(f"an error that is not JSON: {where}") from None
            if not _has_message(doc):
                raise HttpFinding(f"an error without a message: {where}")
        elif "json" in reply.content_type:
            try:
                json.loads(reply.body)
            except ValueError:
                raise HttpFinding(f"a reply that is not JSON: {where}") from None

    def summary(self) -> str:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        return f"{self.calls} calls ({statuses})"


def _has_message(doc: Any) -> bool:
    """Whether an error body says something: a non-empty string somewhere in it."""
    if isinstance(doc, str):
        return bool(doc.strip())
    if isinstance(doc, dict):
        return any(_has_message(v) for v in doc.values())
    if isinstance(doc, list):
        return any(_has_message(v) for v in doc)
    return False


def check_log(lines: Sequence[str]) -> None:
    """The server's log after fuzzing: no traceback, no error line (a hostile call is the caller's doing)."""
    for line in lines:
        if "Traceback" in line or '"level": "error"' in line or '"level":"error"' in line or line.startswith("ERROR"):
            raise HttpFinding(f"the server logged: {line[:2000]}")


@contextmanager
def serve_models(workdir: Path, args: Sequence[str] = ()) -> Iterator[Any]:
    """A server (ortserve_devtools' ServerProcess, its log in pipes) of the tiny classifier, the tiny embedding model
    and the tiny sparse embedding model, published to a file registry under `workdir`, with an HTTP port; every
    model ready."""
    from ortserve.registry.artifacts import ArtifactStore
    from ortserve.registry.filestore import FileStore
    from ortserve.registry.publishing import publish
    from ortserve_devtools.bert_bundle import build_tiny_bundle, build_tiny_embedding_bundle
    from ortserve_devtools.server_process import ServerProcess
    from ortserve_devtools.sparse_bundle import build_tiny_sparse_bundle

    store = workdir / "store"
    if not store.exists():
        files, artifacts = FileStore(store), ArtifactStore(store / "artifacts")
        build_tiny_bundle(workdir / CLASSIFIER, seed=0)
        build_tiny_embedding_bundle(workdir / EMBEDDING, seed=0)
        build_tiny_sparse_bundle(workdir / SPARSE, seed=0)
        for model in MODELS:
            publish(files, artifacts, model=model, version="v1", bundle_dir=workdir / model, weight=100)
    # cwd: not the checkout, whose source tree (no compiled engine) `python -m` would put first on sys.path.
    server = ServerProcess(["--registry", store.as_uri(), "--frontend", "python", *args], http=True, cwd=workdir)
    try:
        for model in MODELS:
            server.wait_ready(model=model, timeout=120)
        yield server
    finally:
        server.stop()
