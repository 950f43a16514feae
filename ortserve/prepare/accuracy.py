"""The accuracy gate: an optimised model against its source, on the same texts, before anything is written.

    evals = load_eval_set(source_bundle, labels)      eval.jsonl, else eval.txt, else the built-in corpus
    report = run_gate(source_model, candidate_bytes, tokenizer_json, max_seq_len, evals, settings, level="int8")
        tokenize once -> length-sorted batches of 16, padded as the server pads them
        -> each model's logits (ONNX Runtime, CPU provider, 2 intra-op threads) -> compare() -> refusals()
        -> the candidate again one text at a time (int8 scales activations per batch, so a text's answer depends
           on its batch: the gate holds both ends to its thresholds) -> both models timed on the same batches
    report.passed, report.refusals, report.table(), report.manifest_entry()

`compare` and `refusals` are pure functions over numpy arrays; everything that runs a model comes after them.
An embedding model (a kind without labels, bundle/kinds.py) is judged by `compare_vectors` and `vector_refusals`
instead: a text keeps its answer when its vector's cosine to the source's reaches the floor the server will hold the
version to at its precision (bundle/outputs.py: 0.999 at bf16, 0.99 at int8 and fp16), and the same bound is judged
over every text.
A text is *decisive* when the source's top-1 probability is at least `min_margin` above the runner-up: near-ties
flip under any rounding (the MiniLM demo head's median margin is about one logit), so agreement is judged on
the decisive texts and reported over all of them too.

The gate judges what the eval set proves, not what it happened to see: it refuses unless the one-sided 95%
Clopper-Pearson lower bound on decisive agreement (`agreement_lower_bound`) reaches `min_agreement`. 309 decisive
texts that all agree prove at most 0.9904, so a set needs at least `decisive_needed` decisive texts (299 for 0.99)
to prove the threshold even with no disagreement, and more to tolerate some. (A model that keeps 98.65% of its
decisive labels shows 0.99 or more on 309 texts two times in five; the bound on 309 passes it one time in 67, when
it happens to keep all 309.)

The built-in corpus (`eval_corpus.txt`, beside this file, one text per line) is 1,669 hand-written texts, enough
decisive ones (about 1,500 for the MiniLM demo) to prove 0.99 with a few disagreements: English reviews of products,
apps, places, films, books and services, news, technical notes, logs and errors, workplace and family statements,
chat, questions and support emails, from one word to about 140; the same kinds in German, French, Spanish, Italian,
Portuguese and Dutch; Japanese, Chinese, Russian, Arabic and Korean at some length, and a few lines in each of more
than 25 other languages (Greek, Hebrew, Devanagari, Thai, Tamil, Georgian, ...); and odd input that real traffic has
(codes, URLs, SQL, emoji, typos, repetition, mixed languages). `onnxruntime` and `tokenizers` are imported inside
the calls, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ortserve.bundle.agreement import margins, softmax
from ortserve.bundle.cpu import CpuInfo, cpu_info
from ortserve.bundle.kinds import CLASSIFIER, Kind
from ortserve.bundle.manifest import read_pad_id
from ortserve.bundle.outputs import cosines, min_cosine

EVAL_TEXT_FILE = "eval.txt"
EVAL_JSONL_FILE = "eval.jsonl"
BUILTIN_CORPUS = "eval_corpus.txt"
BUILTIN_NAME = "built-in corpus"
# What the server feeds (see service/instance.py); the gate feeds the same, zeros for token types included.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = CLASSIFIER.graph_output

Progress = Callable[[str], None]


BOUND_METHOD = "Clopper-Pearson"
"""The lower bound's method: exact (the binomial itself, no normal approximation), so its coverage is at least the
stated confidence for every agreement rate and set size; Wilson's is not near 1, where the gate works."""


class EvalSetError(ValueError):
    """An evaluation file the gate cannot use; the message names the file (and line) and the problem."""


class ModelRunError(Exception):
    """ONNX Runtime could not load or run one of the two models; the message says which, in one line."""


# -- settings and results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateSettings:
    """The gate's thresholds (the `registry` flags of the same names) and how it runs the models."""

    min_margin: float = 0.1
    """A text is decisive when the source's top-1 probability is at least this far above the runner-up."""
    min_agreement: float = 0.99
    """Refuse when the lower confidence bound on argmax agreement over the decisive texts is below this."""
    confidence: float = 0.95
    """One-sided confidence of that bound (`agreement_lower_bound`)."""
    max_accuracy_drop: float = 1.0
    """With labels: refuse when accuracy falls by more than this many percentage points."""
    accept_accuracy_loss: bool = False
    """Write the bundle even though the gate refuses; the report records that it was accepted."""
    batch_size: int = 16
    threads: int = 2
    """intra-op threads of both sessions; the same for both, so the speed ratio compares graphs, not settings."""
    speed_rounds: int = 3
    """Timing rounds over all batches; each batch keeps its best, the least disturbed run on a shared machine."""
    speed_budget_s: float = 20.0
    """No further timing round starts past this many seconds (a large eval set gets one round)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_margin < 1.0:
            raise ValueError(f"min_margin must be in [0, 1), got {self.min_margin}")
        if not 0.0 <= self.min_agreement < 1.0:
            raise ValueError(f"min_agreement must be in [0, 1), got {self.min_agreement}: a lower bound on agreement "
                             "from a finite eval set never reaches 1")
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError(f"confidence must be in [0.5, 1), got {self.confidence}")
        if not (self.max_accuracy_drop >= 0.0 and math.isfinite(self.max_accuracy_drop)):
            raise ValueError(f"max_accuracy_drop must be >= 0 percentage points, got {self.max_accuracy_drop}")
        if self.batch_size < 1 or self.threads < 1 or self.speed_rounds < 0:
            raise ValueError("batch_size and threads must be >= 1, speed_rounds >= 0")


@dataclass(frozen=True)
class EvalSet:
    """The texts both models run; `labels` are indices into the bundle's labels, one per text, or None."""

    texts: tuple[str, ...]
    labels: tuple[int, ...] | None
    name: str  # eval.jsonl, eval.txt or BUILTIN_NAME
    sha256: str  # of the file the texts came from

    def describe(self) -> str:
        labelled = ", labelled" if self.labels is not None else ""
        return f"{len(self.texts)} texts from {self.name}{labelled}"


