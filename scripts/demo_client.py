#!/usr/bin/env python3
"""Send a handful of real texts to a running ortserve and print what comes back.

    python scripts/demo_client.py --address localhost:8001 --model sentiment [TEXT ...]
    python scripts/demo_client.py --model sentiment --users 50 TEXT        # who gets which canary version
    python scripts/demo_client.py --model search --search QUERY [TEXT ...]  # nearest neighbours by embedding
    python scripts/demo_client.py --model rerank --rerank QUERY [TEXT ...]  # passages ranked by a reranker's SCORE
    python scripts/demo_client.py --model ner --entities [TEXT ...]         # named entities with their offsets

A classifier's labels come from the server: ModelMetadata lists them, and the classification extension
(`classification` = k on the requested LOGITS, tritonclient's `class_count`) answers "score:index:label".
"""

from __future__ import annotations

import argparse
import json
import sys

import grpc
import numpy as np

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

DEFAULT_TEXTS = [
    "I absolutely loved this film, the acting was wonderful.",
    "This was a waste of time and money. Terrible.",
    "The service was quick and the staff were friendly.",
    "The battery died after two days and support never answered.",
    "An okay product, nothing special.",
]
DEFAULT_CORPUS = [
    "How do I reset my password?",
    "The package arrived two weeks late.",
    "Which payment methods do you accept?",
    "My phone's battery drains overnight.",
    "Can I change the delivery address after ordering?",
    "The screen cracked when I dropped it.",
]
DEFAULT_ENTITY_TEXTS = [
    "Zoë flew from Malmö to 東京 to meet José.",
]
AGGREGATIONS = ("simple", "first", "average", "max", "none")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="localhost:8001")
    parser.add_argument("--model", default="sentiment")
    parser.add_argument("--users", type=int, default=0,
                        help="instead: send one text as each of N users (routing keys) and show who got which version")
    parser.add_argument("--search", metavar="QUERY",
                        help="instead: embed QUERY and the texts with an embedding model, rank the texts by cosine")
    parser.add_argument("--rerank", metavar="QUERY",
                        help="instead: score each text against QUERY with a reranker (TEXT + TEXT_PAIR [1] -> "
                             "SCORE) and print them ranked")
    parser.add_argument("--entities", action="store_true",
                        help="instead: named entities of each text from a token classifier (ENTITIES)")
    parser.add_argument("--aggregation", choices=AGGREGATIONS, default="first",
                        help="with --entities: how tokens group into entities (default first)")
    parser.add_argument("texts", nargs="*")
    args = parser.parse_args()
    with grpc.insecure_channel(args.address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            if args.rerank:
                return _rerank(stub, args.model, args.rerank, args.texts or DEFAULT_CORPUS)
            if args.entities:
                return _entities(stub, args.model, args.texts or DEFAULT_ENTITY_TEXTS, args.aggregation)
            if args.search:
                return _search(stub, args.model, args.search, args.texts or DEFAULT_CORPUS)
            if args.users:
                return _per_user(stub, args.model, (args.texts or DEFAULT_TEXTS)[0], args.users)
            return _classify(stub, args.model, args.texts or DEFAULT_TEXTS)
        except grpc.RpcError as e:
            print(f"demo_client: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1


def _request(model: str, texts: list[str]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)]).contents.bytes_contents.extend(
        t.encode() for t in texts
    )
    return request


def _classify(stub: pb_grpc.GRPCInferenceServiceStub, model: str, texts: list[str]) -> int:
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name=model), timeout=30)
    labels = json.loads(meta.parameters["labels"].string_param)
    print(f"labels (ModelMetadata parameter 'labels'): {', '.join(labels)}")
    # Every label's probability, best first: LOGITS with classification = k and scores = probabilities.
    request = _request(model, texts)
    request.outputs.add(name="LOGITS").parameters["classification"].int64_param = len(labels)
    request.parameters["scores"].string_param = "probabilities"
    response, call = stub.ModelInfer.with_call(request, timeout=30)
    out = response.outputs[0]
    k = out.shape[1]
    elements = _split(response.raw_output_contents[0])
    headers = dict(call.trailing_metadata())
    print(f"model {response.model_name} version {response.model_version} (request id {headers.get('x-request-id')}),"
          f" top {k} of each as 'probability:index:label'")
    for r, text in enumerate(texts):
        best = [e.decode() for e in elements[r * k:(r + 1) * k]]
        label, probability = best[0].split(":", 2)[2], float(best[0].split(":", 1)[0])
        print(f"  {label:<9} {probability:5.3f}  {'  '.join(best):<46} {text}")
    return 0


