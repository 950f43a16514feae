"""API keys (issue 54), against real servers of the tiny embedding model with keys from ORTSERVE_API_KEY and a key
file: every HTTP route and every gRPC method of both front ends (the admin status included) asks for one; probes
stay open; refusals are 401 in each API's error shape and UNAUTHENTICATED; stock SDKs (openai, LangChain, cohere,
huggingface_hub, tritonclient over HTTP and gRPC) pass their key unchanged, and a wrong or missing key is refused;
no key ever reaches the log. Also TEI's `POST /`: InferenceClient(base_url=the server) embeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from ortserve_devtools.bert_bundle import build_tiny_embedding_bundle
from support.server_process import ServerProcess, running_server, write_texts

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve.service.api_keys import ApiKeys, bearer
from ortserve.service.app import ADMIN_STATUS_METHOD
from ortserve.service.config import ConfigError, load_settings

ENV_KEY, FILE_KEYS = "env-key-7f3a9c", ("file-key-one-81d2", "file-key-two-c4e0")
WRONG = "file-key-one-81d3"  # one character off a real key
MODEL = "embed"
TRITON_SCRIPT = Path(__file__).parents[1] / "support" / "triton_client.py"


@pytest.fixture(scope="module")
def embed_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("keyed") / "embed"
    build_tiny_embedding_bundle(dest, seed=0)
    return dest


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text("# rotated monthly\n" + "\n".join(FILE_KEYS) + "\n\n")
    return path


@pytest.fixture(scope="module")
def keyed(embed_bundle: Path, key_file: Path, frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(embed_bundle), "--model-name", MODEL, "--frontend", frontend,
                         "--api-key-file", str(key_file)], env={"ORTSERVE_API_KEY": ENV_KEY}, http=True) as server:
        yield server


@pytest.fixture
def url(keyed: ServerProcess) -> str:
    return f"http://127.0.0.1:{keyed.http_port}"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# ---- the rule --------------------------------------------------------------------------------------------------


def test_keys_come_from_the_flag_the_environment_and_a_file(key_file: Path) -> None:
    settings = load_settings(env={"ORTSERVE_API_KEY": "a,b"}, flags={"api_key_file": str(key_file)})
    keys = ApiKeys.of(settings)
    assert all(keys.accepts(k) for k in ("a", "b", *FILE_KEYS))
    assert not any(keys.accepts(k) for k in ("", None, "c", "a ", WRONG))
    assert not ApiKeys([]).required and ApiKeys([]).accepts(None)
    assert bearer("Bearer  abc ") == "abc" and bearer("bearer abc") == "abc" and bearer("Basic abc") is None
    with pytest.raises(ConfigError) as info:
        load_settings(flags={"api_key": ["secret-with-bell\x07"]})
    assert "secret" not in str(info.value)  # a key never reaches a message


# ---- HTTP: every route ---------------------------------------------------------------------------------------


def _call(url: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
          ) -> requests.Response:
    return requests.request(method, url + path, data=None if body is None else json.dumps(body),
                            headers={"Content-Type": "application/json", **(headers or {})}, timeout=30)


TEXTS = {"input": ["a b"], "inputs": "a b", "model": MODEL, "query": "q", "documents": ["a"], "texts": ["a"]}
V2_BODY = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a b"]}]}
HTTP_CALLS = [("POST", path, TEXTS) for path in (
    "/v1/embeddings", "/v1/classify", "/classify", "/v1/rerank", "/v2/rerank", "/embed", "/rerank", "/predict",
    "/tokenize", "/", f"/models/{MODEL}", f"/models/{MODEL}/pipeline/feature-extraction")] + [
    ("POST", f"/v2/models/{MODEL}/infer", V2_BODY), ("POST", f"/v2/models/{MODEL}/versions/1/infer", V2_BODY),
    ("GET", "/v1/models", None), ("GET", f"/v1/models/{MODEL}", None), ("GET", "/info", None), ("GET", "/v2", None),
    ("GET", f"/v2/models/{MODEL}", None), ("GET", "/no/such/route", None)]


@pytest.mark.parametrize(("method", "path", "body"), HTTP_CALLS, ids=[f"{m} {p}" for m, p, _ in HTTP_CALLS])
def test_every_http_route_refuses_a_missing_or_wrong_key_in_its_apis_shape(url: str, method: str, path: str,
                                                                            body: Any) -> None:
    for headers in ({}, _auth(WRONG), {"Authorization": WRONG}, {"x-api-key": WRONG}):
        reply = _call(url, method, path, body, headers)
        assert reply.status_code == 401, (headers, reply.text)
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")
        assert WRONG not in reply.text and "Authorization: Bearer" in reply.text
        doc = reply.json()
        if path.startswith(("/v1/embeddings", "/v1/models")) or path.endswith("classify"):
            assert doc["error"]["code"] == "invalid_api_key"
        elif path in ("/embed", "/rerank", "/predict", "/tokenize", "/", "/info") or path.startswith("/models/"):
            assert doc["error_type"] == "unauthorized"
        elif path.endswith("/rerank"):
            assert set(doc) == {"message"}
        else:
            assert set(doc) == {"error"}
    for headers in (_auth(ENV_KEY), _auth(FILE_KEYS[1]), {"api-key": FILE_KEYS[0]}, {"x-api-key": ENV_KEY}):
        assert _call(url, method, path, body, headers).status_code != 401


def test_probes_and_metrics_stay_open(url: str, keyed: ServerProcess) -> None:
    assert requests.get(keyed.metrics_url, timeout=10).status_code == 200
    for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{MODEL}/ready",
                 f"/v2/models/{MODEL}/versions/1/ready"):
        assert requests.get(url + path, timeout=10).status_code == 200, path


# ---- HTTP: stock SDKs ----------------------------------------------------------------------------------------


def test_openai_and_langchain_pass_their_key(url: str) -> None:
    from langchain_openai import OpenAIEmbeddings
    from openai import AuthenticationError, OpenAI

    got = OpenAI(base_url=f"{url}/v1", api_key=ENV_KEY, max_retries=0).embeddings.create(model=MODEL, input=["a b"])
    assert len(got.data[0].embedding) == 32
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=f"{url}/v1", api_key=WRONG, max_retries=0).embeddings.create(model=MODEL, input=["a"])
    chain = OpenAIEmbeddings(base_url=f"{url}/v1", api_key=FILE_KEYS[0], model=MODEL,  # type: ignore[arg-type]
                             check_embedding_ctx_length=False, max_retries=0)
    assert len(chain.embed_query("a b")) == 32
    with pytest.raises(AuthenticationError):
        OpenAIEmbeddings(base_url=f"{url}/v1", api_key=WRONG, model=MODEL,  # type: ignore[arg-type]
                         check_embedding_ctx_length=False, max_retries=0).embed_query("a")


def test_cohere_passes_its_key(url: str) -> None:
    import cohere
    from cohere.errors import BadRequestError, UnauthorizedError

    with pytest.raises(BadRequestError, match="not a reranker"):  # past the key: the model is an embedder
        cohere.ClientV2(api_key=ENV_KEY, base_url=url).rerank(model=MODEL, query="q", documents=["a"])
    with pytest.raises(UnauthorizedError):
        cohere.ClientV2(api_key=WRONG, base_url=url).rerank(model=MODEL, query="q", documents=["a"])


def test_huggingface_inference_client_embeds_at_the_root_with_its_key(url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """TEI's POST / (the model's kind decides: an embedder embeds), where InferenceClient(base_url=) posts."""
    from huggingface_hub import InferenceClient, constants
    from huggingface_hub.errors import HfHubHTTPError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # it refuses every URL offline; it reaches no hub here
    got = InferenceClient(base_url=url, api_key=FILE_KEYS[1]).feature_extraction("a b")
    direct = requests.post(url + "/embed", json={"inputs": "a b"}, headers=_auth(ENV_KEY), timeout=10).json()
    np.testing.assert_allclose(got, np.asarray(direct), rtol=0, atol=1e-6)
    with pytest.raises(HfHubHTTPError) as info:
        InferenceClient(base_url=url, api_key=WRONG).feature_extraction("a b")
    assert info.value.response.status_code == 401


def test_tritonclient_http_passes_its_header(keyed: ServerProcess) -> None:
    import tritonclient.http as triton_http
    from tritonclient.utils import InferenceServerException

    client = triton_http.InferenceServerClient(f"127.0.0.1:{keyed.http_port}")
    text = triton_http.InferInput("TEXT", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"a b"], dtype=np.object_))
    assert client.is_server_ready()  # a probe: no key
    got = client.infer(MODEL, [text], headers=_auth(ENV_KEY)).as_numpy("EMBEDDING")
    assert got is not None and got.shape == (1, 32)
    with pytest.raises(InferenceServerException, match="API key"):
        client.infer(MODEL, [text], headers=_auth(WRONG))


# ---- gRPC: both front ends -----------------------------------------------------------------------------------


def _request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"a b")
    return request


def test_every_grpc_method_asks_for_a_key_but_the_probes(keyed: ServerProcess) -> None:
    good = (("authorization", f"Bearer {FILE_KEYS[0]}"),)
    with grpc.insecure_channel(keyed.address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        status = channel.unary_unary(ADMIN_STATUS_METHOD, request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        refused = [lambda md: stub.ModelInfer(_request(), metadata=md, timeout=10),
                   lambda md: stub.ModelMetadata(pb.ModelMetadataRequest(name=MODEL), metadata=md, timeout=10),
                   lambda md: stub.ServerMetadata(pb.ServerMetadataRequest(), metadata=md, timeout=10),
                   lambda md: status(b"", metadata=md, timeout=10)]
        for call in refused:
            for metadata in (None, (("authorization", f"Bearer {WRONG}"),), (("authorization", FILE_KEYS[0]),)):
                with pytest.raises(grpc.RpcError) as info:
                    call(metadata)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "authorization: Bearer" in (info.value.details() or "")
            call(good)
        assert json.loads(status(b"", metadata=good, timeout=10))["models"][MODEL]
        reply = stub.ModelInfer(_request(), metadata=good, timeout=10)
        assert list(reply.outputs[0].shape) == [1, 32]
        # probes: no key
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
        assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        assert stub.ModelReady(pb.ModelReadyRequest(name=MODEL), timeout=10).ready
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_ortserve_status_and_tritonclient_grpc_send_the_key(keyed: ServerProcess, tmp_path: Path) -> None:
    def status(extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "ORTSERVE_API_KEY"} | extra
        return subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", keyed.address,
                               "--json"], capture_output=True, text=True, timeout=60, env=env)
    assert status({"ORTSERVE_API_KEY": ENV_KEY}).returncode == 0
    refused = status({})
    assert refused.returncode == 3 and "UNAUTHENTICATED" in refused.stderr

    texts = write_texts(tmp_path / "texts.json", ["a b"])

    def triton(*headers: str) -> dict[str, Any]:
        out = subprocess.run([sys.executable, str(TRITON_SCRIPT), keyed.address, MODEL, str(texts), "--output",
                              "EMBEDDING", *[a for h in headers for a in ("--header", h)]],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    assert triton(f"authorization=Bearer {ENV_KEY}")["shape"] == [1, 32]
    assert triton(f"authorization=Bearer {WRONG}")["error"] == "StatusCode.UNAUTHENTICATED"


def test_no_key_reaches_the_log(keyed: ServerProcess) -> None:
    text = "".join(keyed.raw_lines + keyed.stderr_lines)
    assert not any(key in text for key in (ENV_KEY, WRONG, *FILE_KEYS))


def test_a_setting_closes_the_probes_too(embed_bundle: Path) -> None:
    with running_server(["--bundle", str(embed_bundle), "--model-name", MODEL, "--frontend", "python",
                         "--no-api-key-probes"], env={"ORTSERVE_API_KEY": ENV_KEY}, ready=False,
                        http=True) as server:
        url = f"http://127.0.0.1:{server.http_port}"
        assert requests.get(url + "/v2/health/live", timeout=10).status_code == 401
        assert requests.get(url + "/v2/health/live", headers=_auth(ENV_KEY), timeout=10).status_code == 200
        with grpc.insecure_channel(server.address) as channel:
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert requests.get(server.metrics_url, timeout=10).status_code == 401
        scraped = requests.get(server.metrics_url, headers=_auth(ENV_KEY), timeout=10)
        assert scraped.status_code == 200 and "ortserve_unauthenticated_total" in scraped.text
