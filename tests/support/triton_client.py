"""Run as a script: send texts with tritonclient.grpc (a client ortserve did not write).

tritonclient registers its own copy of the KServe `inference` protobuf package, which cannot share
a process with ortserve's, so the tests run this in a subprocess and read JSON from stdout.
usage: triton_client.py ADDRESS MODEL TEXTS_JSON [--output NAME] [--class-count K] [--scores MODE] [--pair TEXT]
                       [--aggregation STRATEGY] [--param NAME=JSON ...] [--header NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import tritonclient.grpc as triton


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("model")
    parser.add_argument("texts_path")
    parser.add_argument("--output", default="LOGITS")
    parser.add_argument("--class-count", type=int, default=0, help="InferRequestedOutput(..., class_count=K)")
    parser.add_argument("--scores", help="the request parameter `scores`")
    parser.add_argument("--pair", help="TEXT_PAIR [1]: the query, read first with every text (a cross-encoder's pairs)")
    parser.add_argument("--aggregation", help="the request parameter `aggregation` (a token classifier's ENTITIES)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=JSON",
                        help="a request parameter, its value as JSON (tritonclient types it: int64, string, bool...)")
    parser.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                        help="a header (gRPC metadata) every call but the probes sends, e.g. authorization=Bearer KEY")
    args = parser.parse_args()
    with open(args.texts_path) as f:
        texts = json.load(f)
    headers = dict(h.split("=", 1) for h in args.header) or None
    client = triton.InferenceServerClient(url=args.address)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(args.model)
    try:
        meta = client.get_model_metadata(args.model, as_json=True, headers=headers)
    except triton.InferenceServerException as e:
        print(json.dumps({"error": e.status(), "message": e.message()}))
        return
    data = np.array([t.encode() for t in texts], dtype=np.object_)
    tensor = triton.InferInput("TEXT", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(data)
    parameters = {"scores": args.scores} if args.scores else {}
    if args.aggregation:
        parameters["aggregation"] = args.aggregation
    for param in args.param:
        name, value = param.split("=", 1)
        parameters[name] = json.loads(value)
    inputs = [tensor]
    if args.pair is not None:
        pair = triton.InferInput("TEXT_PAIR", [1], "BYTES")
        pair.set_data_from_numpy(np.array([args.pair.encode()], dtype=np.object_))
        inputs.append(pair)
    try:
        result = client.infer(args.model, inputs, parameters=parameters or None,
                              outputs=[triton.InferRequestedOutput(args.output, class_count=args.class_count)],
                              headers=headers)
    except triton.InferenceServerException as e:
        print(json.dumps({"error": e.status(), "message": e.message()}))
        return
    values = result.as_numpy(args.output)
    response = result.get_response(as_json=True)
    reply = {"dtype": str(values.dtype), "shape": list(values.shape), "metadata": meta,
             "model_version": response["model_version"]}
    if args.output == "ENTITIES":
        reply["entities"] = [json.loads(element) for element in values]
    elif values.dtype == np.object_:
        reply["classes"] = [[element.decode() for element in row] for row in values]
    else:
        reply[args.output.lower()] = values.tolist()
    print(json.dumps(reply))


if __name__ == "__main__":
    main()
