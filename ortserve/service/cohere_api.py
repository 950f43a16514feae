"""Cohere's rerank and embed on the HTTP port: rerank in Cohere's v2 and Jina's shape, for Cohere's SDK
(`ClientV2(base_url=...).rerank`, which posts to /v2/rerank), Jina-, Infinity- and vLLM-style clients (/v1/rerank),
LangChain's and LlamaIndex's Cohere rerankers; embed as Cohere's SDK calls it (`Client.embed`: /v1/embed,
`ClientV2.embed`: /v2/embed):

    POST /v1/rerank, /v2/rerank   {"model", "query", "documents": [str | {"text": str}], "top_n",
                                   "return_documents"}
      -> {"id", "results": [{"index", "relevance_score", "document": {"text"}}], "meta", "model", "usage"}
    POST /v1/embed                {"model", "texts", "input_type", "embedding_types", "truncate"}
      -> {"response_type": "embeddings_floats", "id", "embeddings": [[float]], "texts", "meta"} without
         embedding_types, else {"response_type": "embeddings_by_type", "id", "embeddings": {type: rows}, ...}
    POST /v2/embed                {"model", "texts" | "inputs": [{"content": [{"type": "text", "text"}]}],
                                   "input_type", "embedding_types", "output_dimension", "truncate"}
      -> {"response_type": "embeddings_by_type", "id", "embeddings": {type: rows}, "texts", "meta"}

A reranker is a classifier of pairs: the call is one V2 ModelInfer with TEXT = the documents and TEXT_PAIR = [the
query] (read query first, as cross-encoders are trained); relevance_score is its SCORE (the logit through the
model's score activation). Results are sorted by score, best first (ties: the earlier document).

An embed call is one V2 ModelInfer per wire type it asks for (float serves "float" and "base64"; the others are the
`embedding_type` parameter, the wire rules' compact types), made together so the batcher runs them side by side:
`input_type` names the model's prompt (`prompt_name`: INPUT_PROMPTS, the first the model keeps; none kept, the texts
go as sent), `output_dimension` is `dimensions`, `truncate` END (the default) reads a text's first max_seq_len
tokens, NONE refuses a text past them, START is refused (the model reads a text's start). Errors: {"message"} with the
V2 REST status (docs/client_apis.md).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

import numpy as np
from aiohttp import web

from ortserve.bundle.kinds import EMBEDDING
from ortserve.service.text_calls import (
    Answer,
    ApiError,
    EmbeddingParams,
    ServedModel,
    TextCalls,
    api_route,
    boolean,
    json_response,
    positive_int,
    whole_text_tokenizer,
)

INPUT_PROMPTS = {"search_query": ("search_query", "query"),
                 "search_document": ("search_document", "document", "passage"),
                 "classification": ("classification",), "clustering": ("clustering",)}
"""Cohere's input_type -> the prompt names it is served with, the first the model keeps."""
EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary", "base64")
TRUNCATE = ("NONE", "START", "END")


def error_body(e: ApiError) -> dict[str, Any]:
    return {"message": e.message}


