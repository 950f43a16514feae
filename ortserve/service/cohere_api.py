"""Rerank in Cohere's v2 and Jina's shape on the HTTP port, for Cohere's SDK (`ClientV2(base_url=...).rerank`,
which posts to /v2/rerank), Jina-, Infinity- and vLLM-style clients (/v1/rerank), LangChain's and LlamaIndex's
Cohere rerankers:

    POST /v1/rerank, /v2/rerank   {"model", "query", "documents": [str | {"text": str}], "top_n",
                                   "return_documents"}
      -> {"id", "results": [{"index", "relevance_score", "document": {"text"}}], "meta", "model", "usage"}

A reranker is a classifier of pairs: the call is one V2 ModelInfer with TEXT = the documents and TEXT_PAIR = [the
query] (read query first, as cross-encoders are trained); relevance_score is its SCORE (the logit through the
model's score activation). Results are sorted by score, best first (ties: the earlier document). Errors:
{"message"} with the V2 REST status (docs/client_apis.md).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ortserve.service.text_calls import ApiError, TextCalls, api_route, boolean, json_response, positive_int


def error_body(e: ApiError) -> dict[str, Any]:
    return {"message": e.message}


def add_routes(app: web.Application, calls: TextCalls) -> None:
    api = CohereApi(calls)
    app.router.add_post("/v1/rerank", api.rerank)
    app.router.add_post("/v2/rerank", api.rerank)


class CohereApi:
    def __init__(self, calls: TextCalls) -> None:
        self._calls = calls

    @api_route(error_body)
    async def rerank(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        query = doc.get("query")
        if not isinstance(query, str) or not query:
            raise ApiError.invalid("'query' must be a non-empty string", "query")
        documents = documents_of(doc.get("documents"))
        top_n = positive_int(doc, "top_n")
        return_documents = boolean(doc, "return_documents", False)
        served = self._calls.choose(doc.get("model"))
        if not served.reranker:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not a reranker (a "
                                   "classifier of pairs with one score): rerank serves rerankers", "model")
        answer = await self._calls.run(request, served, documents, pairs=[query])
        # Counted as the model read each pair: the query first (a decoder reranker's template is not symmetric).
        tokens = await self._calls.count_tokens(answer, [query] * len(documents), pairs=documents)
        scores = answer.values[:, 0]
        order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))[:top_n]
        results = [{"index": i, "relevance_score": float(scores[i]),
                    **({"document": {"text": documents[i]}} if return_documents else {})} for i in order]
        return json_response({"id": answer.request_id, "results": results,
                              "meta": {"api_version": {"version": "2"}, "tokens": {"input_tokens": tokens}},
                              "model": served.name, "usage": {"total_tokens": tokens}},
                             headers={"x-request-id": answer.request_id, "x-model-version": answer.version})


def documents_of(value: Any) -> list[str]:
    """The documents' texts: strings, or objects with "text" (Cohere v1, Jina)."""
    if not isinstance(value, list):
        raise ApiError.invalid("'documents' must be an array of strings (or of objects with \"text\")", "documents")
    if not value:
        raise ApiError.invalid("'documents' is empty: send at least one document", "documents")
    texts = []
    for i, document in enumerate(value):
        text = document.get("text") if isinstance(document, dict) else document
        if not isinstance(text, str):
            raise ApiError.invalid(f"documents[{i}] must be a string or an object with a string \"text\"",
                                   "documents")
        texts.append(text)
    return texts
