"""The kind specs (bundle/kinds.py) agree with the wire rules and decide what a manifest of each kind may say and
what ModelMetadata lists, with plain values."""

from __future__ import annotations

from typing import Any

import pytest

from ortserve import engine_ext
from ortserve.bundle.kinds import (
    BY_FORMAT,
    BY_NAME,
    CLASSIFIER,
    EMBEDDING,
    KINDS,
    SPARSE_EMBEDDING,
    TOKEN_CLASSIFIER,
    Kind,
)
from ortserve.bundle.manifest import BundleError, parse_manifest
from ortserve.service.served_output import ServedOutput

WIRE_NAMES = {engine_ext.CLASSIFIER_OUTPUT, engine_ext.EMBEDDING_OUTPUT, engine_ext.ENTITIES_OUTPUT,
              engine_ext.CHARS_READ_OUTPUT, engine_ext.TOKEN_LOGITS_OUTPUT, engine_ext.TOKEN_OFFSETS_OUTPUT,
              engine_ext.SPARSE_INDICES_OUTPUT, engine_ext.SPARSE_VALUES_OUTPUT, engine_ext.SPARSE_COUNTS_OUTPUT}


def manifest_of(kind: Kind, **extra: Any) -> dict[str, Any]:
    shape: dict[str, Any] = {"labels": ["a", "b"]} if kind.labelled else {"dim": 8}
    return {"format": kind.format, **shape, "max_seq_len": 16, **extra}


def test_every_kind_is_found_by_format_and_name_and_names_outputs_the_wire_rules_define() -> None:
    assert len({k.format for k in KINDS}) == len({k.name for k in KINDS}) == len(KINDS)
    for kind in KINDS:
        assert BY_FORMAT[kind.format] is kind and BY_NAME[kind.name] is kind
        assert {r.name for r in kind.replies} <= WIRE_NAMES  # the C++ wire rules' names (infer_wire.h)
        assert parse_manifest(manifest_of(kind)).spec is kind
    assert CLASSIFIER.wire_output == engine_ext.CLASSIFIER_OUTPUT
    assert EMBEDDING.wire_output == engine_ext.EMBEDDING_OUTPUT
    assert TOKEN_CLASSIFIER.wire_output == engine_ext.ENTITIES_OUTPUT
    assert SPARSE_EMBEDDING.wire_output == engine_ext.SPARSE_INDICES_OUTPUT
    assert [k.name for k in KINDS if k.dense] == ["embedding"] and [k.name for k in KINDS if k.sparse] == [
        "sparse-embedding"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_manifest_carries_only_its_kinds_keys(kind: Kind) -> None:
    others = {key for k in KINDS for key in k.keys} - set(kind.keys)
    values = {"labels": ["a"], "dim": 4, "multi_label": True, "pairs": True, "score_activation": "sigmoid",
              "matryoshka_dims": [4], "embedding_ranges": {"widths": {"4": [[0.0] * 4, [1.0] * 4]}}}
    assert others, "every kind lacks some other kind's key"
    for key in others:
        with pytest.raises(BundleError, match=rf"{key} appl(y|ies) to .*{kind.format}"):
            parse_manifest(manifest_of(kind, **{key: values[key]}))


def test_the_served_facts_follow_the_spec() -> None:
    """What the C++ wire rules get per version (ServedOutput.wire) comes from the spec: its output names, whether
    it is read per token; a reranker answers SCORE with LOGITS beside."""
    tokens = ServedOutput.of(parse_manifest(manifest_of(TOKEN_CLASSIFIER)))
    assert tokens.wire.output == "ENTITIES"
    assert tokens.wire.also == ["CHARS_READ", "TOKEN_LOGITS", "TOKEN_OFFSETS"]
    assert tokens.wire.per_token
    embedding = ServedOutput.of(parse_manifest(manifest_of(EMBEDDING)))
    assert (embedding.wire.output, embedding.wire.also, embedding.wire.per_token) == ("EMBEDDING", [], False)
    assert embedding.metadata()[2]["embedding_types"] == '["float", "binary", "ubinary"]'  # no ranges: no int8
    ranged = ServedOutput.of(parse_manifest({**manifest_of(EMBEDDING), "embedding_ranges": {
        "widths": {"8": [[0.0] * 8, [1.0] * 8]}}}))
    assert ranged.wire.ranges == {8: [0.0] * 8 + [1.0] * 8}
    assert ranged.metadata()[2]["embedding_types"] == '["float", "int8", "uint8", "binary", "ubinary"]'
    reranker = ServedOutput.of(parse_manifest({**manifest_of(CLASSIFIER), "labels": ["relevant"], "pairs": True,
                                               "score_activation": "sigmoid"}))
    assert (reranker.wire.output, reranker.wire.also) == ("SCORE", ["LOGITS"])
    inputs, outputs, parameters = reranker.metadata()
    assert [name for name, _, _ in inputs] == ["TEXT", "TEXT_PAIR"]
    assert outputs == [("SCORE", "FP32", [-1]), ("LOGITS", "FP32", [-1, 1])]
    assert parameters == {"kind": "classifier", "labels": '["relevant"]', "pairs": True,
                          "score_activation": "sigmoid"}
    _, outputs, parameters = tokens.metadata()
    assert outputs == [("ENTITIES", "BYTES", [-1]), ("CHARS_READ", "INT64", [-1]),
                       ("TOKEN_LOGITS", "FP32", [-1, -1, 2]), ("TOKEN_OFFSETS", "INT64", [-1, -1, 2])]
    assert parameters["kind"] == "token-classifier" and "aggregation" in parameters


def test_a_sparse_kind_is_served_as_its_entries_with_no_widths() -> None:
    """A sparse embedding model: its vocabulary is its dim, no widths or compact types (so the wire rules refuse
    dimensions and embedding_type), its three outputs listed, the wire rules told it is sparse."""
    manifest = parse_manifest(manifest_of(SPARSE_EMBEDDING, dim=30522))
    assert (manifest.columns, manifest.widths, manifest.spec.dense) == (30522, (), False)
    served = ServedOutput.of(manifest)
    assert (served.wire.output, served.wire.also, served.wire.sparse) == (
        "SPARSE_INDICES", ["SPARSE_VALUES", "SPARSE_COUNTS"], True)
    _, outputs, parameters = served.metadata()
    assert outputs == [("SPARSE_INDICES", "INT64", [-1]), ("SPARSE_VALUES", "FP32", [-1]),
                       ("SPARSE_COUNTS", "INT64", [-1])]
    assert parameters == {"kind": "sparse-embedding", "vocabulary": "30522", "sparse_bounds": '["top_k", "threshold"]'}
    embedding = ServedOutput.of(parse_manifest(manifest_of(EMBEDDING)))
    assert not embedding.wire.sparse
