"""Fixtures for the hot-reload tests: tiny real bundles and a registry on each backend.

Backends: the file store, the Consul stand-in as a real process on a free port, and a real Consul
agent when CONSUL_HTTP_ADDR is set (each test gets its own key prefix there).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # importlib mode does not add sibling modules

from ortserve_devtools.bert_bundle import build_tiny_bundle
from reload_harness import Registry, make_registry

BACKENDS = ["file", "standin", "consul"]


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """bundle(seed, **sizes) -> a tiny random-weight BERT bundle; distinct seeds give distinct bytes."""
    root = tmp_path_factory.mktemp("reload-bundles")
    built: dict[tuple[object, ...], Path] = {}

    def make(seed: int, **sizes: int) -> Path:
        key = (seed, *sorted(sizes.items()))
        if key not in built:
            name = f"seed{seed}" + "".join(f"-{k}{v}" for k, v in sorted(sizes.items()))
            built[key] = build_tiny_bundle(root / name, seed=seed, **sizes).path
        return built[key]

    return make


@pytest.fixture(params=BACKENDS)
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    """The same test over the file store, the Consul stand-in process, and a real agent (if any)."""
    yield from make_registry(request.param, tmp_path)


@pytest.fixture
def file_registry(tmp_path: Path) -> Iterator[Registry]:
    yield from make_registry("file", tmp_path)
