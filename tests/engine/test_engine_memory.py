"""Memory: out-of-memory runs in a capped CPU arena (gpu_oom_fallback off / lazy / warm, the cool-down, threads,
events),
shape buckets (bucket_shape, padded ModelInstance batches), an FP16 bundle on CPU, and the CUDA-only options on a
machine without a usable GPU.

A capped CPU arena is how the out-of-memory path is tested without a GPU: ORT's BFCArena fails a run over its cap
the same way the CUDA arena does over gpu_memory_limit_mb. The arena is one per process (support/arena.py).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ortserve_devtools.bert_bundle import build_tiny_bundle
from support.arena import CPU_ARENA_LIMIT_MB
from support.instances import options

from ortserve import engine_ext
from ortserve.engine_ext import Engine, EngineError, EngineOptions, InputError, OutOfMemoryError, bucket_shape
from ortserve.prepare.optimize import optimize_bundle
from ortserve.service.instance import ModelInstance, ShapeLadder, shape_ladder

SMALL = (2, 16)  # fits the capped arena
LARGE = (64, 256)  # does not: its attention scores alone are 64 x 2 x 256 x 256 floats (32 MiB)
VOCAB = 512  # build_tiny_bundle's default vocab_size
BFC_REASON = "Available memory of"  # BFCArena's words for a request over its cap
COOLDOWN_S = 1.5  # the rerun of LARGE on CPU takes ~0.1 s here: 15x margin before the cool-down ends
NO_CUDA = pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(),
    reason="this onnxruntime build has CUDA; these tests are of the CPU-only fallback",
)


@dataclass(frozen=True)
class Bert:
    model: Path  # tiny BERT, hidden 64, max_seq_len 512
    small: dict[str, np.ndarray]
    large: dict[str, np.ndarray]
    small_logits: np.ndarray  # of an uncapped engine
    large_logits: np.ndarray


def _feeds(rows: int, tokens: int, seed: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(1, VOCAB, size=(rows, tokens), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Bert:
    bundle = build_tiny_bundle(tmp_path_factory.mktemp("bert512"), hidden=64, layers=2, heads=2, max_position=512,
                               max_seq_len=512)
    model = bundle.path / "model.onnx"
    small, large = _feeds(*SMALL, seed=1), _feeds(*LARGE, seed=2)
    with Engine(model) as uncapped:
        small_logits, large_logits = uncapped.run(small)["logits"], uncapped.run(large)["logits"]
    # The tests below mean something only if the cap splits the two batches: a changed ORT must fail here, loudly.
    with Engine(model, EngineOptions(cpu_arena_limit_mb=CPU_ARENA_LIMIT_MB, gpu_oom_fallback="off")) as capped:
        np.testing.assert_allclose(capped.run(small)["logits"], small_logits, rtol=0, atol=1e-5)
        with pytest.raises(OutOfMemoryError, match=BFC_REASON):
            capped.run(large)
    return Bert(model=model, small=small, large=large, small_logits=small_logits, large_logits=large_logits)


def _capped(bert: Bert, **options: object) -> Engine:
    """An engine in the capped arena; tests close it (`with`): every capped session's weights live in that arena."""
    return Engine(bert.model, EngineOptions(cpu_arena_limit_mb=CPU_ARENA_LIMIT_MB, **options))


def _assert_logits(got: dict[str, np.ndarray], expected: np.ndarray) -> None:
    np.testing.assert_allclose(got["logits"], expected, rtol=0, atol=1e-5)


# -- gpu_oom_fallback="off" -----------------------------------------------------------------------------------------


def test_off_raises_out_of_memory_and_records_the_event(bert: Bert) -> None:
    with _capped(bert, gpu_oom_fallback="off") as capped:
        before = time.time()
        with pytest.raises(OutOfMemoryError) as caught:
            capped.run(bert.large)
        message = str(caught.value)
        assert f"model '{bert.model}' ran out of memory on cpu" in message
        assert message.endswith("(gpu_oom_fallback is off)")
        assert BFC_REASON in message
        assert isinstance(caught.value, EngineError)
        assert (capped.oom_errors, capped.fallback_runs, capped.has_fallback) == (1, 0, False)
        assert capped.cooldown_left_s == 0  # nothing to cool down to: batches keep going to the capped session
        [event] = capped.take_fallback_events()
        assert event["shape"] == list(LARGE)
        assert event["answered"] is False
        assert event["error"] == "gpu_oom_fallback is off"
        assert BFC_REASON in event["reason"] and "\n" not in event["reason"]
        assert before <= event["unix_s"] <= time.time()
        # The failed run left the arena usable: the next small batch is answered there.
        _assert_logits(capped.run(bert.small), bert.small_logits)
        assert capped.oom_errors == 1


