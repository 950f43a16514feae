"""Cross-object rules over the rendered manifests: the mistakes a schema cannot see.

Each function takes every object of a full install and returns readable problems ([] = fine),
so a test asserts `== []` and a mutation test can assert which rule fired.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
from kustomize_lite import split_image
from manifest_files import Manifest

from ortserve.service.config import ConfigError, Settings, load_settings

Obj = dict[str, Any]
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
GRPC_PORT_NAME = "grpc"
METRICS_PORT_NAME = "http-metrics"
HTTP_PORT_NAME = "http"
SERVER_CONFIG = "ortserve-config"
# The health service the server keeps SERVING regardless of models (ortserve/service/app.py).
LIVENESS_SERVICE = "liveness"
# Which grpc.health.v1 service each probe asks: "" is the overall readiness.
PROBE_SERVICES = {"startupProbe": "", "readinessProbe": "", "livenessProbe": LIVENESS_SERVICE}
# Labels ortserve's own metrics carry (ortserve/service/metrics.py); scrape-time labels must not reuse them.
METRIC_LABELS = frozenset({"model", "version", "code", "result", "state", "lane", "device", "reason",
                           "transport", "stable", "candidate", "outcome", "role"})
SETTING_NAMES = frozenset(f.name for f in dataclasses.fields(Settings))


def of_kind(objects: Iterable[Manifest], kind: str) -> list[Manifest]:
    return [m for m in objects if m.kind == kind]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Equality-based label selection; an empty selector selects nothing (never intended here)."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_labels(workload: Manifest) -> dict[str, str]:
    return workload.doc["spec"]["template"].get("metadata", {}).get("labels", {})


def pod_spec(workload: Manifest) -> Obj:
    return workload.doc["spec"]["template"]["spec"]


def container_ports(workload: Manifest) -> dict[str, int]:
    return {
        port["name"]: port["containerPort"]
        for container in pod_spec(workload)["containers"]
        for port in container.get("ports", [])
        if "name" in port
    }


def load_toml_settings(text: str) -> Settings:
    """Settings from a TOML text, through the server's own loader (no environment)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ortserve.toml"
        path.write_text(text)
        return load_settings(file=str(path), env={})


def server_settings(objects: list[Manifest]) -> Settings | str:
    """The Settings the ConfigMap yields, or the server's own error message for it."""
    (config,) = (m for m in of_kind(objects, "ConfigMap") if m.name == SERVER_CONFIG)
    try:
        return load_toml_settings(config.doc["data"]["ortserve.toml"])
    except ConfigError as exc:
        return f"ConfigMap/{SERVER_CONFIG}: the server would refuse to start: {exc}"


def deployment_problems(objects: list[Manifest]) -> list[str]:
    config = server_settings(objects)
    if isinstance(config, str):
        return [config]
    problems: list[str] = []
    for dep in of_kind(objects, "Deployment"):
        where = dep.label()
        spec, pod = dep.doc["spec"], pod_spec(dep)
        if not selects(spec["selector"].get("matchLabels", {}), pod_labels(dep)):
            problems.append(f"{where}: selector does not match its own pod template labels")
        ports = container_ports(dep)
        grpc_port, metrics_port = ports.get(GRPC_PORT_NAME), ports.get(METRICS_PORT_NAME)
        if grpc_port is None or metrics_port is None:
            problems.append(f"{where}: needs container ports named {GRPC_PORT_NAME!r} and {METRICS_PORT_NAME!r}")
            continue
        if config.port != grpc_port or config.metrics_port != metrics_port:
            problems.append(
                f"{where}: ConfigMap port/metrics_port {config.port}/{config.metrics_port} "
                f"!= container ports {grpc_port}/{metrics_port}"
            )
        if config.http_port != ports.get(HTTP_PORT_NAME, 0):
            problems.append(f"{where}: ConfigMap http_port {config.http_port} != container port named "
                            f"{HTTP_PORT_NAME!r} {ports.get(HTTP_PORT_NAME)} (0 and no such port: REST off)")
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if not grace > config.shutdown_grace_s:
            problems.append(
                f"{where}: terminationGracePeriodSeconds {grace} must exceed shutdown_grace_s "
                f"{config.shutdown_grace_s}, or the kubelet kills calls mid-drain"
            )
        for container in pod["containers"]:
            # The server ignores ORTSERVE_* variables that name no setting: a typo would go unnoticed.
            unknown = [
                e["name"]
                for e in container.get("env", [])
                if e["name"].startswith("ORTSERVE_")
                and e["name"].removeprefix("ORTSERVE_").lower() not in SETTING_NAMES
            ]
            if unknown:
                problems.append(f"{where}: env {unknown} name no server setting (ortserve serve --help)")
        problems += _probe_problems(where, pod, grpc_port)
        problems += _security_problems(where, pod)
        problems += _scrape_annotation_problems(where, dep, metrics_port)
    return problems


