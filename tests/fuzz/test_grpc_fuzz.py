"""A bounded, deterministic fuzz run over real gRPC against both front ends (the long run is `scripts/dev fuzz`).

Hypothesis draws hostile ModelInfer calls (ortserve_devtools/fuzz/requests.py: structured requests with broken names,
datatypes, shapes, length prefixes, UTF-8, parameters, outputs and headers; serialised bodies mutated byte by byte)
and sends each to a real server process. Every answer must be OK / INVALID_ARGUMENT / NOT_FOUND / RESOURCE_EXHAUSTED,
within the deadline, with no traceback; an OK answer must carry the model's logits for the call's texts; afterwards
the server answers a fixed call with the same logits and its RSS stayed within RSS_BOUND (fuzz.harness).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from ortserve_devtools.fuzz.harness import Finding, FuzzTarget, MiB
from ortserve_devtools.fuzz.requests import Metadata, call_metadata, infer_requests, request_bodies
from support.reference import Reference
from support.server_process import ServerProcess, running_server

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.slow  # fuzzing callers against real servers on both front ends

MAX_TEXTS = 16
EXAMPLES = 250  # per strategy and front end: ~10 s of calls on two shared cores
# RSS growth allowed after a warm-up at the request limits (a run grows it by ~4 MiB: allocator slack). The sanitizer
# job raises it: ASan's quarantine keeps up to 256 MiB of freed memory resident on purpose.
RSS_BOUND = int(os.environ.get("ORTSERVE_FUZZ_RSS_BOUND_MIB", "24")) * MiB
# Derandomized: the same calls on every run, so a CI failure reproduces locally with the same example.
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def target(tiny_bundle: Path, frontend: str) -> Iterator[tuple[FuzzTarget, ServerProcess]]:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend,
                         "--max-texts-per-request", str(MAX_TEXTS), "--max-message-bytes", "65536"]) as server:
        fuzz = FuzzTarget(server.address, server.proc.pid, expected=Reference(tiny_bundle).logits,
                          alive=lambda: server.proc.poll() is None)
        fuzz.warm_up(MAX_TEXTS)
        yield fuzz, server
        fuzz.close()


def _fuzz(run: Callable[[], None], fuzz: FuzzTarget, server: ServerProcess) -> dict[str, int]:
    """Run a hypothesis test, then check the server as a whole (same logits for the fixed call, RSS within the bound,
    no traceback); returns the status codes the run got. A finding carries the server's last stderr lines (a
    sanitizer report lands there)."""
    logits, rss = fuzz.fixed_logits(), fuzz.rss()
    before = dict(fuzz.codes)
    try:
        run()
        fuzz.check_health(logits, rss, RSS_BOUND)
    except Finding as e:
        e.add_note("server stderr, last lines:\n" + "".join(server.stderr_lines[-60:]))
        raise
    lines = server.stderr_lines + server.raw_lines
    assert not [line for line in lines if "Traceback" in line], "".join(lines[-40:])
    return {code: n - before.get(code, 0) for code, n in fuzz.codes.items()}


def test_structured_requests(target: tuple[FuzzTarget, ServerProcess]) -> None:
    fuzz, server = target

    @FUZZ
    @given(infer_requests(max_texts=MAX_TEXTS), call_metadata())
    def one(request: pb.ModelInferRequest, metadata: Metadata) -> None:
        fuzz.fuzz_request(request, metadata)

    seen = _fuzz(one, fuzz, server)
    # The run reached both sides: calls that were served and calls that were refused for what they carry.
    assert seen.get("OK", 0) >= EXAMPLES // 10 and seen.get("INVALID_ARGUMENT", 0) >= EXAMPLES // 10, seen


def test_mutated_bodies(target: tuple[FuzzTarget, ServerProcess]) -> None:
    fuzz, server = target

    @FUZZ
    @given(request_bodies(max_texts=MAX_TEXTS))
    def one(body: bytes) -> None:
        fuzz.fuzz(body)

    seen = _fuzz(one, fuzz, server)
    assert seen.get("INVALID_ARGUMENT", 0) >= EXAMPLES // 10, seen


def test_a_count_no_memory_could_back_is_invalid_argument(tiny_bundle: Path, frontend: str,
                                                          request: pytest.FixtureRequest) -> None:
    """Found by the decode fuzzer (now the seed ortserve/engine_ext/fuzz/corpus/decode/huge-count): with a large
    --max-texts-per-request, a 30-byte call declaring shape [10**12] with one element. The Python codec compares the
    count with the elements; the native decoder (infer_codec.cc DecodeRequest) reserved shape[0] text views (16 TB),
    std::bad_alloc escaped the gRPC callback and the caller got UNIMPLEMENTED with no message. It now reserves at most
    what the message holds."""
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend,
                         "--max-texts-per-request", str(10**12)]) as server:
        fuzz = FuzzTarget(server.address, server.proc.pid)
        call = pb.ModelInferRequest(model_name="classifier")
        call.inputs.add(name="TEXT", datatype="BYTES", shape=[10**12]).contents.bytes_contents.append(b"x")
        try:
            answer = fuzz.fuzz_request(call)
            assert answer.code == grpc.StatusCode.INVALID_ARGUMENT, answer
            assert "carries 1 elements" in answer.details
            fuzz.fixed_logits()
        finally:
            fuzz.close()


def _beside_good_callers(address: str, metadata: tuple[tuple[str, str], ...]) -> tuple[list[str], list[str]]:
    """Ten calls carrying `metadata` while two callers send good calls on the same channel (one HTTP/2
    connection): (the ten calls' outcomes, the good calls that failed)."""
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    good = pb.ModelInferRequest(model_name="classifier")
    good.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"a good call")
    failed: list[str] = []
    served = [0]
    stop = threading.Event()

    def caller() -> None:
        while not stop.is_set():
            try:
                stub.ModelInfer(good, timeout=10)
                served[0] += 1
            except grpc.RpcError as e:
                failed.append(f"{e.code().name}: {e.details()}")

    callers = [threading.Thread(target=caller) for _ in range(2)]
    for thread in callers:
        thread.start()
    outcomes: list[str] = []
    try:
        while served[0] < 20 and not failed:  # the callers are under way
            time.sleep(0.01)
        for _ in range(10):
            try:
                stub.ModelInfer(good, metadata=metadata, timeout=10)
                outcomes.append("OK")
            except grpc.RpcError as e:
                outcomes.append(e.code().name)
    finally:
        stop.set()
        for thread in callers:
            thread.join(30)
        channel.close()
    return outcomes, failed


