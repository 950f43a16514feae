"""The parity gate: the exported graph under ONNX Runtime against PyTorch on the same texts, before anything is written.

    report = judge(kind, texts, reference, runs, tokenizer_mismatches, ...)     pure: numpy arrays in, verdict out

PyTorch's answer for each text (the checkpoint as transformers or sentence-transformers runs it, eval mode, FP32)
is held against ONNX Runtime's in every run the importer makes of the exported graph: in batches of 16 in the texts'
order (so most rows are padded, some heavily), and one text at a time. The texts are the checkpoint's eval.jsonl or
eval.txt, else the built-in corpus, plus a few made longer than max_seq_len, so that truncation is judged too.

    classifier   every text's argmax identical, and every logit within LOGIT_TOLERANCE x max(1, the text's largest
                 |logit|) of PyTorch's. A text whose top two PyTorch logits lie within two tolerances of each other
                 is a tie no float arithmetic orders the same way everywhere: either of the tied labels agrees, and
                 the report counts such texts
    embedding    every text's cosine similarity to PyTorch's vector >= MIN_COSINE
    both         the bundle's tokenizer.json gives the checkpoint tokenizer's ids for every text; every output finite

The tolerance is far above float32 rounding between two correct implementations (ONNX Runtime and PyTorch use other
kernels, summation orders and FMA on each CPU: about 1e-6 relative for these models) and far below what any real
difference in the graph (a wrong mask, position, pooling or truncation) moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ortserve.registry.cpu import CpuInfo

LOGIT_TOLERANCE = 1e-4
MIN_COSINE = 0.9999
TEXT_SHOWN = 60


@dataclass(frozen=True)
class Run:
    """One way the importer ran the exported graph, and what it gave: float32 [texts, columns] in text order."""

    name: str
    outputs: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class RunVerdict:
    """A run against PyTorch: the figures, and the first text each finding is about."""

    name: str
    texts: int
    non_finite: int
    max_abs_delta: float
    worst_text: int
    # classifier
    agree: int = 0
    ties: int = 0
    over_tolerance: int = 0
    max_relative_delta: float = 0.0
    """|delta| / max(1, the text's largest |logit|): what the tolerance bounds."""
    first_disagreement: int | None = None
    # embedding
    min_cosine: float | None = None
    below_cosine: int = 0

    def to_dict(self, kind: str) -> dict[str, Any]:
        out: dict[str, Any] = {"texts": self.texts, "max_abs_delta": _sig(self.max_abs_delta)}
        if kind == "classifier":
            out.update(argmax_agreement=f"{self.agree}/{self.texts}", ties=self.ties,
                       max_relative_delta=_sig(self.max_relative_delta))
        else:
            out["min_cosine"] = None if self.min_cosine is None else round(self.min_cosine, 7)
        if self.non_finite:
            out["non_finite"] = self.non_finite
        return out


@dataclass(frozen=True)
class ParityReport:
    kind: str  # "classifier" or "embedding"
    texts: tuple[str, ...] = field(repr=False)
    eval_name: str
    eval_sha256: str
    long_texts: int
    """How many of the texts were made past max_seq_len (the rest are the evaluation set's)."""
    runs: tuple[RunVerdict, ...]
    tokenizer_mismatches: int
    first_mismatch: int | None
    reference: str
    cpu: CpuInfo | None = None
    accuracy: float | None = None
    """With a labelled eval.jsonl: PyTorch's accuracy on it (the exported graph's is the same when argmax is)."""

    @property
    def refusals(self) -> tuple[str, ...]:
        """Why the gate refuses, one line each; () when it passes."""
        reasons = []
        if self.tokenizer_mismatches:
            reasons.append(f"the bundle's tokenizer.json gives other token ids than the checkpoint's tokenizer on "
                           f"{self.tokenizer_mismatches} of {len(self.texts)} texts (first "
                           f"{_quote(self.texts[self.first_mismatch or 0])})")
        for run in self.runs:
            where = f"{run.name}: "
            if run.non_finite:
                reasons.append(f"{where}{run.non_finite} of {run.texts} texts got non-finite outputs")
            if self.kind == "classifier":
                if run.agree < run.texts:
                    first = run.first_disagreement if run.first_disagreement is not None else 0
                    reasons.append(f"{where}argmax differs from PyTorch's on {run.texts - run.agree} of {run.texts} "
                                   f"texts (first {_quote(self.texts[first])})")
                if run.over_tolerance:
                    reasons.append(f"{where}{run.over_tolerance} of {run.texts} texts have a logit further than "
                                   f"{LOGIT_TOLERANCE:g} x max(1, |logit|) from PyTorch's (worst |delta| "
                                   f"{run.max_abs_delta:.3g}, {_quote(self.texts[run.worst_text])})")
            elif run.below_cosine:
                reasons.append(f"{where}{run.below_cosine} of {run.texts} texts have cosine similarity to PyTorch's "
                               f"vector below {MIN_COSINE:g} (worst {run.min_cosine:.6f}, "
                               f"{_quote(self.texts[run.worst_text])})")
        return tuple(reasons)

    @property
    def passed(self) -> bool:
        return not self.refusals

    @property
    def rule(self) -> str:
        if self.kind == "classifier":
            return f"argmax identical; |delta logit| <= {LOGIT_TOLERANCE:g} x max(1, |logit|)"
        return f"cosine >= {MIN_COSINE:g}"

    def manifest_entry(self) -> dict[str, Any]:
        """The manifest's `imported.parity`: figures the same checkpoint, tools and CPU class reproduce (no times)."""
        out: dict[str, Any] = {
            "reference": self.reference,
            "rule": self.rule,
            "texts": len(self.texts),
            "eval": {"source": self.eval_name, "sha256": self.eval_sha256, "texts": len(self.texts) - self.long_texts},
            "past_max_seq_len": self.long_texts,
            "tokenizer_ids_identical": f"{len(self.texts) - self.tokenizer_mismatches}/{len(self.texts)}",
            "runs": {run.name: run.to_dict(self.kind) for run in self.runs},
            "passed": self.passed,
        }
        if self.accuracy is not None:
            out["accuracy"] = round(self.accuracy, 6)
        if self.cpu is not None:
            out["cpu"] = self.cpu.to_dict()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**self.manifest_entry(), "refusals": list(self.refusals)}

    def table(self) -> list[str]:
        """The report as printed: a row per measure and run, the requirement beside each."""
        rows = [("", "ONNX RUNTIME vs PYTORCH", "REQUIRED")]
        total = len(self.texts)
        rows.append(("tokenizer.json ids = the checkpoint's", f"{total - self.tokenizer_mismatches}/{total} texts",
                     "all"))
        for run in self.runs:
            if self.kind == "classifier":
                ties = f", {run.ties} ties" if run.ties else ""
                rows.append((f"{run.name}: argmax identical", f"{run.agree}/{run.texts}{ties}", "all"))
                rows.append((f"{run.name}: |delta logit| max (relative)",
                             f"{run.max_abs_delta:.3g} ({run.max_relative_delta:.3g})",
                             f"<= {LOGIT_TOLERANCE:g} relative"))
            else:
                rows.append((f"{run.name}: cosine min", f"{run.min_cosine:.7f}", f">= {MIN_COSINE:g}"))
                rows.append((f"{run.name}: |delta| max", f"{run.max_abs_delta:.3g}", ""))
        if self.accuracy is not None:
            rows.append(("accuracy on the eval labels (PyTorch)", f"{self.accuracy:.2%}", ""))
        if self.cpu is not None:
            rows.append(("CPU", self.cpu.describe(), ""))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        made = f" + {self.long_texts} past max_seq_len" if self.long_texts else ""
        lines = [f"parity gate: {total - self.long_texts} texts from {self.eval_name}{made}; PyTorch = "
                 f"{self.reference}"]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        lines += [f"verdict: refused: {reason}" for reason in self.refusals] or ["verdict: pass"]
        return lines