@dataclass(frozen=True)
class Comparison:
    """Source against optimised logits over the same texts (`compare`). Counts, so agreement is exact."""

    texts: int
    agree: int  # texts whose argmax is the same
    decisive: int  # texts where the source's top-1 probability leads the runner-up by >= min_margin
    decisive_agree: int
    min_margin: float
    max_abs_delta_logit: float
    mean_abs_delta_logit: float
    max_abs_delta_prob: float
    mean_abs_delta_prob: float
    non_finite: int = 0  # texts whose optimised logits hold a NaN or an infinity
    correct_before: int | None = None  # with labels: texts the source classifies right
    correct_after: int | None = None

    @property
    def agreement(self) -> float:
        return self.agree / self.texts

    @property
    def decisive_agreement(self) -> float | None:
        """None when no text is decisive: then agreement says nothing either way."""
        return self.decisive_agree / self.decisive if self.decisive else None

    def decisive_lower_bound(self, confidence: float) -> float:
        """The one-sided lower confidence bound on decisive agreement; 0.0 when no text is decisive."""
        return agreement_lower_bound(self.decisive_agree, self.decisive, confidence)

    @property
    def accuracy_before(self) -> float | None:
        return None if self.correct_before is None else self.correct_before / self.texts

    @property
    def accuracy_after(self) -> float | None:
        return None if self.correct_after is None else self.correct_after / self.texts

    @property
    def accuracy_drop_points(self) -> float | None:
        if self.correct_before is None or self.correct_after is None:
            return None
        return 100.0 * (self.correct_before - self.correct_after) / self.texts


@dataclass(frozen=True)
class VectorComparison:
    """Source against optimised vectors over the same texts (`compare_vectors`): how many kept the floor."""

    texts: int
    close: int  # texts whose cosine to the source's vector reaches min_cosine
    min_cosine: float
    worst_cosine: float
    mean_cosine: float
    max_abs_delta: float
    non_finite: int = 0  # texts whose optimised vector holds a NaN or an infinity

    @property
    def agreement(self) -> float:
        return self.close / self.texts

    def lower_bound(self, confidence: float) -> float:
        """The one-sided lower confidence bound on the share of texts that keep the floor."""
        return agreement_lower_bound(self.close, self.texts, confidence)


@dataclass(frozen=True)
class Speed:
    """Engine-alone texts/s of both models over the same batches: each batch's best round, summed."""

    texts: int
    batch_size: int
    threads: int
    rounds: int
    source_texts_per_s: float
    optimized_texts_per_s: float

    @property
    def ratio(self) -> float:
        return self.optimized_texts_per_s / self.source_texts_per_s

    def to_dict(self) -> dict[str, Any]:
        return {"texts": self.texts, "batch_size": self.batch_size, "threads": self.threads, "rounds": self.rounds,
                "source_texts_per_s": round(self.source_texts_per_s, 1),
                "optimized_texts_per_s": round(self.optimized_texts_per_s, 1), "ratio": round(self.ratio, 3)}