def test_a_header_block_a_mesh_forwards_is_served(tiny_bundle: Path, frontend: str) -> None:
    """Envoy (Istio's proxy) forwards request headers up to 60 KiB by default; max_header_bytes (64 KiB) is above
    that on both front ends."""
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend]) as server:
        outcomes, failed = _beside_good_callers(server.address, (("x-trace-context", "t" * 60_000),))
    assert outcomes == ["OK"] * 10
    assert not failed, sorted(set(failed))


def test_an_oversized_header_fails_only_its_own_call(tiny_bundle: Path, frontend: str,
                                                     request: pytest.FixtureRequest) -> None:
    """Found by the fuzz run (call_metadata: an x-request-id of ~20 KB next to a caller on the same connection). The
    oversized call is RESOURCE_EXHAUSTED on both front ends; on the native one (grpc++ 1.51, Debian's) the calls
    sharing its HTTP/2 connection fail too, RESOURCE_EXHAUSTED "received initial metadata size exceeds limit" or
    UNAVAILABLE "Socket closed", though their headers are small. max_header_bytes (64 KiB) puts the limit above what
    a mesh forwards, so only a caller that bypasses the mesh can reach it."""
    if frontend == "native":
        request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError,
                                              reason="grpc++ 1.51 fails the connection's other streams"))
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", frontend]) as server:
        outcomes, failed = _beside_good_callers(server.address, (("x-trace-context", "t" * 70_000),))
    assert set(outcomes) <= {"RESOURCE_EXHAUSTED", "UNAVAILABLE"}, outcomes
    assert not failed, f"{len(failed)} good calls failed next to the oversized ones: {sorted(set(failed))}"
