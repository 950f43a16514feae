"""A stock KServe V2 client (tritonclient.grpc) gets the same logits as onnxruntime's own session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from support.reference import Reference
from support.server_process import ServerProcess, write_texts

TEXTS = ["tritonclient says hello", "a second, rather longer text sent through a stock client", "x"]


def test_tritonclient_infer_matches_onnxruntime(server: ServerProcess, tiny_bundle: Path, tmp_path: Path) -> None:
    script = Path(__file__).parents[1] / "support" / "triton_client.py"
    texts = write_texts(tmp_path / "texts.json", TEXTS)
    out = subprocess.run(
        [sys.executable, str(script), server.address, "classifier", str(texts)],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["dtype"] == "float32"
    assert reply["model_version"] == "1"
    assert reply["metadata"]["inputs"][0]["name"] == "TEXT"
    got = np.asarray(reply["logits"], dtype=np.float32)
    np.testing.assert_allclose(got, Reference(tiny_bundle).logits(TEXTS), atol=1e-5, rtol=0)