@dataclass(frozen=True)
class GateReport:
    """What the gate found (`run_gate`): the measures, the thresholds they were held to, and the verdict."""

    level: str
    evals: EvalSet
    comparison: Comparison | VectorComparison
    """A classifier's labels (Comparison) or an embedding model's vectors (VectorComparison)."""
    settings: GateSettings
    refusals: tuple[str, ...]  # why the gate refuses, one line each; empty when it passes
    speed: Speed | None = None
    cpu: CpuInfo | None = None
    """The CPU both models ran on: int8 kernels, and so int8's speed, depend on it (bundle/cpu.py)."""
    source_outputs: np.ndarray | None = field(default=None, repr=False, compare=False)
    """float32 [texts, labels]: the source's logits on the eval texts (the bundle's reference answers come from
    them)."""
    optimized_outputs: np.ndarray | None = field(default=None, repr=False, compare=False)
    alone: Comparison | VectorComparison | None = None
    """The candidate run one text at a time against the source. A dynamically quantized (int8) graph scales its
    activations per batch, so a text's logits depend on the texts batched with it; the server forms batches of
    every size, so the gate holds both ends, batches of `batch_size` (`comparison`) and single texts, to its
    thresholds."""
    batch_spread: float | None = None
    """The largest |logit| change of one text between its batch of `batch_size` and itself alone."""
    optimized_alone_outputs: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def max_abs_delta_logit(self) -> float:
        """The largest |delta logit| against the source over both batchings: what a server may see on any text."""
        both = [c for c in (self.comparison, self.alone) if isinstance(c, Comparison)]
        return max((c.max_abs_delta_logit for c in both), default=0.0)

    @property
    def passed(self) -> bool:
        return not self.refusals

    @property
    def accepted_loss(self) -> bool:
        """Refused, and written anyway (--accept-accuracy-loss)."""
        return bool(self.refusals) and self.settings.accept_accuracy_loss

    def manifest_entry(self) -> dict[str, Any]:
        """The manifest's `optimization.accuracy`: what the same source, texts, tools and CPU class reproduce.

        Speed is left out: it is this machine at this moment, and a re-publish of the same source and level on
        the same machine must give the same bytes (same sha256). The CPU is in: it says where the gate vouched."""
        c, s = self.comparison, self.settings
        if isinstance(c, VectorComparison):
            return self._vector_entry(c)
        return {
            "eval": {"source": self.evals.name, "sha256": self.evals.sha256, "texts": c.texts,
                     "labelled": self.evals.labels is not None},
            "min_margin": s.min_margin,
            "decisive": c.decisive,
            "decisive_agree": c.decisive_agree,
            "agreement": _ratio(c.agreement),
            "decisive_agreement": None if c.decisive_agreement is None else _ratio(c.decisive_agreement),
            "decisive_agreement_bound": self._bound_entry(c),
            "max_abs_delta_logit": _sig(c.max_abs_delta_logit),
            "mean_abs_delta_logit": _sig(c.mean_abs_delta_logit),
            "max_abs_delta_prob": _sig(c.max_abs_delta_prob),
            "mean_abs_delta_prob": _sig(c.mean_abs_delta_prob),
            "accuracy_before": None if c.accuracy_before is None else _ratio(c.accuracy_before),
            "accuracy_after": None if c.accuracy_after is None else _ratio(c.accuracy_after),
            "min_agreement": s.min_agreement,
            "max_accuracy_drop": s.max_accuracy_drop,
            "passed": self.passed,
            "accepted_loss": self.accepted_loss,
            **self._alone_entry(),
            **({"cpu": self.cpu.to_dict()} if self.cpu is not None else {}),
        }

    def _vector_entry(self, c: VectorComparison) -> dict[str, Any]:
        """An embedding model's `optimization.accuracy`: the cosine floor, how many texts kept it, and the bound."""
        s = self.settings
        entry: dict[str, Any] = {
            "eval": {"source": self.evals.name, "sha256": self.evals.sha256, "texts": c.texts, "labelled": False},
            "min_cosine": c.min_cosine,
            "close": c.close,
            "agreement": _ratio(c.agreement),
            "agreement_bound": {"lower": _ratio(c.lower_bound(s.confidence)), "method": BOUND_METHOD,
                                "one_sided": True, "confidence": s.confidence,
                                "texts_needed": decisive_needed(s.min_agreement, s.confidence)},
            "worst_cosine": _cosine(c.worst_cosine),
            "mean_cosine": _cosine(c.mean_cosine),
            "max_abs_delta": _sig(c.max_abs_delta),
            "min_agreement": s.min_agreement,
            "passed": self.passed,
            "accepted_loss": self.accepted_loss,
        }
        if isinstance(self.alone, VectorComparison):
            a = self.alone
            entry["alone"] = {"close": a.close, "agreement_lower_bound": _ratio(a.lower_bound(s.confidence)),
                              "worst_cosine": _cosine(a.worst_cosine)}
        if self.cpu is not None:
            entry["cpu"] = self.cpu.to_dict()
        return entry

    def _bound_entry(self, c: Comparison) -> dict[str, Any]:
        """What the gate judges: the lower bound, how it was computed, and the fewest decisive texts that can pass."""
        s = self.settings
        return {"lower": _ratio(c.decisive_lower_bound(s.confidence)), "method": BOUND_METHOD, "one_sided": True,
                "confidence": s.confidence, "decisive_needed": decisive_needed(s.min_agreement, s.confidence)}

    def _alone_entry(self) -> dict[str, Any]:
        if not isinstance(self.alone, Comparison):
            return {}
        a = self.alone
        return {"alone": {"agreement": _ratio(a.agreement), "decisive": a.decisive,
                          "decisive_agree": a.decisive_agree,
                          "decisive_agreement": None if a.decisive_agreement is None else _ratio(a.decisive_agreement),
                          "decisive_agreement_lower_bound": _ratio(a.decisive_lower_bound(self.settings.confidence)),
                          "max_abs_delta_logit": _sig(a.max_abs_delta_logit)},
                "batch_spread_logit": _sig(self.batch_spread if self.batch_spread is not None else math.inf)}

    def to_dict(self) -> dict[str, Any]:
        """Everything, for `--json`: the manifest's entry, the counts, the reasons, and the speed."""
        c = self.comparison
        if isinstance(c, VectorComparison):
            return {"level": self.level, **self.manifest_entry(), "counts": {"close": c.close,
                    "non_finite": c.non_finite}, "refusals": list(self.refusals),
                    "speed": self.speed.to_dict() if self.speed else None}
        counts = {"agree": c.agree, "decisive_agree": c.decisive_agree, "non_finite": c.non_finite,
                  "correct_before": c.correct_before, "correct_after": c.correct_after}
        return {"level": self.level, **self.manifest_entry(), "counts": counts, "refusals": list(self.refusals),
                "speed": self.speed.to_dict() if self.speed else None}

    def table(self) -> list[str]:
        """The report as printed: one row per measure, the requirement beside the ones the gate checks."""
        c, s = self.comparison, self.settings
        needed = decisive_needed(s.min_agreement, s.confidence)
        rows = [("", "SOURCE -> " + self.level.upper(), "REQUIRED")]
        if isinstance(c, VectorComparison):
            return self._lines(rows + self._vector_rows(c, needed))
        rows.append(("argmax agreement, all texts", f"{c.agreement:.4f} ({c.agree}/{c.texts})", ""))
        decisive = ("n/a (no text is decisive)" if c.decisive_agreement is None
                    else f"{c.decisive_agreement:.4f} ({c.decisive_agree}/{c.decisive})")
        rows.append((f"argmax agreement, decisive (margin >= {s.min_margin:g})", decisive,
                     f">= {needed} decisive texts"))
        rows.append((f"  its lower bound (one-sided {s.confidence:.0%}, {BOUND_METHOD})",
                     f"{c.decisive_lower_bound(s.confidence):.4f}", f">= {s.min_agreement:g}"))
        rows.append(("|delta logit| max / mean", f"{c.max_abs_delta_logit:.3g} / {c.mean_abs_delta_logit:.3g}", ""))
        if isinstance(self.alone, Comparison):
            a = self.alone
            alone = ("n/a" if a.decisive_agreement is None
                     else f"{a.decisive_agreement:.4f} ({a.decisive_agree}/{a.decisive}), lower bound "
                          f"{a.decisive_lower_bound(s.confidence):.4f}")
            rows.append(("  one text at a time: decisive agreement", alone, f"bound >= {s.min_agreement:g}"))
            rows.append(("  one text at a time: |delta logit| max", f"{a.max_abs_delta_logit:.3g}", ""))
            rows.append(("  a text's logits, alone vs batched: max change", f"{self.batch_spread:.3g}", ""))
        rows.append(("|delta probability| max / mean", f"{c.max_abs_delta_prob:.3g} / {c.mean_abs_delta_prob:.3g}",
                     ""))
        if c.non_finite:
            rows.append(("texts with non-finite logits", str(c.non_finite), "0"))
        if c.accuracy_before is not None and c.accuracy_after is not None:
            rows.append(("accuracy (labels)", f"{c.accuracy_before:.2%} -> {c.accuracy_after:.2%}",
                         f"drop <= {s.max_accuracy_drop:g} points"))
        return self._lines(rows)

    def _vector_rows(self, c: VectorComparison, needed: int) -> list[tuple[str, str, str]]:
        s = self.settings
        rows = [(f"texts with cosine >= {c.min_cosine:g} to the source", f"{c.agreement:.4f} ({c.close}/{c.texts})",
                 f">= {needed} texts"),
                (f"  its lower bound (one-sided {s.confidence:.0%}, {BOUND_METHOD})",
                 f"{c.lower_bound(s.confidence):.4f}", f">= {s.min_agreement:g}"),
                ("cosine worst / mean", f"{c.worst_cosine:.6f} / {c.mean_cosine:.6f}", ""),
                ("|delta| max", f"{c.max_abs_delta:.3g}", "")]
        if isinstance(self.alone, VectorComparison):
            a = self.alone
            rows.append(("  one text at a time: texts kept, lower bound",
                         f"{a.close}/{a.texts}, {a.lower_bound(s.confidence):.4f}", f">= {s.min_agreement:g}"))
            rows.append(("  one text at a time: cosine worst", f"{a.worst_cosine:.6f}", ""))
        if c.non_finite:
            rows.append(("texts with non-finite vectors", str(c.non_finite), "0"))
        return rows

    def _lines(self, rows: list[tuple[str, str, str]]) -> list[str]:
        """The table's rows (the speed and the CPU added) and the verdict, as printed."""
        if self.speed is not None:
            sp = self.speed
            rows.append((f"texts/s, engine alone ({sp.threads} threads, batches of {sp.batch_size})",
                         f"{sp.source_texts_per_s:.0f} -> {sp.optimized_texts_per_s:.0f} ({sp.ratio:.2f}x)", ""))
            # What it timed: a served copy under load runs one-thread runs side by side, where bf16 gained 1.8x
            # against this row's 1.07x on a Zen 4 (issue 59); scripts/bench times that.
            rows.append(("  timed as", "one session, batch after batch (served under load: scripts/bench)", ""))
        if self.cpu is not None:
            rows.append(("CPU", self.cpu.describe(), ""))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"accuracy gate: {self.level} against its source on {self.evals.describe()}"]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        verdict = "refused, accepted anyway (--accept-accuracy-loss)" if self.accepted_loss else "refused"
        lines += [f"verdict: {verdict}: {reason}" for reason in self.refusals] or ["verdict: pass"]
        return lines


