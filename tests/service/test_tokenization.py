"""Which tokenizer a version runs (the engine's C++ WordPiece or Hugging Face's), and where the batcher runs it.

Real bundles, the real engine and both real tokenizers. An "unsupported" bundle is the tiny one with a
tokenizer.json that HF runs but the C++ tokenizer does not reproduce (a different normalizer).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.instances import options
from support.reference import Reference

from ortserve.prepare.reference_choice import attach
from ortserve.registry.desired import DesiredModel, DesiredState, DesiredVersion
from ortserve.service.assembly import VersionFactory
from ortserve.service.config import Settings
from ortserve.service.data_plane import DataPlane
from ortserve.service.errors import ResourceExhausted
from ortserve.service.instance import ModelInstance
from ortserve.service.manager import ModelManager
from ortserve.service.metrics import Metrics
from ortserve.service.tokenization import INLINE_MAX_CHARS, TokenizerError, open_tokenizer

TEXTS = [
    "the movie was great",
    "Héllo, WORLD!!  naïve café [SEP] résumé",
    "中文字符 mixed with english and 123 numbers",
    "word " * 300,  # truncated to max_seq_len
    "",
]


@pytest.fixture(scope="module")
def unsupported_bundle(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("unsupported") / "bundle"
    shutil.copytree(tiny_bundle, dest)
    spec = json.loads((dest / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "Lowercase"}
    (dest / "tokenizer.json").write_text(json.dumps(spec))
    attach(dest)  # another tokenizer, other answers: the bundle's reference answers are written anew
    return dest


def max_seq_len(bundle: Path) -> int:
    return int(json.loads((bundle / "manifest.json").read_text())["max_seq_len"])


def test_auto_runs_the_native_tokenizer_for_bert_wordpiece_bundles(tiny_bundle: Path) -> None:
    tok = open_tokenizer(tiny_bundle / "tokenizer.json", max_seq_len(tiny_bundle))
    assert tok.kind == "native" and tok.fallback == ""
    hf = open_tokenizer(tiny_bundle / "tokenizer.json", max_seq_len(tiny_bundle), "hf")
    assert hf.kind == "hf" and tok.pad_id == hf.pad_id == 0
    for native_ids, hf_ids in zip(tok.encode(TEXTS), hf.encode(TEXTS), strict=True):
        assert native_ids.dtype == np.int64 and native_ids.tolist() == hf_ids.tolist()
    assert len(tok.encode(["word " * 300])[0]) == max_seq_len(tiny_bundle)


def test_auto_falls_back_to_hf_and_says_why(unsupported_bundle: Path) -> None:
    tok = open_tokenizer(unsupported_bundle / "tokenizer.json", max_seq_len(unsupported_bundle))
    assert tok.kind == "hf"
    assert "normalizer" in tok.fallback and "Lowercase" in tok.fallback


def test_native_refuses_a_tokenizer_it_cannot_reproduce(unsupported_bundle: Path) -> None:
    with pytest.raises(TokenizerError, match="normalizer") as raised:
        open_tokenizer(unsupported_bundle / "tokenizer.json", max_seq_len(unsupported_bundle), "native")
    assert str(unsupported_bundle) in str(raised.value)


def test_only_short_requests_on_the_native_tokenizer_are_tokenized_inline(tiny_bundle: Path) -> None:
    native = open_tokenizer(tiny_bundle / "tokenizer.json", 64)
    hf = open_tokenizer(tiny_bundle / "tokenizer.json", 64, "hf")
    short = ["a short text"] * 4
    long = ["x" * (INLINE_MAX_CHARS // 2), "y" * (INLINE_MAX_CHARS // 2 + 1)]
    assert native.inline(short) and not native.inline(long)
    assert not hf.inline(short)


class CountingPool(ThreadPoolExecutor):
    """A real thread pool that counts what is handed to it."""

    def __init__(self) -> None:
        super().__init__(1)
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture(scope="module")
def classifiers(tiny_bundle: Path) -> Iterator[dict[str, ModelInstance]]:
    out = {kind: ModelInstance.load(tiny_bundle, options(intra_op_threads=1), tokenizer=kind)
           for kind in ("native", "hf")}
    yield out
    for c in out.values():
        c.close()


@pytest.mark.parametrize("kind", ["native", "hf"])
def test_queued_requests_tokenize_on_the_loop_only_with_the_native_tokenizer(
    classifiers: dict[str, ModelInstance], tiny_bundle: Path, kind: str
) -> None:
    classifier = classifiers[kind]
    assert classifier.tokenizer.kind == kind
    requests = [[f"text number {i} is {'good ' * i}"] for i in range(6)] + [["long " * (INLINE_MAX_CHARS // 4)]]
    tokenize_pool = CountingPool()
    settings = Settings(max_batch_size=8, max_padding_ratio=3.0, max_queue_items=64, engine_concurrency=1)

    async def main() -> list[Any]:
        plane = DataPlane(settings, Metrics(), tokenize_pool=tokenize_pool)
        plane.start(asyncio.get_running_loop())
        batcher = plane.version("m", "1", classifier)
        try:
            return await asyncio.gather(*(batcher.infer(texts) for texts in requests))
        finally:
            await batcher.close(5)
            plane.close()

    try:
        results = asyncio.run(main())
    finally:
        tokenize_pool.shutdown()
    reference = Reference(tiny_bundle)
    for texts, result in zip(requests, results, strict=True):
        np.testing.assert_allclose(result.outputs, reference.logits(texts), rtol=1e-4, atol=1e-5)
    # Natively, the batcher tokenizes (on the loop's thread, GIL released) all but the long text, which leaves the
    # loop to be tokenized in the pool; the HF tokenizer always runs in the pool.
    assert tokenize_pool.submitted == (1 if kind == "native" else len(requests))


def manager_state(bundle: Path) -> DesiredState:
    return DesiredState({"m": DesiredModel("m", {"v1": DesiredVersion("v1", bundle_dir=str(bundle),
                                                                      created_at="2026-01-01")}, {"v1": 100})})


def load_with(settings: Settings, bundle: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manager's status of the version and the lifecycle events, after loading `bundle` as m/v1."""
    events: list[dict[str, Any]] = []

    async def main() -> dict[str, Any]:
        tok = ThreadPoolExecutor(1)
        plane = DataPlane(settings, Metrics(), tokenize_pool=tok)
        plane.start(asyncio.get_running_loop())
        factory = VersionFactory(settings, plane, fetch=None)
        manager = ModelManager(factory, drain_timeout_s=5, retry_backoff_s=(5, 5),
                               observer=lambda event, model, version, **f: events.append({"event": event, **f}))
        try:
            manager.apply(manager_state(bundle))
            await manager.wait_converged(30)
            return manager.status()["models"]["m"]["versions"]["v1"]
        finally:
            await manager.close()
            plane.close()
            tok.shutdown()

    return asyncio.run(main()), events


