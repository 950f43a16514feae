"""Opening a version's two sessions side by side: the narrow (one-thread) session opens and warms on the
caller-supplied long-lived thread while the loading thread opens the wide one; failures close what opened."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.instances import options
from support.reference import Reference

from ortserve.engine_ext import ModelLoadError
from ortserve.service.instance import ModelInstance

TEXTS = ["a short text", "a somewhat longer text that pads the other one"]


class RecordingExecutor(ThreadPoolExecutor):
    """A real one-thread pool that also notes which functions it was given."""

    def __init__(self) -> None:
        super().__init__(1, thread_name_prefix="test-opener")
        self.names: list[str] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.names.append(getattr(fn, "__name__", repr(fn)))
        return super().submit(fn, *args, **kwargs)


def test_narrow_session_opens_and_warms_on_the_opener(tiny_bundle: Path) -> None:
    with RecordingExecutor() as opener:
        classifier = ModelInstance.load(tiny_bundle, options(intra_op_threads=2, narrow_engine=True),
                                         opener=opener)
        try:
            classifier.warm_up(opener=opener)
            assert classifier.narrow is not None
            assert opener.names == ["open_engine", "run"]  # the narrow session's open, then its warm-up run
            expected = Reference(tiny_bundle).logits(TEXTS)
            ids = classifier.tokenize(TEXTS)
            np.testing.assert_allclose(classifier.run(ids), expected, atol=1e-5)
            np.testing.assert_allclose(classifier.run(ids, narrow=True), expected, atol=1e-5)
        finally:
            classifier.close()


def test_no_narrow_session_leaves_the_opener_alone(tiny_bundle: Path) -> None:
    with RecordingExecutor() as opener:
        classifier = ModelInstance.load(tiny_bundle, options(intra_op_threads=2, narrow_engine=False), opener=opener)
        classifier.warm_up(opener=opener)
        classifier.close()
        assert classifier.narrow is None and opener.names == []


def test_a_model_that_fails_to_load_fails_both_and_the_opener_keeps_working(tiny_bundle: Path,
                                                                           tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_bundle.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.onnx").write_bytes(b"not an onnx graph")
    two = options(intra_op_threads=2, narrow_engine=True)
    with RecordingExecutor() as opener:
        with pytest.raises(ModelLoadError, match="cannot load model"):
            ModelInstance.load(broken, two, opener=opener)
        classifier = ModelInstance.load(tiny_bundle, two, opener=opener)  # the same thread, next load
        assert classifier.narrow is not None
        classifier.close()
