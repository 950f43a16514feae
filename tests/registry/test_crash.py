"""A publish killed (SIGKILL) at each step leaves no partial record, and the next publish works.

The CLI pauses at a named point when ORTSERVE_TEST_PAUSE_AT is set (ortserve/registry/pausepoints.py),
so the kill lands at an exact step instead of a timing guess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ortserve_devtools.consul_standin import ConsulStandin

from ortserve.registry.artifacts import bundle_digest
from ortserve.registry.catalog import read_model_state
from ortserve.registry.connect import open_store

REPO = Path(__file__).resolve().parents[2]
Cli = Callable[..., subprocess.CompletedProcess[str]]


def publish_and_kill_at(point: str, registry_args: list[str], bundle: Path, cwd: Path,
                        extra: tuple[str, ...] = ()) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTSERVE_", "CONSUL_HTTP"))}
    env.update(PYTHONPATH=str(REPO), ORTSERVE_TEST_PAUSE_AT=f"{point}:60")
    proc = subprocess.Popen([sys.executable, "-m", "ortserve.registry.cli", *registry_args, "publish",
                             "--model", "m", "--version", "v2", "--bundle", str(bundle), *extra],
                            cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    line = ""
    while f"paused at {point}" not in line:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, f"publish exited before {point}"
        assert time.monotonic() < deadline, f"never reached {point}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def _kv_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "kv").rglob("*")) if p.is_file()}


@pytest.mark.parametrize("point", ["publish-upload", "publish-after-upload", "publish-before-txn"])
def test_file_store_publish_killed_leaves_no_record(cli: Cli, tmp_path: Path, bundles: dict[str, Path],
                                                    point: str) -> None:
    root = tmp_path / "store"
    args = ["--registry", root.as_uri()]
    assert cli(*args, "publish", "--model", "m", "--version", "v1", "--bundle", str(bundles["a"]), "--weight",
               "100", cwd=tmp_path).returncode == 0
    before = _kv_files(root)
    publish_and_kill_at(point, args, bundles["b"], tmp_path, ("--weight", "10"))
    assert _kv_files(root) == before
    state = read_model_state(open_store(root.as_uri()), "m")
    assert set(state.versions) == {"v1"} and dict(state.routing.weights) == {"v1": 100}  # type: ignore[union-attr]
    # Only whole artifacts under their final names (a killed upload leaves at most a dot-temp file).
    whole = {r.artifact.sha256 for r in state.versions.values()} | {bundle_digest(bundles["b"])[0]}
    for tar in (root / "artifacts" / "sha256").glob("*.tar"):
        assert tar.name.removesuffix(".tar") in whole
    # The interrupted publish can simply be run again.
    result = cli(*args, "publish", "--model", "m", "--version", "v2", "--bundle", str(bundles["b"]), "--weight",
                 "10", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    state = read_model_state(open_store(root.as_uri()), "m")
    assert dict(state.routing.weights) == {"v1": 90, "v2": 10}  # type: ignore[union-attr]


def test_file_store_txn_killed_mid_apply_is_completed_by_the_next_reader(
        cli: Cli, tmp_path: Path, bundles: dict[str, Path]) -> None:
    """The version record and the routing change are one transaction: killed after the first file
    was renamed into place, the journal makes the next reader finish it (never half of it)."""
    root = tmp_path / "store"
    args = ["--registry", root.as_uri()]
    assert cli(*args, "publish", "--model", "m", "--version", "v1", "--bundle", str(bundles["a"]), "--weight",
               "100", cwd=tmp_path).returncode == 0
    publish_and_kill_at("filestore-mid-apply", args, bundles["b"], tmp_path, ("--weight", "10"))
    assert (root / "journal.json").exists()
    half = _kv_files(root)
    routing_on_disk = json.loads(half["kv/models/m/routing.json"])["value"]
    assert "kv/models/m/versions/v2.json" in half and '"v2"' not in routing_on_disk  # really half applied
    result = cli(*args, "show", "m", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc["versions"]) == {"v1", "v2"}
    assert doc["routing"]["weights"] == {"v1": 90, "v2": 10}
    assert not (root / "journal.json").exists()


def test_consul_publish_killed_before_txn_leaves_no_record(cli: Cli, tmp_path: Path,
                                                           bundles: dict[str, Path]) -> None:
    with ConsulStandin() as s:
        args = ["--registry", s.url(), "--artifacts", (tmp_path / "art").as_uri()]
        assert cli(*args, "publish", "--model", "m", "--version", "v1", "--bundle", str(bundles["a"]),
                   cwd=tmp_path).returncode == 0
        keys_before = sorted(s.state.entries)
        publish_and_kill_at("publish-before-txn", args, bundles["b"], tmp_path, ("--weight", "10"))
        assert sorted(s.state.entries) == keys_before == ["ortserve/models/m/versions/v1"]
