"""`scripts/dev image smoke`: the built image run as deploy/k8s runs it, then checked from outside.

  1. the image against the manifests (pod_contract.image_problems): user, entrypoint, args, ports, config, cache
  2. two tiny bundles (scripts/make_demo_bundle.py --tiny), published by the image's own `registry` run as
     k8s/job-publish.yaml runs it (the Job's args for v2: a 5 % canary; the same with v1 at 100 first) into a file
     registry on the host
  3. the server container: the Deployment's user, read-only root, dropped capabilities, args, environment and
     volumes (the ConfigMap's ortserve.toml at /etc/ortserve, artifacts read-only, the cache and /tmp as emptyDirs);
     the additions are the file registry, mounted read-only, named by ORTSERVE_REGISTRY instead of Consul, and a
     request line for every call (ORTSERVE_REQUEST_LOG_SAMPLE=1: step 6 reads them)
  4. the probes' health services, a tritonclient call with labels and a routing key, the same over REST, a
     Prometheus scrape,
     `ortserve status` from the host
  5. `registry route` on the host: the server picks the new split up, each key on the version the router says
  6. SIGTERM with calls in flight: readiness flips, the calls it had are answered, exit 0 within the pod's
     terminationGracePeriodSeconds
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ortserve_devtools.checkout import ROOT
from ortserve_devtools.image import smoke_calls
from ortserve_devtools.image.container import Container, run_arguments, run_to_end, volume_dir
from ortserve_devtools.image.pod_contract import (
    ImageConfig,
    expand,
    image_problems,
    publisher_contract,
    server_contract,
)
from ortserve_devtools.image.podman import (
    ImageError,
    Log,
    UsageError,
    ensure_tools,
    image_exists,
    inspect_image,
    podman,
)

REGISTRY_PATH = "/registry"  # where the smoke mounts its file registry (the manifests use Consul)
KEYS = [f"user-{i:04d}" for i in range(200)]


@dataclass
class SmokeResult:
    steps: list[tuple[str, float]] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _with_values(args: list[str], values: dict[str, str]) -> list[str]:
    """`args` with the value after each flag in `values` replaced."""
    out = list(args)
    for flag, value in values.items():
        if flag not in out:
            raise ImageError(f"the publish Job's args have no {flag}")
        out[out.index(flag) + 1] = value
    return out


def smoke(log: Log, *, image: str, workdir: Path | None, port_offset: int, keep: bool) -> SmokeResult:
    ensure_tools(log, install=False)
    if not image_exists(image):
        raise UsageError(f"no image {image}: build it with `scripts/dev image build`")
    result = SmokeResult()
    step_started = time.monotonic()

    def step(name: str) -> None:
        nonlocal step_started
        result.steps.append((name, time.monotonic() - step_started))
        step_started = time.monotonic()

    # 1. the image against the manifests
    server = server_contract()
    publisher = publisher_contract()
    config_path, config_text = server.config_file()
    settings = tomllib.loads(config_text)
    problems = image_problems(server, ImageConfig.from_inspect(inspect_image(image)), settings)
    if problems:
        raise ImageError("the image disagrees with deploy/k8s:\n  - " + "\n  - ".join(problems))
    models = settings.get("models") or []
    if not models:
        raise ImageError(f"{server.where}: the ConfigMap's ortserve.toml names no models")
    model = models[0]
    cache = server.env["ORTSERVE_ARTIFACT_CACHE"]
    log(f"image {image} agrees with {server.where}: uid {server.uid}:{server.gid}, ENTRYPOINT ortserve, args "
        f"{' '.join(server.args)}, ports {server.ports}, --config {config_path} from its ConfigMap, artifact cache "
        f"{cache} on a writable volume, read-only root")
    grpc_port = server.ports["grpc"] + port_offset
    metrics_port = server.ports["http-metrics"] + port_offset
    http_port = server.ports["http"] + port_offset if "http" in server.ports else 0
    # Step 6 reads every call's `request` line to know which were in flight; the server samples them by default.
    env = {"ORTSERVE_REGISTRY": f"file://{REGISTRY_PATH}", "ORTSERVE_REQUEST_LOG_SAMPLE": "1"}
    if port_offset:
        env |= {"ORTSERVE_PORT": str(grpc_port), "ORTSERVE_METRICS_PORT": str(metrics_port)}
        if http_port:
            env["ORTSERVE_HTTP_PORT"] = str(http_port)
        log(f"--port-offset {port_offset}: ports {grpc_port}/{metrics_port}/{http_port} through ORTSERVE_PORT, "
            "_METRICS_PORT, _HTTP_PORT")
    busy = [p for p in (grpc_port, metrics_port, http_port) if p and not _port_free(p)]
    if busy:
        raise UsageError(f"port(s) {busy} are taken on this host; the container shares the host's network: free "
                         "them or pass --port-offset N")
    step("checks against deploy/k8s")

    work = Path(tempfile.mkdtemp(prefix="ortserve-smoke-", dir=workdir))
    os.chmod(work, 0o755)
    name = f"ortserve-smoke-{os.getpid()}"
    containers: list[Container] = []
    try:
        # 2. bundles, published by the image's registry CLI as the Job runs it
        bundles = work / "bundles"
        for seed, version in enumerate(("v1", "v2"), start=1):
            done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_bundle.py"),
                                   str(bundles / model / version), "--tiny", "--seed", str(seed)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise ImageError(f"make_demo_bundle.py exited {done.returncode}: {done.stderr.strip()}")
        for path in [bundles, *bundles.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        registry = work / "registry"
        artifacts = work / "artifacts"
        for path in (registry, artifacts):
            path.mkdir()
            os.chmod(path, 0o777)  # written by the Job's uid, as a volume it owns through fsGroup
        job_args = list(publisher.args)
        canary = int(job_args[job_args.index("--weight") + 1]) if "--weight" in job_args else 0
        published = {"v1": 100 - canary, "v2": canary} if canary else {"v1": 100}
        volumes = {m.name: volume_dir(m, work / "job-volumes") for m in publisher.mounts if m.kind == "emptyDir"}
        volumes |= {"bundles": bundles, "artifacts": artifacts}
        for version, weight in (("v1", "100"), ("v2", None)):
            args = job_args if weight is None else _with_values(
                job_args, {"--version": version, "--bundle": f"/bundles/{model}/{version}", "--weight": weight})
            arguments = run_arguments(publisher, image, name=f"{name}-publish-{version}", volumes=volumes, env=env,
                                      extra_volumes=[(registry, REGISTRY_PATH, False)],
                                      args=expand(tuple(args), {**publisher.env, **env}))
            status, output = run_to_end(arguments, work / f"publish-{version}.log")
            if status != 0:
                raise ImageError(f"the publish Job's container exited {status}:\n{output.strip()[-1500:]}")
        log(f"published {model} v1 (100) and v2 (the Job's own args: weight {canary}) with the image's `registry`, "
            f"as k8s/job-publish.yaml runs it (uid {publisher.uid}, read-only root)")
        step("bundles and publish Job")

        # 3. the server, as the Deployment runs it
        volumes = {m.name: volume_dir(m, work / "server-volumes") for m in server.mounts
                   if m.kind != "persistentVolumeClaim"}
        volumes["artifacts"] = artifacts
        arguments = run_arguments(server, image, name=name, volumes=volumes, env=env,
                                  extra_volumes=[(registry, REGISTRY_PATH, True)])
        container = Container(arguments, work / "server.log")
        containers.append(container)
        started = container.wait_event("server_started", timeout_s=120)
        address = f"127.0.0.1:{grpc_port}"
        if started.get("port") != grpc_port or started.get("metrics_port") != metrics_port:
            raise ImageError(f"the server listens on {started.get('port')}/{started.get('metrics_port')}, the "
                             f"manifests say {grpc_port}/{metrics_port}")
        probe_services = sorted({service for _, service in server.probes.values()})
        ready_s = smoke_calls.wait_health(address, "", "SERVING", timeout_s=120)
        for service in probe_services:
            if (status_name := smoke_calls.health(address, service)) != "SERVING":
                raise ImageError(f"health service {service!r} is {status_name}")
        log(f"container {name} serving on {address}: health {probe_services} SERVING ({ready_s:.1f} s after "
            f"server_started; the probes' services)")
        result.facts["ready_s"] = round(ready_s, 2)
        step("server start and readiness")

        # 4. calls from outside
        answer = smoke_calls.classify(address, model, ["a wonderful film", "dull and far too long"], "user-7")
        labels = json.loads((bundles / model / answer.version / "manifest.json").read_text())["labels"] \
            if answer.version in ("v1", "v2") else []
        if len(answer.classes) != 2 or not {c.rsplit(":", 1)[-1] for c in answer.classes} <= set(labels):
            raise ImageError(f"tritonclient: classes {answer.classes} from {answer.version!r}, the bundle's labels "
                             f"{labels}")
        log(f"tritonclient: {answer.classes} (score:index:label, labels of the bundle {labels}) from {model} "
            f"{answer.version}, x-routing-key user-7")
        if http_port:
            over_rest = smoke_calls.classify_rest(http_port, model, ["a wonderful film", "dull and far too long"],
                                                  "user-7")
            if over_rest != answer:
                raise ImageError(f"REST on :{http_port} answered {over_rest}, gRPC {answer}")
            log(f"REST on :{http_port} (the Service's http port): the same classes from {over_rest.version}")
        samples = smoke_calls.scrape(metrics_port)
        ok = sum(v for k, v in samples.items() if k.startswith("ortserve_requests_total{")
                 and f'model="{model}"' in k and 'code="OK"' in k)
        if ok < 1:
            raise ImageError(f"/metrics on {metrics_port} counts no OK call of {model}")
        log(f"Prometheus scrape on :{metrics_port} (the prometheus.io/port annotation): {len(samples)} samples, "
            f"ortserve_requests_total OK = {ok:.0f}")
        status = smoke_calls.status_cli(address)
        routing = status["models"][model]["routing"]  # type: ignore[index]
        if routing != published:
            raise ImageError(f"ortserve status: {model} routing {routing}, published {published}")
        log(f"ortserve status (host): {model} routing {routing}, registry index {status.get('registry_index')}")
        step("tritonclient, REST, metrics, status")

        # 5. a route change
        changed = subprocess.run([str(Path(sys.executable).parent / "registry"), "--registry", registry.as_uri(),
                                  "route", model, "v1=50", "v2=50"], capture_output=True, text=True)
        if changed.returncode != 0:
            raise ImageError(f"registry route exited {changed.returncode}: {changed.stderr.strip()}")
        routed_at = time.monotonic()
        while smoke_calls.status_cli(address)["models"][model]["routing"] != {"v1": 50, "v2": 50}:  # type: ignore[index]
            if time.monotonic() - routed_at > 30:
                raise ImageError("the server did not pick up `registry route` within 30 s")
            time.sleep(0.1)
        picked_s = time.monotonic() - routed_at
        from ortserve import engine_ext

        split = engine_ext.Split.of([("v1", 50), ("v2", 50)])
        answers = smoke_calls.versions_for_keys(address, model, KEYS)
        wrong = {k: v for k, v in answers.items() if v != split.pick(engine_ext.route_bucket(model, k))}
        if wrong:
            raise ImageError(f"{len(wrong)} of {len(KEYS)} keys answered by another version than the router's: "
                             f"{list(wrong.items())[:3]}")
        share = sum(v == "v2" for v in answers.values()) / len(answers)
        log(f"registry route {model} v1=50 v2=50 (host CLI, read-only mount in the container): in force "
            f"{picked_s:.2f} s later; {len(KEYS)} routing keys each on the router's version (v2 {share:.0%})")
        result.facts["route_picked_up_s"] = round(picked_s, 2)
        step("route change")

        # 6. SIGTERM under load. Which calls the server had when it began to shut down is read from its own log
        # (a call's `request` line: its id, status, end time and duration), not guessed from the client's clock:
        # a client thread can note "sent" well before its request reaches the server.
        load = smoke_calls.Load(address, model, threads=8, texts=128)
        time.sleep(2.0)
        pid = int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip())
        signalled = time.time()
        os.kill(pid, 15)  # as the kubelet's runtime does: SIGTERM to the container's first process
        # A probe as the kubelet's: any answer but SERVING (or none within its timeout) takes the pod out.
        readiness = smoke_calls.health(address, "", timeout_s=0.5)
        while readiness == "SERVING" and time.time() - signalled < 2:
            readiness = smoke_calls.health(address, "", timeout_s=0.5)
        flip_s = time.time() - signalled
        exit_status = container.wait(max(0.0, server.grace_s - (time.time() - signalled)))
        load.stop()
        if exit_status is None:
            raise ImageError(f"still running {server.grace_s} s after SIGTERM (terminationGracePeriodSeconds): the "
                             "kubelet would SIGKILL it")
        if readiness == "SERVING":
            raise ImageError("readiness still SERVING 2 s after SIGTERM")
        if exit_status != 0:
            raise ImageError(f"exit status {exit_status} after SIGTERM:\n  {container.tail()}")
        shutdown = container.events("shutdown_started")
        if not shutdown or not container.events("shutdown_complete"):
            raise ImageError("no shutdown_started/shutdown_complete in the server's log")
        shutdown_at = _wall(shutdown[0])
        exit_s = _wall(container.events("shutdown_complete")[0]) - signalled
        served = {str(e["request_id"]): e for e in container.events("request")
                  if str(e.get("request_id", "")).startswith("smoke-")}
        had = {rid: e for rid, e in served.items() if _wall(e) - e["total_ms"] / 1000 < shutdown_at}
        in_flight = [rid for rid, e in had.items() if _wall(e) >= shutdown_at]
        outcome = {o.request_id: o.code for o in load.outcomes}
        lost = {rid: (e.get("status"), outcome.get(rid)) for rid, e in had.items()
                if e.get("status") != "OK" or outcome.get(rid) != "OK"}
        if lost or not in_flight:
            raise ImageError(f"of {len(had)} calls the server had at SIGTERM ({len(in_flight)} still running), "
                             f"not answered OK (server status, client code): {list(lost.items())[:5]}")
        late = sorted({code for rid, code in outcome.items() if rid not in had})
        if not set(late) <= {"OK", "UNAVAILABLE", "CANCELLED"}:
            raise ImageError(f"calls that reached the server after SIGTERM, or never, ended {late}")
        log(f"SIGTERM with {len(in_flight)} calls running: every one of the {len(had)} calls the server had answered "
            f"OK; readiness probe {readiness} after {flip_s:.2f} s; later calls {late}; shut down and exited 0 "
            f"{exit_s:.2f} s after SIGTERM (grace {server.grace_s} s)")
        result.facts |= {"in_flight_at_sigterm": len(in_flight), "exit_after_sigterm_s": round(exit_s, 2)}
        step("SIGTERM under load")
        return result
    finally:
        for c in containers:
            c.remove()
        if keep:
            log(f"kept {work} (container logs, registry, volumes)")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _wall(event: dict[str, object]) -> float:
    """A log line's timestamp (ISO 8601 UTC) as Unix time."""
    return dt.datetime.fromisoformat(str(event["timestamp"])).timestamp()