# -- gpu_oom_fallback="lazy" / "warm" -------------------------------------------------------------------------------


def test_lazy_reruns_the_batch_on_a_cpu_session_made_on_first_need(bert: Bert) -> None:
    with _capped(bert, gpu_oom_fallback="lazy") as capped:
        _assert_logits(capped.run(bert.small), bert.small_logits)
        assert not capped.has_fallback  # a batch that fits never makes one
        _assert_logits(capped.run(bert.large), bert.large_logits)
        assert capped.has_fallback
        assert (capped.oom_errors, capped.fallback_runs) == (1, 1)
        [event] = capped.take_fallback_events()
        assert (event["shape"], event["answered"], event["error"]) == (list(LARGE), True, "")
        assert BFC_REASON in event["reason"] and "smaller than requested bytes of" in event["reason"]


def test_warm_loads_the_cpu_session_with_the_engine(bert: Bert) -> None:
    with _capped(bert, gpu_oom_fallback="warm") as capped:
        assert capped.has_fallback
        _assert_logits(capped.run(bert.large), bert.large_logits)
        assert (capped.oom_errors, capped.fallback_runs) == (1, 1)
        assert [e["answered"] for e in capped.take_fallback_events()] == [True]


def test_warm_without_a_cap_on_cpu_has_nothing_to_fall_back_from(bert: Bert) -> None:
    # Fallback applies on CUDA or in the capped arena; an uncapped CPU session would only load the model twice.
    with Engine(bert.model, EngineOptions(gpu_oom_fallback="warm")) as engine:
        assert not engine.has_fallback
        _assert_logits(engine.run(bert.large), bert.large_logits)
        assert (engine.oom_errors, engine.fallback_runs) == (0, 0)


# -- the cool-down --------------------------------------------------------------------------------------------------


def _wait_for_cooldown_to_end(engine: Engine, timeout_s: float) -> None:
    # Polled rather than slept: how long the rerun took does not matter, only that the breaker closed.
    deadline = time.monotonic() + timeout_s
    while engine.cooldown_left_s > 0:
        assert time.monotonic() < deadline, f"cool-down still {engine.cooldown_left_s:.2f} s after {timeout_s} s"
        time.sleep(0.05)


def test_batches_go_to_cpu_during_the_cool_down_and_to_the_device_after(bert: Bert) -> None:
    with _capped(bert, gpu_oom_fallback="lazy", gpu_fallback_cooldown_s=COOLDOWN_S) as capped:
        assert capped.cooldown_left_s == 0
        started = time.monotonic()
        _assert_logits(capped.run(bert.large), bert.large_logits)
        _assert_logits(capped.run(bert.small), bert.small_logits)
        left = capped.cooldown_left_s
        # The cool-down began after `started`, so both runs and the reading fell inside it if this holds.
        if (elapsed := time.monotonic() - started) >= COOLDOWN_S:
            pytest.skip(f"the two runs took {elapsed:.2f} s, past the {COOLDOWN_S} s cool-down: cannot tell")
        assert 0 < left <= COOLDOWN_S
        assert (capped.oom_errors, capped.fallback_runs) == (1, 2)  # the small batch too, though it fits
        assert len(capped.take_fallback_events()) == 1  # a cool-down run is no out-of-memory event

        _wait_for_cooldown_to_end(capped, timeout_s=COOLDOWN_S + 10)
        assert capped.cooldown_left_s == 0
        _assert_logits(capped.run(bert.small), bert.small_logits)
        assert (capped.oom_errors, capped.fallback_runs) == (1, 2)  # back on the capped session
        # ...which is really tried again: the large batch runs out of memory there a second time.
        _assert_logits(capped.run(bert.large), bert.large_logits)
        assert (capped.oom_errors, capped.fallback_runs) == (2, 3)
        assert capped.cooldown_left_s > 0


def test_inputs_the_model_rejects_are_input_errors_during_the_cool_down(bert: Bert) -> None:
    with _capped(bert, gpu_oom_fallback="lazy", gpu_fallback_cooldown_s=30.0) as capped:
        capped.run(bert.large)
        assert capped.cooldown_left_s > 0
        bad = {name: value.copy() for name, value in bert.small.items()}
        bad["input_ids"][0, 0] = VOCAB + 1000  # out of the embedding table: ORT's Gather rejects it
        with pytest.raises(InputError, match=rf"model '{bert.model}' rejected the inputs: .*out of data bounds"):
            capped.run(bad)


