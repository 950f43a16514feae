"""The native front end is built wherever gRPC C++ is installed (scripts/bootstrap dev installs it), so the suite's
native runs cannot be skipped without a failure saying why."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ortserve import engine_ext


def _grpc_cpp_installed() -> bool:
    if shutil.which("pkg-config") is None or shutil.which("protoc") is None or shutil.which("grpc_cpp_plugin") is None:
        return False
    return subprocess.run(["pkg-config", "--exists", "grpc++"], check=False).returncode == 0


def test_frontend_is_built_when_grpc_cpp_is_installed() -> None:
    if not _grpc_cpp_installed():
        pytest.skip("gRPC C++ is not installed here (libgrpc++-dev, protobuf-compiler-grpc, pkg-config)")
    assert engine_ext.HAS_FRONTEND, f"gRPC C++ is installed but the engine was built without it: " \
                                    f"{engine_ext.FRONTEND_MISSING}"


def test_missing_frontend_is_explained() -> None:
    assert bool(engine_ext.FRONTEND_MISSING) is not engine_ext.HAS_FRONTEND