def _ratio(value: float) -> float:
    return round(value, 6)


def _sig(value: float) -> float | None:
    # Four significant digits: the manifest shows the size of a delta, not float32 noise; None keeps JSON strict.
    return float(f"{value:.4g}") if math.isfinite(value) else None


def _cosine(value: float) -> float | None:
    # Seven decimals: a cosine's distance from 1 is what it says (0.9999731, not 1.0).
    return round(value, 7) if math.isfinite(value) else None


# -- pure functions -------------------------------------------------------------------------------------


def agreement_lower_bound(agree: int, texts: int, confidence: float = 0.95) -> float:
    """The one-sided Clopper-Pearson lower confidence bound on a rate seen as `agree` successes in `texts` trials.

    The p at which `agree` or more successes have probability 1 - confidence: (1 - confidence) ** (1 / texts) when
    all agree, 0.0 when none do (or there are no texts), else found by bisection on the binomial tail to within a
    few ulps. Two-sided 95% intervals are two of these at confidence 0.975 (Newcombe 1998, method 5: 81 of 263 ->
    0.2527 .. 0.3676)."""
    if not 0 <= agree <= texts:
        raise ValueError(f"need 0 <= agree <= texts, got {agree} of {texts}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = 1.0 - confidence
    if agree == 0:
        return 0.0
    if agree == texts:
        return float(alpha ** (1.0 / texts))
    low, high = 0.0, 1.0  # tail(low) < alpha <= tail(high): the tail grows with p
    while True:
        middle = (low + high) / 2
        if middle in (low, high):
            return low
        if _binomial_tail(agree, texts, middle) < alpha:
            low = middle
        else:
            high = middle


def decisive_needed(min_agreement: float, confidence: float = 0.95) -> int:
    """The fewest decisive texts whose lower bound reaches `min_agreement` when every one agrees (299 for 0.99 at
    95%): below that, no outcome can pass the gate. 0 when `min_agreement` is 0."""
    if not 0.0 <= min_agreement < 1.0:
        raise ValueError(f"min_agreement must be in [0, 1), got {min_agreement}")
    if min_agreement == 0.0:
        return 0
    # (1 - c) ** (1 / n) >= t  <=>  n >= log(1 - c) / log(t); the loop settles float rounding at the edge.
    n = max(1, math.ceil(math.log(1.0 - confidence) / math.log(min_agreement)) - 1)
    while agreement_lower_bound(n, n, confidence) < min_agreement:
        n += 1
    return n


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), 0 < p < 1, summed over whichever side has fewer terms."""
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)

    def pmf(j: int) -> float:
        return math.exp(log_n - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q)

    if n - k + 1 <= k:
        return math.fsum(pmf(j) for j in range(k, n + 1))
    return 1.0 - math.fsum(pmf(j) for j in range(k))


def compare(source: np.ndarray, optimized: np.ndarray, *, min_margin: float,
            labels: Sequence[int] | None = None) -> Comparison:
    """Argmax agreement (all texts, decisive texts), |delta| of logits and probabilities, accuracy with labels."""
    if source.ndim != 2 or source.shape != optimized.shape or len(source) == 0:
        raise ValueError(f"need two [texts, labels] arrays of one shape, got {source.shape} and {optimized.shape}")
    if labels is not None and len(labels) != len(source):
        raise ValueError(f"{len(labels)} labels for {len(source)} texts")
    finite = np.isfinite(optimized).all(axis=1)
    # A NaN row counts as a disagreement and is left out of the deltas, which it would turn into NaN.
    src_top = source.argmax(axis=1)
    opt_top = np.where(finite, np.nan_to_num(optimized).argmax(axis=1), -1)
    same = src_top == opt_top
    decisive = margins(source) >= min_margin
    delta_logit = np.abs(optimized[finite].astype(np.float64) - source[finite])
    delta_prob = np.abs(softmax(optimized[finite]) - softmax(source[finite])) if finite.any() else np.zeros(0)
    correct_before = correct_after = None
    if labels is not None:
        truth = np.asarray(labels)
        correct_before, correct_after = int((src_top == truth).sum()), int((opt_top == truth).sum())
    return Comparison(
        texts=len(source), agree=int(same.sum()), decisive=int(decisive.sum()),
        decisive_agree=int((same & decisive).sum()), min_margin=min_margin,
        max_abs_delta_logit=float(delta_logit.max()) if delta_logit.size else math.inf,
        mean_abs_delta_logit=float(delta_logit.mean()) if delta_logit.size else math.inf,
        max_abs_delta_prob=float(delta_prob.max()) if delta_prob.size else math.inf,
        mean_abs_delta_prob=float(delta_prob.mean()) if delta_prob.size else math.inf,
        non_finite=int((~finite).sum()), correct_before=correct_before, correct_after=correct_after)


def refusals(c: Comparison, *, min_agreement: float, max_accuracy_drop: float,
             confidence: float = 0.95) -> tuple[str, ...]:
    """Why the gate refuses, one line each, or () when it passes.

    Agreement passes when its lower bound (`agreement_lower_bound`, one-sided at `confidence`) reaches
    `min_agreement`; with fewer decisive texts than `decisive_needed` nothing can pass, and the line says how many
    the eval set needs."""
    reasons = []
    if c.non_finite:
        reasons.append(f"{c.non_finite} of {c.texts} texts got non-finite logits (NaN or infinity)")
    needed = decisive_needed(min_agreement, confidence)
    bound = c.decisive_lower_bound(confidence)
    how = f"one-sided {confidence:.0%} {BOUND_METHOD} lower bound"
    if c.decisive < needed:
        seen = "" if c.decisive_agreement is None else f"decisive agreement {c.decisive_agreement:.4f}, "
        reasons.append(f"too few decisive texts to prove --min-agreement {min_agreement:g}: {seen}{c.decisive_agree}/"
                       f"{c.decisive} texts with a source margin >= {c.min_margin:g}, whose {how} is at most "
                       f"{agreement_lower_bound(c.decisive, c.decisive, confidence):.4f} even with no disagreement; "
                       f"the eval set needs at least {needed} decisive texts, more to tolerate any disagreement")
    elif bound < min_agreement:
        reasons.append(f"decisive agreement {c.decisive_agreement:.4f} ({c.decisive_agree}/{c.decisive} texts with a "
                       f"source margin >= {c.min_margin:g}): its {how} {bound:.4f} is below --min-agreement "
                       f"{min_agreement:g}")
    drop = c.accuracy_drop_points
    if drop is not None and drop > max_accuracy_drop + 1e-9:  # 1e-9: a drop of exactly the limit is allowed
        reasons.append(f"accuracy fell {drop:.2f} points ({c.accuracy_before:.2%} -> {c.accuracy_after:.2%}), "
                       f"more than --max-accuracy-drop {max_accuracy_drop:g}")
    return tuple(reasons)


def compare_vectors(source: np.ndarray, optimized: np.ndarray, *, min_cosine: float) -> VectorComparison:
    """An embedding model's texts: the cosine of each optimised vector to the source's, how many reach `min_cosine`."""
    if source.ndim != 2 or source.shape != optimized.shape or len(source) == 0:
        raise ValueError(f"need two [texts, dim] arrays of one shape, got {source.shape} and {optimized.shape}")
    finite = np.isfinite(optimized).all(axis=1)
    cosine = cosines(source, optimized)
    delta = np.abs(optimized[finite].astype(np.float64) - source[finite])
    return VectorComparison(texts=len(source), close=int((cosine >= min_cosine).sum()), min_cosine=min_cosine,
                            worst_cosine=float(cosine.min()), mean_cosine=float(cosine.mean()),
                            max_abs_delta=float(delta.max()) if delta.size else math.inf,
                            non_finite=int((~finite).sum()))


def vector_refusals(c: VectorComparison, *, min_agreement: float, confidence: float = 0.95) -> tuple[str, ...]:
    """Why the gate refuses an embedding model, one line each, or () when it passes: the share of texts whose vector
    keeps the cosine floor must have its lower bound at `min_agreement` or more (`refusals`' rule, over every text)."""
    reasons = []
    if c.non_finite:
        reasons.append(f"{c.non_finite} of {c.texts} texts got non-finite vectors (NaN or infinity)")
    needed = decisive_needed(min_agreement, confidence)
    how = f"one-sided {confidence:.0%} {BOUND_METHOD} lower bound"
    if c.texts < needed:
        most = agreement_lower_bound(c.texts, c.texts, confidence)
        reasons.append(f"too few texts to prove --min-agreement {min_agreement:g}: {c.close}/{c.texts} kept cosine "
                       f">= {c.min_cosine:g}, whose {how} is at most {most:.4f}; the eval set needs at least "
                       f"{needed} texts")
    elif (bound := c.lower_bound(confidence)) < min_agreement:
        reasons.append(f"{c.close} of {c.texts} texts kept cosine >= {c.min_cosine:g} to the source's vector (worst "
                       f"{c.worst_cosine:.6f}): the {how} {bound:.4f} is below --min-agreement {min_agreement:g}")
    return tuple(reasons)


# -- evaluation texts -----------------------------------------------------------------------------------


def load_eval_set(bundle_dir: str | Path, labels: Sequence[str]) -> EvalSet:
    """The bundle's eval.jsonl or eval.txt (one of them, not both), else the built-in corpus.

    EvalSetError messages name the file relative to the bundle (the caller says which bundle)."""
    root = Path(bundle_dir)
    jsonl, txt = root / EVAL_JSONL_FILE, root / EVAL_TEXT_FILE
    if jsonl.exists() and txt.exists():
        raise EvalSetError(f"both {EVAL_JSONL_FILE} and {EVAL_TEXT_FILE} are present; keep the one to evaluate on")
    if jsonl.exists():
        return _parse_jsonl(_read(jsonl), labels)
    if txt.exists():
        data = _read(txt)
        return EvalSet(texts=_lines(data, EVAL_TEXT_FILE), labels=None, name=EVAL_TEXT_FILE, sha256=_sha256(data))
    return builtin_eval_set()


def builtin_eval_set() -> EvalSet:
    data = resources.files("ortserve.prepare").joinpath(BUILTIN_CORPUS).read_bytes()
    return EvalSet(texts=_lines(data, BUILTIN_CORPUS), labels=None, name=BUILTIN_NAME, sha256=_sha256(data))


def _read(path: Path) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise EvalSetError(f"{path.name}: not a regular file")
    try:
        return path.read_bytes()
    except OSError as e:
        raise EvalSetError(f"{path.name}: cannot read ({e.strerror})") from None


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EvalSetError(f"{name}: not UTF-8 (byte {e.start})") from None


def _lines(data: bytes, name: str) -> tuple[str, ...]:
    texts = tuple(line.strip() for line in _decode(data, name).splitlines() if line.strip())
    if not texts:
        raise EvalSetError(f"{name}: no texts (one text per line; blank lines are skipped)")
    return texts


def _parse_jsonl(data: bytes, labels: Sequence[str]) -> EvalSet:
    path = EVAL_JSONL_FILE
    index = {label: n for n, label in enumerate(labels)}
    texts: list[str] = []
    truth: list[int | None] = []
    for number, line in enumerate(_decode(data, path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise EvalSetError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not row["text"].strip():
            raise EvalSetError(f'{where}: expected {{"text": "...", "label": "..."}} with a non-empty text')
        label = row.get("label")
        if label is not None and label not in index:
            raise EvalSetError(f"{where}: label {label!r} is not one of the bundle's labels ({', '.join(labels)})")
        texts.append(row["text"].strip())
        truth.append(None if label is None else index[label])
    if not texts:
        raise EvalSetError(f"{path}: no texts (one JSON object per line; blank lines are skipped)")
    labelled = [t for t in truth if t is not None]
    if labelled and len(labelled) != len(truth):
        raise EvalSetError(f"{path}: {len(labelled)} of {len(truth)} texts have a label; label all or none")
    return EvalSet(texts=tuple(texts), labels=tuple(labelled) if labelled else None, name=EVAL_JSONL_FILE,
                   sha256=_sha256(data))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- running both models --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    rows: np.ndarray  # indices of its texts in the eval set
    feed: dict[str, np.ndarray]  # int64 [rows, longest text in the batch], every input the server feeds


def make_batches(tokenizer_json: str | Path, max_seq_len: int, texts: Sequence[str], batch_size: int, *,
                 by_length: bool = True, pairs: Sequence[str] | None = None) -> list[Batch]:
    """Texts tokenized and truncated as the server does it, sorted by length (or, `by_length` False, in the order
    given, so that most rows are padded), padded per batch with the bundle's pad id (bundle.pad_id). With `pairs`
    each row is a text and its second text, as the tokenizer makes a pair (its token types included)."""
    from ortserve.bundle import tokenizer as bundle_tokenizer  # lazy: tokenizers, see module docstring

    tokenizer = bundle_tokenizer.load(tokenizer_json, max_seq_len)
    pad_id = read_pad_id(tokenizer_json)
    # encode(), not encode_batch(): the batch call leaves tokenizers' thread pool spinning through the timing.
    encodings = [tokenizer.encode(text) for text in texts] if pairs is None else [
        tokenizer.encode(text, pair) for text, pair in zip(texts, pairs, strict=True)]
    ids = [e.ids or [pad_id] for e in encodings]
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i)) if by_length else list(range(len(ids)))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = np.asarray(order[start:start + batch_size])
        width = max(len(ids[i]) for i in rows)
        input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros_like(input_ids)
        for r, i in enumerate(rows):
            input_ids[r, : len(ids[i])] = ids[i]
            mask[r, : len(ids[i])] = 1
            if pairs is not None and encodings[i].ids:
                types[r, : len(ids[i])] = encodings[i].type_ids
        batches.append(Batch(rows=rows, feed={"input_ids": input_ids, "attention_mask": mask,
                                              "token_type_ids": types}))
    return batches


def open_session(model: str | Path | bytes, threads: int, precision: str = "fp32") -> Any:
    """An ONNX Runtime CPU session as the engine opens one (all graph optimisations), `threads` intra-op; at bf16,
    the model as OpenVINO runs it for the server (OpenVinoSession)."""
    if precision == "bf16":
        if isinstance(model, bytes):
            raise ModelRunError("a bf16 candidate is the FP32 graph's file, not serialized bytes")
        return OpenVinoSession(model, threads)
    import onnxruntime as ort  # lazy, see module docstring

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: ORT's warnings (fp16 casts on CPU...) are not the report
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                providers=["CPUExecutionProvider"])