def _split(raw: bytes) -> list[bytes]:
    """A raw BYTES tensor: each element a 4-byte little-endian length, then the bytes."""
    out, offset = [], 0
    while offset < len(raw):
        size = int.from_bytes(raw[offset:offset + 4], "little")
        out.append(raw[offset + 4:offset + 4 + size])
        offset += 4 + size
    return out


def _search(stub: pb_grpc.GRPCInferenceServiceStub, model: str, query: str, corpus: list[str]) -> int:
    """Nearest neighbours: the embeddings are L2-normalised, so cosine similarity is a dot product."""
    response = stub.ModelInfer(_request(model, [query, *corpus]), timeout=30)
    out = response.outputs[0]
    embeddings = np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(list(out.shape))
    scores = embeddings[1:] @ embeddings[0]
    print(f"model {response.model_name} version {response.model_version}: {out.name} {list(out.shape)}; "
          f"nearest to {query!r}:")
    for rank, i in enumerate(np.argsort(-scores), start=1):
        print(f"  {rank}. {scores[i]:.3f}  {corpus[i]}")
    return 0


def _rerank(stub: pb_grpc.GRPCInferenceServiceStub, model: str, query: str, passages: list[str]) -> int:
    """One query against N passages: TEXT [N] (the passages) and TEXT_PAIR [1] (the query, read first in each pair)."""
    request = _request(model, passages)
    request.inputs.add(name="TEXT_PAIR", datatype="BYTES", shape=[1]).contents.bytes_contents.append(query.encode())
    response = stub.ModelInfer(request, timeout=30)
    out = response.outputs[0]
    scores = (np.frombuffer(response.raw_output_contents[0], dtype="<f4") if response.raw_output_contents
              else np.asarray(out.contents.fp32_contents, dtype=np.float32))
    print(f"model {response.model_name} version {response.model_version}: {out.name} {list(out.shape)}; "
          f"passages ranked for {query!r}:")
    for rank, i in enumerate(np.argsort(-scores, kind="stable"), start=1):
        print(f"  {rank}. {scores[i]:.3f}  {passages[i]}")
    return 0


def _entities(stub: pb_grpc.GRPCInferenceServiceStub, model: str, texts: list[str], aggregation: str) -> int:
    """ENTITIES: per text a JSON array of {"label", "score", "start", "end", "text"}, offsets in characters."""
    request = _request(model, texts)
    request.parameters["aggregation"].string_param = aggregation
    response = stub.ModelInfer(request, timeout=30)
    outputs = {out.name: n for n, out in enumerate(response.outputs)}
    raw = response.raw_output_contents
    elements = (_split(raw[outputs["ENTITIES"]]) if raw
                else list(response.outputs[outputs["ENTITIES"]].contents.bytes_contents))
    print(f"model {response.model_name} version {response.model_version}: ENTITIES, aggregation {aggregation!r}")
    for text, element in zip(texts, elements, strict=True):
        print(f"  {text}")
        for entity in json.loads(element):
            print(f"    {entity['label']:<4} {entity['score']:.3f}  [{entity['start']:>2}:{entity['end']:<2}] "
                  f"{entity['text']!r}")
    return 0


def _per_user(stub: pb_grpc.GRPCInferenceServiceStub, model: str, text: str, users: int) -> int:
    """The canary is sticky per routing key: the same user always lands on the same version."""
    counts: dict[str, int] = {}
    for user in range(users):
        request = _request(model, [text])
        request.parameters["routing_key"].string_param = f"user-{user}"
        versions = {stub.ModelInfer(request, timeout=30).model_version for _ in range(3)}
        assert len(versions) == 1, f"user-{user} was served by {versions}"
        version = versions.pop()
        counts[version] = counts.get(version, 0) + 1
    shares = ", ".join(f"{v}: {n} users" for v, n in sorted(counts.items()))
    print(f"{users} users, 3 calls each, every user always on the same version -> {shares}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