def judge_run(kind: str, reference: np.ndarray, run: Run) -> RunVerdict:
    """One run against PyTorch's outputs (both float32 [texts, columns], same order)."""
    if run.outputs.shape != reference.shape:
        raise ValueError(f"{run.name}: outputs of shape {list(run.outputs.shape)}, PyTorch's "
                         f"{list(reference.shape)}")
    want = reference.astype(np.float64)
    got = run.outputs.astype(np.float64)
    finite = np.isfinite(got).all(axis=1)
    delta = np.where(finite[:, None], np.abs(np.nan_to_num(got) - want), np.inf)
    worst_abs = float(delta.max()) if delta.size else 0.0
    if kind == "classifier":
        scale = np.maximum(1.0, np.abs(want).max(axis=1))
        relative = delta.max(axis=1) / scale
        bound = LOGIT_TOLERANCE * scale
        tied = want >= (want.max(axis=1) - 2 * bound)[:, None]
        ties = tied.sum(axis=1) > 1
        picked = np.nan_to_num(got, nan=-np.inf).argmax(axis=1)
        agree = finite & tied[np.arange(len(got)), picked]
        disagree = np.flatnonzero(~agree)
        return RunVerdict(name=run.name, texts=len(got), non_finite=int((~finite).sum()), max_abs_delta=worst_abs,
                          worst_text=int(np.argmax(relative)), agree=int(agree.sum()), ties=int(ties.sum()),
                          over_tolerance=int((relative > LOGIT_TOLERANCE).sum()),
                          max_relative_delta=float(relative.max()),
                          first_disagreement=int(disagree[0]) if disagree.size else None)
    norms = np.linalg.norm(want, axis=1) * np.linalg.norm(np.nan_to_num(got), axis=1)
    cosine = np.where(finite & (norms > 0), (want * np.nan_to_num(got)).sum(axis=1) / np.maximum(norms, 1e-300), 0.0)
    return RunVerdict(name=run.name, texts=len(got), non_finite=int((~finite).sum()), max_abs_delta=worst_abs,
                      worst_text=int(np.argmin(cosine)), min_cosine=float(cosine.min()),
                      below_cosine=int((cosine < MIN_COSINE).sum()))


