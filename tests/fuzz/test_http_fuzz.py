"""Hostile JSON on every HTTP route (issue 54), against one real server of a classifier, an embedding model and a
sparse embedding model (/embed_sparse, V2's top_k and threshold: issue 57): any
JSON value in any field of any route's body (fuzz.http_calls, also `scripts/dev fuzz --http`) is answered
2xx or 4xx with a message, never 5xx and never a traceback, and the server logs no error for it. Numbers outside a
parameter's range, of any size, are refused with each API's 400 naming the field: one rule (the C++ wire rules) for
every route and transport.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from ortserve_devtools.fuzz.http_calls import (
    CLASSIFIER,
    EMBEDDING,
    ROUTES,
    SPARSE,
    HttpFinding,
    HttpTarget,
    Reply,
    Route,
    check_log,
    http_calls,
    serve_models,
)
from ortserve_devtools.server_process import ServerProcess

EXAMPLES = 400  # ~5 s of calls on two shared cores
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=list(HealthCheck))
HUGE = (2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serve_models(tmp_path_factory.mktemp("http-fuzz")) as server:
        yield server


@pytest.fixture(scope="module")
def target(served: ServerProcess) -> Iterator[HttpTarget]:
    fuzz = HttpTarget("127.0.0.1", served.http_port)
    yield fuzz
    fuzz.close()


def _post(served: ServerProcess, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"http://127.0.0.1:{served.http_port}{path}", data=json.dumps(body),
                         headers={"Content-Type": "application/json"}, timeout=30)


@pytest.mark.parametrize("value", HUGE)
def test_a_huge_integer_is_each_apis_400_naming_the_field(served: ServerProcess, value: int) -> None:
    """The issue's 500: `dimensions` of 2^63 on a JSON route reached the wire rules as uint64 and failed to convert."""
    openai = _post(served, "/v1/embeddings", {"input": ["a"], "model": EMBEDDING, "dimensions": value})
    assert openai.status_code == 400 and openai.json()["error"]["param"] == "dimensions", openai.text
    assert "'dimensions'" in openai.json()["error"]["message"]
    tei = _post(served, "/embed", {"inputs": "a", "model": EMBEDDING, "dimensions": value})
    assert tei.status_code == 400 and "'dimensions'" in tei.json()["error"], tei.text
    assert tei.json()["error_type"] == "validation"
    v2 = _post(served, f"/v2/models/{EMBEDDING}/infer",
               {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
                "parameters": {"dimensions": value}})
    assert v2.status_code == 400 and "request parameter 'dimensions'" in v2.json()["error"], v2.text
    shape = _post(served, f"/v2/models/{CLASSIFIER}/infer",
                  {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [value], "data": ["a"]}]})
    assert shape.status_code in (400, 413) and "shape" in shape.json()["error"], shape.text
    top_k = _post(served, f"/models/{CLASSIFIER}", {"inputs": "a", "parameters": {"top_k": value}})
    assert top_k.status_code in (200, 400), top_k.text  # a top-k past every label is all of them
    sparse = _post(served, "/embed_sparse", {"inputs": "a", "model": SPARSE, "top_k": value})
    assert sparse.status_code in (200, 400), sparse.text  # a top_k past the vocabulary keeps every entry
    if value < 0:
        assert "'top_k'" in sparse.json()["error"], sparse.text


@pytest.mark.parametrize("route", ROUTES, ids=[r.name for r in ROUTES])
def test_each_routes_well_formed_body_is_answered(target: HttpTarget, route: Route) -> None:
    """The fuzzer's starting points are calls the routes answer, so its changes test refusals, not typos."""
    reply = target.fuzz(route, json.dumps(route.body).encode())
    assert reply.status < 300 or route.name.startswith(("cohere-rerank", "tei-rerank")), reply.body[:300]


@FUZZ
@given(http_calls())
def _every_answer_holds(target: HttpTarget, call: tuple[Route, bytes]) -> None:
    target.fuzz(*call)


def test_any_json_in_any_field_of_any_route_is_2xx_or_4xx_with_a_message(target: HttpTarget,
                                                                          served: ServerProcess) -> None:
    before = len(served.raw_lines) + len(served.stderr_lines)
    _every_answer_holds(target)
    assert target.calls >= EXAMPLES
    check_log(served.stderr_lines + served.raw_lines)
    assert len(served.raw_lines) + len(served.stderr_lines) >= before


def test_tei_root_answers_by_the_models_kind_and_asks_for_a_name_among_several(served: ServerProcess) -> None:
    """TEI's POST /: an embedder embeds, a classifier predicts; with several models served, one must be named."""
    embedded = _post(served, "/", {"inputs": "good movie", "model": EMBEDDING})
    assert embedded.status_code == 200 and len(embedded.json()[0]) == 32, embedded.text
    predicted = _post(served, "/", {"inputs": "good movie", "model": CLASSIFIER})
    assert predicted.status_code == 200 and {"score", "label"} <= set(predicted.json()[0]), predicted.text
    sparse = _post(served, "/", {"inputs": "good movie", "model": SPARSE, "top_k": 3})
    assert sparse.status_code == 200 and len(sparse.json()[0]) == 3, sparse.text
    assert {"index", "value"} == set(sparse.json()[0][0])
    unnamed = _post(served, "/", {"inputs": "good movie"})
    assert unnamed.status_code == 400, unnamed.text
    assert unnamed.json()["error"] == (f"this server serves several models ('{CLASSIFIER}', '{EMBEDDING}', "
                                       f"'{SPARSE}'): name one in 'model'")


# ---- the rules themselves, offline -------------------------------------------------------------------------------

FINDINGS = {"a 5xx": Reply(500, "application/json", b'{"error": "internal error"}', 0.01),
            "a 502 without JSON": Reply(502, "text/plain", b"bad gateway", 0.01),
            "a traceback": Reply(400, "application/json", b'{"error": "Traceback (most recent call last):"}', 0.01),
            "an error that is not JSON": Reply(400, "text/plain", b"bad", 0.01),
            "an error without a message": Reply(400, "application/json", b'{"error": {"message": ""}}', 0.01),
            "a reply that is not JSON": Reply(200, "application/json", b"[1,", 0.01)}


@pytest.mark.parametrize("case", FINDINGS, ids=list(FINDINGS))
def test_answers_that_break_a_rule_are_findings(case: str) -> None:
    with pytest.raises(HttpFinding):
        HttpTarget.check(ROUTES[0], b"{}", FINDINGS[case])


def test_answers_that_keep_the_rules_pass_and_the_log_is_checked() -> None:
    for reply in (Reply(200, "application/json", b"[[0.5]]", 0.01),
                  Reply(400, "application/json", b'{"error": {"message": "\'dimensions\' must be ..."}}', 0.01),
                  Reply(404, "application/json", b'{"message": "model \'x\' is not served here"}', 0.01),
                  Reply(200, "application/octet-stream", b"\x00\x01", 0.01)):
        HttpTarget.check(ROUTES[0], b"{}", reply)
    check_log(['{"event": "request", "level": "info"}', "INFO aiohttp.server: http request not served: ..."])
    for line in ('{"event": "http_request_failed", "level": "error"}', "ERROR aiohttp.server: Error handling",
                 "Traceback (most recent call last):"):
        with pytest.raises(HttpFinding):
            check_log([line])
