"""The parity gate: the exported graph under ONNX Runtime against PyTorch on the same texts, before anything is written.

    report = judge(kind, texts, reference, runs, tokenizer_mismatches, ...)     pure: numpy arrays in, verdict out

kind is the bundle's (bundle/kinds.py); a token classifier's reference and runs are float32
[T, labels] per text (TokenOutputs), T the text's tokens (its mask=1 positions: padding is never compared).

PyTorch's answer for each text (the checkpoint as transformers or sentence-transformers runs it, eval mode, FP32)
is held against ONNX Runtime's in every run the importer makes of the exported graph: in batches of 16 in the texts'
order (so most rows are padded, some heavily), and one text at a time. The texts are the checkpoint's eval.jsonl or
eval.txt, else the built-in corpus, plus a few made longer than max_seq_len, so that truncation is judged too.

    classifier   every text's argmax identical, and every logit within LOGIT_TOLERANCE x max(1, the text's largest
                 |logit|) of PyTorch's. A text whose top two PyTorch logits lie within two tolerances of each other
                 is a tie no float arithmetic orders the same way everywhere: either of the tied labels agrees, and
                 the report counts such texts
    embedding    every text's cosine similarity to PyTorch's vector >= MIN_COSINE
    sparse-embedding   every vocabulary weight within LOGIT_TOLERANCE x max(1, the text's largest weight) of
                 SparseEncoder.encode's (a weight one side leaves out being 0), so the columns kept are PyTorch's but
                 for weights within that bound of 0; the report counts texts whose non-zero columns are identical
    token-classifier   the classifier's rule for every token of every text: its argmax identical (ties alike) and
                 every logit within LOGIT_TOLERANCE x max(1, the token's largest |logit|); and every text as many
                 tokens as PyTorch's (its rows only line up then)
    both         the bundle's tokenizer.json gives the checkpoint tokenizer's ids for every text; every output finite

The tolerance is far above float32 rounding between two correct implementations (ONNX Runtime and PyTorch use other
kernels, summation orders and FMA on each CPU: about 1e-6 relative for these models) and far below what any real
difference in the graph (a wrong mask, position, pooling or truncation) moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from ortserve.bundle.cpu import CpuInfo
from ortserve.bundle.kinds import CLASSIFIER, TOKEN_CLASSIFIER, Kind
from ortserve.bundle.outputs import cosines, min_cosine

LOGIT_TOLERANCE = 1e-4
MIN_COSINE = min_cosine("fp32")
"""ONNX Runtime's FP32 export against PyTorch's FP32: what the load-time check asks of an FP32 version on a CPU."""
TEXT_SHOWN = 60
TokenOutputs: TypeAlias = Sequence[np.ndarray]
"""A token classifier's outputs: float32 [T, labels] per text, in text order."""


@dataclass(frozen=True)
class Run:
    """One way the importer ran the exported graph, and what it gave: float32 [texts, columns] in text order (a token
    classifier's: TokenOutputs)."""

    name: str
    outputs: np.ndarray | TokenOutputs = field(repr=False)


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
    """|delta| / max(1, the text's largest |logit|) (a token classifier's: the token's): what the tolerance bounds."""
    first_disagreement: int | None = None
    # token classifier: agree, ties and over_tolerance count tokens; first_disagreement and worst_text are texts
    tokens: int = 0
    length_mismatches: int = 0
    """Texts whose token count differs from PyTorch's (their rows are not compared)."""
    first_length_mismatch: int | None = None
    # embedding
    min_cosine: float | None = None
    below_cosine: int = 0

    def to_dict(self, kind: Kind) -> dict[str, Any]:
        out: dict[str, Any] = {"texts": self.texts, "max_abs_delta": _sig(self.max_abs_delta)}
        if kind is CLASSIFIER:
            out.update(argmax_agreement=f"{self.agree}/{self.texts}", ties=self.ties,
                       max_relative_delta=_sig(self.max_relative_delta))
        elif kind is TOKEN_CLASSIFIER:
            out.update(tokens=self.tokens, argmax_agreement=f"{self.agree}/{self.tokens} tokens", ties=self.ties,
                       max_relative_delta=_sig(self.max_relative_delta))
            if self.length_mismatches:
                out["token_count_mismatches"] = self.length_mismatches
        elif kind.sparse:
            out.update(columns_identical=f"{self.agree}/{self.texts}", max_relative_delta=_sig(self.max_relative_delta))
        else:
            out["min_cosine"] = None if self.min_cosine is None else round(self.min_cosine, 7)
        if self.non_finite:
            out["non_finite"] = self.non_finite
        return out


