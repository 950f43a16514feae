"""scripts/dev bench infinity's ortserve arms end to end on the tiny embedding bundle: a real server process (and a
baseline one), every JSON route beside V2 gRPC, real load. Timings are far too short to mean anything; these check
that every arm answers the V2 path's embeddings and that the report carries every arm's figures and ratios."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from ortserve_devtools.bench import infinity
from ortserve_devtools.bert_bundle import build_tiny_embedding_bundle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # slow: two servers and the benchmark end to end


def test_every_json_route_beside_grpc_with_a_baseline(tmp_path: Path) -> None:
    bundle = tmp_path / "tiny-embedding"
    build_tiny_embedding_bundle(bundle)
    report_path = tmp_path / "report.json"
    assert infinity.main(["--bundle", str(bundle), "--arms", "grpc,openai,cohere,tei,v2rest", "--out",
                          str(tmp_path / "out"), "--seconds", "0.3", "--warmup", "0.1", "--rounds", "1",
                          "--concurrency", "1,2", "--per-call", "1,3", "--baseline-python", sys.executable,
                          "--json-out", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    ortserve_arms = ["grpc", "openai", "cohere", "tei", "v2rest"]
    arms = [*ortserve_arms, *(a + "@base" for a in ortserve_arms)]
    assert report["arms"] == arms
    # Every route answers the V2 gRPC path's embeddings (the baseline is the same install here).
    assert set(report["cosine_vs_v2"]) == set(arms) - {"grpc"}
    assert all(cosine > 0.9999 for cosine in report["cosine_vs_v2"].values())
    for per_call in (1, 3):
        for callers in (1, 2):
            for arm in arms:
                row = report["table"][f"{arm} {per_call} {callers}"]
                assert row["texts_per_s"] > 0 and row["errors"] == 0
            ratios = report["ratios"][f"{per_call} {callers}"]
            assert set(ratios) == {f"{r}{s}/grpc{s}" for r in ("openai", "cohere", "tei", "v2rest")
                                   for s in ("", "@base")}


def test_each_json_routes_body_and_reply_reader() -> None:
    texts = ["a text", "another"]
    rows = [[0.5, -0.25], [1.0, 0.0]]
    openai = json.loads(infinity.ROUTES["openai"].body(texts, "base64"))
    assert openai == {"input": texts, "model": infinity.MODEL, "encoding_format": "base64"}
    assert json.loads(infinity.ROUTES["cohere"].body(texts, "float"))["texts"] == texts
    assert json.loads(infinity.ROUTES["tei"].body(texts, "float"))["inputs"] == texts
    v2 = json.loads(infinity.ROUTES["v2rest"].body(texts, "float"))
    assert v2["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": texts}]
    replies = {
        "openai": {"data": [{"index": 1, "embedding": rows[1]}, {"index": 0, "embedding": rows[0]}]},
        "cohere": {"embeddings": {"float": rows}},
        "tei": rows,
        "v2rest": {"outputs": [{"name": "EMBEDDING", "shape": [2, 2], "data": [x for r in rows for x in r]}]},
    }
    for route, reply in replies.items():
        np.testing.assert_array_equal(infinity.ROUTES[route].rows(json.dumps(reply).encode()), np.float32(rows))
