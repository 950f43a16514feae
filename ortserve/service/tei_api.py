"""Hugging Face Text Embeddings Inference's routes on the HTTP port, with TEI's request and reply shapes, for TEI
clients and `huggingface_hub.InferenceClient`:

    POST /embed      {"inputs": str | [str], "normalize": true, "truncate", "prompt_name", "dimensions"} -> [[float]]
    POST /embed_sparse  {"inputs": str | [str], "truncate", "prompt_name", "top_k", "threshold"}
                                                              -> [[{"index", "value"}]] (a sparse embedding model's)
    POST /rerank     {"query", "texts": [str], "raw_scores": false, "return_text"}    -> [{"index", "score", "text"}]
    POST /predict    {"inputs": str | [a, b] | [[str] | [a, b]], "raw_scores": false}  -> [{"score", "label"}] (a batch:
                                                                                          one such list per input)
    POST /tokenize   {"inputs": str | [str], "add_special_tokens": true}     -> [[{"id", "text", "special", "start",
                                                                                   "stop"}]]
    GET  /info[?model=]                                                              the model, the server's limits
    POST /models/{model}[/pipeline/feature-extraction]   the HF Inference API's task shapes (InferenceClient with
                                                         base_url=that URL): text-classification, feature-extraction
    POST /           by the model's kind, as TEI's root: /embed (an embedding model), /embed_sparse (a sparse one),
                     /rerank (a re-ranker), /predict (a classifier); InferenceClient(base_url=the server) posts here

TEI serves one model; here a body (or /info's query) may name one in "model", which is required only where several
are served. /embed_sparse's `top_k` and `threshold` (ortserve's, beside TEI's fields) bound each text's entries as the
V2 parameters of those names do. Every inference route is one V2 ModelInfer (`text_calls.TextCalls.run`, a sparse
model's `run_sparse`); /tokenize runs the bundle's own tokenizer. Errors: {"error", "error_type"} with the V2 REST
status (docs/client_apis.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from aiohttp import web

from ortserve import __version__, engine_ext
from ortserve.bundle.kinds import CLASSIFIER, EMBEDDING
from ortserve.service.text_calls import (
    ApiError,
    EmbeddingParams,
    ServedModel,
    SparseBounds,
    TextCalls,
    api_route,
    boolean,
    json_response,
    normalized,
    positive_int,
    probabilities,
    texts_of,
    whole_text_tokenizer,
)

ERROR_TYPES = {"invalid_request": "validation", "not_found": "validation", "too_large": "validation",
               "overloaded": "overloaded", "timeout": "overloaded", "unavailable": "unhealthy",
               "body_timeout": "validation", "unauthorized": "unauthorized"}
"""TEI's error_type per kind of error (text_calls.KINDS); any other is "backend"."""
DTYPES = {"fp32": "float32", "fp16": "float16", "int8": "int8", "bf16": "bfloat16"}  # TEI's names
TEI_POOLING = {"lasttoken": "last_token"}  # sentence-transformers' pooling names TEI's /info spells otherwise
LOGITS = CLASSIFIER.wire_output


def error_body(e: ApiError) -> dict[str, Any]:
    return {"error": e.message, "error_type": ERROR_TYPES.get(e.kind, "backend")}


def add_routes(app: web.Application, calls: TextCalls) -> None:
    api = TeiApi(calls)
    app.router.add_post("/embed", api.embed)
    app.router.add_post("/embed_sparse", api.embed_sparse)
    app.router.add_post("/rerank", api.rerank)
    app.router.add_post("/predict", api.predict)
    app.router.add_post("/tokenize", api.tokenize)
    app.router.add_get("/info", api.info)
    app.router.add_post("/", api.root)
    app.router.add_post("/models/{model}", api.hf_task)
    app.router.add_post("/models/{model}/pipeline/feature-extraction", api.hf_feature_extraction)