def add_routes(app: web.Application, calls: TextCalls) -> None:
    api = CohereApi(calls)
    app.router.add_post("/v1/rerank", api.rerank)
    app.router.add_post("/v2/rerank", api.rerank)
    app.router.add_post("/v1/embed", api.embed_v1)
    app.router.add_post("/v2/embed", api.embed_v2)


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
        tokens = answer.token_count
        scores = answer.values[:, 0]
        order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))[:top_n]
        results = [{"index": i, "relevance_score": float(scores[i]),
                    **({"document": {"text": documents[i]}} if return_documents else {})} for i in order]
        return json_response({"id": answer.request_id, "results": results,
                              "meta": {"api_version": {"version": "2"}, "tokens": {"input_tokens": tokens}},
                              "model": served.name, "usage": {"total_tokens": tokens}},
                             headers={"x-request-id": answer.request_id, "x-model-version": answer.version})


    @api_route(error_body)
    async def embed_v1(self, request: web.Request) -> web.Response:
        return await self._embed(request, await self._calls.read_json(request), version=1)

    @api_route(error_body)
    async def embed_v2(self, request: web.Request) -> web.Response:
        return await self._embed(request, await self._calls.read_json(request), version=2)

    async def _embed(self, request: web.Request, doc: dict[str, Any], *, version: int) -> web.Response:
        texts = embed_texts(doc, version)
        types = embedding_types(doc.get("embedding_types"))
        truncate = doc.get("truncate") or "END"
        if not isinstance(truncate, str) or truncate not in TRUNCATE:
            raise ApiError.invalid(f"'truncate' must be one of NONE, START, END, got {_shown(truncate)}")
        if truncate == "START":
            raise ApiError.invalid("'truncate' START is not served: the model reads a text's first max_seq_len "
                                   "tokens (END), or refuses a longer text (NONE)")
        if doc.get("images"):
            raise ApiError.invalid("'images' are not served: this server embeds texts")
        if version == 2 and doc.get("max_tokens") is not None:
            raise ApiError.invalid("'max_tokens' is not taken: the model reads up to its max_seq_len tokens of a text "
                                   "(truncate END) or refuses a longer one (NONE)")
        dimensions = positive_int(doc, "output_dimension") if version == 2 else None
        served = self._calls.choose(doc.get("model"))
        if served.output.kind is not EMBEDDING:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not an embedding "
                                   "model: embed serves embedding models"
                                   + ("; its sparse vectors are at /embed_sparse" if served.output.kind.sparse
                                      else ""))
        prompt = prompt_for(doc.get("input_type"), served)
        if truncate == "NONE":
            await self._refuse_past_max_seq_len(served, texts, prompt)
        wire = list(dict.fromkeys("float" if t == "base64" else t for t in (types or ["float"])))
        answers = await asyncio.gather(*(self._calls.run(request, served, texts, embedding=EmbeddingParams(
            prompt_name=prompt, dimensions=dimensions, embedding_type=None if t == "float" else t)) for t in wire))
        by_type = dict(zip(wire, answers, strict=True))
        first = answers[0]
        tokens = first.token_count
        meta = {"api_version": {"version": str(version)}, "billed_units": {"input_tokens": tokens}}
        headers = {"x-request-id": first.request_id, "x-model-version": first.version}
        if version == 1 and types is None:
            return json_response({"response_type": "embeddings_floats", "id": first.request_id,
                                  "embeddings": by_type["float"].values, "texts": texts, "meta": meta},
                                 headers=headers)
        embeddings = {t: rows_of(t, by_type["float" if t == "base64" else t]) for t in (types or ["float"])}
        return json_response({"response_type": "embeddings_by_type", "id": first.request_id,
                              "embeddings": embeddings, "texts": texts, "meta": meta}, headers=headers)

    async def _refuse_past_max_seq_len(self, served: ServedModel, texts: list[str], prompt: str | None) -> None:
        """truncate NONE: ApiError 400 naming the first text (after its prompt) past the model's max_seq_len tokens,
        counted by its own tokenizer, special tokens included (on the tokenizer pool)."""
        before = dict(served.output.prompts).get(prompt, "") if prompt else ""
        if served.instance.bundle_dir is None:
            raise ApiError(404, f"model '{served.name}' has no tokenizer file to count with: send truncate END",
                           kind="not_found")
        path = str(served.instance.bundle_dir / "tokenizer.json")

        def counts() -> list[int]:
            tokenizer = whole_text_tokenizer(path)
            return [len(e.ids) for e in tokenizer.encode_batch([before + t for t in texts])]

        lengths = await asyncio.get_running_loop().run_in_executor(None, counts)
        for i, length in enumerate(lengths):
            if length > served.max_seq_len:
                raise ApiError.invalid(f"texts[{i}] is {length} tokens, past model '{served.name}''s max_seq_len "
                                       f"{served.max_seq_len}, and truncate is NONE: send truncate END to embed its "
                                       f"first {served.max_seq_len} tokens")


def embed_texts(doc: Mapping[str, Any], version: int) -> list[str]:
    """The texts to embed: "texts" (both versions), or v2's "inputs", each one text of its "text" content parts
    (joined by a space)."""
    texts, inputs = doc.get("texts"), doc.get("inputs") if version == 2 else None
    if texts is not None and inputs is not None:
        raise ApiError.invalid("send 'texts' or 'inputs', not both")
    if inputs is not None:
        if not isinstance(inputs, list) or not inputs:
            raise ApiError.invalid("'inputs' must be a non-empty array of {\"content\": [{\"type\": \"text\", "
                                   "\"text\": str}]}")
        texts = [_input_text(i, item) for i, item in enumerate(inputs)]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ApiError.invalid("'texts' must be a non-empty array of strings" +
                               (" (or send 'inputs')" if version == 2 else ""))
    return texts


def _input_text(i: int, item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else None
    if not isinstance(content, list) or not content:
        raise ApiError.invalid(f"inputs[{i}] must be an object with a non-empty 'content' array")
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApiError.invalid(f"inputs[{i}].content[{j}] must be {{\"type\": \"text\", \"text\": str}}: this "
                                   "server embeds texts, not images")
        parts.append(part["text"])
    return " ".join(parts)


def embedding_types(value: Any) -> list[str] | None:
    """The asked types in order, each once; None when the body names none."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise ApiError.invalid("'embedding_types' must be a non-empty array of " + ", ".join(EMBEDDING_TYPES))
    for t in value:
        if t not in EMBEDDING_TYPES:
            raise ApiError.invalid(f"'embedding_types' holds {_shown(t)}: each must be one of "
                                   + ", ".join(EMBEDDING_TYPES))
    return list(dict.fromkeys(value))


def prompt_for(input_type: Any, served: ServedModel) -> str | None:
    """The model's prompt for Cohere's input_type (INPUT_PROMPTS, the first it keeps); None for none."""
    if input_type is None:
        return None
    if input_type == "image":
        raise ApiError.invalid("input_type 'image' is not served: this server embeds texts")
    if not isinstance(input_type, str) or input_type not in INPUT_PROMPTS:
        raise ApiError.invalid(f"'input_type' must be one of {', '.join(INPUT_PROMPTS)}, got {_shown(input_type)}")
    kept = dict(served.output.prompts)
    return next((name for name in INPUT_PROMPTS[input_type] if name in kept), None)


def rows_of(kind: str, answer: Answer) -> list[Any]:
    """One type's embeddings: rows of numbers, or base64 of each row's float32 little-endian bytes."""
    if kind == "base64":
        return [base64.b64encode(row.astype("<f4").tobytes()).decode() for row in answer.values]
    return [row.astype(np.int64) if kind != "float" else row for row in answer.values]


def _shown(value: Any) -> str:
    return repr(value)[:40]


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
