"""What deploy/k8s gives a container, read from the manifests, and how a built image must agree with it.

The server's contract comes from k8s/release/deployment.yaml (the overlays only rename it, add labels and pin the
image tag) with the ConfigMaps of k8s/base; the publisher's from k8s/job-publish.yaml. Nothing here is assumed: the
smoke runs the image with exactly these users, arguments, mounts, environment and config file, and
`image_problems` names every way the image disagrees with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ortserve_devtools.checkout import ROOT

K8S = ROOT / "deploy" / "k8s"


class ContractError(Exception):
    """The manifests do not say what the smoke needs (which file, which field)."""


@dataclass(frozen=True)
class Mount:
    name: str
    path: str
    read_only: bool
    kind: str  # configMap, persistentVolumeClaim or emptyDir
    files: dict[str, str] = field(default_factory=dict)  # a configMap's keys and texts


@dataclass(frozen=True)
class ContainerContract:
    """One container of a workload, as the kubelet would run it."""

    where: str
    uid: int
    gid: int
    command: tuple[str, ...] | None  # None: the image's ENTRYPOINT
    args: tuple[str, ...]
    ports: dict[str, int]
    env: dict[str, str]  # literal values and configMapKeyRef values resolved
    secret_env: tuple[str, ...]  # names set from Secrets (the smoke sets none of them)
    mounts: tuple[Mount, ...]
    read_only_root: bool
    drop_capabilities: tuple[str, ...]
    no_new_privileges: bool
    grace_s: int
    probes: dict[str, tuple[int, str]]  # probe -> (port, grpc health service)
    annotations: dict[str, str]

    def mount_at(self, path: str) -> Mount | None:
        """The mount that holds `path` (the deepest one)."""
        holders = [m for m in self.mounts if path == m.path or path.startswith(m.path.rstrip("/") + "/")]
        return max(holders, key=lambda m: len(m.path), default=None)

    def config_file(self) -> tuple[str, str]:
        """(path, text) of the `--config` file the arguments name, from the ConfigMap mounted there."""
        args = list(self.args)
        if "--config" not in args or args.index("--config") + 1 >= len(args):
            raise ContractError(f"{self.where}: the arguments {args} name no --config file")
        path = args[args.index("--config") + 1]
        mount = self.mount_at(path)
        if mount is None or mount.kind != "configMap":
            raise ContractError(f"{self.where}: --config {path} is not in a mounted ConfigMap")
        key = path[len(mount.path.rstrip("/")) + 1:]
        if key not in mount.files:
            raise ContractError(f"{self.where}: ConfigMap volume {mount.name} has no key {key!r} for --config {path}")
        return path, mount.files[key]


def _load(path: Path) -> list[dict[str, Any]]:
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as e:
        raise ContractError(f"{path}: {e}") from None


def _configmaps(k8s: Path) -> dict[str, dict[str, str]]:
    maps = {}
    for path in sorted((k8s / "base").glob("*.yaml")):
        for doc in _load(path):
            if doc.get("kind") == "ConfigMap":
                maps[doc["metadata"]["name"]] = dict(doc.get("data") or {})
    return maps


def _find(path: Path, kind: str) -> dict[str, Any]:
    found = [d for d in _load(path) if d.get("kind") == kind]
    if len(found) != 1:
        raise ContractError(f"{path}: expected one {kind}, found {len(found)}")
    return found[0]


def contract_of(workload: dict[str, Any], configmaps: dict[str, dict[str, str]], where: str) -> ContainerContract:
    """The first container of a Deployment or Job."""
    template = workload["spec"]["template"]
    pod = template["spec"]
    container = pod["containers"][0]
    security = pod.get("securityContext", {})
    if "runAsUser" not in security:
        raise ContractError(f"{where}: the pod sets no runAsUser")
    env: dict[str, str] = {}
    secret_env = []
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "configMapKeyRef" in item.get("valueFrom", {}):
            ref = item["valueFrom"]["configMapKeyRef"]
            try:
                env[item["name"]] = configmaps[ref["name"]][ref["key"]]
            except KeyError:
                raise ContractError(f"{where}: env {item['name']} reads ConfigMap {ref['name']} key {ref['key']}, "
                                    "which deploy/k8s/base does not define") from None
        else:
            secret_env.append(item["name"])
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = []
    for m in container.get("volumeMounts", []):
        volume = volumes.get(m["name"])
        if volume is None:
            raise ContractError(f"{where}: volumeMount {m['name']} has no volume")
        kind = next(k for k in ("configMap", "persistentVolumeClaim", "emptyDir") if k in volume)
        files = configmaps.get(volume["configMap"]["name"], {}) if kind == "configMap" else {}
        mounts.append(Mount(m["name"], m["mountPath"], bool(m.get("readOnly", False)), kind, files))
    probes = {}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        grpc = container.get(probe, {}).get("grpc")
        if grpc is not None:
            probes[probe] = (int(grpc["port"]), str(grpc.get("service", "")))
    csc = container.get("securityContext", {})
    return ContainerContract(
        where=where,
        uid=int(security["runAsUser"]),
        gid=int(security.get("runAsGroup", security["runAsUser"])),
        command=tuple(container["command"]) if "command" in container else None,
        args=tuple(str(a) for a in container.get("args", [])),
        ports={p["name"]: int(p["containerPort"]) for p in container.get("ports", [])},
        env=env,
        secret_env=tuple(secret_env),
        mounts=tuple(mounts),
        read_only_root=bool(csc.get("readOnlyRootFilesystem", False)),
        drop_capabilities=tuple(csc.get("capabilities", {}).get("drop", [])),
        no_new_privileges=csc.get("allowPrivilegeEscalation") is False,
        grace_s=int(pod.get("terminationGracePeriodSeconds", 30)),
        probes=probes,
        annotations=dict(template.get("metadata", {}).get("annotations", {})),
    )


def server_contract(k8s: Path = K8S) -> ContainerContract:
    path = k8s / "release" / "deployment.yaml"
    return contract_of(_find(path, "Deployment"), _configmaps(k8s), str(path.relative_to(k8s.parent.parent)))


def publisher_contract(k8s: Path = K8S) -> ContainerContract:
    path = k8s / "job-publish.yaml"
    return contract_of(_find(path, "Job"), _configmaps(k8s), str(path.relative_to(k8s.parent.parent)))


def expand(args: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """The kubelet's $(VAR) expansion of container arguments (an unknown name stays as written)."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


