"""The shadow copies' judge (service/shadow.py) over plain events: each copy's outcome, its agreement by the
candidate's kind, the figures on the metrics registry Prometheus scrapes, and the bounded list of the calls that
disagree most, worst first, texts only when the route keeps them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ortserve.bundle.kinds import CLASSIFIER, EMBEDDING, TOKEN_CLASSIFIER
from ortserve.service.metrics import Metrics
from ortserve.service.served_output import ServedOutput
from ortserve.service.shadow import WORST_KEPT, ShadowBook, outcome

CLASSIFIER_OUT = ServedOutput(CLASSIFIER, "LOGITS", ("neg", "pos"), 2)
EMBEDDING_OUT = ServedOutput(EMBEDDING, "EMBEDDING", (), 2)
TOKENS_OUT = ServedOutput(TOKEN_CLASSIFIER, "ENTITIES", ("O", "B-PER", "I-PER"), 3)


@dataclass
class Event:
    """A ShadowEvent's fields as the data plane fills them (engine_ext.ShadowEvent)."""

    stable_values: bytes
    candidate_values: bytes
    rows: int
    columns: int = 2
    request_id: str = "r"
    model: str = "m"
    stable: str = "v1"
    candidate: str = "v2"
    stable_status: str = "OK"
    candidate_status: str = "OK"
    stable_engine_s: float = 0.003
    candidate_engine_s: float = 0.004
    texts: list[str] = field(default_factory=list)
    per_token: bool = False
    stable_entities: list[tuple[int, int, int, str]] = field(default_factory=list)
    candidate_entities: list[tuple[int, int, int, str]] = field(default_factory=list)

    @property
    def stable_columns(self) -> int:
        return self.columns

    @property
    def candidate_columns(self) -> int:
        return self.columns


def event(stable: list[list[float]], candidate: list[list[float]], **kw: object) -> Event:
    a, b = np.asarray(stable, np.float32), np.asarray(candidate, np.float32)
    return Event(a.tobytes(), b.tobytes(), rows=len(a), **kw)  # type: ignore[arg-type]


def book(served: ServedOutput | None = CLASSIFIER_OUT) -> tuple[ShadowBook, Metrics]:
    metrics = Metrics()
    return ShadowBook(metrics, served=lambda model, version: served), metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, {"model": "m", "stable": "v1", "candidate": "v2", **labels}) or 0.0


def test_outcomes_follow_both_sides_status() -> None:
    assert outcome("OK", "OK") == "compared"
    assert outcome("OK", "RESOURCE_EXHAUSTED") == outcome("OK", "DEADLINE_EXCEEDED") == "dropped"
    assert outcome("OK", "INTERNAL") == outcome("OK", "INVALID_ARGUMENT") == "failed"
    assert outcome("UNAVAILABLE", "OK") == outcome("CANCELLED", "INTERNAL") == "stable_failed"


def test_copies_are_judged_by_the_candidates_kind_and_counted() -> None:
    shadows, metrics = book()
    shadows.observe(event([[4, 0], [0, 4], [0.01, 0]], [[4, 0], [4, 0], [0, 0.01]]))  # one decisive flip
    shadows.observe(event([[4, 0]], [[4, 0]], candidate_status="RESOURCE_EXHAUSTED"))
    shadows.observe(event([[4, 0]], [[4, 0]], candidate_status="INTERNAL"))
    assert sample(metrics, "ortserve_shadow_calls_total", outcome="compared") == 1
    assert sample(metrics, "ortserve_shadow_calls_total", outcome="dropped") == 1
    assert sample(metrics, "ortserve_shadow_calls_total", outcome="failed") == 1
    assert (sample(metrics, "ortserve_shadow_judged_total"), sample(metrics, "ortserve_shadow_agreed_total")) == (2, 1)
    [pair] = shadows.status()["m"]
    assert pair["outcomes"] == {"compared": 1, "dropped": 1, "failed": 1, "stable_failed": 0}
    assert (pair["judged"], pair["agreed"], pair["agreement"]) == (2, 1, 0.5)
    assert [w["request_id"] for w in pair["worst"]] == ["r"] and "texts" not in pair["worst"][0]

    vectors, metrics = book(EMBEDDING_OUT)
    vectors.observe(event([[1, 0], [0, 1]], [[1, 0], [1, 0]]))  # cosine 1 and 0
    assert (sample(metrics, "ortserve_shadow_judged_total"), sample(metrics, "ortserve_shadow_agreed_total")) == (2, 1)


def test_a_token_classifiers_copies_are_judged_on_their_entities() -> None:
    shadows, metrics = book(TOKENS_OUT)
    live = [(0, 0, 4, "PER"), (1, 6, 11, "PER")]
    shadows.observe(Event(b"", b"", rows=2, per_token=True, stable_entities=live, candidate_entities=live))
    assert (sample(metrics, "ortserve_shadow_judged_total"), sample(metrics, "ortserve_shadow_agreed_total")) == (2, 2)
    moved = [(0, 0, 4, "PER"), (1, 6, 9, "PER")]  # the second entity's span differs: both spans are judged
    shadows.observe(Event(b"", b"", rows=2, per_token=True, stable_entities=live, candidate_entities=moved,
                          request_id="moved"))
    assert (sample(metrics, "ortserve_shadow_judged_total"), sample(metrics, "ortserve_shadow_agreed_total")) == (5, 3)
    assert [w["request_id"] for w in shadows.status()["m"][0]["worst"]] == ["moved"]


def test_the_worst_calls_are_bounded_worst_first_and_rounding_is_not_a_difference() -> None:
    shadows, _ = book()
    shadows.observe(event([[4, 0]], [[4.0000005, 0]], request_id="rounding"))
    for i in range(WORST_KEPT + 5):
        lead = 4.0 - 0.2 * i  # the larger i, the further apart (none flips)
        shadows.observe(event([[4, 0]], [[lead, 0]], request_id=f"call-{i}", texts=[f"text {i}"]))
    shadows.observe(event([[4, 0]], [[0, 4]], request_id="flipped"))
    worst = shadows.status()["m"][0]["worst"]
    assert len(worst) == WORST_KEPT
    assert worst[0]["request_id"] == "flipped"  # a disagreed answer before any distance
    distances = [w["distance"] for w in worst[1:]]
    assert distances == sorted(distances, reverse=True)
    assert "rounding" not in {w["request_id"] for w in worst}
    assert worst[1]["texts"] == [f"text {WORST_KEPT + 4}"]  # kept when the event carries them


def test_a_candidate_gone_before_its_event_is_not_judged() -> None:
    shadows, metrics = book(served=None)
    shadows.observe(event([[4, 0]], [[0, 4]]))
    assert sample(metrics, "ortserve_shadow_judged_total") == 0 and shadows.status() == {}
