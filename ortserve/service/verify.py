"""Before a version takes traffic, it answers its bundle's reference texts as its source model did (invariant 1).

    rule = rule_for(manifest, device)             what "the same answers" means at the version's precision
    verdict = judge(references, outputs, rule)    pure: figures, the worst text, passed or failed

The load path (assembly.VersionFactory.verify) runs the texts through the version's own batcher, on its device,
sessions, shape buckets and CUDA graphs, and judges what comes back. A gate vouched for an optimised bundle on the
CPU that published it; this check vouches for it on the machine that serves it, where kernels, instruction sets and
the ONNX Runtime build may differ.

The rules (a reference's `output` is the source model's FP32 output; a decisive reference is one whose label no
rounding may flip, see prepare/reference_choice.py):

    fp32 on a CPU      each logit within 1e-3 x max(1, the text's largest |logit|); embeddings cosine >= 0.9999
    fp32 on a GPU      TF32 matrix products (ONNX Runtime's CUDA default): 2e-2 x the same; cosine >= 0.999
    int8, fp16, bf16   each logit within 1.5 x the largest |delta logit| the accuracy gate recorded against the
                       source, plus 0.01 (int8), 0.05 (fp16) or 0.02 (bf16: 8 significant bits, about 0.4% per
                       rounding) x max(1, the text's largest |logit|); without a recorded gate, no bound on the
                       logits; embeddings cosine >= 0.99 (bf16: 0.999)
    every precision    decisive references keep their top label where the bound cannot flip it (a lead over
                       the runner-up of more than two bounds); every output finite
    token classifier   each token as a classifier's text above (its logits, its bound), and a decisive text keeps
                       every token's label
    sparse embedding   each vocabulary weight as a logit above (1e-3 x max(1, the text's largest weight) on a CPU,
                       2e-2 on a GPU), a weight absent on one side being 0: so the kept columns are the reference's
                       but for weights within the bound of 0 (`registry optimize` refuses sparse bundles: fp32 only)

An int8 graph scales its activations per batch, so the same text's logits move with the texts batched beside it
(up to about one logit for the MiniLM demo): the gate records the largest move it saw, in batches and alone, and
the bound above stands on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ortserve.bundle.manifest import BundleManifest
from ortserve.bundle.outputs import cosines, min_cosine
from ortserve.bundle.references import ReferenceSet

RESULTS = ("passed", "failed", "unverified", "skipped")
FP32_CPU_RELATIVE, FP32_GPU_RELATIVE = 1e-3, 2e-2
GATE_FACTOR = 1.5
SLACK = {"int8": 0.01, "fp16": 0.05, "bf16": 0.02}
TEXT_SHOWN = 60


@dataclass(frozen=True)
class Rule:
    """How closely a version must reproduce its references; `describe` is the line status and logs show."""

    name: str
    gate_delta: float | None = None
    """Classifier: the allowed |delta| is gate_delta + relative x max(1, the text's largest |reference|)."""
    relative: float | None = None
    min_cosine: float | None = None
    """Embedding: the least cosine similarity to the reference vector."""
    value: str = "logit"
    """What a bound is relative to, in `describe`: a classifier's "logit", a sparse embedding's "weight"."""

    def bound(self, reference: np.ndarray) -> float:
        """The largest |delta| allowed on one text's outputs (inf when the rule bounds none)."""
        if self.relative is None:
            return float("inf")
        return (self.gate_delta or 0.0) + self.relative * max(1.0, float(np.abs(reference).max()))

    def describe(self) -> str:
        if self.min_cosine is not None:
            return f"{self.name}: cosine >= {self.min_cosine:g}"
        if self.relative is None:
            return f"{self.name}: decisive labels kept (no gate recorded, so no bound on the logits)"
        gate = f"{self.gate_delta:.3g} + " if self.gate_delta else ""
        kept = "; decisive labels kept" if self.value == "logit" else ""
        return f"{self.name}: |delta| <= {gate}{self.relative:g} x max(1, |{self.value}|){kept}"


def rule_for(manifest: BundleManifest, device: str) -> Rule:
    on_gpu = device.startswith("cuda")
    precision = manifest.precision
    if manifest.spec.dense:  # vectors: judged by cosine
        return Rule(name=f"{precision} embedding on {device}", min_cosine=min_cosine(precision, on_gpu=on_gpu))
    if manifest.spec.sparse:  # weight by weight, as logits (no gate: a sparse bundle is not optimised)
        relative = FP32_CPU_RELATIVE if precision == "fp32" and not on_gpu else FP32_GPU_RELATIVE
        return Rule(name=f"{precision} sparse embedding on {device}", relative=relative, value="weight")
    if precision == "fp32":
        return Rule(name=f"fp32 on {device}", relative=FP32_GPU_RELATIVE if on_gpu else FP32_CPU_RELATIVE)
    gate = manifest.optimization.gate_max_abs_delta if manifest.optimization is not None else None
    if gate is None:
        return Rule(name=f"{precision} on {device}")
    return Rule(name=f"{precision} on {device}", gate_delta=GATE_FACTOR * gate, relative=SLACK.get(precision, 0.05))


@dataclass(frozen=True)
class Verdict:
    """One version's check against its references: what `ortserve status` shows and the log line says."""

    result: str  # one of RESULTS
    rule: str = ""
    texts: int = 0
    reasons: tuple[str, ...] = ()
    """Why it failed, one line each; empty when it passed."""
    figures: dict[str, Any] = field(default_factory=dict)
    took_s: float = 0.0

    @property
    def failed(self) -> bool:
        return self.result == "failed"

    def line(self) -> str:
        """One line for logs and errors: why it failed, or the figures it passed with, and the rule."""
        if self.result in ("unverified", "skipped"):
            return f"outputs {self.result}: {self.rule}"
        if self.reasons:
            return f"outputs differ from the bundle's reference answers: {'; '.join(self.reasons)} [{self.rule}]"
        figures = ", ".join(f"{k} {_show(v)}" for k, v in self.figures.items() if k != "worst_text")
        return f"outputs match {self.texts} reference texts ({figures}) [{self.rule}]"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"result": self.result, "rule": self.rule}
        if self.texts:
            out.update(texts=self.texts, took_s=round(self.took_s, 3), **self.figures)
        if self.reasons:
            out["reasons"] = list(self.reasons)
        return out

    def timed(self, seconds: float) -> Verdict:
        return replace(self, took_s=seconds)


