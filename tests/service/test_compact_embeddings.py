"""Compact embeddings (issue 57): the `embedding_type` request parameter, int8, uint8, binary and ubinary, on both
front ends (the native one answers it itself) and over REST V2, against a real server of an embedding bundle whose
ranges were calibrated on the built-in corpus (prepare/embedding_calibration.py, what `registry import` writes):

- the rule (engine_ext/src/dataplane/embedding_types.h, one implementation for every front end and API) equals
  sentence-transformers' `quantize_embeddings` on the same vectors and ranges, exactly;
- served, each type at each width equals `quantize_embeddings` of the server's own float answer with the manifest's
  ranges of that width. Tolerance: two calls' float answers may differ by rounding (another batch shape), so a level
  may differ by one only where the float lies within 1e-4 of a level's edge, and a bit only where |x| <= 1e-6;
- a bad value, a compact type on a classifier, and int8/uint8 on a bundle without ranges are INVALID_ARGUMENT (HTTP
  400) naming what is taken; ModelMetadata lists the types.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from ortserve_devtools.bert_bundle import build_tiny_embedding_bundle
from sentence_transformers.util.quantization import quantize_embeddings
from support.bad_calls import assert_parameters_refused
from support.compact import assert_quantized
from support.reference import Reference
from support.server_process import ServerProcess, infer_request, logits_of, running_server, set_parameters, stub_for

from ortserve import engine_ext
from ortserve.prepare.accuracy import load_eval_set
from ortserve.prepare.embedding_calibration import calibrate
from ortserve.proto import grpc_service_pb2 as pb

DIM = 32
MATRYOSHKA_DIMS = [16, 8]
TYPES = ("int8", "uint8", "binary", "ubinary")
TEXTS = ["the movie was great", "a much longer sentence about the weather, neither good nor bad", "ok",
         "zebras graze at dawn"]
MODEL = "search"


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny embedding bundle, trained (so says its manifest) to be truncated to 16 and 8, with its ranges
    calibrated as the importer calibrates them: on its embeddings of the built-in corpus."""
    dest = tmp_path_factory.mktemp("compact") / "bundle"
    build_tiny_embedding_bundle(dest, seed=11)
    corpus = load_eval_set(dest, None)
    vectors = Reference(dest).embeddings(corpus.texts)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["matryoshka_dims"] = MATRYOSHKA_DIMS
    manifest["embedding_ranges"] = calibrate(vectors, (DIM, *MATRYOSHKA_DIMS), source=corpus.name)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


@pytest.fixture(scope="module")
def served(bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(bundle), "--model-name", MODEL, "--frontend", frontend], http=True) as s:
        yield s


def ranges_of(bundle: Path, width: int) -> np.ndarray:
    """The manifest's ranges of `width` as quantize_embeddings takes them: float32 [2, width]."""
    entry = json.loads((bundle / "manifest.json").read_text())["embedding_ranges"]["widths"][str(width)]
    return np.asarray(entry, dtype=np.float32)


def grpc_infer(served: ServerProcess, texts: list[str], *, raw: bool = True, request_id: str = "",
               **params: Any) -> pb.ModelInferResponse:
    request = set_parameters(infer_request(texts, model=MODEL), params)
    out = request.outputs.add(name="EMBEDDING")
    out.parameters["binary_data"].bool_param = raw
    channel, stub = stub_for(served.address)
    with channel:
        return stub.ModelInfer(request, metadata=(("x-request-id", request_id),) if request_id else ())


def compact_of(reply: pb.ModelInferResponse) -> np.ndarray:
    """The reply's INT8 or UINT8 tensor, from raw_output_contents or int_contents / uint_contents."""
    out = reply.outputs[0]
    dtype = {"INT8": np.int8, "UINT8": np.uint8}[out.datatype]
    if reply.raw_output_contents:
        return np.frombuffer(reply.raw_output_contents[0], dtype=dtype).reshape(list(out.shape))
    contents = out.contents.int_contents if out.datatype == "INT8" else out.contents.uint_contents
    return np.asarray(contents, dtype=dtype).reshape(list(out.shape))


# ---- the rule, without a server ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("columns", [64, 12, 1])
def test_the_rule_equals_quantize_embeddings(kind: str, columns: int) -> None:
    """Random vectors against ranges calibrated on other draws (so some fall outside and are clipped), a dimension
    with an empty range, values on the ranges' ends, and widths that are not a multiple of 8 (packed per row)."""
    rng = np.random.default_rng(columns)
    vectors = rng.standard_normal((9, columns)).astype(np.float32)
    ranges = np.vstack([rng.standard_normal((50, columns)).min(0), rng.standard_normal((50, columns)).max(0)])
    ranges = ranges.astype(np.float32)
    ranges[:, 0] = 0.25  # an empty range: step 1
    vectors[0] = ranges[0]
    vectors[1] = ranges[1]
    vectors[2] = 0.0
    data, datatype, width = engine_ext.quantize_embeddings(vectors, kind, ranges.ravel().tolist())
    want = quantize_embeddings(vectors, kind, ranges=ranges)
    got = np.frombuffer(data, dtype=np.int8 if datatype == "INT8" else np.uint8).reshape(len(vectors), width)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_the_rule_refuses_int8_without_ranges_and_float() -> None:
    with pytest.raises(ValueError, match="int8 and uint8 need ranges"):
        engine_ext.quantize_embeddings(np.zeros((1, 8), dtype=np.float32), "int8", None)
    with pytest.raises(ValueError, match="type must be a compact one: 'int8', 'uint8', 'binary' or 'ubinary'"):
        engine_ext.quantize_embeddings(np.zeros((1, 8), dtype=np.float32), "float", None)


