"""The committed generated code is what scripts/gen_proto makes from the .proto (reproducible)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
GENERATED = ("grpc_service_pb2.py", "grpc_service_pb2_grpc.py", "grpc_service_pb2.pyi")


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    if not (ROOT / "ortserve" / "proto" / "grpc_service.proto").exists():
        pytest.skip("source tree not available")
    grpc_tools = pytest.importorskip("grpc_tools")
    del grpc_tools
    subprocess.run([str(ROOT / "scripts" / "gen_proto"), str(tmp_path)], check=True, cwd=ROOT,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    committed_version = (ROOT / "ortserve/proto/grpc_service_pb2.py").read_text().splitlines()[4]
    fresh_version = (tmp_path / "ortserve/proto/grpc_service_pb2.py").read_text().splitlines()[4]
    if committed_version != fresh_version:
        pytest.skip(f"grpcio-tools differs from the one that generated the code ({committed_version})")
    for name in GENERATED:
        fresh = (tmp_path / "ortserve" / "proto" / name).read_text()
        assert fresh == (ROOT / "ortserve" / "proto" / name).read_text(), f"{name} is stale: run scripts/gen_proto"


def test_wire_names_match_kserve_v2() -> None:
    from ortserve.proto import grpc_service_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    assert {m.name for m in service.methods} == {
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer"}
    fields = {f.name: f.number for f in pb.ModelInferRequest.DESCRIPTOR.fields}
    assert fields == {"model_name": 1, "model_version": 2, "id": 3, "parameters": 4, "inputs": 5,
                      "outputs": 6, "raw_input_contents": 7}
    contents = {f.name: f.number for f in pb.InferTensorContents.DESCRIPTOR.fields}
    assert contents["bytes_contents"] == 8 and contents["fp32_contents"] == 6