@dataclass(frozen=True)
class ParityReport:
    kind: Kind
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
            if self.kind is TOKEN_CLASSIFIER:
                if run.length_mismatches:
                    first = run.first_length_mismatch if run.first_length_mismatch is not None else 0
                    reasons.append(f"{where}{run.length_mismatches} of {run.texts} texts have another token count "
                                   f"than PyTorch's (first {_quote(self.texts[first])})")
                if run.agree < run.tokens:
                    first = run.first_disagreement if run.first_disagreement is not None else 0
                    reasons.append(f"{where}argmax differs from PyTorch's on {run.tokens - run.agree} of "
                                   f"{run.tokens} tokens (first in {_quote(self.texts[first])})")
                if run.over_tolerance:
                    reasons.append(f"{where}{run.over_tolerance} of {run.tokens} tokens have a logit further than "
                                   f"{LOGIT_TOLERANCE:g} x max(1, |logit|) from PyTorch's (worst |delta| "
                                   f"{run.max_abs_delta:.3g}, in {_quote(self.texts[run.worst_text])})")
            elif self.kind.sparse:
                if run.over_tolerance:
                    reasons.append(f"{where}{run.over_tolerance} of {run.texts} texts have a weight further than "
                                   f"{LOGIT_TOLERANCE:g} x max(1, |weight|) from SparseEncoder's (worst |delta| "
                                   f"{run.max_abs_delta:.3g}, {_quote(self.texts[run.worst_text])})")
            elif self.kind is CLASSIFIER:
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
        if self.kind is CLASSIFIER:
            return f"argmax identical; |delta logit| <= {LOGIT_TOLERANCE:g} x max(1, |logit|)"
        if self.kind is TOKEN_CLASSIFIER:
            return (f"every token (mask=1): argmax identical; |delta logit| <= {LOGIT_TOLERANCE:g} x max(1, "
                    "|logit|)")
        if self.kind.sparse:
            return f"every vocabulary weight: |delta| <= {LOGIT_TOLERANCE:g} x max(1, |weight|)"
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
            if self.kind is TOKEN_CLASSIFIER:
                ties = f", {run.ties} ties" if run.ties else ""
                counts = f", {run.length_mismatches} texts of another length" if run.length_mismatches else ""
                rows.append((f"{run.name}: argmax identical per token", f"{run.agree}/{run.tokens}{ties}{counts}",
                             "all"))
                rows.append((f"{run.name}: |delta logit| max (relative)",
                             f"{run.max_abs_delta:.3g} ({run.max_relative_delta:.3g})",
                             f"<= {LOGIT_TOLERANCE:g} relative"))
            elif self.kind.sparse:
                rows.append((f"{run.name}: non-zero columns identical", f"{run.agree}/{run.texts}", ""))
                rows.append((f"{run.name}: |delta weight| max (relative)",
                             f"{run.max_abs_delta:.3g} ({run.max_relative_delta:.3g})",
                             f"<= {LOGIT_TOLERANCE:g} relative"))
            elif self.kind is CLASSIFIER:
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


@dataclass(frozen=True)
class _Rows:
    """The classifier's rule over rows of logits (a text's, or a token's), one figure per row."""

    finite: np.ndarray
    delta: np.ndarray
    relative: np.ndarray
    ties: np.ndarray
    agree: np.ndarray