def judge(kind: str, texts: Sequence[str], reference: np.ndarray, runs: Sequence[Run], *,
          reference_ids: Sequence[Sequence[int]], bundle_ids: Sequence[Sequence[int]], eval_name: str,
          eval_sha256: str, long_texts: int, reference_name: str, cpu: CpuInfo | None = None,
          labels: Sequence[int] | None = None) -> ParityReport:
    """The gate's report over every run; `labels` (indices, one per evaluation text) gives PyTorch's accuracy."""
    mismatched = [i for i, (a, b) in enumerate(zip(reference_ids, bundle_ids, strict=True)) if list(a) != list(b)]
    accuracy = None
    if labels is not None and kind == "classifier":
        truth = np.asarray(labels)
        accuracy = float((reference[: len(truth)].argmax(axis=1) == truth).mean())
    return ParityReport(kind=kind, texts=tuple(texts), eval_name=eval_name, eval_sha256=eval_sha256,
                        long_texts=long_texts, runs=tuple(judge_run(kind, reference, run) for run in runs),
                        tokenizer_mismatches=len(mismatched), first_mismatch=mismatched[0] if mismatched else None,
                        reference=reference_name, cpu=cpu, accuracy=accuracy)


def _sig(value: float) -> float | None:
    # Four significant digits, as the accuracy gate records its deltas; None keeps JSON strict.
    return float(f"{value:.4g}") if math.isfinite(value) else None


def _quote(text: str) -> str:
    return repr(text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 3] + "...")
