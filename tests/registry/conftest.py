"""Registry test fixtures: tiny real bundles, the Consul stand-in, and stores over each backend."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ortserve_devtools.consul_standin import ConsulStandin
from support.tiny_bundle import build_tiny_bundle

from ortserve.registry.address import ConsulAddress
from ortserve.registry.consulstore import ConsulStore
from ortserve.registry.filestore import FileStore
from ortserve.registry.store import Store

REPO = Path(__file__).resolve().parents[2]
REAL_CONSUL_SKIP = "CONSUL_HTTP_ADDR is not set: no real Consul agent to run the contract against"


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two valid bundles with different bytes ("a", "b"); read-only by convention."""
    root = tmp_path_factory.mktemp("bundles")
    return {"a": build_tiny_bundle(root / "a", seed=0), "b": build_tiny_bundle(root / "b", seed=1)}


@pytest.fixture
def standin() -> Iterator[ConsulStandin]:
    with ConsulStandin() as s:
        yield s


def real_consul_address(prefix: str) -> ConsulAddress:
    raw = os.environ["CONSUL_HTTP_ADDR"]
    scheme = "https" if raw.startswith("https://") else "http"
    hostport = raw.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    return ConsulAddress(host=host or hostport, port=int(port or 8500), scheme=scheme, prefix=prefix,
                         token=os.environ.get("CONSUL_HTTP_TOKEN") or None)


@pytest.fixture(params=["file", "standin", "consul"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The same store contract over FileStore, ConsulStore -> stand-in, ConsulStore -> real agent."""
    if request.param == "file":
        yield FileStore(tmp_path / "store", poll_s=0.02)
    elif request.param == "standin":
        with ConsulStandin() as s:
            store = ConsulStore(ConsulAddress(host="127.0.0.1", port=s.port, prefix="ortserve/"))
            yield store
            store.close()
    else:
        if not os.environ.get("CONSUL_HTTP_ADDR"):
            pytest.skip(REAL_CONSUL_SKIP)
        prefix = f"ortserve-test/{uuid.uuid4().hex}/"
        store = ConsulStore(real_consul_address(prefix))
        yield store
        store._client.kv.delete(prefix, recurse=True)
        store.close()


def _second_handle(store: Store) -> Store:
    if isinstance(store, FileStore):
        return FileStore(store.root, poll_s=0.02)
    assert isinstance(store, ConsulStore)
    return ConsulStore(store.address)


@pytest.fixture
def reopen() -> Callable[[Store], Store]:
    """Another, independent handle on the same store (as another process would have)."""
    return _second_handle


def _run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTSERVE_", "CONSUL_HTTP"))}
    full_env["PYTHONPATH"] = str(REPO)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "ortserve.registry.cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """cli(*args, cwd=..., env=...): the real `registry` CLI in a subprocess, on the source tree."""
    return _run_cli