def _probe_problems(where: str, pod: Obj, grpc_port: int) -> list[str]:
    problems = []
    for container in pod["containers"]:
        for probe_name in PROBES:
            probe = container.get(probe_name)
            if probe is None:
                problems.append(f"{where}: container {container['name']} has no {probe_name}")
                continue
            port = probe.get("grpc", {}).get("port")
            service = probe.get("grpc", {}).get("service", "")
            if service != PROBE_SERVICES[probe_name]:
                problems.append(
                    f"{where}: {probe_name} asks health service {service!r}, expected {PROBE_SERVICES[probe_name]!r}"
                )
            # Native gRPC probes take integer ports only; a name is rejected by the API server.
            if not isinstance(port, int) or isinstance(port, bool):
                problems.append(f"{where}: {probe_name} must be a native grpc probe with an integer port, got {probe}")
            elif port != grpc_port:
                problems.append(f"{where}: {probe_name} probes port {port}, the gRPC port is {grpc_port}")
    return problems


def _security_problems(where: str, pod: Obj) -> list[str]:
    problems = []
    pod_ctx = pod.get("securityContext", {})
    if pod_ctx.get("runAsNonRoot") is not True or not pod_ctx.get("runAsUser"):
        problems.append(f"{where}: pod must set runAsNonRoot: true and a non-zero runAsUser")
    emptydirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    for container in pod["containers"]:
        ctx = container.get("securityContext", {})
        if ctx.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: container {container['name']} needs readOnlyRootFilesystem: true")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: container {container['name']} needs allowPrivilegeEscalation: false")
        if "ALL" not in ctx.get("capabilities", {}).get("drop", []):
            problems.append(f"{where}: container {container['name']} must drop ALL capabilities")
        resources = container.get("resources", {})
        for section in ("requests", "limits"):
            if not {"cpu", "memory"} <= resources.get(section, {}).keys():
                problems.append(f"{where}: container {container['name']} needs cpu and memory {section}")
        # With a read-only root, the artifact cache must be a writable emptyDir mount.
        cache = next((e.get("value") for e in container.get("env", []) if e["name"] == "ORTSERVE_ARTIFACT_CACHE"), None)
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
        mount = mounts.get(cache) if cache else None
        if mount is None or mount["name"] not in emptydirs or mount.get("readOnly"):
            problems.append(f"{where}: ORTSERVE_ARTIFACT_CACHE ({cache}) must be a writable emptyDir mount")
    return problems


def _scrape_annotation_problems(where: str, dep: Manifest, metrics_port: int) -> list[str]:
    notes = dep.doc["spec"]["template"].get("metadata", {}).get("annotations", {})
    problems = []
    if notes.get("prometheus.io/scrape") != "true":
        problems.append(f'{where}: pod annotation prometheus.io/scrape must be "true"')
    if notes.get("prometheus.io/port") != str(metrics_port):
        problems.append(
            f"{where}: prometheus.io/port {notes.get('prometheus.io/port')!r} != metrics port {metrics_port}"
        )
    if not str(notes.get("prometheus.io/path", "")).startswith("/"):
        problems.append(f"{where}: prometheus.io/path must be an absolute path")
    return problems


def config_mount_problems(objects: list[Manifest]) -> list[str]:
    """The --config path each server passes is a key of the mounted ConfigMap."""
    problems = []
    configmaps = {m.name: m.doc for m in of_kind(objects, "ConfigMap")}
    for dep in of_kind(objects, "Deployment"):
        pod = pod_spec(dep)
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            args = container.get("args", [])
            if "--config" not in args or args.index("--config") + 1 >= len(args):
                problems.append(f"{dep.label()}: container {container['name']} passes no --config path")
                continue
            path = args[args.index("--config") + 1]
            found = False
            for mount in container.get("volumeMounts", []):
                volume = volumes.get(mount["name"], {})
                prefix = mount["mountPath"].rstrip("/") + "/"
                if "configMap" in volume and path.startswith(prefix):
                    data = configmaps.get(volume["configMap"]["name"], {}).get("data", {})
                    found = found or path.removeprefix(prefix) in data
            if not found:
                problems.append(f"{dep.label()}: --config {path} is not a key of a mounted ConfigMap")
    return problems