# ---- served ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("k", [DIM, *MATRYOSHKA_DIMS])
def test_grpc_answers_quantize_embeddings_of_the_float_answer(served: ServerProcess, bundle: Path, frontend: str,
                                                              kind: str, k: int) -> None:
    floats = logits_of(grpc_infer(served, TEXTS, dimensions=k))
    for raw in (True, False):
        request_id = f"compact-{kind}-{k}-{raw}"
        reply = grpc_infer(served, TEXTS, raw=raw, request_id=request_id, dimensions=k, embedding_type=kind)
        out = reply.outputs[0]
        assert out.name == "EMBEDDING"
        assert out.datatype == ("INT8" if kind in ("int8", "binary") else "UINT8")
        assert list(out.shape) == [len(TEXTS), k if kind.endswith("int8") else k // 8]
        assert bool(reply.raw_output_contents) == raw
        assert_quantized(compact_of(reply), floats, kind, ranges_of(bundle, k))
        line = served.wait_event("request", request_id=request_id)
        assert line["status"] == "OK"
        if frontend == "native":  # served by the C++ front end itself, not passed on to Python
            assert line.get("frontend") == "native", line


def test_float_is_the_float_answer(served: ServerProcess) -> None:
    np.testing.assert_array_equal(logits_of(grpc_infer(served, TEXTS, embedding_type="float")),
                                  logits_of(grpc_infer(served, TEXTS)))


@pytest.mark.parametrize("kind", TYPES)
def test_rest_v2_answers_them_as_json_integers(served: ServerProcess, bundle: Path, kind: str) -> None:
    url = f"http://127.0.0.1:{served.http_port}/v2/models/{MODEL}/infer"
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS}]}
    floats = requests.post(url, json=body, timeout=30).json()["outputs"][0]
    floats_array = np.asarray(floats["data"], dtype=np.float32).reshape(floats["shape"])
    reply = requests.post(url, json={**body, "parameters": {"embedding_type": kind}}, timeout=30)
    assert reply.status_code == 200, reply.text
    out = reply.json()["outputs"][0]
    dtype = np.int8 if out["datatype"] == "INT8" else np.uint8
    assert all(isinstance(v, int) for v in out["data"])
    assert_quantized(np.asarray(out["data"], dtype=dtype).reshape(out["shape"]), floats_array, kind,
                     ranges_of(bundle, DIM))


def test_model_metadata_lists_the_types(served: ServerProcess) -> None:
    channel, stub = stub_for(served.address)
    with channel:
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name=MODEL))
    assert json.loads(meta.parameters["embedding_types"].string_param) == ["float", *TYPES]


V2_BAD = {
    "unknown type": ({"embedding_type": "int4"}, "request parameter 'embedding_type' must be 'float', 'int8', "
                                                 "'uint8', 'binary' or 'ubinary', got 'int4'"),
    "not a string": ({"embedding_type": 8}, "request parameter 'embedding_type' must be a string (string_param), "
                                            "got int64_param"),
}


@pytest.mark.parametrize("case", V2_BAD, ids=list(V2_BAD))
def test_bad_values_are_invalid_argument_naming_what_is_taken(served: ServerProcess, case: str) -> None:
    assert_parameters_refused(served, MODEL, *V2_BAD[case])


def test_a_classifier_refuses_a_compact_type(server: ServerProcess) -> None:
    """The suite's tiny classifier has no embedding to quantize; float is every version's answer."""
    request = infer_request(["x"])
    request.parameters["embedding_type"].string_param = "binary"
    channel, stub = stub_for(server.address)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ("request parameter 'embedding_type' 'binary' applies to an embedding model's 'EMBEDDING'; model "
                "'classifier' is a classifier model") in info.value.details()
        request.parameters["embedding_type"].string_param = "float"
        assert stub.ModelInfer(request).outputs[0].datatype == "FP32"


# ---- the wire rules for a bundle without ranges ------------------------------------------------------------------


def decode(**params: Any) -> Any:
    return engine_ext.decode_call([("TEXT", "BYTES", [2], True, [b"a", b"b"])], [], [], None, None, 8, **params)


def test_int8_needs_the_widths_ranges() -> None:
    plain = engine_ext.VersionOutput("embedding", "EMBEDDING", widths=[32, 16])
    ranged = engine_ext.VersionOutput("embedding", "EMBEDDING", widths=[32, 16], ranges={32: [0.0] * 32 + [1.0] * 32})
    for kind in ("binary", "ubinary", "float"):  # no ranges needed
        engine_ext.check_outputs(decode(embedding_type=("string_param", kind)), plain, "m")
    for kind in ("int8", "uint8"):
        call = decode(embedding_type=("string_param", kind))
        with pytest.raises(engine_ext.WireError, match=rf"request parameter 'embedding_type' '{kind}' is refused: "
                                                       r"model 'm''s bundle records no calibrated ranges "
                                                       r"\(embedding_ranges, written at import\)"):
            engine_ext.check_outputs(call, plain, "m")
        engine_ext.check_outputs(call, ranged, "m")
        narrow = decode(embedding_type=("string_param", kind), dimensions=("int64_param", 16))
        with pytest.raises(engine_ext.WireError, match="records no calibrated ranges at 16 dimensions"):
            engine_ext.check_outputs(narrow, ranged, "m")
