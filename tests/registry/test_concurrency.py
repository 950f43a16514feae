"""Two writers at once: no lost update, every record readable, routing always sums to 100.

The 2 x 50 run uses the Python API in two worker processes (a CLI start costs seconds here, mostly
`import onnx`); a shorter run drives two real CLI processes against each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ortserve_devtools.consul_standin import ConsulStandin

from ortserve.registry.catalog import read_model_state
from ortserve.registry.connect import open_store

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 50

# Each worker publishes ROUNDS new versions with a weight; `publish --weight` is a read-modify-write
# of routing that keeps every existing version in the map (weights scaled, zeros kept), so a lost
# update shows up as a version missing from the final routing. After each write the worker checks
# the invariants on what it reads back.
WORKER = r"""
import random, sys
from ortserve.registry.connect import open_store
from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.catalog import read_model_state
from ortserve.registry.publishing import publish

url, artifacts, tag, rounds, bundle = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
store, art = open_store(url), ArtifactStore(artifacts)
rng = random.Random(tag)
for i in range(rounds):
    publish(store, art, model="m", version=f"{tag}-{i}", bundle_dir=bundle, weight=rng.randint(1, 20))
    state = read_model_state(store, "m")
    assert not state.problems, state.problems
    assert f"{tag}-{i}" in state.versions
    assert sum(state.routing.weights.values()) == 100, state.routing.weights
    assert set(state.routing.weights) <= set(state.versions)
print("ok", tag)
"""


@pytest.fixture(params=["file", "standin"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if request.param == "file":
        yield (tmp_path / "store").as_uri(), tmp_path / "store" / "artifacts"
    else:
        with ConsulStandin() as s:
            yield s.url(), tmp_path / "artifacts"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTSERVE_", "CONSUL_HTTP"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def test_two_processes_publish_and_route_50_times_each(target: tuple[str, Path], bundles: dict[str, Path],
                                                       tmp_path: Path) -> None:
    url, artifacts = target
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, url, str(artifacts), tag, str(ROUNDS),
                                 str(bundles["a"])], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for tag in ("x", "y")]
    for w in workers:
        out, err = w.communicate(timeout=240)
        assert w.returncode == 0, err[-2000:]
        assert out.startswith("ok")
    state = read_model_state(open_store(url), "m")
    expected = {f"{tag}-{i}" for tag in ("x", "y") for i in range(ROUNDS)}
    assert not state.problems
    assert set(state.versions) == expected  # no version record lost
    assert state.routing is not None
    assert set(state.routing.weights) == expected  # no routing update lost
    assert sum(state.routing.weights.values()) == 100
    assert len(state.routing.history) == 10
    assert len({r.artifact.sha256 for r in state.versions.values()}) == 1  # one artifact, stored once
    assert len(list((artifacts / "sha256").glob("*.tar"))) == 1


def test_two_cli_processes_at_once(cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path,
                                   bundles: dict[str, Path]) -> None:
    root = tmp_path / "store"
    args = ["--registry", root.as_uri()]
    assert cli(*args, "publish", "--model", "m", "--version", "base", "--bundle", str(bundles["a"]),
               "--weight", "100", cwd=tmp_path).returncode == 0
    failures: list[str] = []

    def operator(tag: str) -> None:
        for i in range(2):
            for step in (["publish", "--model", "m", "--version", f"{tag}{i}", "--bundle", str(bundles["b"]),
                          "--weight", "10"],
                         ["route", "m", "base=90", f"{tag}{i}=10"]):
                result = cli(*args, *step, cwd=tmp_path)
                if result.returncode != 0:
                    failures.append(f"{step}: {result.stderr}")

    threads = [threading.Thread(target=operator, args=(tag,)) for tag in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures
    state = read_model_state(open_store(root.as_uri()), "m")
    assert set(state.versions) == {"base", "x0", "x1", "y0", "y1"} and not state.problems
    assert state.routing is not None and sum(state.routing.weights.values()) == 100
    assert set(state.routing.weights) <= set(state.versions)
    # At least base + 4 publishes wrote routing (a route equal to the current weights is a no-op),
    # each pushing the previous weights onto the history.
    assert 4 <= len(state.routing.history) <= 8
    assert all(sum(h.values()) == 100 for h in state.routing.history)
