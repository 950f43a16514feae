"""Dynamic batching behaviour over real gRPC with the real engine (behaviour, not timing).

A "slow" bundle (a wider, 12-layer BERT and ~200-token texts: a batch of 8 takes a noticeable fraction
of a second on one thread) makes queueing deterministic: while one batch runs, the next calls queue. The
tests poll the server's metrics between steps while one batch runs, so that batch must outlast a few
scrapes on a fast machine too (measured: 0.34 s on a host where 6 layers took 0.17 s).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.prometheus_text import metric
from support.reference import Reference
from support.server_process import ServerProcess, infer_request, logits_of, running_server, stub_for

from ortserve.engine_ext import ADMISSION_DEADLINE_SHARE, load_wordpiece

LONG = ["word " * 180 + "alpha", "word " * 181 + "beta", "word " * 179 + "gamma", "word " * 180 + "delta"]


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def slow_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("slow") / "bundle"
    build_tiny_bundle(dest, seed=1, hidden=256, layers=12, heads=4, intermediate=1024, max_position=256,
                      max_seq_len=256)
    return dest


@pytest.fixture(scope="module")
def slow_server(slow_bundle: Path, frontend: str) -> Iterator[ServerProcess]:
    # One batch at a time, so that "the engine is busy" is one state a test can wait for.
    with running_server(["--bundle", str(slow_bundle), "--frontend", frontend, "--intra-op-threads", "1",
                         "--engine-concurrency", "1",
                         "--max-queue-items", "4",
                         "--max-batch-size", "8", "--max-queue-delay-ms", "3000",
                         "--max-texts-per-request", "8", "--default-timeout-ms", "0"], http=True) as s:
        yield s


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def reference(slow_bundle: Path) -> Reference:
    return Reference(slow_bundle)


def engine_texts(server: ServerProcess) -> float:
    """Texts the engine has run, from the server's own metrics."""
    return metric(server.scrape(), "ortserve_batch_size_sum")


