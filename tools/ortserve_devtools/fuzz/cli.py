"""scripts/dev fuzz: the long fuzz run over real gRPC (the suite runs a bounded one: tests/fuzz/test_grpc_fuzz.py), and
with --http over every JSON route of the HTTP port (bounded in the suite: tests/fuzz/test_http_fuzz.py).

Starts an ortserve server per front end on a tiny BERT bundle (or fuzzes one already running, --address), then draws
hostile ModelInfer calls from fuzz.requests in rounds with fresh seeds until the time is up, checking every
answer and, after each round, the server as a whole (fuzz.harness). A background caller sends a known call all
along, so fuzzed calls share batches with good ones, and checks its logits every time. A failing call is shrunk by
hypothesis and written to --findings as a .bin body (replay: scripts/dev fuzz --replay FILE --address ...).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, seed, settings

from ortserve.proto import grpc_service_pb2 as pb
from ortserve_devtools.checkout import ROOT, SCRIPTS
from ortserve_devtools.fuzz.harness import Finding, FuzzTarget, MiB
from ortserve_devtools.fuzz.requests import Metadata, call_metadata, infer_requests, request_bodies

MODEL = "classifier"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/dev fuzz", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=5.0, help="how long to fuzz, over all front ends (default 5)")
    p.add_argument("--frontend", choices=["python", "native", "both"], default="both",
                   help="which front end(s) to start servers with (default both, the time split between them)")
    p.add_argument("--address", help="fuzz a server already running here instead of starting one")
    p.add_argument("--pid", type=int, help="with --address: the server's pid, for the liveness and RSS checks")
    p.add_argument("--max-texts", type=int, default=16, help="--max-texts-per-request of the started servers")
    p.add_argument("--rss-bound-mib", type=float, default=64.0,
                   help="RSS growth allowed over the baseline taken after the first round (default 64)")
    p.add_argument("--round", type=int, default=400, help="examples per strategy between server checks")
    p.add_argument("--seed", type=int, help="first round's seed (default: random; printed)")
    p.add_argument("--share-connection", action="store_true",
                   help="the background caller shares the fuzzed calls' HTTP/2 connection (default: its own)")
    p.add_argument("--findings", type=Path, default=Path("fuzz-findings"), help="where failing bodies go")
    p.add_argument("--replay", type=Path, nargs="+", help="send these bodies once each and check the answers")
    p.add_argument("--native", action="store_true",
                   help="run the coverage-guided C++ fuzzers instead (scripts/fuzz_native; see its --help)")
    p.add_argument("--http", action="store_true",
                   help="fuzz every JSON route of the HTTP port instead (V2 REST, OpenAI, vLLM classify, Cohere, TEI, "
                        "the HF Inference API: fuzz.http_calls), on a server of a classifier and an embedder")
    p.add_argument("--calls", type=int, default=0,
                   help="with --http: stop after this many calls, however long they take (default: after --minutes)")
    return p


def fuzz_http(args: argparse.Namespace, first_seed: int) -> bool:
    """Hostile JSON calls on every HTTP route until --calls or --minutes; every answer 2xx/4xx with a message and no
    traceback, the server's log without an error line. Prints the figures."""
    from ortserve_devtools.fuzz.http_calls import HttpFinding, HttpTarget, Route, check_log, http_calls, serve_models

    with tempfile.TemporaryDirectory(prefix="ortserve-fuzz-http-") as tmp, \
            serve_models(Path(tmp), ["--max-texts-per-request", str(args.max_texts)]) as server:
        target = HttpTarget("127.0.0.1", server.http_port)
        started = time.monotonic()
        end = math.inf if args.calls else started + args.minutes * 60  # --calls: that many, however long
        round_no, ok = 0, True
        while ok and time.monotonic() < end and (not args.calls or target.calls < args.calls):
            round_seed = first_seed + round_no
            examples = min(args.round, args.calls - target.calls) if args.calls else args.round
            fuzz = settings(max_examples=examples, database=None, deadline=None,
                            suppress_health_check=list(HealthCheck))

            @fuzz
            @seed(round_seed)
            @given(http_calls())
            def calls(call: tuple[Route, bytes]) -> None:
                target.fuzz(*call)

            try:
                calls()
                check_log(server.raw_lines + server.stderr_lines)
            except HttpFinding as e:
                _save(args.findings, "http", None, f"seed {round_seed}\n{e}")
                print(f"fuzz [http]: FINDING (round seed {round_seed}): {e}", flush=True)
                ok = False
            round_no += 1
            if round_no % 10 == 0:
                print(f"fuzz [http]: {target.summary()} in {time.monotonic() - started:.0f} s", flush=True)
        took = time.monotonic() - started
        target.close()
        print(f"fuzz [http]: {'no findings' if ok else 'FINDINGS'}: {target.summary()} in {took:.1f} s "
              f"({target.calls / took:.0f} calls/s)", flush=True)
    return ok