def reference_problems(objects: list[Manifest], documented_secrets: set[str]) -> list[str]:
    """Every ServiceAccount, ConfigMap (and key), PVC and Secret a pod names exists.

    Secrets hold tokens and are created by hand (deploy/consul/README.md), so a Secret that is
    not among the objects must be one that README documents.
    """
    names: dict[str, set[str]] = {}
    for m in objects:
        names.setdefault(m.kind, set()).add(m.name)
    configmaps = {m.name: m.doc.get("data", {}) for m in of_kind(objects, "ConfigMap")}
    problems = []
    for workload in of_kind(objects, "Deployment") + of_kind(objects, "Job"):
        pod, where = pod_spec(workload), workload.label()
        account = pod.get("serviceAccountName", "default")
        if account not in names.get("ServiceAccount", set()):
            problems.append(f"{where}: ServiceAccount {account!r} is not defined")
        for volume in pod.get("volumes", []):
            if "configMap" in volume and volume["configMap"]["name"] not in configmaps:
                problems.append(f"{where}: ConfigMap {volume['configMap']['name']!r} is not defined")
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim is not None and claim not in names.get("PersistentVolumeClaim", set()):
                problems.append(f"{where}: PersistentVolumeClaim {claim!r} is not defined")
        for container in pod["containers"]:
            for env in container.get("env", []):
                source = env.get("valueFrom", {})
                if "configMapKeyRef" in source:
                    ref = source["configMapKeyRef"]
                    if ref["key"] not in configmaps.get(ref["name"], {}):
                        problems.append(f"{where}: env {env['name']} reads missing ConfigMap key {ref}")
                if "secretKeyRef" in source:
                    secret = source["secretKeyRef"]["name"]
                    if secret not in names.get("Secret", set()) | documented_secrets:
                        problems.append(f"{where}: Secret {secret!r} is neither defined nor documented")
    return problems


def _target_port(service_port: Obj, workload: Manifest) -> int | None:
    target = service_port.get("targetPort", service_port["port"])
    if isinstance(target, int):
        return target if target in container_ports(workload).values() else None
    return container_ports(workload).get(target)


def service_problems(objects: list[Manifest]) -> list[str]:
    problems = []
    deployments = of_kind(objects, "Deployment")
    for svc in of_kind(objects, "Service"):
        where, spec = svc.label(), svc.doc["spec"]
        backends = [d for d in deployments if d.namespace == svc.namespace and selects(spec["selector"], pod_labels(d))]
        if not backends:
            problems.append(f"{where}: selector {spec['selector']} matches no Deployment's pods")
        for port in spec["ports"]:
            name = port.get("name", "")
            for dep in backends:
                target = _target_port(port, dep)
                if target is None:
                    problems.append(
                        f"{where}: port {name!r} targets {port.get('targetPort')!r}, not a port of {dep.name}"
                    )
                # Istio picks the protocol from the port name prefix or appProtocol.
                elif target == container_ports(dep).get(GRPC_PORT_NAME) and (
                    not name.startswith("grpc") or port.get("appProtocol") != "grpc"
                ):
                    problems.append(f"{where}: the gRPC port must be named grpc* with appProtocol grpc, got {name!r}")
    return problems


def hpa_problems(objects: list[Manifest]) -> list[str]:
    problems = []
    deployments = {(d.namespace, d.name): d for d in of_kind(objects, "Deployment")}
    targeted = set()
    for hpa in of_kind(objects, "HorizontalPodAutoscaler"):
        spec, where = hpa.doc["spec"], hpa.label()
        ref = spec["scaleTargetRef"]
        dep = deployments.get((hpa.namespace, ref["name"]))
        if ref["kind"] != "Deployment" or dep is None:
            problems.append(f"{where}: scaleTargetRef {ref['kind']}/{ref['name']} is not a Deployment here")
        else:
            targeted.add(dep.name)
            if "replicas" in dep.doc["spec"]:
                problems.append(f"{where}: {dep.name} sets spec.replicas, which fights the autoscaler on every apply")
        if spec.get("minReplicas", 1) > spec["maxReplicas"]:
            problems.append(f"{where}: minReplicas > maxReplicas")
        cpu = [m for m in spec.get("metrics", []) if m.get("resource", {}).get("name") == "cpu"]
        if not cpu:
            problems.append(f"{where}: no CPU resource metric")
    for dep in deployments.values():
        if dep.name not in targeted:
            problems.append(f"{dep.label()}: no HorizontalPodAutoscaler targets it")
    return problems


