"""An int8 bundle answers the same on every x86 CPU class, shown by running it on two.

ONNX Runtime multiplies int8 weights with VNNI or AMX where the CPU has them and with AVX2's VPMADDUBSW elsewhere,
whose int16 sums saturate for full 8-bit weights. `registry optimize` writes 7-bit weights, which no kernel can
saturate. The check: the same int8 model, run natively and under qemu-user emulating an AVX2-only CPU (Haswell: no
AVX-512, no VNNI; ORT's kernel dispatch reads the emulated CPUID), must give the same logits within float rounding
(the FP32 parts of the graph: 1e-4), pass its own load-time check there, and score the same in the accuracy gate.
On a CPU with VNNI or AMX, a full 8-bit graph of the same model must differ under the emulation: that proves the
emulated run took the AVX2 kernels, so the equality above means something.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle

from ortserve.bundle.cpu import cpu_info
from ortserve.bundle.manifest import load_manifest
from ortserve.bundle.references import ReferenceSet, read_references
from ortserve.prepare.accuracy import GateSettings, builtin_eval_set, compare, make_batches, open_session, run_outputs
from ortserve.prepare.optimize import optimize_bundle
from ortserve.service.verify import judge, rule_for

QEMU = shutil.which("qemu-x86_64")
# slow: int8 on an emulated AVX2 CPU (qemu-user)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(QEMU is None, reason="qemu-user is not installed (scripts/bootstrap dev installs it)"),
]
AVX2_CPU = "Haswell-noTSX"
FLOAT_ROUNDING = 1e-4
EMULATED_TEXTS = 334
"""The built-in corpus's first 334 texts (every kind and length it has), and the bundle's reference texts: the whole
corpus (1,669) takes qemu-user past the test's time limit."""
# Runs in the emulated process: each model's logits on the texts (a JSON list), in order, into one .npz.
EMULATED = """
import json, sys
import numpy as np
from ortserve.prepare.accuracy import make_batches, open_session, run_outputs
out, tokenizer, texts_json, *models = sys.argv[1:]
texts = json.loads(open(texts_json, encoding="utf-8").read())
batches = make_batches(tokenizer, 32, texts, 16)
np.savez(out, *[run_outputs(open_session(m, 2), batches, len(texts)) for m in models])
"""


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = tmp_path_factory.mktemp("int8-every-cpu")
    source = root / "source"
    build_tiny_bundle(source, seed=7)
    int8 = optimize_bundle(source, root / "int8", "int8", gate=GateSettings(speed_rounds=0)).path
    legacy = root / "legacy.onnx"  # what `registry optimize` wrote before: full 8-bit weights
    quantize_dynamic(source / "model.onnx", legacy, per_channel=True, weight_type=QuantType.QInt8)
    return {"source": source, "int8": int8, "legacy": legacy}


def _texts(refs: ReferenceSet) -> list[str]:
    first = list(builtin_eval_set().texts[:EMULATED_TEXTS])
    seen = set(first)
    return first + [t for t in dict.fromkeys(refs.texts) if t not in seen]


def _logits(models: list[Path], tokenizer: Path, texts: list[str]) -> list[np.ndarray]:
    batches = make_batches(tokenizer, 32, texts, 16)
    return [run_outputs(open_session(m, 2), batches, len(texts)) for m in models]


def _emulated(models: list[Path], tokenizer: Path, texts: list[str], tmp_path: Path) -> list[np.ndarray]:
    out, texts_json = tmp_path / "avx2.npz", tmp_path / "texts.json"
    texts_json.write_text(json.dumps(texts), encoding="utf-8")
    assert QEMU is not None
    result = subprocess.run([QEMU, "-cpu", AVX2_CPU, sys.executable, "-c", EMULATED, str(out), str(tokenizer),
                             str(texts_json), *map(str, models)], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-2000:]
    with np.load(out) as data:
        return [data[f"arr_{i}"] for i in range(len(models))]


def test_int8_answers_the_same_on_an_avx2_cpu(bundles: dict[str, Path], tmp_path: Path) -> None:
    tokenizer = bundles["source"] / "tokenizer.json"
    models = [bundles["int8"] / "model.onnx", bundles["legacy"]]
    manifest = load_manifest(bundles["int8"])
    assert manifest.references is not None and manifest.optimization is not None
    refs = read_references(bundles["int8"], manifest.references, 2)
    texts = _texts(refs)
    (int8_here, legacy_here), source = (_logits(models, tokenizer, texts),
                                        _logits([bundles["source"] / "model.onnx"], tokenizer, texts)[0])
    int8_avx2, legacy_avx2 = _emulated(models, tokenizer, texts, tmp_path)

    np.testing.assert_allclose(int8_avx2, int8_here, rtol=0, atol=FLOAT_ROUNDING)
    here, avx2 = (compare(source, x, min_margin=0.1) for x in (int8_here, int8_avx2))
    assert (avx2.agree, avx2.decisive_agree) == (here.agree, here.decisive_agree)  # the gate's verdict holds there

    # The bundle's own load-time check, as a server on that CPU would judge it.
    row = {text: i for i, text in enumerate(texts)}
    verdict = judge(refs, int8_avx2[[row[t] for t in refs.texts]], rule_for(manifest, "cpu"))
    assert verdict.result == "passed", verdict.line()

    if cpu_info().int8_exact_8bit:  # here VNNI or AMX: the full 8-bit graph saturates only in the emulation
        assert np.abs(legacy_avx2 - legacy_here).max() > 0.05