@contextmanager
def _server(frontend: str, max_texts: int, workdir: Path) -> Iterator[tuple[FuzzTarget, Callable[[], str]]]:
    from ortserve_devtools.bert_bundle import build_tiny_bundle
    from ortserve_devtools.server_process import start_until_ready

    bundle = workdir / "tiny"
    if not bundle.exists():
        build_tiny_bundle(bundle, seed=0)
    log = workdir / f"server-{frontend}.log"
    served = start_until_ready(["--bundle", str(bundle), "--model-name", MODEL, "--frontend", frontend,
                                "--max-texts-per-request", str(max_texts), "--max-message-bytes", "65536"],
                               model=MODEL, log_path=log)
    target = FuzzTarget(served.address, served.pid, expected=_reference(bundle), alive=served.alive)
    try:
        yield target, lambda: log.read_text(errors="replace")
    finally:
        target.close()
        served.stop()


def _reference(bundle: Path) -> Callable[[Sequence[str]], np.ndarray]:
    root = ROOT
    sys.path.insert(0, str(root / "tests"))
    from support.reference import Reference

    return Reference(bundle).logits


class _Background(threading.Thread):
    """Sends the fixed call in a loop during fuzzing; any other answer or other logits is a finding. On its own
    connection unless `shared`: the native front end's grpc++ fails every stream of a connection that carried an
    oversized header block (tests/fuzz/test_grpc_fuzz.py::test_an_oversized_header_fails_only_its_own_call), which
    would end every run at once."""

    def __init__(self, target: FuzzTarget, expected: np.ndarray, *, shared: bool) -> None:
        super().__init__(daemon=True, name="fuzz-background")
        self._probe = FuzzTarget(target.address, target.pid, labels=target.labels, alive=target.alive,
                                 own_connection=not shared)
        self._expected = expected
        self._halt = threading.Event()
        self.error: str | None = None
        self.calls = 0

    def run(self) -> None:
        while not self._halt.is_set() and self.error is None:
            try:
                logits = self._probe.fixed_logits()
            except Finding as e:
                self.error = str(e)
                break
            if not np.allclose(logits, self._expected, atol=1e-5, rtol=0):
                self.error = f"background call's logits changed: {self._expected.tolist()} -> {logits.tolist()}"
            self.calls += 1
            self._halt.wait(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join(15)
        self._probe.close()


def _round(target: FuzzTarget, max_texts: int, examples: int, round_seed: int) -> None:
    """One round: `examples` structured requests, then as many mutated bodies, from `round_seed`."""
    fuzz = settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))

    @fuzz
    @seed(round_seed)
    @given(infer_requests(max_texts=max_texts), call_metadata())
    def structured(request: pb.ModelInferRequest, metadata: Metadata) -> None:
        target.fuzz_request(request, metadata)

    @fuzz
    @seed(round_seed + 1)
    @given(request_bodies(max_texts=max_texts))
    def mutated(body: bytes) -> None:
        target.fuzz(body)

    structured()
    mutated()


