"""OpenAI's embeddings API on the HTTP port, for the OpenAI SDK, LangChain's `OpenAIEmbeddings(base_url=...)`,
LlamaIndex and any client of `/v1/embeddings`:

    POST /v1/embeddings          {"input": str | [str], "model", "encoding_format": "float" | "base64",
                                  "dimensions", "prompt_name"}
    GET  /v1/models              the served models
    GET  /v1/models/{model}      one of them
    POST /v1/classify, /classify {"input": str | [str], "model"}: a classifier's labels and probabilities, in vLLM's
                                 (and SGLang's) shape

Each call is one V2 ModelInfer (`text_calls.TextCalls.run`). Errors: {"error": {"message", "type", "param",
"code"}} with the V2 REST status (docs/client_apis.md).
"""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np
from aiohttp import web

from ortserve.bundle.kinds import CLASSIFIER, EMBEDDING
from ortserve.service.text_calls import (
    ApiError,
    EmbeddingParams,
    TextCalls,
    api_route,
    json_response,
    probabilities,
    texts_of,
)

TYPES = {"invalid_request": "invalid_request_error", "not_found": "invalid_request_error",
         "too_large": "invalid_request_error", "overloaded": "rate_limit_error", "unavailable": "server_error",
         "timeout": "server_error", "cancelled": "server_error", "internal": "server_error",
         "unauthorized": "invalid_request_error", "body_timeout": "invalid_request_error",
         "client_gone": "invalid_request_error"}
"""OpenAI's error `type` per kind of error (text_calls.KINDS)."""
CODES = {"not_found": "model_not_found", "too_large": "request_too_large", "overloaded": "rate_limit_exceeded",
         "unavailable": "model_not_ready", "timeout": "timeout", "unauthorized": "invalid_api_key",
         "body_timeout": "timeout"}


def error_body(e: ApiError) -> dict[str, Any]:
    return {"error": {"message": e.message, "type": TYPES.get(e.kind, "server_error"), "param": e.param,
                      "code": CODES.get(e.kind)}}


def add_routes(app: web.Application, calls: TextCalls) -> None:
    api = OpenAiApi(calls)
    app.router.add_post("/v1/embeddings", api.embeddings)
    app.router.add_get("/v1/models", api.models)
    app.router.add_get("/v1/models/{model}", api.model)
    app.router.add_post("/v1/classify", api.classify)
    app.router.add_post("/classify", api.classify)


class OpenAiApi:
    def __init__(self, calls: TextCalls) -> None:
        self._calls = calls

    @api_route(error_body)
    async def embeddings(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        texts, _ = texts_of(doc.get("input"), "input", allow_empty_text=False)
        served = self._calls.choose(doc.get("model"))
        if served.output.kind is not EMBEDDING:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not an embedding "
                                   "model: /v1/embeddings serves embedding models"
                                   + ("; its sparse vectors are at /embed_sparse" if served.output.kind.sparse
                                      else ""), "model")
        encoding = doc.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise ApiError.invalid(f"'encoding_format' must be 'float' or 'base64', got {encoding!r}",
                                   "encoding_format")
        answer = await self._calls.run(request, served, texts, embedding=EmbeddingParams.of(doc))
        tokens = answer.token_count
        rows = answer.values
        # base64: the float32 values' little-endian bytes, as OpenAI sends them (the SDK's default).
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(row.astype("<f4").tobytes()).decode() if encoding == "base64"
                 else row} for i, row in enumerate(rows)]
        return json_response({"object": "list", "data": data, "model": served.name,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
                             headers={"x-request-id": answer.request_id, "x-model-version": answer.version})

    @api_route(error_body)
    async def classify(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        texts, _ = texts_of(doc.get("input"), "input")
        served = self._calls.choose(doc.get("model"))
        if served.output.kind is not CLASSIFIER or served.output.pairs:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not a classifier of "
                                   "single texts: /v1/classify serves those", "model")
        answer = await self._calls.run(request, served, texts)
        tokens = answer.token_count
        labels = served.output.labels
        data = [{"index": i, "label": labels[int(np.argmax(row))], "probs": row, "num_classes": len(labels)}
                for i, row in enumerate(probabilities(answer.values, served.output))]
        return json_response({"id": f"classify-{answer.request_id}", "object": "list", "created": int(time.time()),
                              "model": served.name, "data": data,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                                        "prompt_tokens_details": None}},
                             headers={"x-request-id": answer.request_id, "x-model-version": answer.version})

    @api_route(error_body)
    async def models(self, request: web.Request) -> web.Response:
        return json_response({"object": "list", "data": [self._entry(name) for name in self._calls.served_names()]})

    @api_route(error_body)
    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in self._calls.served_names():
            self._calls.choose(name)  # 503 while it loads, else 404 listing the served models
        return json_response(self._entry(name))

    def _entry(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self._calls.first_served(name), "owned_by": "ortserve"}
