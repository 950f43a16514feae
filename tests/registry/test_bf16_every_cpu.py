"""A bf16 version is refused, with what to do instead, on a CPU without bf16: shown on every machine by emulating one.

bf16 runs on OpenVINO, which computes in bf16 only where the CPU has AVX-512 BF16 or AMX; elsewhere it would quietly
compute in FP32 or emulate bf16 slowly, so the engine refuses the version at load, and the accuracy gate refuses to
judge a bf16 copy it cannot run. CI's AVX2 EPYCs are such CPUs, and this machine may not be: the check runs the
product under qemu-user emulating an AVX2-only CPU (Haswell: no AVX-512, no AMX; OpenVINO's capabilities come from
the emulated CPUID, as ORT's kernel dispatch does in test_int8_every_cpu.py). There, loading a bf16 bundle must raise
ModelLoadError saying the CPU has no bf16 and to serve the fp32 or int8 version, the FP32 source must still load,
and `optimize_bundle(..., "bf16")` must refuse with OptimizeError saying the gate cannot measure bf16 on this CPU,
leaving nothing behind. Where this machine has bf16, the same bundle loads natively: the refusal is the CPU's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.bf16 import bf16_unavailable
from support.instances import options

from ortserve.bundle.manifest import load_manifest
from ortserve.prepare.accuracy import builtin_eval_set
from ortserve.prepare.optimize import optimize_bundle
from ortserve.service.instance import ModelInstance

QEMU = shutil.which("qemu-x86_64")
# slow: bf16 on an emulated AVX2 CPU (qemu-user)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(QEMU is None, reason="qemu-user is not installed (scripts/bootstrap dev installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                       reason="the openvino package is not installed: without it bf16 is refused as not installed, "
                              "before any CPU is asked (tests/engine/test_bf16_engine.py tests that refusal)"),
]
AVX2_CPU = "Haswell-noTSX"
EVAL_TEXTS = 40
"""The emulated gate's evaluation texts (the bundle's eval.txt): the refusal comes after the source's logits, which
the whole built-in corpus would take a minute of emulation to compute."""
# Runs in the emulated process: what OpenVINO sees, each load and the optimisation, as one JSON object on stdout.
EMULATED = """
import json, sys
from ortserve.engine_ext import ModelLoadError, openvino_cpu_capabilities
from ortserve.prepare.optimize import OptimizeError, optimize_bundle
from ortserve.service.config import Settings
from ortserve.service.instance import ModelInstance, instance_options
bf16, source, small, dest = sys.argv[1:]
out = {"capabilities": openvino_cpu_capabilities()}
for name, bundle in (("bf16", bf16), ("fp32", source)):
    try:
        instance = ModelInstance.load(bundle, instance_options(Settings()))
        out[name] = "loaded: " + instance.engine.runtime
        instance.close()
    except ModelLoadError as e:
        out[name] = "ModelLoadError: " + str(e)
try:
    optimize_bundle(small, dest, "bf16")
    out["optimize"] = "written"
except OptimizeError as e:
    out["optimize"] = "OptimizeError: " + str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bf16-every-cpu")
    source = build_tiny_bundle(root / "source", seed=7).path
    # No gate: this machine may have no bf16 to run one on; the bundle is what a bf16 machine publishes, less the
    # gate's report, which the load does not read.
    bf16 = optimize_bundle(source, root / "bf16", "bf16", gate=None).path
    small = root / "small"
    shutil.copytree(source, small)
    (small / "eval.txt").write_text("\n".join(builtin_eval_set().texts[:EVAL_TEXTS]) + "\n", encoding="utf-8")
    return {"source": source, "bf16": bf16, "small": small, "dest": root / "emulated-bf16"}


def test_bf16_is_refused_on_a_cpu_without_it_and_fp32_serves_there(bundles: dict[str, Path], tmp_path: Path) -> None:
    assert load_manifest(bundles["bf16"]).precision == "bf16"
    assert QEMU is not None
    result = subprocess.run([QEMU, "-cpu", AVX2_CPU, sys.executable, "-c", EMULATED, str(bundles["bf16"]),
                             str(bundles["source"]), str(bundles["small"]), str(bundles["dest"])],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])

    # The emulation is what it claims: OpenVINO sees a CPU without BF16 (so the emulated CPUID reached it).
    assert "BF16" not in out["capabilities"].split() and "FP32" in out["capabilities"].split(), out["capabilities"]
    model = bundles["bf16"] / "model.onnx"
    assert out["bf16"] == (f"ModelLoadError: cannot load model '{model}': this CPU has no bf16 arithmetic (OpenVINO "
                           f"reports {out['capabilities']}; bf16 needs AVX-512 BF16 or AMX: AMD Zen 4 or Intel "
                           "Sapphire Rapids and later): serve the fp32 or int8 version of this model here")
    assert out["fp32"].startswith("loaded: onnxruntime "), out["fp32"]

    refusal = out["optimize"]
    assert refusal.startswith(f"OptimizeError: {bundles['small']}: gate step failed: this CPU has no bf16 "
                              "arithmetic"), refusal
    assert "so the gate cannot measure bf16 answers here: optimise on a CPU with AVX-512 BF16 or AMX" in refusal
    assert not bundles["dest"].exists() and not list(bundles["dest"].parent.glob("*.tmp"))  # nothing left behind

    if not bf16_unavailable():  # this machine has bf16: the very bundle loads natively
        instance = ModelInstance.load(bundles["bf16"], options())
        try:
            assert instance.engine.runtime.startswith("openvino ") and instance.engine.runtime.endswith(" bf16")
        finally:
            instance.close()