def test_status_and_load_event_name_the_tokenizer(tiny_bundle: Path, unsupported_bundle: Path) -> None:
    status, events = load_with(Settings(intra_op_threads=1), tiny_bundle)
    assert status["tokenizer"] == "native"
    assert [e["tokenizer"] for e in events if e["event"] == "loaded"] == ["native"]
    status, events = load_with(Settings(intra_op_threads=1), unsupported_bundle)
    assert status["tokenizer"] == "hf"
    (loaded,) = [e for e in events if e["event"] == "loaded"]
    assert loaded["tokenizer"] == "hf" and "normalizer" in loaded["tokenizer_fallback"]


def test_native_on_an_unsupported_bundle_fails_the_load_with_the_reason(unsupported_bundle: Path) -> None:
    status, events = load_with(Settings(intra_op_threads=1, tokenizer="native"), unsupported_bundle)
    assert status["state"] == "failed"
    assert "normalizer" in status["error"] and "native tokenizer" in status["error"]
    assert not [e for e in events if e["event"] == "loaded"]


def test_a_call_the_queue_would_refuse_is_not_tokenized(classifiers: dict[str, ModelInstance]) -> None:
    """A version whose texts are tokenized in the pool asks the batcher first: under overload a refused call costs
    no tokenization."""
    tokenize_pool = CountingPool()
    settings = Settings(max_queue_items=2, engine_concurrency=1)

    async def main() -> None:
        plane = DataPlane(settings, Metrics(), tokenize_pool=tokenize_pool)
        plane.start(asyncio.get_running_loop())
        batcher = plane.version("m", "1", classifiers["hf"])
        plane.lanes.pause()  # no run starts: the first call holds the engine, the next ones stay queued
        calls = [asyncio.ensure_future(batcher.infer(["the lone call"]))]
        try:
            calls.append(asyncio.ensure_future(batcher.infer(["one", "two"])))
            while batcher.queue_depth < 2:
                await asyncio.sleep(0.001)
            tokenized = tokenize_pool.submitted
            with pytest.raises(ResourceExhausted, match=r"2 texts queued for this model version \(limit 2\)"):
                await batcher.infer(["one more"])
            assert tokenize_pool.submitted == tokenized
        finally:
            plane.lanes.resume()
            await asyncio.gather(*calls)
            await batcher.close(5)
            plane.close()

    try:
        asyncio.run(main())
    finally:
        tokenize_pool.shutdown()
