"""Token classification's entities (dataplane/entities.h, a token classifier's ENTITIES) held to
transformers' TokenClassificationPipeline: for generated token logits, spans and word boundaries, every aggregation
(none, simple, first, average, max) gives the entities the pipeline's own postprocess steps give (its softmax,
`aggregate` with `aggregate_words` and `group_entities`, the "O" filter): the same labels and spans in the same
order, scores within float32 rounding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.pipelines.token_classification import AggregationStrategy, TokenClassificationPipeline

from ortserve.engine_ext import aggregate_entities

STRATEGIES = ("none", "simple", "first", "average", "max")
LABEL_SETS = [
    ("O", "B-PER", "I-PER", "B-LOC", "I-LOC"),                            # BIO
    ("O", "B-ORG", "I-ORG", "E-ORG", "S-ORG", "B-PER", "I-PER", "E-PER", "S-PER"),  # IOBES
    ("O", "PER", "LOC", "MISC"),                                          # no prefixes
    ("O", "B-A-B", "I-A-B", "A"),                                         # dashes inside the tag
]


class _Pipeline:
    """The pipeline's aggregation methods on a stand-in: id2label and a tokenizer that joins token strings."""

    aggregate = TokenClassificationPipeline.aggregate
    aggregate_word = TokenClassificationPipeline.aggregate_word
    aggregate_words = TokenClassificationPipeline.aggregate_words
    group_sub_entities = TokenClassificationPipeline.group_sub_entities
    get_tag = TokenClassificationPipeline.get_tag
    group_entities = TokenClassificationPipeline.group_entities

    def __init__(self, labels: tuple[str, ...]) -> None:
        class Config:
            id2label = dict(enumerate(labels))

        class Model:
            config = Config

        class Tokenizer:
            @staticmethod
            def convert_tokens_to_string(tokens: list[str]) -> str:
                return " ".join(tokens)

        self.model, self.tokenizer = Model, Tokenizer


def pipeline_entities(logits: np.ndarray, spans: list[tuple[int, int, bool, bool]], labels: tuple[str, ...],
                      strategy: str) -> list[tuple[str, float, int, int, int]]:
    """What TokenClassificationPipeline.postprocess computes after gather_pre_entities, for one chunk."""
    maxes = np.max(logits, axis=-1, keepdims=True)
    shifted_exp = np.exp(logits - maxes)
    scores = shifted_exp / shifted_exp.sum(axis=-1, keepdims=True)
    pre = [{"word": f"t{i}", "scores": scores[i], "start": start, "end": end, "index": i, "is_subword": sub}
           for i, (start, end, sub, special) in enumerate(spans) if not special]
    grouped = _Pipeline(labels).aggregate(pre, AggregationStrategy(strategy))
    kept = [e for e in grouped if e.get("entity", None) not in ["O"] and e.get("entity_group", None) not in ["O"]]
    return [(e.get("entity", e.get("entity_group")), float(e["score"]), e["start"], e["end"], e.get("index", -1))
            for e in kept]


@st.composite
def tokens(draw: st.DrawFn) -> tuple[np.ndarray, list[tuple[int, int, bool, bool]], tuple[str, ...]]:
    labels = draw(st.sampled_from(LABEL_SETS))
    n = draw(st.integers(0, 24))
    # Logits on a coarse grid, so that exact ties (first of equal wins) come up too.
    values = draw(st.lists(st.integers(-8, 8), min_size=n * len(labels), max_size=n * len(labels)))
    logits = (np.asarray(values, dtype=np.float32) / 2).reshape(n, len(labels))
    spans, at = [], 0
    for i in range(n):
        special = i == 0 or i == n - 1 if draw(st.booleans()) else draw(st.integers(0, 9)) == 0
        sub = draw(st.booleans()) and i > 0
        at += 0 if sub else draw(st.integers(0, 2))
        length = draw(st.integers(1, 6))
        spans.append((at, at + length, sub, special))
        at += length
    return logits, spans, labels


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tokens(), strategy=st.sampled_from(STRATEGIES))
def test_entities_equal_the_pipelines(case: Any, strategy: str) -> None:
    logits, spans, labels = case
    got = aggregate_entities(logits, spans, list(labels), strategy)
    expected = pipeline_entities(logits, spans, labels, strategy)
    assert [(label, start, end, index) for label, _, start, end, index in got] == \
        [(label, start, end, index) for label, _, start, end, index in expected]
    np.testing.assert_allclose([score for _, score, *_ in got], [score for _, score, *_ in expected],
                               rtol=2e-6, atol=1e-7)


def test_a_named_example() -> None:
    """'Ada Lovelace visited Lon ##don': B-PER I-PER O B-LOC I-LOC."""
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    best = [None, 1, 2, 0, 3, 4, None]  # [CLS] ... [SEP]
    logits = np.zeros((len(best), len(labels)), np.float32)
    for i, k in enumerate(best):
        if k is not None:
            logits[i, k] = 5.0
    spans = [(0, 0, False, True), (0, 3, False, False), (4, 12, False, False), (13, 20, False, False),
             (21, 24, False, False), (24, 27, True, False), (0, 0, False, True)]
    simple = aggregate_entities(logits, spans, labels, "simple")
    assert [(label, start, end) for label, _, start, end, _ in simple] == [("PER", 0, 12), ("LOC", 21, 27)]
    assert [label for label, *_ in aggregate_entities(logits, spans, labels, "none")] == \
        ["B-PER", "I-PER", "B-LOC", "I-LOC"]
    with pytest.raises(ValueError,
                       match="aggregation must be 'simple', 'first', 'average', 'max' or 'none', got 'mean'"):
        aggregate_entities(logits, spans, labels, "mean")
