"""The bf16 precision's engine: the FP32 graph read by ONNX Runtime, run by OpenVINO in bf16 (issue 46).

On every machine: `bf16_refusal`'s reasons from plain values, the options a bf16 engine refuses, and a process whose
OpenVINO library cannot be loaded refusing bf16 at load (naming the library) while FP32 engines serve on. On a CPU
with bf16 (tests/support/bf16.py says why others skip): a bf16 engine of the tiny BERT's model.onnx keeps the FP32
engine's contract (inputs, outputs, input validation, the non-finite check, every dtype it exchanges, close),
answers within bf16's rounding of FP32 while really computing in bf16, and gives 8 threads at once the very answers
it gives them one at a time.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.bf16 import require_bf16

from ortserve.engine_ext import (
    Engine,
    EngineClosedError,
    EngineOptions,
    InputError,
    NonFiniteOutputError,
    bf16_refusal,
    openvino_streams,
    ort_version,
)
from ortserve.prepare.accuracy import Batch, builtin_eval_set, make_batches

TEXTS = 400  # the built-in corpus's first 400: every kind and length of text it has, 25 batches, a second's work
# bf16 keeps 8 significant bits: each weight and activation rounds by up to 2^-8 (0.4%) of itself, and the tiny
# BERT's two layers round every value a dozen times over, so a logit may move by a few percent of the text's largest
# logit (measured on this corpus: at most 1.2%). 5% leaves room for another CPU's accumulation order.
BF16_RELATIVE = 0.05
# OpenVINO at f32 and ONNX Runtime compute the same FP32 graph: they differ by float rounding only.
FP32_ROUNDING = 1e-4
THREADS = 8
ROUNDS = 3
NO_BF16_CAPABILITIES = "FP32 INT8 BIN EXPORT_IMPORT"  # what OpenVINO reports on an AVX2 CPU (Haswell, EPYC Zen 2/3)
BF16_CAPABILITIES = "BF16 WINOGRAD FP32 FP16 INT8 BIN EXPORT_IMPORT"  # ...and on a Sapphire Rapids

# -- on every machine -----------------------------------------------------------------------------------------


def test_bf16_refusal_names_what_the_cpu_lacks() -> None:
    no_bf16 = bf16_refusal(NO_BF16_CAPABILITIES, "bf16")
    assert no_bf16.startswith(f"this CPU has no bf16 arithmetic (OpenVINO reports {NO_BF16_CAPABILITIES}; ")
    assert "AVX-512 BF16 or AMX" in no_bf16 and no_bf16.endswith("serve the fp32 or int8 version of this model here")
    assert "OpenVINO reports no capabilities" in bf16_refusal("", "")
    # Whole words: a capability merely containing the letters is not BF16.
    assert bf16_refusal("FP32 NOTBF16 BF16X", "bf16").startswith("this CPU has no bf16 arithmetic")

    not_compiled = bf16_refusal(BF16_CAPABILITIES, "f32")
    assert not_compiled == ("OpenVINO compiled the model at f32, not bf16, although the CPU reports BF16: serve the "
                            "fp32 version")
    assert "an unknown precision" in bf16_refusal(BF16_CAPABILITIES, "")
    assert bf16_refusal(BF16_CAPABILITIES, "bf16") == ""


@pytest.mark.parametrize(("options", "message"), [
    ({"precision": "bf16", "device": "cuda"}, "precision 'bf16' runs on the CPU (OpenVINO); device must be 'cpu', "
                                              "got 'cuda'"),
    ({"precision": "bf16", "device": "cuda:1"}, "device must be 'cpu', got 'cuda:1'"),
    ({"precision": "fp8"}, "precision must be one of 'fp32', 'int8', 'fp16', 'bf16'; got 'fp8'"),
    ({"precision": "BF16"}, "precision must be one of 'fp32', 'int8', 'fp16', 'bf16'; got 'BF16'"),
], ids=["bf16-on-cuda", "bf16-on-cuda-1", "fp8", "upper-case"])
def test_options_a_bf16_engine_refuses_are_value_errors(tiny_bundle: Path, options: dict[str, str],
                                                        message: str) -> None:
    # Refused before the model is read: no GPU and no OpenVINO needed to say so.
    with pytest.raises(ValueError) as caught:
        Engine(tiny_bundle / "model.onnx", EngineOptions(**options))
    assert message in str(caught.value)


@pytest.mark.parametrize(("threads", "cores", "streams"), [
    (1, 2, 2),  # the one-thread session: two runs side by side, as ONNX Runtime runs them
    (2, 2, 1),  # the wide one fills the cores alone
    (2, 8, 4), (3, 8, 2), (4, 2, 1),  # never more threads than fit, never no stream
    (0, 16, 1),  # OpenVINO picks the threads: one stream
])
def test_a_bf16_engine_gets_as_many_streams_as_runs_fit_the_cores(threads: int, cores: int, streams: int) -> None:
    """An OpenVINO stream runs one request at a time: with one, concurrent runs of the one-thread session queued."""
    assert openvino_streams(threads, cores) == streams


def test_the_precision_option_defaults_to_fp32_and_survives_a_copy() -> None:
    # ModelInstance copies the server's options and sets the manifest's precision on the copy.
    assert EngineOptions().precision == "fp32"
    bf16 = EngineOptions(precision="bf16", intra_op_threads=3)
    copied = copy.copy(bf16)
    assert (copied.precision, copied.intra_op_threads) == ("bf16", 3)
    copied.precision = "fp32"
    assert bf16.precision == "bf16"


# Runs in a fresh process (the library path is read at import): what a bf16 and an FP32 engine do there.
WITHOUT_OPENVINO = """
import json, sys
if sys.argv[2] == "hide":
    sys.modules["openvino"] = None  # find_spec("openvino") is None: as if the package were not installed
