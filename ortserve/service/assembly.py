"""The composition root's factory: DesiredVersion → verified bundle → ModelInstance → VersionBatcher → outputs
checked against the bundle's reference answers.

Injected into the manager, so the manager never knows about artifacts, engines or settings.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from ortserve.bundle.manifest import BundleError
from ortserve.bundle.model_files import model_size
from ortserve.bundle.references import read_references
from ortserve.registry.desired import ArtifactRef, DesiredVersion
from ortserve.service import verify
from ortserve.service.config import Settings
from ortserve.service.data_plane import DataPlane, VersionBatcher
from ortserve.service.device_memory import MIB, MemoryBudgetError, budget_refusal, used_memory_probe
from ortserve.service.errors import ServiceError
from ortserve.service.instance import ModelInstance, instance_options
from ortserve.service.tokenization import TokenizerChoice

CHECK_DEADLINE_S = 3600.0
"""Each load-time check call's deadline: the server's own call, never refused by the callers' default budget."""


class OutputsDiffer(Exception):
    """The version's answers to its reference texts differ from the stored ones (verify_outputs=enforce)."""

    def __init__(self, verdict: verify.Verdict) -> None:
        super().__init__(verdict.line())
        self.verdict = verdict
        self.observed: dict[str, Any] = {"verify": verdict.result}
        """What the manager adds to the version's failure event (the app counts it)."""


class ArtifactFetcher(Protocol):
    def __call__(self, ref: ArtifactRef) -> Path:
        """A local, sha256-verified bundle directory for `ref` (blocking)."""


class VersionFactory:
    def __init__(
        self,
        settings: Settings,
        plane: DataPlane,
        *,
        fetch: ArtifactFetcher | None,
        opener: Executor | None = None,
    ) -> None:
        self._settings = settings
        self._plane = plane
        self._fetch = fetch
        self._opener = opener  # a long-lived thread that opens and warms a version's second session
        self._options = instance_options(settings)
        self.memory_kind, self._used_bytes = used_memory_probe(settings.device)
        self._loaded: weakref.WeakSet[ModelInstance] = weakref.WeakSet()
        """Every instance this factory loaded; the open ones hold memory against memory_budget_mb."""

    def held_mb(self) -> float:
        """Memory the open versions took when they loaded."""
        return sum(c.memory_mb or 0.0 for c in list(self._loaded) if not c.engine.closed)

    def load(self, model: str, spec: DesiredVersion) -> ModelInstance:
        if spec.artifact is not None:
            if self._fetch is None:
                raise RuntimeError("no artifact store configured for registry bundles")
            bundle = self._fetch(spec.artifact)
        elif spec.bundle_dir:
            bundle = Path(spec.bundle_dir)
        else:
            raise ValueError(f"version {spec.version} has neither an artifact nor a bundle directory")
        budget, held = self._settings.memory_budget_mb, self.held_mb()
        weights_mb = model_size(bundle) / MIB  # a floor: the weights alone (model.onnx, and model.onnx.data)
        if refusal := budget_refusal(budget_mb=budget, held_mb=held, need_mb=weights_mb, what="its model file"):
            raise MemoryBudgetError(refusal)
        before = self._used_bytes()
        instance = ModelInstance.load(
            bundle, self._options, tokenizer=cast(TokenizerChoice, self._settings.tokenizer), opener=self._opener
        )
        try:
            instance.warm_up(opener=self._opener)  # invariant 1: no traffic before a real batch ran
            instance.memory_mb = max(0, self._used_bytes() - before) / MIB
            if refusal := budget_refusal(budget_mb=budget, held_mb=held, need_mb=instance.memory_mb,
                                         what=f"measured on {self.memory_kind} over its load and warm-up"):
                raise MemoryBudgetError(refusal)
        except BaseException:
            instance.close()
            raise
        self._loaded.add(instance)
        return instance

    def batcher(self, model: str, version: str, instance: ModelInstance) -> VersionBatcher:
        return self._plane.version(model, version, instance)

    async def verify(self, instance: ModelInstance, batcher: VersionBatcher) -> verify.Verdict:
        """The version's answers to its reference texts through its own batcher, judged by its precision's rule.
        Raises OutputsDiffer when they differ and verify_outputs is enforce; returns the verdict otherwise."""
        mode = self._settings.verify_outputs
        entry = instance.manifest.references
        if mode == "off":
            return verify.skipped()
        if entry is None or instance.bundle_dir is None:
            return verify.unverified("the bundle carries no reference answers")
        started = time.monotonic()
        try:
            refs = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(read_references, instance.bundle_dir, entry, instance.manifest.columns,
                                        per_token=instance.manifest.per_token,
                                        max_seq_len=instance.manifest.max_seq_len,
                                        sparse=instance.manifest.spec.sparse))
        except BundleError as e:
            verdict = verify.unreadable(str(e))
        else:
            # One call per text, one after another: a version not yet routed has its queue to itself, so each call
            # finds it idle and runs at once, whatever the admission settings (its own deadline, CHECK_DEADLINE_S,
            # not the budget default_timeout_ms gives callers); as light on memory as a call can be, and int8's
            # per-batch activation scales see each text alone, as the gate ran it too.
            outputs = []
            for n, text in enumerate(refs.texts):
                pairs = None if refs.pairs is None else [refs.pairs[n]]  # a bundle of pairs: its second text
                try:
                    answer = (await batcher.infer([text], pairs=pairs,
                                                  deadline=time.monotonic() + CHECK_DEADLINE_S)).outputs[0]
                    if refs.per_token:  # its tokens' rows (the batcher's row holds them first, zeros after)
                        answer = answer[:refs.tokens[n] * refs.outputs.shape[1]].reshape(refs.tokens[n], -1)
                    outputs.append(answer)
                except ServiceError as e:
                    verdict = verify.unanswered(text, f"{e.code.name}: {e}")
                    break
            else:
                verdict = verify.judge(refs, np.concatenate(outputs) if refs.per_token else np.stack(outputs),
                                       verify.rule_for(instance.manifest, instance.engine.device))
        verdict = verdict.timed(time.monotonic() - started)
        if verdict.failed and mode == "enforce":
            raise OutputsDiffer(verdict)
        return verdict