def wait_for(server: ServerProcess, *, queued: int, in_flight: int) -> None:
    """Poll the server's own metrics until it holds exactly this many queued texts and calls."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = server.scrape()
        depth = metric(body, "ortserve_queue_depth")
        calls = metric(body, "ortserve_inflight_requests")
        if depth == queued and calls == in_flight:
            return
        time.sleep(0.01)
    raise AssertionError(f"server never reached queued={queued} in_flight={in_flight}")


def wait_idle(server: ServerProcess) -> None:
    wait_for(server, queued=0, in_flight=0)


def log_of(server: ServerProcess, request_id: str) -> dict:
    return server.wait_event("request", request_id=request_id)


def test_concurrent_requests_share_a_batch(slow_server: ServerProcess, reference: Reference) -> None:
    """Calls that queue while the engine runs share the next batch. Arranged, not left to 4 concurrent calls (an idle
    engine runs the first at once, and on a loaded machine the others may each find it idle again): a call of 8 long
    texts holds the one lane, seen in flight with nothing queued, before the 4 calls are sent, so they queue behind
    it together. Should the busy batch end before any of them arrived, the arrangement is made again, 3 times at
    most."""
    sizes: list[list[int]] = []
    for attempt in range(3):
        wait_idle(slow_server)
        channel, stub = stub_for(slow_server.address)
        with channel:
            busy = stub.ModelInfer.future(infer_request(LONG * 2), timeout=60)  # one 8-text batch
            wait_for(slow_server, queued=0, in_flight=1)
            # 4 calls fit the 4-text queue even while all are still being tokenized.
            futures = [stub.ModelInfer.future(infer_request([LONG[i % 4]]), timeout=60,
                                              metadata=(("x-request-id", f"share-{attempt}-{i}"),)) for i in range(4)]
            replies = [f.result() for f in futures]
            busy.result()
        for i, reply in enumerate(replies):
            np.testing.assert_allclose(logits_of(reply), reference.logits([LONG[i % 4]]), atol=1e-4)
        sizes.append([log_of(slow_server, f"share-{attempt}-{i}")["batch_size"] for i in range(4)])
        if max(sizes[-1]) > 1:
            return
    raise AssertionError(f"calls queued behind a running batch never shared one (batch sizes by try: {sizes})")


def test_lone_request_is_not_held_back_by_queue_delay(slow_server: ServerProcess) -> None:
    wait_idle(slow_server)
    channel, stub = stub_for(slow_server.address)
    with channel:
        started = time.monotonic()
        stub.ModelInfer(infer_request(["a lone short text"]), timeout=60, metadata=(("x-request-id", "lone"),))
        elapsed = time.monotonic() - started
    line = log_of(slow_server, "lone")
    # max_queue_delay is 3 s on this server: a request that waited for it would show it.
    assert line["queue_ms"] < 1000 and elapsed < 2.5, (line, elapsed)
    assert line["batch_size"] == 1


def test_queue_full_is_resource_exhausted_and_accepted_calls_complete(
    slow_server: ServerProcess, reference: Reference
) -> None:
    wait_idle(slow_server)
    channel, stub = stub_for(slow_server.address)
    with channel:
        # The queue is full by arrangement, not by how fast 12 calls arrive: a long batch holds the one lane first.
        busy = stub.ModelInfer.future(infer_request(LONG * 2), timeout=60)
        wait_for(slow_server, queued=0, in_flight=1)
        futures = [stub.ModelInfer.future(infer_request([LONG[i % 4]]), timeout=60) for i in range(12)]
        ok, refused = 0, []
        for i, f in enumerate(futures):
            try:
                np.testing.assert_allclose(logits_of(f.result()), reference.logits([LONG[i % 4]]), atol=1e-4)
                ok += 1
            except grpc.RpcError as e:
                refused.append(e)
        busy.result()
    assert refused, "a 4-text queue should have refused some of 12 concurrent calls"
    assert all(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for e in refused), [e.details() for e in refused]
    assert all(re.search(r"\d+ texts queued .*limit 4", e.details()) for e in refused)
    assert ok >= 4


def test_over_rest_a_full_queue_is_429_with_retry_after(slow_server: ServerProcess, reference: Reference) -> None:
    """REST calls meet the same admission as gRPC calls: the one queue, the same message, Retry-After for the
    pushback."""
    wait_idle(slow_server)
    url = f"http://127.0.0.1:{slow_server.http_port}/v2/models/classifier/infer"

    def call(i: int) -> requests.Response:
        return requests.post(url, timeout=60, json={"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1],
                                                                "data": [LONG[i % 4]]}]})

    channel, stub = stub_for(slow_server.address)
    with channel, ThreadPoolExecutor(12) as pool:
        # The queue is full by arrangement, not by how fast 12 calls arrive: a long batch holds the one lane first.
        busy = stub.ModelInfer.future(infer_request(LONG * 2), timeout=60)
        wait_for(slow_server, queued=0, in_flight=1)
        replies = list(pool.map(call, range(12)))
        busy.result()
    refused = [r for r in replies if r.status_code != 200]
    assert refused, "a 4-text queue should have refused some of 12 concurrent calls"
    assert all(r.status_code == 429 and int(r.headers["Retry-After"]) >= 1 for r in refused), \
        [(r.status_code, r.text) for r in refused]
    assert all(re.search(r"\d+ texts queued .*limit 4", r.json()["error"]) for r in refused)
    for i, r in enumerate(replies):
        if r.status_code == 200:
            np.testing.assert_allclose(np.asarray(r.json()["outputs"][0]["data"]).reshape(1, -1),
                                       reference.logits([LONG[i % 4]]), atol=1e-4)


def test_a_deadline_shorter_than_the_running_batch_never_reaches_the_engine(slow_server: ServerProcess) -> None:
    """Admission counts the batches running ahead, not only the queue: a call that cannot finish behind them is
    refused at once (the batcher's tests hold a call that expires while queued: tests/dataplane/test_batcher.py)."""
    wait_idle(slow_server)
    before = engine_texts(slow_server)
    channel, stub = stub_for(slow_server.address)
    with channel:
        # One call of 8 texts of 128 tokens: a single batch that keeps the engine busy for a good while. In 2,016
        # characters, so that the Python front end tokenizes them on its loop (not in its pool): the batch is the
        # engine's by the time the call shows in flight. The server's rate estimate is measured by then: every
        # version answers its reference texts through its batcher before serving.
        busy = [stub.ModelInfer.future(infer_request(["x " * 126] * 8), timeout=60)]
        wait_for(slow_server, queued=0, in_flight=1)  # the batch is running, nothing queued
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(infer_request(["too late for this one"]), timeout=0.05,
                            metadata=(("x-request-id", "too-late-1"),))
        # The refusal is the server's; a loaded machine may let the client's own 50 ms run out before it arrives.
        assert e.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED)
        for f in busy:
            f.result()
    line = slow_server.wait_event("request", request_id="too-late-1")
    assert line["status"] == "RESOURCE_EXHAUSTED", line
    assert re.search(r"about \d+ ms of work including this call's, which has \d+ ms left", line["error"])
    wait_idle(slow_server)
    assert engine_texts(slow_server) - before == 8  # only the busy texts ran