def unverified(why: str) -> Verdict:
    return Verdict(result="unverified", rule=why)


def skipped() -> Verdict:
    return Verdict(result="skipped", rule="--verify-outputs off")


def unreadable(why: str) -> Verdict:
    """The references exist but cannot be used (missing file, wrong hash): as good as a wrong answer."""
    return Verdict(result="failed", rule="reference answers unreadable", reasons=(why,))


def unanswered(text: str, error: str) -> Verdict:
    """The version could not answer a reference text through its batcher (out of memory, an engine error)."""
    return Verdict(result="failed", rule="reference texts answered", reasons=(f"{_quote(text)} got {error}",))


def judge(refs: ReferenceSet, outputs: np.ndarray, rule: Rule) -> Verdict:
    """Compares the version's outputs for the reference texts with the stored ones by `rule`. A token classifier's
    outputs are its token rows, text after text (as `refs.outputs`): each token is judged as a classifier's text
    is, and a decisive text keeps every token's label."""
    expected = refs.outputs.astype(np.float64)
    got = np.asarray(outputs, dtype=np.float64)
    if got.shape != expected.shape:
        return Verdict(result="failed", rule=rule.describe(), texts=len(refs.texts),
                       reasons=(f"the version answers shape {list(got.shape)}, its references "
                                f"{list(expected.shape)}",))
    # The text of each row, and what a row is called in the reasons.
    text_of = np.repeat(np.arange(len(refs.texts)), refs.tokens) if refs.per_token else np.arange(len(refs.texts))
    rows = "tokens" if refs.per_token else "texts"
    reasons: list[str] = []
    figures: dict[str, Any] = {}
    finite = np.isfinite(got).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        reasons.append(f"{int((~finite).sum())} of {len(finite)} {rows} got non-finite outputs, first "
                       f"{_quote(refs.texts[text_of[bad]])}")
    if rule.min_cosine is not None:
        cosine = cosines(expected, got)
        worst = int(np.argmin(cosine))
        figures.update(min_cosine=float(cosine[worst]), worst_text=_quote(refs.texts[worst]))
        if cosine[worst] < rule.min_cosine:
            below = int((cosine < rule.min_cosine).sum())
            reasons.append(f"{below} of {len(cosine)} texts below cosine {rule.min_cosine:g} (worst "
                           f"{cosine[worst]:.6f}, {_quote(refs.texts[worst])})")
    else:
        delta = np.abs(np.nan_to_num(got, nan=np.inf) - expected).max(axis=1)
        bounds = np.array([rule.bound(row) for row in expected])
        worst = int(np.argmax(delta / np.maximum(bounds, 1e-30))) if np.isfinite(bounds).any() else int(
            np.argmax(delta))
        figures.update(max_abs_delta=float(delta.max()), worst_text=_quote(refs.texts[text_of[worst]]))
        if np.isfinite(bounds[worst]):
            figures["bound"] = float(bounds[worst])
        over = delta > bounds
        if over.any():
            reasons.append(f"{int(over.sum())} of {len(over)} {rows} past the bound (worst |delta| "
                           f"{delta[worst]:.4g} > {bounds[worst]:.4g}, {_quote(refs.texts[text_of[worst]])})")
        # A decisive label must hold where the bound cannot flip it: its lead over the runner-up is more than two
        # bounds (each of the two logits may move by one). Unbounded rules keep every decisive label.
        ranked = np.sort(expected, axis=1)
        lead = ranked[:, -1] - ranked[:, -2] if expected.shape[1] > 1 else np.full(len(expected), np.inf)
        decisive = np.asarray(refs.decisive, dtype=bool)[text_of] & ((lead > 2 * bounds) | ~np.isfinite(bounds))
        flipped = decisive & (np.nan_to_num(got).argmax(axis=1) != expected.argmax(axis=1))
        figures["decisive_agreement"] = f"{int(decisive.sum() - flipped.sum())}/{int(decisive.sum())}"
        if flipped.any():
            first = int(np.flatnonzero(flipped)[0])
            reasons.append(f"{int(flipped.sum())} of {int(decisive.sum())} decisive {rows} changed label (first "
                           f"{_quote(refs.texts[text_of[first]])})")
    return Verdict(result="failed" if reasons else "passed", rule=rule.describe(), texts=len(refs.texts),
                   reasons=tuple(reasons), figures=figures)


def _quote(text: str) -> str:
    return repr(text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 3] + "...")


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