@dataclass(frozen=True)
class ImageConfig:
    """What the smoke reads from `podman image inspect`."""

    user: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    exposed_ports: frozenset[int]
    env: dict[str, str]

    @classmethod
    def from_inspect(cls, info: dict[str, Any]) -> ImageConfig:
        config = info.get("Config", {})
        return cls(
            user=str(config.get("User", "")),
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            exposed_ports=frozenset(int(p.split("/")[0]) for p in (config.get("ExposedPorts") or {})),
            env=dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e),
        )


def image_problems(server: ContainerContract, image: ImageConfig, settings: dict[str, Any]) -> list[str]:
    """Every way the image disagrees with the server's manifests; `settings` is the --config file's TOML."""
    problems = []
    if image.user.split(":")[0] != str(server.uid):
        problems.append(f"image USER {image.user!r} is not the pod's runAsUser {server.uid}")
    if server.command is None and image.entrypoint != ("ortserve",):
        problems.append(f"the Deployment runs the image's ENTRYPOINT, which is {list(image.entrypoint)}, not "
                        "['ortserve']")
    if server.args != image.cmd:
        problems.append(f"the Deployment's args {list(server.args)} differ from the image's CMD {list(image.cmd)}")
    # http_port 0 (or absent) is no REST port: not one the config listens on.
    ports = {settings.get("port"), settings.get("metrics_port")}
    if settings.get("http_port"):
        ports.add(settings["http_port"])
    if set(server.ports.values()) != image.exposed_ports or ports != image.exposed_ports:
        problems.append(f"ports: the image exposes {sorted(image.exposed_ports)}, the Deployment declares "
                        f"{sorted(server.ports.values())}, its config listens on {sorted(map(str, ports))}")
    grpc_port = server.ports.get("grpc")
    for probe, (port, _service) in server.probes.items():
        if port != grpc_port:
            problems.append(f"{probe} probes port {port}, not the grpc port {grpc_port}")
    if server.annotations.get("prometheus.io/port") != str(server.ports.get("http-metrics")):
        problems.append(f"prometheus.io/port {server.annotations.get('prometheus.io/port')!r} is not the "
                        f"http-metrics port {server.ports.get('http-metrics')}")
    cache = server.env.get("ORTSERVE_ARTIFACT_CACHE", "")
    if image.env.get("ORTSERVE_ARTIFACT_CACHE") != cache:
        problems.append(f"ORTSERVE_ARTIFACT_CACHE: the image says {image.env.get('ORTSERVE_ARTIFACT_CACHE')!r}, "
                        f"the Deployment {cache!r}")
    holder = server.mount_at(cache) if cache else None
    if holder is None or holder.read_only:
        problems.append(f"the artifact cache {cache!r} is on no writable volume of the Deployment")
    if not server.read_only_root:
        problems.append("the Deployment's root filesystem is writable (readOnlyRootFilesystem is not true)")
    return problems
