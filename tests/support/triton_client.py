"""Run as a script: send texts with tritonclient.grpc (a client ortserve did not write).

tritonclient registers its own copy of the KServe `inference` protobuf package, which cannot share
a process with ortserve's, so the tests run this in a subprocess and read JSON from stdout.
usage: triton_client.py ADDRESS MODEL TEXTS_JSON
"""

from __future__ import annotations

import json
import sys

import numpy as np
import tritonclient.grpc as triton


def main() -> None:
    address, model, texts_path = sys.argv[1:4]
    with open(texts_path) as f:
        texts = json.load(f)
    client = triton.InferenceServerClient(url=address)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(model)
    meta = client.get_model_metadata(model, as_json=True)
    data = np.array([t.encode() for t in texts], dtype=np.object_)
    tensor = triton.InferInput("TEXT", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor], outputs=[triton.InferRequestedOutput("LOGITS")])
    logits = result.as_numpy("LOGITS")
    response = result.get_response(as_json=True)
    print(json.dumps({"logits": logits.tolist(), "dtype": str(logits.dtype), "metadata": meta,
                      "model_version": response["model_version"]}))


if __name__ == "__main__":
    main()
