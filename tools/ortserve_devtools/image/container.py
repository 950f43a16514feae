"""A container run the way the kubelet would run a ContainerContract: its user, read-only root, dropped
capabilities, volumes at their mount paths, environment, command and arguments (host networking here).

`run_arguments` is the pure part (tested without podman); `Container` runs it attached, its stdout (the server's JSON
log) going to a file that `events` reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ortserve_devtools.image.pod_contract import ContainerContract, ContractError, Mount, expand
from ortserve_devtools.image.podman import LIMIT_FLAGS, ImageError, podman, podman_command


def run_arguments(contract: ContainerContract, image: str, *, name: str, volumes: Mapping[str, Path],
                  env: Mapping[str, str] | None = None, extra_volumes: Sequence[tuple[Path, str, bool]] = (),
                  args: Sequence[str] | None = None) -> list[str]:
    """`podman run` arguments. `volumes` maps each of the contract's volume names to a host directory; `env`
    overrides or adds variables; `extra_volumes` (host, path, read_only) are mounts the manifests do not have (the
    smoke's registry); `args` replaces the contract's arguments (default: them, $(VAR)-expanded)."""
    out = ["run", "--rm", "--name", name, "--network", "host", *LIMIT_FLAGS, "--user", f"{contract.uid}:{contract.gid}"]
    if contract.read_only_root:
        out += ["--read-only", "--read-only-tmpfs=false"]  # no tmpfs the pod would not have: /tmp is a volume
    for capability in contract.drop_capabilities:
        out += ["--cap-drop", capability]
    if contract.no_new_privileges:
        out += ["--security-opt", "no-new-privileges"]
    missing = sorted(m.name for m in contract.mounts if m.name not in volumes)
    if missing:
        raise ContractError(f"{contract.where}: no host directory for the volumes {missing}")
    for mount in contract.mounts:
        out += ["--volume", f"{volumes[mount.name]}:{mount.path}:{'ro' if mount.read_only else 'rw'}"]
    for host, path, read_only in extra_volumes:
        out += ["--volume", f"{host}:{path}:{'ro' if read_only else 'rw'}"]
    merged = {**contract.env, **(env or {})}
    for key in sorted(merged):
        out += ["--env", f"{key}={merged[key]}"]
    if contract.command is not None:
        out += ["--entrypoint", json.dumps(list(contract.command))]
    out.append(image)
    out += list(args) if args is not None else expand(contract.args, merged)
    return out


def volume_dir(mount: Mount, root: Path) -> Path:
    """A host directory for a volume: a ConfigMap's files written out, else an empty directory open to every uid
    (the kubelet makes emptyDirs 0777; the pod's uid is not root)."""
    path = root / mount.name
    path.mkdir(parents=True, exist_ok=True)
    for key, text in mount.files.items():
        (path / key).write_text(text)
    os.chmod(path, 0o755 if mount.kind == "configMap" else 0o777)
    return path


class Container:
    """One attached `podman run`, owned by the smoke's main thread."""

    def __init__(self, arguments: list[str], log_path: Path) -> None:
        self.name = arguments[arguments.index("--name") + 1]
        self.log_path = log_path
        with log_path.open("w") as out:
            self.proc = subprocess.Popen(podman_command(*arguments), stdout=out, stderr=subprocess.STDOUT)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and (name is None or event.get("event") == name):
                out.append(event)
        return out

    def tail(self, lines: int = 12) -> str:
        return "\n  ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_event(self, name: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.events(name)
            if found:
                return found[0]
            if self.proc.poll() is not None:
                raise ImageError(f"container {self.name} exited {self.proc.returncode} before {name}:\n  {self.tail()}")
            time.sleep(0.1)
        raise ImageError(f"container {self.name} logged no {name} within {timeout_s:.0f} s:\n  {self.tail()}")

    def signal(self, signal_name: str) -> None:
        podman("kill", "--signal", signal_name, self.name)

    def wait(self, timeout_s: float) -> int | None:
        """The exit status, or None when it is still running after `timeout_s`."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def remove(self) -> None:
        """Stops it for good (SIGKILL) if it still runs."""
        if self.proc.poll() is None:
            podman("kill", "--signal", "KILL", self.name, check=False)
            self.wait(30)


def run_to_end(arguments: list[str], log_path: Path, timeout_s: float = 300.0) -> tuple[int, str]:
    """Runs a container that exits by itself (the publish Job); (exit status, its output)."""
    container = Container(arguments, log_path)
    status = container.wait(timeout_s)
    if status is None:
        container.remove()
        raise ImageError(f"container {container.name} ran past {timeout_s:.0f} s:\n  {container.tail()}")
    return status, log_path.read_text(errors="replace")