# -- threads --------------------------------------------------------------------------------------------------------


def test_concurrent_runs_all_answer_while_one_runs_out_of_memory(bert: Bert) -> None:
    with _capped(bert, gpu_oom_fallback="lazy") as capped:
        threads, runs = 4, 8
        start = threading.Barrier(threads + 1)

        def small_runs() -> list[np.ndarray]:
            start.wait()
            return [capped.run(bert.small)["logits"] for _ in range(runs)]

        def large_run() -> np.ndarray:
            start.wait()
            return capped.run(bert.large)["logits"]

        with ThreadPoolExecutor(threads + 1) as pool:
            smalls = [pool.submit(small_runs) for _ in range(threads)]
            large = pool.submit(large_run)
            np.testing.assert_allclose(large.result(timeout=120), bert.large_logits, rtol=0, atol=1e-5)
            for future in smalls:
                for logits in future.result(timeout=120):
                    np.testing.assert_allclose(logits, bert.small_logits, rtol=0, atol=1e-5)
        events = capped.take_fallback_events()
        # Small batches may run out of memory too while the large one holds the shared arena: all were answered.
        assert capped.oom_errors >= 1
        assert len(events) == capped.oom_errors
        assert all(e["answered"] and e["error"] == "" for e in events)
        assert list(LARGE) in [e["shape"] for e in events]
        assert capped.oom_errors <= capped.fallback_runs <= threads * runs + 1


# -- events ---------------------------------------------------------------------------------------------------------


def test_take_fallback_events_clears_and_keeps_the_newest_256(bert: Bert) -> None:
    with _capped(bert, gpu_oom_fallback="off") as capped:
        assert capped.take_fallback_events() == []
        for _ in range(260):
            with pytest.raises(OutOfMemoryError):
                capped.run(bert.large)
        events = capped.take_fallback_events()
        assert capped.oom_errors == 260
        assert len(events) == 256
        times = [e["unix_s"] for e in events]
        assert times == sorted(times)  # oldest first, and the 4 oldest were the ones dropped
        assert capped.take_fallback_events() == []
        assert sorted(events[0]) == ["answered", "error", "reason", "shape", "unix_s"]


# -- bucket_shape ---------------------------------------------------------------------------------------------------

ROWS = (1, 2, 4, 8)
TOKENS = (8, 16, 32)


@pytest.mark.parametrize(
    ("rows", "tokens", "bucket_rows", "bucket_tokens", "expected"),
    [
        (3, 10, ROWS, TOKENS, (4, 16)),
        (1, 1, ROWS, TOKENS, (1, 8)),
        (8, 32, ROWS, TOKENS, (8, 32)),  # a rung holds itself
        (5, 17, ROWS, TOKENS, (8, 32)),
        (9, 33, ROWS, TOKENS, (9, 33)),  # past the top rung: unchanged
        (20, 12, ROWS, TOKENS, (20, 16)),  # one dimension past its ladder, the other on it
        (5, 7, (), (), (5, 7)),  # no ladder: unchanged
        (5, 7, (), TOKENS, (5, 8)),
        (5, 7, ROWS, (), (8, 7)),
    ],
)
def test_bucket_shape_table(rows: int, tokens: int, bucket_rows: tuple[int, ...], bucket_tokens: tuple[int, ...],
                            expected: tuple[int, int]) -> None:
    assert bucket_shape(rows, tokens, bucket_rows, bucket_tokens) == expected


ladders = st.lists(st.integers(1, 600), max_size=8, unique=True).map(sorted)  # ascending, as config requires


def _rung(value: int, ladder: list[int]) -> int:
    """The rule, written out: the smallest rung that holds value, else value itself."""
    return min((rung for rung in ladder if rung >= value), default=value)


@settings(max_examples=500, deadline=None)
@given(rows=st.integers(1, 700), tokens=st.integers(1, 700), bucket_rows=ladders, bucket_tokens=ladders)
def test_bucket_shape_is_the_smallest_rung_that_holds_each(rows: int, tokens: int, bucket_rows: list[int],
                                                           bucket_tokens: list[int]) -> None:
    got = bucket_shape(rows, tokens, bucket_rows, bucket_tokens)
    for value, ladder, result in ((rows, bucket_rows, got[0]), (tokens, bucket_tokens, got[1])):
        assert result >= value
        assert result in ladder or result == value
        assert not [rung for rung in ladder if value <= rung < result]  # no smaller rung holds it
        assert result == _rung(value, ladder)


# -- shape ladders and padded batches through ModelInstance --------------------------------------------------------