def _classify_rows(want: np.ndarray, got: np.ndarray) -> _Rows:
    """float64 [rows, labels] each: the argmax (ties alike) and the tolerance relative to the row's largest |logit|."""
    finite = np.isfinite(got).all(axis=1)
    delta = np.where(finite[:, None], np.abs(np.nan_to_num(got) - want), np.inf)
    scale = np.maximum(1.0, np.abs(want).max(axis=1)) if want.size else np.ones(len(want))
    relative = (delta.max(axis=1) if delta.size else np.zeros(len(want))) / scale
    bound = LOGIT_TOLERANCE * scale
    tied = want >= (want.max(axis=1, initial=-np.inf) - 2 * bound)[:, None]
    picked = np.nan_to_num(got, nan=-np.inf).argmax(axis=1) if got.size else np.zeros(0, dtype=int)
    agree = finite & tied[np.arange(len(got)), picked] if got.size else np.zeros(0, dtype=bool)
    return _Rows(finite=finite, delta=delta, relative=relative, ties=tied.sum(axis=1) > 1, agree=agree)


def _judge_tokens(reference: TokenOutputs, run: Run) -> RunVerdict:
    """A token classifier's run: the classifier's rule over every token of the texts whose token counts match."""
    outputs = list(run.outputs)
    if len(outputs) != len(reference):
        raise ValueError(f"{run.name}: outputs for {len(outputs)} texts, PyTorch's for {len(reference)}")
    shapes_match = [np.shape(g) == np.shape(w) for g, w in zip(outputs, reference, strict=True)]
    compared = [i for i, same in enumerate(shapes_match) if same]
    mismatched = [i for i, same in enumerate(shapes_match) if not same]
    columns = next((np.shape(w)[1] for w in reference if np.ndim(w) == 2), 0)
    want = np.concatenate([np.asarray(reference[i], np.float64).reshape(-1, columns) for i in compared]
                          or [np.zeros((0, columns))])
    got = np.concatenate([np.asarray(outputs[i], np.float64).reshape(-1, columns) for i in compared]
                         or [np.zeros((0, columns))])
    text_of = np.repeat(np.asarray(compared, dtype=int), [len(reference[i]) for i in compared]).astype(int)
    rows = _classify_rows(want, got)
    disagree = np.flatnonzero(~rows.agree)
    non_finite_texts = {int(text_of[t]) for t in np.flatnonzero(~rows.finite)}
    worst = int(text_of[int(np.argmax(rows.relative))]) if rows.relative.size else 0
    return RunVerdict(name=run.name, texts=len(reference), non_finite=len(non_finite_texts),
                      max_abs_delta=float(rows.delta.max()) if rows.delta.size else 0.0, worst_text=worst,
                      agree=int(rows.agree.sum()), ties=int(rows.ties.sum()),
                      over_tolerance=int((rows.relative > LOGIT_TOLERANCE).sum()),
                      max_relative_delta=float(rows.relative.max(initial=0.0)),
                      first_disagreement=int(text_of[disagree[0]]) if disagree.size else None,
                      tokens=len(want), length_mismatches=len(mismatched),
                      first_length_mismatch=mismatched[0] if mismatched else None)


