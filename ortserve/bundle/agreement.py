"""Do two versions answer the same call alike? One judge per kind, over plain arrays (a live shadow comparison, and
the rules the gate shares: `softmax`, `margins`).

    judge = judge_of(labelled=..., reranker=..., per_token=...)  which judge a version's answers take
    one = judge_call(judge, stable, candidate, ...)             pure: an `Agreement` for one call
    tally = tally.add(one)                                     counts that sum across calls and replicas

The kinds' rules (the stable version's answer is the baseline, as the source model's is at the gate):

    labels      a classifier: decisive top-1 agreement, the gate's rule: a row is judged when the stable side's top-1
                probability leads its runner-up by at least `min_margin`, and agrees when the candidate's top-1 is
                the same label (independent labels: the labels past 0.5 are the same set, on rows where every
                label is at least `min_margin / 2` from 0.5)
    vectors     an embedding model: each row agrees when the cosine of the two vectors reaches `min_cosine`
    ranks       a reranker (a classifier of pairs answering one call's candidates): the call is one judged item,
                agreeing when the top-k candidates are the same set; beside it the share of candidate pairs the
                two versions put in the same order (concordance)
    entities    a token classifier: each entity (its span and label) of either side is judged; it agrees when the
                other side has the same span with the same label

Every judge also says how far apart the call's answers are (`distance`, 0 for the same answers, 1 at most), which
orders the calls that disagree most. A non-finite candidate answer disagrees on every item it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ortserve.bundle.outputs import cosines

LABELS, VECTORS, RANKS, ENTITIES = "labels", "vectors", "ranks", "entities"
JUDGES = (LABELS, VECTORS, RANKS, ENTITIES)
MIN_MARGIN = 0.1
"""The gate's default (prepare/accuracy.GateSettings.min_margin): a near tie is not decisive."""
MIN_COSINE = 0.99
"""Two versions of an embedding model agree on a text at this cosine (the optimised-precision floor,
bundle/outputs.MIN_COSINE)."""
TOP_K = 3

Entity = tuple[int, int, str]
"""(start, end, label): a span of the caller's text in code points and its entity label."""


@dataclass(frozen=True)
class Agreement:
    """One call's comparison: `judged` items (decisive rows, vectors, the call's ranking, entities), `agreed` of them;
    `distance` how far apart the answers are (0 .. 1), and for rankings the concordant share of pairs."""

    judged: int
    agreed: int
    distance: float
    concordance: float | None = None

    @property
    def disagreed(self) -> int:
        return self.judged - self.agreed


@dataclass(frozen=True)
class Tally:
    """Agreement counted over many calls; `+` sums tallies (calls, replicas), so the figures are exact counts."""

    calls: int = 0
    judged: int = 0
    agreed: int = 0
    concordance_sum: float = 0.0
    ranked_calls: int = 0

    def add(self, one: Agreement) -> Tally:
        ranked = one.concordance is not None
        return Tally(calls=self.calls + 1, judged=self.judged + one.judged, agreed=self.agreed + one.agreed,
                     concordance_sum=self.concordance_sum + (one.concordance or 0.0),
                     ranked_calls=self.ranked_calls + int(ranked))

    def __add__(self, other: Tally) -> Tally:
        return Tally(calls=self.calls + other.calls, judged=self.judged + other.judged,
                     agreed=self.agreed + other.agreed, concordance_sum=self.concordance_sum + other.concordance_sum,
                     ranked_calls=self.ranked_calls + other.ranked_calls)

    def __sub__(self, earlier: Tally) -> Tally:
        """What was counted since `earlier` (counters that only grow; a reset reads as nothing since)."""
        return Tally(calls=max(0, self.calls - earlier.calls), judged=max(0, self.judged - earlier.judged),
                     agreed=max(0, self.agreed - earlier.agreed),
                     concordance_sum=max(0.0, self.concordance_sum - earlier.concordance_sum),
                     ranked_calls=max(0, self.ranked_calls - earlier.ranked_calls))

    @property
    def agreement(self) -> float | None:
        """None while nothing was judged."""
        return self.agreed / self.judged if self.judged else None

    @property
    def concordance(self) -> float | None:
        return self.concordance_sum / self.ranked_calls if self.ranked_calls else None


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (the probabilities behind the margins)."""
    wide = np.asarray(logits, dtype=np.float64)
    exp = np.exp(wide - wide.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def margins(logits: np.ndarray) -> np.ndarray:
    """Top-1 probability minus the runner-up's, per row (1.0 for a single-label head)."""
    probs = np.sort(softmax(logits), axis=1)
    runner_up = probs[:, -2] if probs.shape[1] > 1 else np.zeros(len(probs))
    return probs[:, -1] - runner_up