def _save(findings: Path, name: str, body: bytes | None, message: str) -> None:
    findings.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if body is not None:
        (findings / f"{name}-{stamp}.bin").write_bytes(body)
    (findings / f"{name}-{stamp}.txt").write_text(message + "\n")
    print(f"fuzz: finding written to {findings}/{name}-{stamp}.*", flush=True)


def fuzz_target(target: FuzzTarget, *, name: str, seconds: float, args: argparse.Namespace, first_seed: int,
                log: Callable[[], str] | None = None) -> bool:
    """Fuzz one server for `seconds`; True when nothing was found."""
    target.warm_up(args.max_texts)
    expected = target.fixed_logits()
    background = _Background(target, expected, shared=args.share_connection)
    background.start()
    end = time.monotonic() + seconds
    baseline: int | None = None
    round_no = 0
    ok = True
    try:
        while time.monotonic() < end:
            round_seed = first_seed + 2 * round_no
            try:
                _round(target, args.max_texts, args.round, round_seed)
                rss = target.check_health(expected, baseline, int(args.rss_bound_mib * MiB))
            except Finding as e:
                _save(args.findings, name, target.last_failure, f"seed {round_seed}\n{e}")
                print(f"fuzz [{name}]: FINDING (round seed {round_seed}): {e}", flush=True)
                ok = False
                break
            if background.error:
                _save(args.findings, name, None, background.error)
                print(f"fuzz [{name}]: FINDING in the background caller: {background.error}", flush=True)
                ok = False
                break
            if baseline is None:
                baseline = rss  # after a first round: arenas and caches at their working size
            round_no += 1
            rss_text = "" if rss is None else f", RSS {rss / MiB:.0f} MiB"
            print(f"fuzz [{name}]: round {round_no} (seed {round_seed}) passed: {target.summary()}, "
                  f"{background.calls} background calls{rss_text}", flush=True)
    finally:
        background.stop()
    if ok and log is not None and "Traceback" in log():
        _save(args.findings, name, None, "a Traceback in the server log:\n" + log()[-8000:])
        ok = False
    return ok


def replay(target: FuzzTarget, files: Sequence[Path]) -> bool:
    ok = True
    for path in files:
        try:
            answer = target.fuzz(path.read_bytes())
            print(f"{path}: {answer.code.name} {answer.details!r}")
        except Finding as e:
            print(f"{path}: FINDING: {e}")
            ok = False
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.native:
        native = SCRIPTS / "fuzz_native"
        os.execv(str(native), [str(native), "--minutes", str(args.minutes)])
    first_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"fuzz: seed {first_seed}", flush=True)
    if args.http:
        return 0 if fuzz_http(args, first_seed) else 1
    if args.address:
        target = FuzzTarget(args.address, args.pid)
        try:
            if args.replay:
                return 0 if replay(target, args.replay) else 1
            return 0 if fuzz_target(target, name="remote", seconds=args.minutes * 60, args=args,
                                    first_seed=first_seed) else 1
        finally:
            target.close()
    frontends = ["python", "native"] if args.frontend == "both" else [args.frontend]
    if "native" in frontends:
        from ortserve import engine_ext

        if not engine_ext.HAS_FRONTEND:
            print(f"fuzz: the native front end is not built ({engine_ext.FRONTEND_MISSING}); fuzzing python only")
            frontends.remove("native")
    ok = True
    with tempfile.TemporaryDirectory(prefix="ortserve-fuzz-") as tmp:
        for frontend in frontends:
            with _server(frontend, args.max_texts, Path(tmp)) as (target, log):
                if args.replay:
                    ok = replay(target, args.replay) and ok
                    continue
                ok = fuzz_target(target, name=frontend, seconds=args.minutes * 60 / len(frontends), args=args,
                                 first_seed=first_seed, log=log) and ok
                print(f"fuzz [{frontend}]: {'no findings' if ok else 'FINDINGS'}: {target.summary()}", flush=True)
    return 0 if ok else 1