# How the server compiles a bf16 version (engine_ext openvino_model.cc), so that the gate judges the numbers it will
# serve: bf16 asked for explicitly, no pinning, the latency hint, the gate's thread count.
OPENVINO_BF16 = {"INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": "NO"}


class OpenVinoSession:
    """A bf16 candidate as the server runs it: the FP32 graph compiled by OpenVINO for the CPU at bf16, behind the
    slice of ONNX Runtime's session API the gate uses (`get_inputs`, `run`)."""

    def __init__(self, model: str | Path, threads: int) -> None:
        import openvino  # lazy: only the bf16 level needs it

        core = openvino.Core()
        capabilities = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        if "BF16" not in capabilities:
            raise ModelRunError(f"this CPU has no bf16 arithmetic (OpenVINO reports {' '.join(capabilities)}), so "
                                "the gate cannot measure bf16 answers here: optimise on a CPU with AVX-512 BF16 or "
                                "AMX (AMD Zen 4, Intel Sapphire Rapids and later)")
        read = core.read_model(str(model))
        self._inputs = [_Named(port.get_any_name()) for port in read.inputs]
        self._outputs = {port.get_any_name(): i for i, port in enumerate(read.outputs)}
        compiled = core.compile_model(read, "CPU", {**OPENVINO_BF16, "INFERENCE_NUM_THREADS": str(threads)})
        compiled_at = compiled.get_property("INFERENCE_PRECISION_HINT")
        if compiled_at != openvino.Type.bf16:
            raise ModelRunError(f"OpenVINO compiled the model at {compiled_at}, not bf16")
        self._request = compiled.create_infer_request()

    def get_inputs(self) -> list[Any]:
        return list(self._inputs)

    def run(self, outputs: Sequence[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        results = self._request.infer(feeds)
        return [np.array(results[self._outputs[name]], copy=True) for name in outputs]


@dataclass(frozen=True)
class _Named:
    name: str


def run_outputs(session: Any, batches: Sequence[Batch], texts: int, output: str = OUTPUT_NAME) -> np.ndarray:
    """float32 [texts, columns] of the graph's `output` (a classifier's logits by default), rows in eval-set order."""
    names = {i.name for i in session.get_inputs()}
    out: np.ndarray | None = None
    for batch in batches:
        (values,) = session.run([output], {k: v for k, v in batch.feed.items() if k in names})
        if out is None:
            out = np.zeros((texts, values.shape[1]), dtype=np.float32)
        out[batch.rows] = values
    assert out is not None  # an eval set is never empty (load_eval_set)
    return out


def run_token_outputs(session: Any, batches: Sequence[Batch], texts: int,
                      output: str = OUTPUT_NAME) -> list[np.ndarray]:
    """A token classifier's graph (`output` float32 [batch, seq, labels]): float32 [T, labels] per text, in eval-set
    order, each cut to its text's T unmasked positions (its tokens, as the server answers them)."""
    names = {i.name for i in session.get_inputs()}
    out: list[np.ndarray | None] = [None] * texts
    for batch in batches:
        (values,) = session.run([output], {k: v for k, v in batch.feed.items() if k in names})
        lengths = batch.feed["attention_mask"].sum(axis=1)
        for r, i in enumerate(batch.rows):
            out[int(i)] = np.asarray(values[r, : int(lengths[r])], dtype=np.float32).copy()
    assert all(rows is not None for rows in out)  # the batches cover every text (make_batches)
    return [rows for rows in out if rows is not None]


def measure_speed(source: Any, optimized: Any, batches: Sequence[Batch], *, rounds: int, budget_s: float,
                  threads: int, batch_size: int, output: str = OUTPUT_NAME) -> Speed:
    """Both models batch by batch, alternating, so a busy neighbour slows both alike; best round per batch."""
    names = [{i.name for i in s.get_inputs()} for s in (source, optimized)]
    feeds = [[{k: v for k, v in b.feed.items() if k in wanted} for b in batches] for wanted in names]
    best = np.full((2, len(batches)), np.inf)
    started, done = time.perf_counter(), 0
    while done < rounds and (done == 0 or time.perf_counter() - started < budget_s):
        for j in range(len(batches)):
            for m, session in enumerate((source, optimized)):
                t0 = time.perf_counter()
                session.run([output], feeds[m][j])
                best[m, j] = min(best[m, j], time.perf_counter() - t0)
        done += 1
    texts = sum(len(b.rows) for b in batches)
    return Speed(texts=texts, batch_size=batch_size, threads=threads, rounds=done,
                 source_texts_per_s=texts / best[0].sum(), optimized_texts_per_s=texts / best[1].sum())


def run_gate(source_model: str | Path, candidate: bytes | Path, tokenizer_json: str | Path, max_seq_len: int,
             evals: EvalSet, settings: GateSettings, *, level: str, precision: str = "fp32",
             progress: Progress | None = None, kind: Kind = CLASSIFIER) -> GateReport:
    """Runs both models on `evals` and judges the candidate (the optimised graph's serialized bytes, or at bf16 the
    FP32 graph's file, which OpenVINO runs in bf16). A kind without labels (an embedding): its graph's vectors are
    judged by their cosine to the source's, at the floor the server holds `precision` to (bundle/outputs.py)."""
    vectors, output = not kind.labelled, kind.graph_output
    floor = min_cosine(precision)
    report = progress or (lambda _line: None)
    batches = make_batches(tokenizer_json, max_seq_len, evals.texts, settings.batch_size)
    report(f"gate: {evals.describe()}, {len(batches)} length-sorted batches of <= {settings.batch_size}")
    logits = []
    for name, model, runs_at in (("source", source_model, "fp32"), (level, candidate, precision)):
        t0 = time.perf_counter()
        try:
            session = open_session(model, settings.threads, runs_at)
            logits.append((session, run_outputs(session, batches, len(evals.texts), output)))
        except ModelRunError:
            raise
        except Exception as e:  # ORT raises its own types (Fail, InvalidGraph, RuntimeException...)
            first = (str(e).strip().splitlines() or [""])[0][:200]
            runtime = "OpenVINO" if runs_at == "bf16" else "ONNX Runtime"
            raise ModelRunError(f"{runtime} could not run the {name} model ({type(e).__name__}: {first})") from e
        report(f"gate: {name} {'vectors' if vectors else 'logits'} ({time.perf_counter() - t0:.1f}s)")
    (source, source_logits), (optimized, optimized_logits) = logits
    if source_logits.shape != optimized_logits.shape:
        raise ModelRunError(f"the {level} model gives logits of shape {list(optimized_logits.shape)}, the source "
                            f"{list(source_logits.shape)}")

    def judged(candidate: np.ndarray) -> Comparison | VectorComparison:
        if vectors:
            return compare_vectors(source_logits, candidate, min_cosine=floor)
        return compare(source_logits, candidate, min_margin=settings.min_margin, labels=evals.labels)

    comparison = judged(optimized_logits)
    t0 = time.perf_counter()
    try:
        optimized_alone = run_outputs(optimized, make_batches(tokenizer_json, max_seq_len, evals.texts, 1),
                                      len(evals.texts), output)
    except Exception as e:  # as above
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ModelRunError(f"ONNX Runtime could not run the {level} model ({type(e).__name__}: {first})") from e
    report(f"gate: {level} {'vectors' if vectors else 'logits'} one text at a time ({time.perf_counter() - t0:.1f}s)")
    alone = judged(optimized_alone)
    both_finite = np.isfinite(optimized_logits).all(axis=1) & np.isfinite(optimized_alone).all(axis=1)
    spread = float(np.abs(optimized_logits[both_finite] - optimized_alone[both_finite]).max(initial=0.0))
    speed = None
    if settings.speed_rounds:
        t0 = time.perf_counter()
        speed = measure_speed(source, optimized, batches, rounds=settings.speed_rounds,
                              budget_s=settings.speed_budget_s, threads=settings.threads,
                              batch_size=settings.batch_size, output=output)
        report(f"gate: timed both models, {speed.rounds} rounds ({time.perf_counter() - t0:.1f}s)")

    def why(c: Comparison | VectorComparison) -> tuple[str, ...]:
        if isinstance(c, VectorComparison):
            return vector_refusals(c, min_agreement=settings.min_agreement, confidence=settings.confidence)
        return refusals(c, min_agreement=settings.min_agreement, max_accuracy_drop=settings.max_accuracy_drop,
                        confidence=settings.confidence)

    reasons = why(comparison)
    reasons += tuple(f"one text at a time: {r}" for r in why(alone) if r not in reasons)
    return GateReport(level=level, evals=evals, comparison=comparison, settings=settings, speed=speed,
                      refusals=reasons, cpu=cpu_info(), source_outputs=source_logits,
                      optimized_outputs=optimized_logits, alone=alone, batch_spread=spread,
                      optimized_alone_outputs=optimized_alone)