class TeiApi:
    def __init__(self, calls: TextCalls) -> None:
        self._calls = calls

    @api_route(error_body)
    async def embed(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        return await self._embed(request, doc, self._calls.choose(doc.get("model")))

    async def _embed(self, request: web.Request, doc: dict[str, Any], served: ServedModel) -> web.Response:
        texts, _ = texts_of(doc.get("inputs"), "inputs")
        boolean(doc, "truncate", False)  # taken: every text is read up to max_seq_len tokens (TEI's auto-truncate)
        normalize = boolean(doc, "normalize", True)
        if served.output.kind is not EMBEDDING:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not an embedding "
                                   "model" + (": use /embed_sparse" if served.output.kind.sparse else ""), "model")
        answer = await self._calls.run(request, served, texts, embedding=EmbeddingParams.of(doc))
        values = normalized(answer.values) if normalize else answer.values
        return json_response(values, headers=_headers(answer.request_id, answer.version))

    @api_route(error_body)
    async def embed_sparse(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        return await self._embed_sparse(request, doc, self._calls.choose(doc.get("model")))

    async def _embed_sparse(self, request: web.Request, doc: dict[str, Any], served: ServedModel) -> web.Response:
        texts, _ = texts_of(doc.get("inputs"), "inputs")
        boolean(doc, "truncate", False)  # taken: every text is read up to max_seq_len tokens (TEI's auto-truncate)
        bounds, prompt = SparseBounds.of(doc), EmbeddingParams.of(doc).prompt_name
        if not served.output.kind.sparse:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not a sparse embedding "
                                   "model (SPLADE)" + (": use /embed" if served.output.kind is EMBEDDING else ""),
                                   "model")
        answer = await self._calls.run_sparse(request, served, texts, bounds=bounds, prompt_name=prompt)
        rows = [[{"index": int(i), "value": float(v)} for i, v in zip(indices, values, strict=True)]
                for indices, values in answer.entries]
        return json_response(rows, headers=_headers(answer.request_id, answer.version))

    @api_route(error_body)
    async def root(self, request: web.Request) -> web.Response:
        """TEI's `POST /`: the route of the served model's kind (the body's "model", or the one served)."""
        doc = await self._calls.read_json(request)
        served = self._calls.choose(doc.get("model"))
        if served.output.kind is EMBEDDING:
            return await self._embed(request, doc, served)
        if served.output.kind.sparse:
            return await self._embed_sparse(request, doc, served)
        if served.reranker:
            return await self._rerank(request, doc, served)
        if served.output.kind is CLASSIFIER:
            return await self._predict(request, doc, served)
        raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}: POST / answers an "
                               "embedding model (/embed), a sparse one (/embed_sparse), a re-ranker (/rerank) or a "
                               "classifier (/predict)", "model")

    @api_route(error_body)
    async def rerank(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        return await self._rerank(request, doc, None)

    async def _rerank(self, request: web.Request, doc: dict[str, Any], chosen: ServedModel | None) -> web.Response:
        query = doc.get("query")
        if not isinstance(query, str):
            raise ApiError.invalid("'query' must be a string", "query")
        texts = doc.get("texts")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ApiError.invalid("'texts' must be an array of strings", "texts")
        if not texts:
            raise ApiError.invalid("`texts` cannot be empty", "texts")
        boolean(doc, "truncate", False)
        raw, return_text = boolean(doc, "raw_scores", False), boolean(doc, "return_text", False)
        served = chosen or self._calls.choose(doc.get("model"))
        if not served.reranker:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not a re-ranker model",
                                   "model")
        answer = await self._calls.run(request, served, texts, pairs=[query], output=LOGITS if raw else None)
        scores = answer.values[:, 0]
        order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
        ranks = [{"index": i, **({"text": texts[i]} if return_text else {}), "score": float(scores[i])}
                 for i in order]
        return json_response(ranks, headers=_headers(answer.request_id, answer.version))

    @api_route(error_body)
    async def predict(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        return await self._predict(request, doc, None)

    async def _predict(self, request: web.Request, doc: dict[str, Any], chosen: ServedModel | None) -> web.Response:
        raw = boolean(doc, "raw_scores", False)
        boolean(doc, "truncate", False)
        inputs, single = predict_inputs(doc.get("inputs"))
        served = chosen or self._calls.choose(doc.get("model"))
        if served.output.kind is not CLASSIFIER:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}, not a classifier",
                                   "model")
        if any(len(i) == 2 for i in inputs) != served.output.pairs or len({len(i) for i in inputs}) > 1:
            wanted = "pairs of strings [a, b]" if served.output.pairs else "single strings"
            raise ApiError.invalid(f"model '{served.name}' reads {wanted}: send every input as such", "inputs")
        # A pair [a, b] is read a first: V2's TEXT_PAIR (read first) is a, TEXT is b.
        texts = [i[-1] for i in inputs]
        pairs = [i[0] for i in inputs] if served.output.pairs else None
        answer = await self._calls.run(request, served, texts, pairs=pairs,
                                       output=LOGITS if raw or not served.reranker else engine_ext.SCORE_OUTPUT)
        rows = answer.values if raw or served.reranker else probabilities(answer.values, served.output)
        predictions = [ranked(row, served.output.labels) for row in rows]
        return json_response(predictions[0] if single else predictions,
                             headers=_headers(answer.request_id, answer.version))

    @api_route(error_body)
    async def tokenize(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        texts, _ = texts_of(doc.get("inputs"), "inputs")
        special = boolean(doc, "add_special_tokens", True)
        served = self._calls.choose(doc.get("model"))
        bundle = served.instance.bundle_dir
        if bundle is None:
            raise ApiError(404, f"model '{served.name}' has no tokenizer file to tokenize with", kind="not_found")
        loop = asyncio.get_running_loop()
        tokens = await loop.run_in_executor(None, tokenize_whole, str(bundle / "tokenizer.json"), texts, special)
        return json_response(tokens)

    @api_route(error_body)
    async def info(self, request: web.Request) -> web.Response:
        served = self._calls.choose(request.query.get("model"))
        settings, output = self._calls.settings, served.output
        if output.kind is EMBEDDING:
            imported = served.instance.manifest.imported
            pooling = (imported.details.get("pooling") if imported is not None else None) or "model"
            names = [TEI_POOLING.get(str(mode), str(mode)) for mode in pooling] if isinstance(pooling, list) else [
                str(pooling)]
            model_type: dict[str, Any] = {"embedding": {"pooling": "+".join(names)}}
        elif output.kind.sparse:  # TEI names a SPLADE model's pooling "splade"
            model_type = {"embedding": {"pooling": "splade"}}
        else:
            labels = {"id2label": {str(i): label for i, label in enumerate(output.labels)},
                      "label2id": {label: i for i, label in enumerate(output.labels)}}
            model_type = {"reranker" if served.reranker else "classifier": labels}
        return json_response({
            "model_id": served.name, "model_sha": None, "model_dtype": DTYPES.get(served.precision, served.precision),
            "served_model_name": served.name, "model_type": model_type,
            "max_concurrent_requests": settings.max_queue_items, "max_input_length": served.max_seq_len,
            "max_batch_tokens": settings.max_batch_tokens, "max_batch_requests": settings.max_batch_size,
            "max_client_batch_size": settings.max_texts_per_request, "auto_truncate": True,
            "tokenization_workers": settings.tokenizer_threads, "version": __version__, "sha": None,
            "docker_label": None})

    # ---- the HF Inference API's task routes (huggingface_hub's InferenceClient posts to the URL it is given) ----

    @api_route(error_body)
    async def hf_task(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        served = self._calls.choose(request.match_info["model"])
        if served.output.kind is EMBEDDING:
            return await self._embed(request, doc, served)
        if served.output.kind is not CLASSIFIER or served.output.pairs:
            raise ApiError.invalid(f"model '{served.name}' is a {served.instance.kind_shown}: /models/{{model}} "
                                   "answers text-classification (a classifier) and feature-extraction (an "
                                   "embedding model)", "model")
        texts, _ = texts_of(doc.get("inputs"), "inputs")
        parameters = doc.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ApiError.invalid("'parameters' must be an object", "parameters")
        top_k = positive_int(parameters, "top_k")
        function = parameters.get("function_to_apply")
        if function not in (None, "softmax", "sigmoid", "none"):
            raise ApiError.invalid(f"'function_to_apply' must be 'softmax', 'sigmoid' or 'none', got {function!r}",
                                   "function_to_apply")
        answer = await self._calls.run(request, served, texts)
        logits = answer.values
        if function == "none":
            rows = logits
        elif function == "sigmoid":
            rows = 1.0 / (1.0 + np.exp(-logits))
        elif function == "softmax":
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            rows = shifted / shifted.sum(axis=1, keepdims=True)
        else:
            rows = probabilities(logits, served.output)
        # One list per text, a single text's too (the task's shape: [[{"label", "score"}, ...]]).
        return json_response([ranked(row, served.output.labels)[:top_k] for row in rows],
                             headers=_headers(answer.request_id, answer.version))

    @api_route(error_body)
    async def hf_feature_extraction(self, request: web.Request) -> web.Response:
        doc = await self._calls.read_json(request)
        return await self._embed(request, doc, self._calls.choose(request.match_info["model"]))


def predict_inputs(value: Any) -> tuple[list[list[str]], bool]:
    """TEI's predict inputs as [text] or [first, second] each, and whether it was one input: a string, a pair
    [a, b] of strings, or a batch [[a] | [a, b], ...]."""
    shape = "a string, a pair of strings [a, b], or a batch [[a] or [a, b], ...]"
    if isinstance(value, str):
        return [[value]], True
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if len(value) > 2:
            raise ApiError.invalid(f"'inputs' must be {shape}: a list of {len(value)} strings is neither", "inputs")
        return [list(value)], True
    if isinstance(value, list) and value and all(
            isinstance(v, list) and len(v) in (1, 2) and all(isinstance(s, str) for s in v) for v in value):
        return [list(v) for v in value], False
    if value == []:
        raise ApiError.invalid("`inputs` cannot be empty", "inputs")
    raise ApiError.invalid(f"'inputs' must be {shape}", "inputs")


def ranked(row: np.ndarray, labels: tuple[str, ...]) -> list[dict[str, Any]]:
    """[{"score", "label"}] of one text, best first (ties: the earlier label)."""
    order = sorted(range(len(labels)), key=lambda j: (-row[j], j))
    return [{"score": float(row[j]), "label": labels[j]} for j in order]


def tokenize_whole(path: str, texts: list[str], add_special_tokens: bool) -> list[list[dict[str, Any]]]:
    """TEI's tokens: id, text (a special token's own, else the text's slice), special, start and stop (offsets in
    code points of the text; None for a special token)."""
    tokenizer = whole_text_tokenizer(path)
    out = []
    for text in texts:
        encoding = tokenizer.encode(text, add_special_tokens=add_special_tokens)
        out.append([{"id": token_id, "text": token if special else text[start:stop], "special": bool(special),
                     "start": None if special else start, "stop": None if special else stop}
                    for token_id, token, special, (start, stop) in zip(
                        encoding.ids, encoding.tokens, encoding.special_tokens_mask, encoding.offsets, strict=True)])
    return out


def _headers(request_id: str, version: str) -> dict[str, str]:
    return {"x-request-id": request_id, "x-model-version": version}