def pdb_problems(objects: list[Manifest]) -> list[str]:
    problems = []
    deployments = of_kind(objects, "Deployment")
    covered: dict[str, int] = {d.name: 0 for d in deployments}
    for pdb in of_kind(objects, "PodDisruptionBudget"):
        selector = pdb.doc["spec"]["selector"].get("matchLabels", {})
        hits = [d for d in deployments if d.namespace == pdb.namespace and selects(selector, pod_labels(d))]
        if len(hits) != 1:
            problems.append(f"{pdb.label()}: selector {selector} matches {len(hits)} Deployments' pods, expected 1")
        for dep in hits:
            covered[dep.name] += 1
    problems += [f"Deployment/{name}: covered by {n} PodDisruptionBudgets" for name, n in covered.items() if n != 1]
    return problems


def service_monitor_problems(objects: list[Manifest]) -> list[str]:
    problems = []
    services = of_kind(objects, "Service")
    deployments = of_kind(objects, "Deployment")
    for monitor in of_kind(objects, "ServiceMonitor"):
        spec, where = monitor.doc["spec"], monitor.label()
        namespaces = spec.get("namespaceSelector", {}).get("matchNames", [monitor.namespace])
        picked = [
            s
            for s in services
            if s.namespace in namespaces
            and selects(spec["selector"]["matchLabels"], s.doc["metadata"].get("labels", {}))
        ]
        if not picked:
            problems.append(f"{where}: selector matches no Service (ServiceMonitors select Service labels)")
        for endpoint in spec["endpoints"]:
            shadowed = [
                r["targetLabel"] for r in endpoint.get("relabelings", []) if r.get("targetLabel") in METRIC_LABELS
            ]
            if shadowed or set(spec.get("podTargetLabels", [])) & METRIC_LABELS:
                problems.append(
                    f"{where}: target labels {shadowed or spec['podTargetLabels']} collide with the server's metric "
                    f"labels {sorted(METRIC_LABELS)} (Prometheus would rename ours to exported_*)"
                )
            for svc in picked:
                port = next((p for p in svc.doc["spec"]["ports"] if p.get("name") == endpoint["port"]), None)
                if port is None:
                    problems.append(f"{where}: Service {svc.name} has no port named {endpoint['port']!r}")
                    continue
                for dep in deployments:
                    if not selects(svc.doc["spec"]["selector"], pod_labels(dep)):
                        continue
                    notes = dep.doc["spec"]["template"].get("metadata", {}).get("annotations", {})
                    if _target_port(port, dep) != container_ports(dep).get(METRICS_PORT_NAME):
                        problems.append(f"{where}: endpoint port {endpoint['port']!r} is not {dep.name}'s metrics port")
                    if endpoint.get("path", "/metrics") != notes.get("prometheus.io/path"):
                        problems.append(f"{where}: path {endpoint.get('path')} != {dep.name}'s prometheus.io/path")
    return problems


def _resolve_host(host: str, namespace: str, services: list[Manifest]) -> Manifest | None:
    """Istio host forms: name, name.ns, name.ns.svc, name.ns.svc.cluster.local (short = same ns)."""
    parts = host.split(".")
    name = parts[0]
    ns = parts[1] if len(parts) > 1 else namespace
    if len(parts) > 2 and ".".join(parts[2:]) not in ("svc", "svc.cluster.local"):
        return None
    return next((s for s in services if s.name == name and s.namespace == ns), None)