def test_shape_ladder_is_on_when_asked_or_auto_on_cuda() -> None:
    asked = options(shape_buckets="on", bucket_rows=ROWS, bucket_tokens=(8, 16, 32, 64, 128))
    assert shape_ladder(asked, device="cpu", max_seq_len=48) == ShapeLadder(rows=ROWS, tokens=(8, 16, 32, 48))
    assert shape_ladder(asked, device="cpu", max_seq_len=32) == ShapeLadder(rows=ROWS, tokens=(8, 16, 32))
    auto = options(shape_buckets="auto", bucket_rows=ROWS, bucket_tokens=TOKENS)
    assert shape_ladder(auto, device="cpu", max_seq_len=32) == ShapeLadder()
    assert shape_ladder(auto, device="cuda:0", max_seq_len=32) == ShapeLadder(rows=ROWS, tokens=TOKENS)
    off = options(shape_buckets="off", bucket_rows=ROWS, bucket_tokens=TOKENS)
    assert shape_ladder(off, device="cuda:0", max_seq_len=32) == ShapeLadder()
    assert ShapeLadder().shapes() == []


@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("bert32"), max_seq_len=32).path


@pytest.fixture(scope="module")
def bucketed(small_bundle: Path) -> Iterator[ModelInstance]:
    classifier = ModelInstance.load(small_bundle, options(shape_buckets="on", bucket_rows=ROWS, bucket_tokens=TOKENS))
    # The property below is only worth something if batches are really padded up.
    assert classifier.ladder == ShapeLadder(rows=ROWS, tokens=TOKENS)
    yield classifier
    classifier.close()


@pytest.fixture(scope="module")
def unbucketed(small_bundle: Path) -> Iterator[ModelInstance]:
    classifier = ModelInstance.load(small_bundle, options(shape_buckets="off", bucket_rows=ROWS,
                                                                 bucket_tokens=TOKENS))
    assert classifier.ladder == ShapeLadder()
    yield classifier
    classifier.close()


