"""Loading: runtime binding, options, metadata, device fallback, and load failures."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from ortserve import engine_ext
from ortserve.engine_ext import Engine, EngineError, EngineOptions, ModelLoadError, _engine


def test_runtime_is_the_installed_onnxruntime_library() -> None:
    assert engine_ext.ort_version() == onnxruntime.__version__
    library = Path(engine_ext.library_path())
    assert library.is_file()
    assert library.parent == Path(onnxruntime.__file__).parent / "capi"
    assert library.name.startswith("libonnxruntime.so")


def test_init_again_with_the_same_library_is_a_no_op_and_another_is_refused() -> None:
    _engine._init(engine_ext.library_path())
    with pytest.raises(EngineError, match="already loaded from"):
        _engine._init("/usr/lib/other/libonnxruntime.so")


def _import_with_library(library: str) -> subprocess.CompletedProcess[str]:
    # The inherited environment decides which ortserve is imported (the installed one in CI).
    env = {**os.environ, "ORTSERVE_ONNXRUNTIME_LIB": library}
    return subprocess.run(
        [sys.executable, "-c", "import ortserve.engine_ext"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_import_fails_clearly_when_the_library_is_missing(tmp_path: Path) -> None:
    result = _import_with_library(str(tmp_path / "libonnxruntime.so.1"))
    assert result.returncode != 0
    assert "ImportError: ortserve.engine_ext: cannot load the ONNX Runtime library" in result.stderr


def test_import_fails_clearly_when_the_library_is_not_onnxruntime() -> None:
    libm = next(
        p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6") if Path(p).exists()
    )
    result = _import_with_library(libm)
    assert result.returncode != 0
    assert "has no OrtGetApiBase symbol" in result.stderr


def test_metadata_of_the_classifier(models) -> None:
    engine = Engine(models.classifier)
    assert [(i.name, i.dtype, i.shape) for i in engine.inputs] == [
        ("input_ids", "int64", [-1, -1]),
        ("attention_mask", "int64", [-1, -1]),
    ]
    assert [(o.name, o.dtype, o.shape) for o in engine.outputs] == [("logits", "float32", [-1, 3])]
    assert engine.path == str(models.classifier)
    assert engine.device == "cpu"
    assert not engine.closed
    assert repr(engine.inputs[0]) == "TensorInfo(name='input_ids', dtype='int64', shape=[-1, -1])"


def test_metadata_of_mixed_dtypes(models) -> None:
    engine = Engine(str(models.types))
    assert [(i.name, i.dtype, i.shape) for i in engine.inputs] == [
        ("a", "int32", [-1]),
        ("b", "float64", [-1]),
        ("c", "bool", [-1]),
        ("d", "float32", [2, 3]),
    ]
    assert [(o.name, o.dtype) for o in engine.outputs] == [
        ("a_int64", "int64"),
        ("b_signed", "float64"),
        ("d_double", "float32"),
        ("c_not", "bool"),
    ]


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(ModelLoadError, match=re.escape(f"cannot load model '{missing}': file not found")):
        Engine(missing)


def test_directory_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="is a directory"):
        Engine(tmp_path)


def test_garbage_file_gives_orts_reason(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    with pytest.raises(ModelLoadError) as caught:
        Engine(bogus)
    message = str(caught.value)
    assert f"cannot load model '{bogus}'" in message
    assert "Protobuf parsing failed" in message
    assert isinstance(caught.value, EngineError) and isinstance(caught.value, RuntimeError)


def test_unsupported_element_type_is_a_load_error(models) -> None:
    with pytest.raises(ModelLoadError, match="input 'text' has element type string"):
        Engine(models.string_input)


def test_bad_optimization_level_names_the_allowed_values(models) -> None:
    with pytest.raises(ValueError, match="'disable', 'basic', 'extended', 'all'; got 'fast'"):
        Engine(models.classifier, EngineOptions(graph_optimization_level="fast"))


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_every_optimization_level_gives_the_same_logits(models, token_batch, level: str) -> None:
    feeds = token_batch(np.random.default_rng(1), 3, 7)
    reference = Engine(models.classifier, EngineOptions(graph_optimization_level="disable")).run(feeds)["logits"]
    logits = Engine(models.classifier, EngineOptions(graph_optimization_level=level)).run(feeds)["logits"]
    np.testing.assert_allclose(logits, reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"intra_op_threads": -1}, "intra_op_threads must be >= 0"),
        ({"inter_op_threads": -2}, "inter_op_threads must be >= 0"),
        ({"device": "gpu"}, "device must be 'cpu', 'cuda' or 'cuda:N'"),
        ({"device": "cuda:x"}, "got 'cuda:x'"),
        ({"device": "cuda:"}, "got 'cuda:'"),
    ],
)
def test_bad_options_are_value_errors(models, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Engine(models.classifier, EngineOptions(**options))


def test_thread_and_spinning_options_are_accepted(models, token_batch) -> None:
    feeds = token_batch(np.random.default_rng(2), 2, 5)
    reference = Engine(models.classifier).run(feeds)["logits"]
    engine = Engine(models.classifier, EngineOptions(intra_op_threads=2, inter_op_threads=2, allow_spinning=True))
    np.testing.assert_allclose(engine.run(feeds)["logits"], reference, rtol=0, atol=1e-6)


def _idle_cpu_s_after_runs(engine: Engine, feeds: dict[str, np.ndarray]) -> float:
    """Process CPU seconds over 0.3 s of idle right after a burst of runs (the pool's threads, nothing else)."""
    for _ in range(20):
        engine.run(feeds)
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.3)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_spinning_threads_stop_when_the_run_returns_unless_told_to_keep_spinning(models, token_batch) -> None:
    # The server's default: spin between operators, never between calls (docs/history/benchmark-runs.md, run 18).
    feeds = token_batch(np.random.default_rng(3), 64, 64)
    stops = Engine(models.classifier, EngineOptions(intra_op_threads=2, allow_spinning=True))
    keeps = Engine(models.classifier, EngineOptions(intra_op_threads=2, allow_spinning=True, spin_between_runs=True))
    np.testing.assert_allclose(stops.run(feeds)["logits"], keeps.run(feeds)["logits"], rtol=0, atol=1e-6)
    kept, stopped = _idle_cpu_s_after_runs(keeps, feeds), _idle_cpu_s_after_runs(stops, feeds)
    assert kept >= 0.005, f"ORT's threads no longer spin after a run ({kept * 1000:.1f} ms CPU): the test cannot tell"
    assert stopped < kept / 3, f"idle CPU after runs: {stopped * 1000:.1f} ms stopping vs {kept * 1000:.1f} ms spinning"


@pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(),
    reason="this onnxruntime build has CUDA; the fallback path is for CPU-only builds",
)
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_falls_back_to_cpu_with_one_stderr_line(models, token_batch, capfd, device: str) -> None:
    engine = Engine(models.classifier, EngineOptions(device=device))
    err = capfd.readouterr().err
    assert engine.device == "cpu"
    lines = [line for line in err.splitlines() if "ortserve.engine" in line]
    assert len(lines) == 1
    assert lines[0].startswith("ortserve.engine: CUDA provider unavailable (")
    assert lines[0].endswith(f"running '{models.classifier}' on CPU")
    feeds = token_batch(np.random.default_rng(3), 2, 4)
    np.testing.assert_allclose(engine.run(feeds)["logits"], Engine(models.classifier).run(feeds)["logits"])


def test_context_manager_closes(models) -> None:
    with Engine(models.classifier) as engine:
        assert not engine.closed
    assert engine.closed
    assert "closed" in repr(engine)