def istio_problems(objects: list[Manifest]) -> list[str]:
    problems: list[str] = []
    services = of_kind(objects, "Service")
    deployments = of_kind(objects, "Deployment")
    subsets: dict[str, set[str]] = {}
    for rule in of_kind(objects, "DestinationRule"):
        svc = _resolve_host(rule.doc["spec"]["host"], rule.namespace, services)
        if svc is None:
            problems.append(f"{rule.label()}: host {rule.doc['spec']['host']!r} is no Service here")
            continue
        subsets[svc.name] = set()
        for subset in rule.doc["spec"].get("subsets", []):
            subsets[svc.name].add(subset["name"])
            chosen = {**svc.doc["spec"]["selector"], **subset["labels"]}
            hits = [d.name for d in deployments if d.namespace == svc.namespace and selects(chosen, pod_labels(d))]
            if len(hits) != 1:
                problems.append(f"{rule.label()}: subset {subset['name']} selects pods of {hits}, expected one release")
    for vs in of_kind(objects, "VirtualService"):
        problems += _virtual_service_problems(vs, services, subsets)
    return problems


def _virtual_service_problems(vs: Manifest, services: list[Manifest], subsets: dict[str, set[str]]) -> list[str]:
    where, spec = vs.label(), vs.doc["spec"]
    problems = [
        f"{where}: host {h!r} is no Service here" for h in spec["hosts"] if not _resolve_host(h, vs.namespace, services)
    ]
    routes = spec["http"]
    for index, route in enumerate(routes):
        label = f"{where}: http[{index}] ({route.get('name', '')})"
        if "match" not in route and index != len(routes) - 1:
            problems.append(f"{label}: a rule without match catches everything; rules after it never apply")
        destinations = route["route"]
        weights = [d.get("weight") for d in destinations]
        numeric = all(isinstance(w, int) for w in weights)
        if len(destinations) > 1 and (not numeric or sum(weights) != 100):
            problems.append(f"{label}: weights {weights} must all be set and sum to 100")
        if len(destinations) == 1 and weights[0] not in (None, 100):
            problems.append(f"{label}: a single destination takes weight 100, got {weights[0]}")
        for dest in destinations:
            target = dest["destination"]
            svc = _resolve_host(target["host"], vs.namespace, services)
            if svc is None:
                problems.append(f"{label}: destination host {target['host']!r} is no Service here")
                continue
            if "subset" in target and target["subset"] not in subsets.get(svc.name, set()):
                problems.append(
                    f"{label}: subset {target['subset']!r} is not defined by a DestinationRule for {svc.name}"
                )
            # A rule without a port match serves every port of the Service (gRPC and REST): a destination that
            # names a port would send the other ports' calls to it.
            number = target.get("port", {}).get("number")
            matched = {m.get("port") for m in route.get("match", [])}
            if number is not None and matched != {number}:
                problems.append(f"{label}: destination port {number} without a match on port {number}: calls on "
                                f"Service {svc.name}'s other ports would go to it")
        # A release pin must lead to the release it names (x-ortserve-release: v2 -> subset v2).
        for match in route.get("match", []):
            pin = match.get("headers", {}).get("x-ortserve-release", {}).get("exact")
            if pin is not None and [d["destination"].get("subset") for d in destinations] != [pin]:
                problems.append(f"{label}: x-ortserve-release {pin!r} does not route to subset {pin!r} only")
    return problems


def job_problems(objects: list[Manifest], console_scripts: set[str]) -> list[str]:
    """Jobs run a command the image installs, from the same image repository as the servers."""
    problems = []
    server_repos = {
        split_image(c["image"])[0] for d in of_kind(objects, "Deployment") for c in pod_spec(d)["containers"]
    }
    injected = {
        m.name
        for m in of_kind(objects, "Namespace")
        if m.doc["metadata"].get("labels", {}).get("istio-injection") == "enabled"
    }
    for job in of_kind(objects, "Job"):
        pod = pod_spec(job)
        notes = job.doc["spec"]["template"].get("metadata", {}).get("annotations", {})
        # An injected sidecar keeps running after the job's container exits: the Job never completes.
        if job.namespace in injected and notes.get("sidecar.istio.io/inject") != "false":
            problems.append(f'{job.label()}: namespace has istio-injection; annotate sidecar.istio.io/inject: "false"')
        if pod.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(f"{job.label()}: restartPolicy must be Never or OnFailure")
        for container in pod["containers"]:
            command = container.get("command", [])
            if not command or command[0] not in console_scripts:
                problems.append(f"{job.label()}: command {command} is not a console script of pyproject.toml")
            if split_image(container["image"])[0] not in server_repos:
                problems.append(f"{job.label()}: image {container['image']} is not the server image {server_repos}")
    return problems