batches = st.lists(st.lists(st.integers(1, VOCAB - 1), min_size=1, max_size=32), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(batch=batches)
def test_bucketed_padding_never_changes_a_reply(bucketed: ModelInstance, unbucketed: ModelInstance,
                                                batch: list[list[int]]) -> None:
    token_ids = [np.asarray(ids, dtype=np.int64) for ids in batch]
    logits = bucketed.run(token_ids)
    assert logits.shape == (len(batch), 2)  # the ladder's extra rows are dropped
    alone = np.concatenate([unbucketed.run([ids]) for ids in token_ids])
    np.testing.assert_allclose(logits, alone, rtol=0, atol=1e-5)


def test_warm_up_runs_the_ladder_and_describe_reports_it(bucketed: ModelInstance,
                                                         unbucketed: ModelInstance) -> None:
    assert len(bucketed.ladder.shapes()) == len(ROWS) * len(TOKENS)
    bucketed.warm_up()
    assert bucketed.describe() == {
        "kind": "classifier",
        "device": "cpu",
        "precision": "fp32",
        "runtime": f"onnxruntime {engine_ext.ort_version()}",
        "shape_buckets": {"rows": list(ROWS), "tokens": list(TOKENS)},
    }
    assert "shape_buckets" not in unbucketed.describe()


def test_text_classifier_passes_the_memory_options_and_describe_reports_fallbacks(bert: Bert) -> None:
    classifier = ModelInstance.load(bert.model.parent, options(cpu_arena_limit_mb=CPU_ARENA_LIMIT_MB,
                                                               gpu_oom_fallback="lazy", gpu_fallback_cooldown_s=30.0))
    try:
        assert "oom_errors" not in classifier.describe()
        # Rows of equal length: the same feeds as bert.large (mask all ones, token types zero).
        logits = classifier.run(list(bert.large["input_ids"]))
        np.testing.assert_allclose(logits, bert.large_logits, rtol=0, atol=1e-5)
        info = classifier.describe()
        assert (info["oom_errors"], info["fallback_runs"]) == (1, 1)
        assert 0 < info["cooldown_left_s"] <= 30.0
    finally:
        classifier.close()


# -- FP16 on CPU, CUDA-only options without CUDA --------------------------------------------------------------------


def test_fp16_bundle_on_cpu_answers_and_describe_says_to_serve_fp32(small_bundle: Path, unbucketed: ModelInstance,
                                                                     tmp_path: Path) -> None:
    half = tmp_path / "fp16"
    optimize_bundle(small_bundle, half, "fp16")
    classifier = ModelInstance.load(half, options())
    try:
        token_ids = [np.arange(1, 12, dtype=np.int64), np.arange(40, 45, dtype=np.int64)]
        # ORT's CPU provider computes in float32 from FP16-rounded weights: close to the FP32 bundle, not equal.
        np.testing.assert_allclose(classifier.run(token_ids), unbucketed.run(token_ids), rtol=0, atol=2e-2)
        info = classifier.describe()
        assert (info["device"], info["precision"], info["optimization"]) == ("cpu", "fp16", "fp16")
        assert info["precision_note"].startswith("FP16 graph on CPU")
        assert "precision_note" not in unbucketed.describe()
    finally:
        classifier.close()


def _cuda_runtime_loads() -> bool:
    # The names cuda_runtime.cc tries, in its order.
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def test_cuda_memory_info_is_an_engine_error_without_a_usable_gpu() -> None:
    # A runtime may be installed without a driver or a GPU (CUDA error 35 here): then the call itself fails.
    if not _cuda_runtime_loads():
        expected = r"^cannot load the CUDA runtime \(.*libcudart"
    elif not Path("/dev/nvidiactl").exists():
        expected = r"^selecting GPU 0: CUDA error \d+"
    else:
        free, total = engine_ext.cuda_memory_info(0)
        assert 0 < free <= total
        expected = ""
    if expected:
        with pytest.raises(EngineError, match=expected):
            engine_ext.cuda_memory_info(0)
    with pytest.raises(EngineError, match=r"cannot load the CUDA runtime|selecting GPU 4096: CUDA error"):
        engine_ext.cuda_memory_info(4096)  # no machine has this GPU


@NO_CUDA
def test_cuda_options_fall_back_to_cpu_cleanly(models, token_batch, capfd: pytest.CaptureFixture[str]) -> None:
    engine = Engine(models.classifier, EngineOptions(device="cuda", cuda_graphs=True, gpu_memory_limit_mb=64,
                                                     cudnn_conv_algo_search="heuristic", gpu_oom_fallback="warm"))
    lines = [line for line in capfd.readouterr().err.splitlines() if "ortserve.engine" in line]
    assert len(lines) == 1 and lines[0].startswith("ortserve.engine: CUDA provider unavailable (")
    assert engine.device == "cpu"
    assert engine.cuda_graphs is False
    assert engine.cuda_graphs_refused == ""  # no graph was refused: there was no CUDA to ask
    assert not engine.has_fallback  # nothing to fall back from on an uncapped CPU session
    feeds = token_batch(np.random.default_rng(4), 3, 6)
    np.testing.assert_allclose(engine.run(feeds)["logits"], Engine(models.classifier).run(feeds)["logits"],
                               rtol=0, atol=1e-6)
    assert (engine.oom_errors, engine.fallback_runs, engine.cooldown_left_s) == (0, 0, 0)


# -- option validation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cudnn_conv_algo_search": "fast"}, "cudnn_conv_algo_search must be one of 'exhaustive', 'heuristic', "
                                             "'default'; got 'fast'"),
        ({"gpu_oom_fallback": "on"}, "gpu_oom_fallback must be one of 'off', 'lazy', 'warm'; got 'on'"),
        ({"gpu_memory_limit_mb": -1}, r"gpu_memory_limit_mb must be >= 0"),
        ({"cpu_arena_limit_mb": -8}, r"cpu_arena_limit_mb must be >= 0"),
        ({"gpu_fallback_cooldown_s": -0.5}, r"gpu_fallback_cooldown_s must be >= 0"),
        ({"gpu_fallback_cooldown_s": float("nan")}, r"gpu_fallback_cooldown_s must be >= 0"),
    ],
)
def test_bad_memory_options_are_value_errors(models, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Engine(models.classifier, EngineOptions(**options))


def test_another_arena_cap_is_refused(models) -> None:
    # Registered, if not already.
    with Engine(models.classifier, EngineOptions(cpu_arena_limit_mb=CPU_ARENA_LIMIT_MB)) as engine:
        assert engine.device == "cpu"
    with pytest.raises(ValueError, match=rf"cpu_arena_limit_mb is one arena for the whole process, already capped "
                                         rf"at {CPU_ARENA_LIMIT_MB} MB; got {CPU_ARENA_LIMIT_MB + 1}$"):
        Engine(models.classifier, EngineOptions(cpu_arena_limit_mb=CPU_ARENA_LIMIT_MB + 1))
    with Engine(models.classifier, EngineOptions(cpu_arena_limit_mb=CPU_ARENA_LIMIT_MB)) as again:  # the same cap
        assert not again.closed