import numpy as np
from ortserve.engine_ext import Engine, EngineOptions, ModelLoadError, openvino_cpu_capabilities
model, out = sys.argv[1], {}
try:
    Engine(model, EngineOptions(precision="bf16"))
    out["bf16"] = "loaded"
except ModelLoadError as e:
    out["bf16"] = str(e)
try:
    out["capabilities"] = openvino_cpu_capabilities()
except ModelLoadError as e:
    out["capabilities"] = "ModelLoadError: " + str(e)
fp32 = Engine(model)
ids = np.array([[2, 40, 41, 3]], dtype=np.int64)
logits = fp32.run({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
out["fp32"] = [fp32.runtime, list(logits["logits"].shape)]
print(json.dumps(out))
"""


@pytest.mark.parametrize(("library", "hide", "reason"), [
    ("/nonexistent/libopenvino_c.so", "", "cannot load OpenVINO's C library '/nonexistent/libopenvino_c.so': "
                                          "/nonexistent/libopenvino_c.so: cannot open shared object file"),
    ("libm.so.6", "", "'libm.so.6' has no ov_core_create; the bf16 precision needs OpenVINO >= 2023.1"),
    ("", "hide", "the bf16 precision runs on OpenVINO, which is not installed: pip install openvino"),
], ids=["missing-file", "not-openvino", "not-installed"])
def test_without_a_loadable_openvino_bf16_is_a_load_error_and_fp32_still_serves(tiny_bundle: Path, tmp_path: Path,
                                                                                library: str, hide: str,
                                                                                reason: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ORTSERVE_OPENVINO_LIB"}
    if library:
        env["ORTSERVE_OPENVINO_LIB"] = library
    model = str(tiny_bundle / "model.onnx")
    result = subprocess.run([sys.executable, "-c", WITHOUT_OPENVINO, model, hide or "show"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert out["bf16"].startswith(f"cannot load model '{model}': {reason}"), out["bf16"]
    assert out["capabilities"].startswith(f"ModelLoadError: {reason}"), out["capabilities"]
    assert out["fp32"] == [f"onnxruntime {ort_version()}", [1, 2]]  # OpenVINO's absence costs FP32 nothing


# -- on a CPU with bf16 ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def batches(tiny_bundle: Path) -> list[Batch]:
    """The texts as the server pads them, in corpus order (most rows padded), batches of 16."""
    texts = builtin_eval_set().texts[:TEXTS]
    return make_batches(tiny_bundle / "tokenizer.json", 32, texts, 16, by_length=False)


@pytest.fixture(scope="module")
def engines(tiny_bundle: Path) -> Iterator[dict[str, Engine]]:
    require_bf16()
    model = str(tiny_bundle / "model.onnx")
    opened = {"fp32": Engine(model), "bf16": Engine(model, EngineOptions(precision="bf16"))}
    yield opened
    for engine in opened.values():
        engine.close()


def _tensors(engine: Engine) -> list[list[tuple[str, str, list[int]]]]:
    return [[(t.name, t.dtype, list(t.shape)) for t in tensors] for tensors in (engine.inputs, engine.outputs)]


def test_a_bf16_engine_keeps_the_fp32_engines_tensors_and_says_what_runs_it(engines: dict[str, Engine]) -> None:
    fp32, bf16 = engines["fp32"], engines["bf16"]
    assert _tensors(bf16) == _tensors(fp32)
    assert [t.name for t in bf16.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert _tensors(bf16)[1] == [("logits", "float32", [-1, 2])]  # symbolic batch kept: ORT read them
    assert fp32.runtime == f"onnxruntime {ort_version()}"
    assert bf16.runtime.startswith("openvino 20") and bf16.runtime.endswith(" bf16"), bf16.runtime
    assert (bf16.device, bf16.path, bf16.closed) == ("cpu", fp32.path, False)


def _logits(engine: Engine, batches: list[Batch]) -> np.ndarray:
    return np.concatenate([engine.run(b.feed)["logits"] for b in batches])


def test_bf16_answers_within_bf16_rounding_of_fp32_and_really_computes_in_bf16(
        engines: dict[str, Engine], batches: list[Batch], tiny_bundle: Path) -> None:
    import openvino

    fp32, bf16 = _logits(engines["fp32"], batches), _logits(engines["bf16"], batches)
    assert bf16.dtype == np.float32 and bf16.shape == fp32.shape == (TEXTS, 2)
    delta = np.abs(bf16 - fp32).max(axis=1)
    allowed = BF16_RELATIVE * np.maximum(1.0, np.abs(fp32).max(axis=1))
    worst = int(np.argmax(delta / allowed))
    assert (delta <= allowed).all(), f"text {worst}: |delta| {delta[worst]:.4g} > {allowed[worst]:.4g}"

    # The same graph compiled by OpenVINO at f32 gives ONNX Runtime's answers: the engine's differ by far more, so
    # the bf16 its runtime names is the arithmetic it does, not a label.
    request = openvino.Core().compile_model(str(tiny_bundle / "model.onnx"), "CPU",
                                            {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    at_f32 = np.concatenate([np.asarray(request.infer(b.feed)[0]) for b in batches])
    assert np.abs(at_f32 - fp32).max() <= FP32_ROUNDING
    assert np.abs(bf16 - fp32).max() > 20 * FP32_ROUNDING


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_any_thread_count_compiles_at_bf16(engines: dict[str, Engine], batches: list[Batch], tiny_bundle: Path,
                                           threads: int) -> None:
    # 0 leaves the count to OpenVINO (the engine then passes one property fewer); the server opens 1 and N.
    with Engine(str(tiny_bundle / "model.onnx"), EngineOptions(precision="bf16", intra_op_threads=threads)) as engine:
        assert engine.runtime == engines["bf16"].runtime
        got, fp32 = _logits(engine, batches[:4]), _logits(engines["fp32"], batches[:4])
    assert (np.abs(got - fp32).max(axis=1) <= BF16_RELATIVE * np.maximum(1.0, np.abs(fp32).max(axis=1))).all()


def test_eight_threads_at_once_get_exactly_their_sequential_answers(engines: dict[str, Engine],
                                                                    batches: list[Batch]) -> None:
    """Each caller runs on its own infer request: a shared one would hand a thread another's logits or shapes."""
    bf16 = engines["bf16"]
    expected = [bf16.run(b.feed)["logits"] for b in batches]
    assert len({e.tobytes() for e in expected}) == len(batches)  # every batch's answer tells it apart
    start = threading.Barrier(THREADS)

    def worker(index: int) -> int:
        order = [(index * 3 + i) % len(batches) for i in range(len(batches))]  # different shapes at the same moment
        start.wait()
        exact = 0
        for _ in range(ROUNDS):
            for i in order:
                got = bf16.run(batches[i].feed)["logits"]
                exact += int(got.dtype == np.float32 and np.array_equal(got, expected[i]))
        return exact

    with ThreadPoolExecutor(THREADS) as pool:
        exact_counts = list(pool.map(worker, range(THREADS), timeout=120))
    assert exact_counts == [ROUNDS * len(batches)] * THREADS


def test_a_closed_bf16_engine_refuses_runs(engines: dict[str, Engine], batches: list[Batch],
                                           tiny_bundle: Path) -> None:
    engine = Engine(str(tiny_bundle / "model.onnx"), EngineOptions(precision="bf16"))
    np.testing.assert_array_equal(engine.run(batches[0].feed)["logits"], engines["bf16"].run(batches[0].feed)["logits"])
    engine.close()
    assert engine.closed
    with pytest.raises(EngineClosedError, match=r"engine for model '.*model\.onnx' is closed"):
        engine.run(batches[0].feed)
    engine.close()  # again: a no-op


def _ids(rows: int = 2, seq: int = 5) -> np.ndarray:
    return np.full((rows, seq), 7, dtype=np.int64)


def _feeds(**replace: object) -> dict[str, object]:
    feeds: dict[str, object] = {"input_ids": _ids(), "attention_mask": _ids(), "token_type_ids": _ids() * 0}
    feeds.update(replace)
    return {k: v for k, v in feeds.items() if v is not None}


BAD_FEEDS: dict[str, Callable[[], dict[str, object]]] = {
    "missing": lambda: _feeds(attention_mask=None),
    "unexpected": lambda: _feeds(position_ids=_ids()),
    "dtype": lambda: _feeds(input_ids=_ids().astype(np.int32)),
    "float": lambda: _feeds(input_ids=_ids().astype(np.float32)),
    "rank": lambda: _feeds(input_ids=np.ones(5, dtype=np.int64)),
    "shared-dimension": lambda: _feeds(attention_mask=_ids(2, 6)),
    "not-an-array": lambda: _feeds(input_ids=[[1, 2]]),
    "strings": lambda: _feeds(input_ids=np.array([["a", "b"]])),
}


@pytest.mark.parametrize("case", sorted(BAD_FEEDS))
def test_bad_feeds_are_the_fp32_engines_input_errors(engines: dict[str, Engine], case: str) -> None:
    # One validation in front of both runtimes: OpenVINO never sees a feed ONNX Runtime's engine would refuse.
    messages = []
    for precision in ("fp32", "bf16"):
        with pytest.raises(InputError) as caught:
            engines[precision].run(BAD_FEEDS[case]())
        messages.append(str(caught.value))
    assert messages[1] == messages[0]
    assert engines["bf16"].run(_feeds())["logits"].shape == (2, 2)  # and it serves on


def test_non_finite_outputs_are_checked_as_at_fp32(engines: dict[str, Engine], models: Any) -> None:
    # The same check after either runtime: a NaN from OpenVINO is refused by name unless check_finite is off.
    x = np.array([[1.0, -1.0, 0.0, 2.0]], dtype=np.float32)
    messages = []
    for precision in ("fp32", "bf16"):
        with pytest.raises(NonFiniteOutputError) as caught:
            Engine(models.log, EngineOptions(precision=precision)).run({"x": x})
        messages.append(str(caught.value))
    assert messages[1] == messages[0] and messages[0].startswith("output 'y' has 2 non-finite values (NaN/Inf) of 4")
    allowed = Engine(models.log, EngineOptions(precision="bf16", check_finite=False)).run({"x": x})
    assert list(allowed) == ["y", "z"]  # both outputs, in the model's order
    assert np.isnan(allowed["y"][0, 1]) and np.isneginf(allowed["y"][0, 2])
    np.testing.assert_array_equal(allowed["z"], np.abs(x))


def test_every_dtype_the_engine_exchanges_reaches_openvino_and_back(engines: dict[str, Engine], models: Any) -> None:
    # int32, float64 and bool in; int64, float64, float32 and bool out; values bf16 holds exactly, so equal.
    feeds = {"a": np.array([-3, 0, 7, 2**31 - 1], dtype=np.int32), "b": np.array([1.5, -2.25, 4.0, 0.0]),
             "c": np.array([True, False, False, True]), "d": np.arange(6, dtype=np.float32).reshape(2, 3)}
    expected = Engine(models.types).run(feeds)
    got = Engine(models.types, EngineOptions(precision="bf16")).run(feeds)
    assert list(got) == list(expected) == ["a_int64", "b_signed", "d_double", "c_not"]
    for name, want in expected.items():
        assert got[name].dtype == want.dtype, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)