GRPC_CODES = frozenset(c.name for c in grpc.StatusCode)
DURATION_SECONDS = r"^\d+(\.\d+)?s$"  # the service config's JSON form of google.protobuf.Duration


def client_config_problems(config: Obj, objects: list[Manifest], services: set[str]) -> list[str]:
    """deploy/client/service-config.json: a valid gRPC service config (gRFCs A2, A6) for the served `services`, with
    a retry policy that matches what Istio does for callers in the mesh (deploy/istio), and a headless Service that
    resolves to the pods for callers outside it."""
    where = "deploy/client/service-config.json"
    problems: list[str] = []
    if config.get("loadBalancingConfig") != [{"round_robin": {}}]:
        problems.append(f"{where}: loadBalancingConfig must be round_robin (pick_first pins one pod)")
    policies = []
    for method in config.get("methodConfig", []):
        for name in method.get("name", []):
            if name.get("service") not in services:
                problems.append(f"{where}: methodConfig names service {name.get('service')!r}, not one the server "
                                f"serves {sorted(services)}")
        if "retryPolicy" in method:
            policies.append(method["retryPolicy"])
    if len(policies) != 1:
        return [*problems, f"{where}: expected one retryPolicy, found {len(policies)}"]
    policy = policies[0]
    attempts = policy.get("maxAttempts")
    if not isinstance(attempts, int) or not 2 <= attempts <= 5:
        problems.append(f"{where}: maxAttempts {attempts!r} must be 2..5 (gRPC caps it at 5)")
    for key in ("initialBackoff", "maxBackoff"):
        if not re.fullmatch(DURATION_SECONDS, str(policy.get(key, ""))):
            problems.append(f"{where}: {key} {policy.get(key)!r} must be a duration in seconds such as '0.05s'")
    if not isinstance(policy.get("backoffMultiplier"), int | float) or policy["backoffMultiplier"] <= 0:
        problems.append(f"{where}: backoffMultiplier must be > 0")
    codes = policy.get("retryableStatusCodes", [])
    problems += [f"{where}: {c!r} is no gRPC status code" for c in codes if c not in GRPC_CODES]
    if "UNAVAILABLE" not in codes:
        problems.append(f"{where}: UNAVAILABLE (a draining or lost pod) must be retryable")
    throttle = config.get("retryThrottling", {})
    if not 0 < throttle.get("maxTokens", 0) <= 1000 or not throttle.get("tokenRatio", 0) > 0:
        problems.append(f"{where}: retryThrottling needs maxTokens in (0, 1000] and tokenRatio > 0")
    # Callers in the mesh get the same policy from their sidecar: as many retries, on the same codes.
    for vs in of_kind(objects, "VirtualService"):
        for index, route in enumerate(vs.doc["spec"]["http"]):
            retries = route.get("retries", {})
            label = f"{vs.label()}: http[{index}] ({route.get('name', '')})"
            if retries.get("attempts") != (attempts or 0) - 1:
                problems.append(f"{label}: retries.attempts {retries.get('attempts')} != the client's maxAttempts "
                                f"{attempts} - 1")
            retry_on = set(str(retries.get("retryOn", "")).split(","))
            missing = [c for c in codes if c.lower().replace("_", "-") not in retry_on]
            if missing:
                problems.append(f"{label}: retryOn {retries.get('retryOn')!r} lacks {missing}")
    for rule in of_kind(objects, "DestinationRule"):
        outlier = rule.doc["spec"].get("trafficPolicy", {}).get("outlierDetection")
        if not outlier or not outlier.get("consecutiveGatewayErrors"):
            problems.append(f"{rule.label()}: no outlierDetection on gateway errors: a dead pod keeps its share")
        elif outlier.get("maxEjectionPercent", 10) >= 100:
            problems.append(f"{rule.label()}: maxEjectionPercent 100 can eject a one-pod release entirely")
    headless = [s for s in of_kind(objects, "Service") if s.doc["spec"].get("clusterIP") == "None"]
    if not any(p.get("name", "").startswith("grpc") for s in headless for p in s.doc["spec"]["ports"]):
        problems.append("no headless Service with a grpc port: a client's round_robin would see one virtual IP")
    return problems
