"""Large calls (issue 45 item 3), over real gRPC and REST on both front ends, with the server's defaults:

- a call of 2,048 texts (max_texts_per_request's default: OpenAI's limit; LangChain sends 1,000) is answered in
  order, equal to the same texts sent as 16 calls of 128 (the batcher runs it in its batches of max_batch_size);
- one text more is INVALID_ARGUMENT (gRPC) / 413 (REST, and the OpenAI route) naming the bound, and the server
  serves on;
- the `priority` request parameter ("interactive" or "bulk") is taken over both transports, a bad one refused naming
  the choices (its effect on the order of runs: tests/dataplane/test_batcher.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from support.server_process import ServerProcess, infer_request, logits_of, running_server, stub_for

from ortserve.service import config

BOUND = config.default("max_texts_per_request")
WORDS = ["good", "bad", "movie", "plot", "the", "actors", "were", "not", "great", "awful", "Akku", "電池", "🎉"]


def texts(n: int) -> list[str]:
    """n texts of 1 to 40 words, varied so that the batcher's runs mix lengths."""
    rng = np.random.default_rng(45)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 41)))) for _ in range(n)]


@pytest.fixture(scope="module")
def large(tiny_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend],
                        http=True) as server:
        yield server


def test_the_default_bound_is_openai_s(large: ServerProcess) -> None:
    assert BOUND == 2048


def test_a_call_of_2048_texts_equals_16_calls_of_128(large: ServerProcess) -> None:
    sent = texts(BOUND)
    channel, stub = stub_for(large.address)
    with channel:
        whole = logits_of(stub.ModelInfer(infer_request(sent, raw=True), timeout=300))
        parts = np.concatenate([logits_of(stub.ModelInfer(infer_request(sent[i:i + 128]), timeout=120))
                                for i in range(0, BOUND, 128)])
    assert whole.shape == (BOUND, parts.shape[1])
    np.testing.assert_allclose(whole, parts, atol=1e-5, rtol=0)
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [BOUND], "data": sent}]}
    rest = requests.post(f"http://127.0.0.1:{large.http_port}/v2/models/classifier/infer", json=body, timeout=300)
    assert rest.status_code == 200, rest.text
    np.testing.assert_allclose(np.asarray(rest.json()["outputs"][0]["data"]).reshape(whole.shape), parts,
                               atol=1e-5, rtol=0)


def test_one_text_past_the_bound_is_refused_naming_it(large: ServerProcess) -> None:
    sent = texts(BOUND + 1)
    channel, stub = stub_for(large.address)
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(infer_request(sent), timeout=60)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"more than the maximum of {BOUND} per request" in (refused.value.details() or "")
        body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [BOUND + 1], "data": sent}]}
        rest = requests.post(f"http://127.0.0.1:{large.http_port}/v2/models/classifier/infer", json=body, timeout=60)
        assert rest.status_code == 413 and f"more than the maximum of {BOUND} per request" in rest.json()["error"]
        openai = requests.post(f"http://127.0.0.1:{large.http_port}/v1/classify", timeout=60,
                               json={"input": sent, "model": "classifier"})
        assert openai.status_code == 413, openai.text
        assert logits_of(stub.ModelInfer(infer_request(["still serving"]), timeout=60)).shape[0] == 1


def test_the_priority_parameter_over_both_transports(large: ServerProcess) -> None:
    sent = texts(4)
    channel, stub = stub_for(large.address)
    with channel:
        expected = logits_of(stub.ModelInfer(infer_request(sent), timeout=60))
        for value in ("bulk", "interactive"):
            request = infer_request(sent)
            request.parameters["priority"].string_param = value
            np.testing.assert_allclose(logits_of(stub.ModelInfer(request, timeout=60)), expected, atol=1e-6)
        request = infer_request(sent)
        request.parameters["priority"].string_param = "urgent"
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request, timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request parameter 'priority' must be 'interactive' or 'bulk', got 'urgent'" in refused.value.details()
    url = f"http://127.0.0.1:{large.http_port}/v2/models/classifier/infer"
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [4], "data": sent}]}
    ok = requests.post(url, json={**body, "parameters": {"priority": "bulk"}}, timeout=60)
    assert ok.status_code == 200
    np.testing.assert_allclose(np.asarray(ok.json()["outputs"][0]["data"]).reshape(expected.shape), expected,
                               atol=1e-6)
    bad = requests.post(url, json={**body, "parameters": {"priority": 3}}, timeout=60)
    assert bad.status_code == 400 and "request parameter 'priority' must be a string" in bad.json()["error"]

