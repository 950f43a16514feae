"""Request lines are sampled (issue 45 item 5: a line per call wrote 57 MB in a 30 s load run): every failed call and
every call at or over latency_slo_p99_ms gets one, the rest by request_log_sample, chosen by request id; metrics
count every call. The rule over plain values, then a real server over gRPC on both front ends."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from support.prometheus_text import metric
from support.server_process import infer_request, running_server, stub_for

from ortserve.service import config
from ortserve.service.request_log import CallRecord, LogSampling


def call(request_id: str, status: str = "OK", total_s: float = 0.01) -> CallRecord:
    return CallRecord(request_id=request_id, model="m", status=status, total_s=total_s)


def test_failed_and_slow_calls_are_always_kept() -> None:
    none = LogSampling(share=0.0, slow_s=0.5)
    assert not none.keeps(call("a"))
    assert none.keeps(call("a", status="RESOURCE_EXHAUSTED"))
    assert none.keeps(call("a", total_s=0.5)) and none.keeps(call("a", total_s=3.0))
    assert LogSampling(share=1.0, slow_s=0.5).keeps(call("a"))


def test_the_share_is_kept_by_request_id() -> None:
    sampling = LogSampling(share=0.25, slow_s=10.0)
    ids = [f"req-{i}" for i in range(4000)]
    kept = [i for i in ids if sampling.keeps(call(i))]
    assert 0.22 < len(kept) / len(ids) < 0.28  # crc32 of the ids: deterministic, near the share
    assert kept == [i for i in ids if sampling.keeps(call(i))]  # the same calls whoever asks
    assert set(kept) <= {i for i in ids if LogSampling(share=0.5, slow_s=10.0).keeps(call(i))}  # nested shares


def test_the_default_samples_one_in_a_hundred() -> None:
    assert config.default("request_log_sample") == 0.01


def test_a_server_logs_failures_and_samples_the_rest(tiny_bundle: Path, frontend: str) -> None:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend],
                        env={"ORTSERVE_REQUEST_LOG_SAMPLE": "0"}) as server:
        channel, stub = stub_for(server.address)
        with channel:
            for i in range(20):
                stub.ModelInfer(infer_request([f"text {i}"]), timeout=60,
                                metadata=[("x-request-id", f"sampled-{i}")])
            with pytest.raises(grpc.RpcError):
                stub.ModelInfer(infer_request(["x"], model="nope"), timeout=60,
                                metadata=[("x-request-id", "sampled-failed")])
        scraped = server.scrape()
        lines = {e["request_id"]: e for e in server.events("request") if e["request_id"].startswith("sampled-")}
    assert set(lines) == {"sampled-failed"} and lines["sampled-failed"]["status"] == "NOT_FOUND"
    assert metric(scraped, "ortserve_requests_total", code="OK") == 20  # counted all the same