def test_cancelled_calls_free_their_queue_slots(slow_server: ServerProcess) -> None:
    wait_idle(slow_server)
    before = engine_texts(slow_server)
    channel, stub = stub_for(slow_server.address)
    with channel:
        busy = stub.ModelInfer.future(infer_request(LONG * 2), timeout=60)  # one long 8-text batch
        wait_for(slow_server, queued=0, in_flight=1)
        queued = [stub.ModelInfer.future(infer_request([LONG[1]]), timeout=60) for _ in range(4)]
        wait_for(slow_server, queued=4, in_flight=5)
        for f in queued:
            f.cancel()
        wait_for(slow_server, queued=0, in_flight=1)
        # The queue holds 4: if the cancelled calls still held slots, these would be refused.
        again = [stub.ModelInfer.future(infer_request([LONG[2]]), timeout=60) for _ in range(4)]
        busy.result()
        for f in again:
            f.result()
    wait_idle(slow_server)
    assert engine_texts(slow_server) - before == 12  # busy + the 4 re-sent; the cancelled ones never ran


def refused_at_once(server: ServerProcess, error: grpc.RpcError, request_id: str, budget_s: float,
                    took_s: float) -> str:
    """The message of a call the server must refuse at once (RESOURCE_EXHAUSTED) for a deadline of `budget_s`. On a
    loaded machine the refusal may reach the client after that deadline, which the client then reports as
    DEADLINE_EXCEEDED: the server's own line for the call must then say it refused it, within the budget."""
    if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert took_s < budget_s  # refused at once, not left to expire
        return error.details() or ""
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error.details()
    line = server.wait_event("request", request_id=request_id)
    assert line["status"] == "RESOURCE_EXHAUSTED" and line["total_ms"] < 1000 * budget_s, line
    return str(line["error"])


def _held_backlog(server: ServerProcess, stub: object, texts: int = 24) -> list[grpc.Future]:
    """`texts` one-text calls (with a long deadline) queued behind the engine: at least 16 of them are waiting when
    this returns, which is far more work than a millisecond on any machine (one ~200-token text of the slow bundle
    takes milliseconds on one thread)."""
    backlog = [stub.ModelInfer.future(infer_request([LONG[i % 4]]), timeout=120) for i in range(texts)]
    until = time.monotonic() + 30
    while metric(server.scrape(), "ortserve_queue_depth") < 16 and time.monotonic() < until:
        time.sleep(0.01)
    return backlog


def test_a_call_without_a_deadline_has_the_server_s_default_budget(slow_bundle: Path, frontend: str) -> None:
    """A call that sends no deadline is judged by the server's default budget (default_timeout_ms) by the same rule
    as a deadline: behind a held backlog far over a 50 ms budget it is refused at once (RESOURCE_EXHAUSTED, with the
    backlog's drain time as its pushback), and the message says the budget was the server's. (16 held texts of ~200
    tokens are hundreds of ms on one thread here, still over 3/4 of 50 ms on a machine ten times faster; 1 ms could
    run out between the call's arrival and its admission on a loaded machine.)"""
    with running_server(["--bundle", str(slow_bundle), "--frontend", frontend, "--intra-op-threads", "1",
                         "--engine-concurrency", "1", "--max-queue-items", "64",
                         "--default-timeout-ms", "50", "--max-batch-size", "2"]) as server:
        channel, stub = stub_for(server.address)
        with channel:
            stub.ModelInfer(infer_request([LONG[0]]), timeout=60)  # one run measures the engine's rate
            backlog = _held_backlog(server, stub)
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(infer_request([LONG[1]]))  # no deadline
            for f in backlog:
                f.result()
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    assert re.search(r"about \d+ ms of work including this call's, which has \d+ ms left of the server's default "
                     r"time budget \(it sent no deadline\); retry with backoff, or send a longer deadline",
                     refused.value.details()), refused.value.details()
    assert int(dict(refused.value.trailing_metadata())["grpc-retry-pushback-ms"]) > 0