def judge_run(kind: Kind, reference: np.ndarray | TokenOutputs, run: Run) -> RunVerdict:
    """One run against PyTorch's outputs (both float32 [texts, columns], same order; a token classifier's both
    TokenOutputs)."""
    if kind is TOKEN_CLASSIFIER:
        return _judge_tokens(reference, run)
    reference = np.asarray(reference)
    outputs = np.asarray(run.outputs)
    if outputs.shape != reference.shape:
        raise ValueError(f"{run.name}: outputs of shape {list(outputs.shape)}, PyTorch's "
                         f"{list(reference.shape)}")
    want = reference.astype(np.float64)
    got = outputs.astype(np.float64)
    finite = np.isfinite(got).all(axis=1)
    delta = np.where(finite[:, None], np.abs(np.nan_to_num(got) - want), np.inf)
    worst_abs = float(delta.max()) if delta.size else 0.0
    if kind is CLASSIFIER:
        rows = _classify_rows(want, got)
        relative, ties, agree = rows.relative, rows.ties, rows.agree
        disagree = np.flatnonzero(~agree)
        return RunVerdict(name=run.name, texts=len(got), non_finite=int((~finite).sum()), max_abs_delta=worst_abs,
                          worst_text=int(np.argmax(relative)), agree=int(agree.sum()), ties=int(ties.sum()),
                          over_tolerance=int((relative > LOGIT_TOLERANCE).sum()),
                          max_relative_delta=float(relative.max()),
                          first_disagreement=int(disagree[0]) if disagree.size else None)
    if kind.sparse:
        return _judge_sparse(want, got, finite, delta, run.name)
    cosine = cosines(want, got)
    return RunVerdict(name=run.name, texts=len(got), non_finite=int((~finite).sum()), max_abs_delta=worst_abs,
                      worst_text=int(np.argmin(cosine)), min_cosine=float(cosine.min()),
                      below_cosine=int((cosine < MIN_COSINE).sum()))


def _judge_sparse(want: np.ndarray, got: np.ndarray, finite: np.ndarray, delta: np.ndarray, name: str) -> RunVerdict:
    """A sparse embedding model's run: every weight within the tolerance relative to the text's largest weight
    (float64 [texts, vocabulary] each); `agree` counts texts whose non-zero columns are PyTorch's."""
    scale = np.maximum(1.0, np.abs(want).max(axis=1)) if want.size else np.ones(len(want))
    relative = (delta.max(axis=1) if delta.size else np.zeros(len(want))) / scale
    same = finite & ((want > 0) == (np.nan_to_num(got) > 0)).all(axis=1)
    differ = np.flatnonzero(~same)
    return RunVerdict(name=name, texts=len(got), non_finite=int((~finite).sum()),
                      max_abs_delta=float(delta.max()) if delta.size else 0.0,
                      worst_text=int(np.argmax(relative)) if relative.size else 0, agree=int(same.sum()),
                      over_tolerance=int((relative > LOGIT_TOLERANCE).sum()),
                      max_relative_delta=float(relative.max(initial=0.0)),
                      first_disagreement=int(differ[0]) if differ.size else None)


def judge(kind: Kind, texts: Sequence[str], reference: np.ndarray | TokenOutputs, runs: Sequence[Run], *,
          reference_ids: Sequence[Sequence[int]], bundle_ids: Sequence[Sequence[int]], eval_name: str,
          eval_sha256: str, long_texts: int, reference_name: str, cpu: CpuInfo | None = None,
          labels: Sequence[int] | None = None) -> ParityReport:
    """The gate's report over every run; `labels` (indices, one per evaluation text) gives PyTorch's accuracy."""
    mismatched = [i for i, (a, b) in enumerate(zip(reference_ids, bundle_ids, strict=True)) if list(a) != list(b)]
    accuracy = None
    if labels is not None and kind is CLASSIFIER:
        truth = np.asarray(labels)
        accuracy = float((np.asarray(reference)[: len(truth)].argmax(axis=1) == truth).mean())
    return ParityReport(kind=kind, texts=tuple(texts), eval_name=eval_name, eval_sha256=eval_sha256,
                        long_texts=long_texts, runs=tuple(judge_run(kind, reference, run) for run in runs),
                        tokenizer_mismatches=len(mismatched), first_mismatch=mismatched[0] if mismatched else None,
                        reference=reference_name, cpu=cpu, accuracy=accuracy)


def _sig(value: float) -> float | None:
    # Four significant digits, as the accuracy gate records its deltas; None keeps JSON strict.
    return float(f"{value:.4g}") if math.isfinite(value) else None


def _quote(text: str) -> str:
    return repr(text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 3] + "...")
