#!/usr/bin/env python3
"""Send a handful of real texts to a running ortserve and print labels and logits.

    python scripts/demo_client.py --address localhost:8001 --model sentiment [TEXT ...]
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="localhost:8001")
    parser.add_argument("--model", default="sentiment")
    parser.add_argument("--users", type=int, default=0,
                        help="instead: send one text as each of N users (routing keys) and show who got which version")
    parser.add_argument("texts", nargs="*", default=DEFAULT_TEXTS)
    args = parser.parse_args()
    if args.users:
        return _per_user(args)
    with grpc.insecure_channel(args.address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        labels = _labels(args.model)
        request = pb.ModelInferRequest(model_name=args.model)
        request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(args.texts)]).contents.bytes_contents.extend(
            t.encode() for t in args.texts
        )
        try:
            response, call = stub.ModelInfer.with_call(request, timeout=30)
        except grpc.RpcError as e:
            print(f"demo_client: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
        shape = list(response.outputs[0].shape)
        logits = np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(shape)
        headers = dict(call.trailing_metadata())
        print(f"model {response.model_name} version {response.model_version} "
              f"(request id {headers.get('x-request-id')})")
        for text, row in zip(args.texts, logits, strict=True):
            label = labels[int(np.argmax(row))] if labels else str(int(np.argmax(row)))
            print(f"  {label:<9} logits {np.array2string(row, precision=3):<22} {text}")
    return 0


def _per_user(args: argparse.Namespace) -> int:
    """The canary is sticky per routing key: the same user always lands on the same version."""
    with grpc.insecure_channel(args.address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        counts: dict[str, int] = {}
        for user in range(args.users):
            request = pb.ModelInferRequest(model_name=args.model)
            request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
                args.texts[0].encode()
            )
            request.parameters["routing_key"].string_param = f"user-{user}"
            versions = {stub.ModelInfer(request, timeout=30).model_version for _ in range(3)}
            assert len(versions) == 1, f"user-{user} was served by {versions}"
            version = versions.pop()
            counts[version] = counts.get(version, 0) + 1
        shares = ", ".join(f"{v}: {n} users" for v, n in sorted(counts.items()))
        print(f"{args.users} users, 3 calls each, every user always on the same version -> {shares}")
    return 0


def _labels(model: str) -> list[str]:
    # The V2 protocol has no label field; the demo bundle's labels are negative/positive.
    return ["negative", "positive"] if model == "sentiment" else []


if __name__ == "__main__":
    sys.exit(main())