def test_by_default_calls_without_a_deadline_queue_like_a_batch_job(slow_bundle: Path, reference: Reference,
                                                                     frontend: str) -> None:
    """Issue 45's finding: REST callers without a deadline were refused by the thousands past 250 ms of queued work
    while gRPC callers with one were served. With the default budget (600 s, sized for batch clients) the same calls,
    behind the same held backlog, over REST and gRPC with no deadline, are all admitted and answered."""
    with running_server(["--bundle", str(slow_bundle), "--frontend", frontend, "--intra-op-threads", "1",
                         "--engine-concurrency", "1", "--max-queue-items", "64", "--max-batch-size", "2"],
                        http=True) as server:
        url = f"http://127.0.0.1:{server.http_port}/v2/models/classifier/infer"
        channel, stub = stub_for(server.address)
        with channel, ThreadPoolExecutor(8) as pool:
            stub.ModelInfer(infer_request([LONG[0]]), timeout=60)
            backlog = _held_backlog(server, stub)
            body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [LONG[2]]}]}
            rest = [pool.submit(requests.post, url, json=body, timeout=120) for _ in range(8)]
            grpc_calls = [stub.ModelInfer.future(infer_request([LONG[3]])) for _ in range(8)]  # no deadline
            for f in backlog:
                f.result()
            replies = [f.result() for f in rest]
            answers = [f.result(timeout=120) for f in grpc_calls]
    assert [r.status_code for r in replies] == [200] * 8, replies[0].text
    expected = reference.logits([LONG[2]])[0]
    for r in replies:
        np.testing.assert_allclose(r.json()["outputs"][0]["data"], expected, atol=1e-4)
    for reply in answers:
        np.testing.assert_allclose(logits_of(reply), reference.logits([LONG[3]]), atol=1e-4)


def test_over_rest_the_timeout_header_is_the_call_s_deadline(slow_bundle: Path, frontend: str) -> None:
    """x-request-timeout-ms is a REST call's deadline (the V2 body's `timeout` parameter too; the shorter wins): one
    far shorter than the held backlog is refused at once, 429 with Retry-After, naming the time it had; a bad value
    is 400 naming the header. The deadline is 4 runs of one text, as this machine runs them now: far under the held
    backlog's 16 or more, and far over what the REST handler takes to reach admission, which 1 ms was not on a
    loaded machine (the call expired first: 504)."""
    with running_server(["--bundle", str(slow_bundle), "--frontend", frontend, "--intra-op-threads", "1",
                         "--engine-concurrency", "1", "--max-queue-items", "64", "--max-batch-size", "2"],
                        http=True) as server:
        url = f"http://127.0.0.1:{server.http_port}/v2/models/classifier/infer"
        body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [LONG[2]]}]}
        bad = requests.post(url, json=body, headers={"x-request-timeout-ms": "soon"}, timeout=30)
        channel, stub = stub_for(server.address)
        with channel:
            started = time.monotonic()
            stub.ModelInfer(infer_request([LONG[0]]), timeout=60)  # one run measures the engine's rate
            budget_ms = str(max(50, round(4000 * (time.monotonic() - started))))
            backlog = _held_backlog(server, stub)
            short = requests.post(url, json=body, headers={"x-request-timeout-ms": budget_ms}, timeout=30)
            # The body's timeout (60 s) is longer: the header's wins.
            both = requests.post(url, json={**body, "parameters": {"timeout": 60_000_000}},
                                 headers={"x-request-timeout-ms": budget_ms}, timeout=30)
            for f in backlog:
                f.result()
    assert bad.status_code == 400
    assert "header 'x-request-timeout-ms' must be a positive integer of milliseconds, got 'soon'" in bad.json()["error"]
    for reply in (short, both):
        assert reply.status_code == 429 and int(reply.headers["Retry-After"]) >= 1, reply.text
        assert re.search(r"which has \d+ ms left; retry with backoff or a longer deadline", reply.json()["error"])