def _same_shape(stable: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(stable, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"need two [rows, columns] answers of one shape, got {a.shape} and {b.shape}")
    return a, b


def labels(stable: np.ndarray, candidate: np.ndarray, *, min_margin: float = MIN_MARGIN,
           multi_label: bool = False) -> Agreement:
    """A classifier's call: decisive top-1 agreement (see the module docstring)."""
    a, b = _same_shape(stable, candidate)
    finite = np.isfinite(b).all(axis=1)
    clean = np.where(finite[:, None], b, 0.0)
    if multi_label:
        pa, pb = 1.0 / (1.0 + np.exp(-a)), 1.0 / (1.0 + np.exp(-clean))
        decisive = (np.abs(pa - 0.5) >= min_margin / 2).all(axis=1)
        same = ((pa > 0.5) == (pb > 0.5)).all(axis=1) & finite
        distance = np.abs(pa - pb).max(axis=1)
    else:
        pa, pb = softmax(a), softmax(clean)
        decisive = margins(a) >= min_margin
        same = (a.argmax(axis=1) == clean.argmax(axis=1)) & finite
        distance = 0.5 * np.abs(pa - pb).sum(axis=1)  # total variation
    distance = np.where(finite, distance, 1.0)
    return Agreement(judged=int(decisive.sum()), agreed=int((decisive & same).sum()),
                     distance=float(distance.max()) if len(distance) else 0.0)


def vectors(stable: np.ndarray, candidate: np.ndarray, *, min_cosine: float = MIN_COSINE) -> Agreement:
    """An embedding model's call: each row agrees at `min_cosine` or more."""
    a, b = _same_shape(stable, candidate)
    cos = cosines(a, b)
    return Agreement(judged=len(cos), agreed=int((cos >= min_cosine).sum()),
                     distance=float(np.clip(1.0 - cos.min(), 0.0, 1.0)) if len(cos) else 0.0)


def ranks(stable: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
          top_k: int = TOP_K) -> Agreement:
    """A reranker's call (one score per candidate): one judged item, agreeing when the top-k sets match; the
    concordance is the share of candidate pairs both versions order alike (a tie on one side only counts half)."""
    a = np.asarray(stable, dtype=np.float64).reshape(-1)
    b = np.asarray(candidate, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"need two score lists of one length, got {a.shape} and {b.shape}")
    n = len(a)
    if n == 0:
        return Agreement(judged=0, agreed=0, distance=0.0, concordance=None)
    if not np.isfinite(b).all():
        return Agreement(judged=1, agreed=0, distance=1.0, concordance=0.0)
    k = min(top_k, n)
    # Stable sort on the negated score: equal scores keep the candidates' order, the same on both sides.
    top_a = set(np.argsort(-a, kind="stable")[:k].tolist())
    top_b = set(np.argsort(-b, kind="stable")[:k].tolist())
    if n < 2:
        concordance = 1.0
    else:
        i, j = np.triu_indices(n, 1)
        sa, sb = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
        concordance = float(np.where(sa == sb, 1.0, np.where(sa * sb < 0, 0.0, 0.5)).mean())
    return Agreement(judged=1, agreed=int(top_a == top_b), distance=1.0 - concordance, concordance=concordance)


def reranker_scores(logits: np.ndarray) -> np.ndarray:
    """The one score per pair a reranker's ranking is read from: its single logit, else the last label's lead over
    the first (monotonic in the last label's softmax probability for two labels)."""
    wide = np.asarray(logits, dtype=np.float64)
    if wide.ndim == 1:
        return wide
    return wide[:, 0] if wide.shape[1] == 1 else wide[:, -1] - wide[:, 0]


def entities(stable: Iterable[Iterable[Entity]], candidate: Iterable[Iterable[Entity]]) -> Agreement:
    """A token classifier's call (its texts' entities, text by text): every entity either side found is judged and
    agrees when the other side found the same span with the same label."""
    judged = agreed = 0
    worst = 0.0
    for mine, theirs in zip(stable, candidate, strict=True):
        a, b = set(map(tuple, mine)), set(map(tuple, theirs))
        union = a | b
        same = len(a & b)
        judged += len(union)
        agreed += same
        if union:
            worst = max(worst, 1.0 - same / len(union))
    return Agreement(judged=judged, agreed=agreed, distance=worst)


def judge_of(*, labelled: bool, reranker: bool, per_token: bool) -> str:
    """Which judge compares a version's answers: a token classifier's entities, a reranker's ranks (a classifier of
    pairs with a score), a classifier's labels, else an embedding model's vectors."""
    if per_token:
        return ENTITIES
    if reranker:
        return RANKS
    return LABELS if labelled else VECTORS


def judge_call(judge: str, stable: np.ndarray, candidate: np.ndarray, *, multi_label: bool = False) -> Agreement:
    """One call's answers ([rows, columns] each) under `judge` (not ENTITIES: its answers are entities, not rows).
    Answers of different shapes (another head, another width) disagree on every row."""
    a, b = np.asarray(stable), np.asarray(candidate)
    if a.shape != b.shape:
        return Agreement(judged=1 if judge == RANKS else len(a), agreed=0, distance=1.0,
                         concordance=0.0 if judge == RANKS else None)
    if judge == LABELS:
        return labels(a, b, multi_label=multi_label)
    if judge == VECTORS:
        return vectors(a, b)
    if judge == RANKS:
        return ranks(reranker_scores(a), reranker_scores(b))
    raise ValueError(f"judge_call: no row judge {judge!r} (one of {LABELS}, {VECTORS}, {RANKS})")
