"""run(): parity with onnxruntime's Python API, dtypes, input validation, non-finite outputs."""

from __future__ import annotations

import gc

import numpy as np
import onnxruntime
import pytest

from ortserve.engine_ext import Engine, EngineError, EngineOptions, InputError, NonFiniteOutputError


@pytest.fixture(scope="module")
def classifier(models) -> Engine:
    return Engine(models.classifier)


@pytest.fixture(scope="module")
def types_engine(models) -> Engine:
    return Engine(models.types)


def _python_session(path) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (1, 9), (4, 16), (32, 3)])
def test_classifier_matches_onnxruntime_python(models, classifier, token_batch, batch: int, seq: int) -> None:
    feeds = token_batch(np.random.default_rng(batch * 100 + seq), batch, seq)
    expected = _python_session(models.classifier).run(["logits"], feeds)[0]
    logits = classifier.run(feeds)["logits"]
    assert logits.dtype == np.float32
    assert logits.shape == (batch, 3)
    assert np.max(np.abs(logits - expected)) <= 1e-5


def test_mixed_dtypes_match_onnxruntime_python(models, types_engine) -> None:
    feeds = {
        "a": np.array([-3, 0, 7, 2**31 - 1], dtype=np.int32),
        "b": np.array([1.5, -2.25, 1e300, 0.0], dtype=np.float64),
        "c": np.array([True, False, False, True]),
        "d": np.arange(6, dtype=np.float32).reshape(2, 3),
    }
    expected = _python_session(models.types).run(None, feeds)
    result = types_engine.run(feeds)
    assert list(result) == ["a_int64", "b_signed", "d_double", "c_not"]
    for (name, value), want in zip(result.items(), expected, strict=True):
        assert value.dtype == want.dtype, name
        np.testing.assert_array_equal(value, want)
    np.testing.assert_array_equal(result["c_not"], [False, True, True, False])
    np.testing.assert_array_equal(result["a_int64"], np.array([-3, 0, 7, 2**31 - 1], dtype=np.int64))


def test_empty_batch_runs(types_engine) -> None:
    feeds = {
        "a": np.zeros(0, dtype=np.int32),
        "b": np.zeros(0, dtype=np.float64),
        "c": np.zeros(0, dtype=bool),
        "d": np.ones((2, 3), dtype=np.float32),
    }
    result = types_engine.run(feeds)
    assert result["a_int64"].shape == (0,)
    np.testing.assert_array_equal(result["d_double"], np.full((2, 3), 2.0, dtype=np.float32))


def test_outputs_belong_to_python_after_close(models, token_batch) -> None:
    engine = Engine(models.classifier)
    feeds = token_batch(np.random.default_rng(5), 2, 6)
    logits = engine.run(feeds)["logits"]
    snapshot = logits.copy()
    engine.close()
    del engine
    gc.collect()
    # Churn the allocator so that freed ORT memory would be reused and visibly overwritten.
    junk = [np.full((256, 256), 7.0) for _ in range(64)]
    assert junk[-1][0, 0] == 7.0
    np.testing.assert_array_equal(logits, snapshot)
    assert logits.flags.writeable
    logits[0, 0] = 42.0  # writable, and nobody else's memory
    assert logits[0, 0] == 42.0


def test_non_contiguous_and_foreign_order_inputs_are_accepted(classifier, token_batch) -> None:
    feeds = token_batch(np.random.default_rng(6), 3, 10)
    expected = classifier.run(feeds)["logits"]
    wide = {name: np.repeat(value, 2, axis=1) for name, value in feeds.items()}
    strided = {name: value[:, ::2] for name, value in wide.items()}
    assert not strided["input_ids"].flags.c_contiguous
    np.testing.assert_array_equal(classifier.run(strided)["logits"], expected)
    fortran = {name: np.asfortranarray(value) for name, value in feeds.items()}
    np.testing.assert_array_equal(classifier.run(fortran)["logits"], expected)
    big_endian = {name: value.astype(">i8") for name, value in feeds.items()}
    np.testing.assert_array_equal(classifier.run(big_endian)["logits"], expected)
    readonly = {name: value.copy() for name, value in feeds.items()}
    for value in readonly.values():
        value.flags.writeable = False
    np.testing.assert_array_equal(classifier.run(readonly)["logits"], expected)


def _ids(batch: int = 2, seq: int = 5) -> np.ndarray:
    return np.ones((batch, seq), dtype=np.int64)


def test_missing_input_names_it_with_dtype_and_dims(classifier) -> None:
    with pytest.raises(InputError, match=r"^missing input 'attention_mask' \(int64 \[batch, seq\]\)$"):
        classifier.run({"input_ids": _ids()})
    with pytest.raises(InputError, match=r"^missing inputs 'input_ids' \(int64 \[batch, seq\]\), 'attention"):
        classifier.run({})