def test_a_deadline_is_admission_s_budget(slow_bundle: Path, reference: Reference, frontend: str) -> None:
    """A call with a deadline is admitted when the work ahead of it plus its own fits before the deadline, whatever
    default_timeout_ms says (the budget of calls that send none), and refused at once (RESOURCE_EXHAUSTED, naming
    its deadline) when it cannot fit."""
    with running_server(["--bundle", str(slow_bundle), "--frontend", frontend, "--intra-op-threads", "1",
                         "--engine-concurrency", "1", "--max-queue-items", "64",
                         "--default-timeout-ms", "10", "--max-batch-size", "2"]) as server:
        channel, stub = stub_for(server.address)
        with channel:
            started = time.monotonic()
            stub.ModelInfer(infer_request([LONG[0]]), timeout=60)  # one run measures the engine's rate
            one_run_s = time.monotonic() - started
            # Far more time than 16 texts take: all admitted, although their work is far over the 10 ms default.
            futures = [stub.ModelInfer.future(infer_request([LONG[i % 4]]), timeout=120) for i in range(16)]
            for i, f in enumerate(futures):
                np.testing.assert_allclose(logits_of(f.result()), reference.logits([LONG[i % 4]]), atol=1e-4)
            # A backlog of 24 texts, then a call whose deadline is a small part of it: refused at once.
            backlog = [stub.ModelInfer.future(infer_request([LONG[i % 4]]), timeout=120) for i in range(24)]
            until = time.monotonic() + 30
            while metric(server.scrape(), "ortserve_queue_depth") < 16 and time.monotonic() < until:
                time.sleep(0.01)
            budget_s = max(0.05, 4 * one_run_s)
            asked = time.monotonic()
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(infer_request([LONG[1]]), timeout=budget_s, metadata=[("x-request-id", "unmeetable")])
            took = time.monotonic() - asked
            for f in backlog:
                f.result()
            message = refused_at_once(server, refused.value, "unmeetable", budget_s, took)
    assert re.search(r"about \d+ ms of work including this call's, which has \d+ ms left", message), message


def test_a_call_is_admitted_by_its_tokens_not_its_texts(slow_bundle: Path, frontend: str) -> None:
    """Issue 29's finding, over gRPC on both front ends: a call of 128 texts of 4,000 words was admitted as if it were
    128 short texts, at the rate short texts ran at, and ran past its deadline. Admission counts the tokens the runs
    will do (each text truncated to max_seq_len, in SplitRows' runs): with a deadline 8 times what 128 short texts
    need and an eighth of what these need, the call is refused at once."""
    short = "good movie"
    short_tokens = len(load_wordpiece(slow_bundle / "tokenizer.json", 256).encode([short])[0])
    with running_server(["--bundle", str(slow_bundle), "--frontend", frontend, "--intra-op-threads", "1",
                         "--engine-concurrency", "1"]) as server:
        channel, stub = stub_for(server.address)
        with channel:
            # Short calls one at a time until the engine has run them for a second: the batcher's estimate then
            # holds their rate (what ran before weighs e^-2 of it), which the server's metrics tell within far less
            # than the factor of 8 either side that the deadline leaves.
            body = server.scrape()
            runs0, busy0 = (metric(body, "ortserve_engine_duration_seconds_count"),
                            metric(body, "ortserve_engine_duration_seconds_sum"))
            runs = busy = 0.0
            while busy < 1.0:
                for _ in range(10):
                    stub.ModelInfer(infer_request([short]), timeout=60)
                body = server.scrape()
                runs = metric(body, "ortserve_engine_duration_seconds_count") - runs0
                busy = metric(body, "ortserve_engine_duration_seconds_sum") - busy0
            tokens_per_s = short_tokens * runs / busy
            own = 128 * 256  # 128 texts truncated to 256 tokens, in runs of 4 (max_batch_tokens 1024): no padding
            as_texts = 128 * short_tokens
            left_s = (own * as_texts) ** 0.5 / tokens_per_s / ADMISSION_DEADLINE_SHARE
            asked = time.monotonic()
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(infer_request(["word " * 4000] * 128), timeout=left_s,
                                metadata=[("x-request-id", "long-texts")])
            took = time.monotonic() - asked
            message = refused_at_once(server, refused.value, "long-texts", left_s, took)
    assert re.search(r"about \d+ ms of work including this call's, which has \d+ ms left", message), message