def test_input_error_is_also_a_value_error(classifier) -> None:
    with pytest.raises(ValueError, match="missing input"):
        classifier.run({"input_ids": _ids()})
    with pytest.raises(EngineError):
        classifier.run({"input_ids": _ids()})


def test_unexpected_input_lists_the_models_inputs(classifier) -> None:
    feeds = {"input_ids": _ids(), "attention_mask": _ids(), "token_type_ids": _ids()}
    with pytest.raises(InputError) as caught:
        classifier.run(feeds)
    assert str(caught.value) == (
        "unexpected input 'token_type_ids'; the model's inputs are: "
        "input_ids (int64 [batch, seq]), attention_mask (int64 [batch, seq])"
    )


def test_wrong_dtype(classifier) -> None:
    feeds = {"input_ids": _ids().astype(np.float32), "attention_mask": _ids()}
    with pytest.raises(InputError, match=r"^input 'input_ids' has dtype float32, expected int64$"):
        classifier.run(feeds)
    feeds = {"input_ids": _ids().astype(np.int32), "attention_mask": _ids()}
    with pytest.raises(InputError, match="input 'input_ids' has dtype int32, expected int64"):
        classifier.run(feeds)


def test_wrong_rank(classifier) -> None:
    feeds = {"input_ids": np.ones(5, dtype=np.int64), "attention_mask": _ids()}
    with pytest.raises(InputError, match=r"input 'input_ids' has shape \[5\] \(rank 1\), expected rank 2"):
        classifier.run(feeds)


def test_fixed_dimension_mismatch(types_engine) -> None:
    feeds = {
        "a": np.zeros(2, dtype=np.int32),
        "b": np.zeros(2),
        "c": np.zeros(2, dtype=bool),
        "d": np.zeros((2, 4), dtype=np.float32),
    }
    with pytest.raises(
        InputError,
        match=r"input 'd' has shape \[2, 4\], expected float32 \[2, 3\]: "
        r"dimension 1 must be 3",
    ):
        types_engine.run(feeds)


def test_shared_symbolic_dimension_must_agree(classifier) -> None:
    feeds = {"input_ids": _ids(2, 5), "attention_mask": _ids(2, 6)}
    with pytest.raises(
        InputError,
        match=r"input 'attention_mask' has shape \[2, 6\] but input 'input_ids' "
        r"has \[2, 5\]: dimension 'seq' must be the same size in both",
    ):
        classifier.run(feeds)


def test_not_an_array(classifier) -> None:
    with pytest.raises(InputError, match=r"input 'input_ids' must be a numpy\.ndarray, got list"):
        classifier.run({"input_ids": [[1, 2]], "attention_mask": _ids()})


def test_object_and_string_arrays_are_dtype_errors(classifier) -> None:
    feeds = {"input_ids": np.array([["a", "b"]], dtype=object), "attention_mask": _ids(1, 2)}
    with pytest.raises(InputError, match="input 'input_ids' has dtype object, expected int64"):
        classifier.run(feeds)
    feeds = {"input_ids": np.array([["a", "b"]]), "attention_mask": _ids(1, 2)}
    with pytest.raises(InputError, match="input 'input_ids' has dtype <U1, expected int64"):
        classifier.run(feeds)


def test_non_string_feed_name(classifier) -> None:
    with pytest.raises(InputError, match="input names must be str, got int"):
        classifier.run({1: _ids()})


def test_feeds_must_be_a_dict(classifier) -> None:
    with pytest.raises(TypeError):
        classifier.run([("input_ids", _ids())])


def test_values_the_model_rejects_are_input_errors(classifier) -> None:
    feeds = {"input_ids": np.array([[999]], dtype=np.int64), "attention_mask": _ids(1, 1)}
    with pytest.raises(InputError, match=r"rejected the inputs: .*Gather.*out of data bounds"):
        classifier.run(feeds)


def test_non_finite_output_names_output_and_count(models) -> None:
    engine = Engine(models.log)
    x = np.array([[1.0, -1.0, 0.0, 2.0], [-3.0, 4.0, 5.0, 6.0]], dtype=np.float32)
    with pytest.raises(NonFiniteOutputError) as caught:
        engine.run({"x": x})
    message = str(caught.value)
    assert message.startswith("output 'y' has 3 non-finite values (NaN/Inf) of 8")
    assert "'z'" not in message  # abs(x) is finite
    assert "check_finite=False" in message
    np.testing.assert_allclose(engine.run({"x": np.abs(x) + 1})["y"], np.log(np.abs(x) + 1), rtol=1e-6)


def test_non_finite_allowed_when_not_checked(models) -> None:
    engine = Engine(models.log, EngineOptions(check_finite=False))
    x = np.array([[1.0, -1.0, 0.0, 2.0]], dtype=np.float32)
    y = engine.run({"x": x})["y"]
    assert np.isnan(y[0, 1]) and np.isneginf(y[0, 2])
    assert y[0, 0] == 0.0
