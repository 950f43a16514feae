"""What one loaded version takes and answers, built once when it loads (`ModelInstance.served`) from its kind's spec
(bundle/kinds.py) and its manifest: the facts every API reads (its kind, labels, pairs, a reranker's score), the
C++ wire rules' copy (`wire`, read by both front ends: the native one through its route table) and what
ModelMetadata says of it (`metadata`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ortserve import engine_ext
from ortserve.bundle.kinds import Kind
from ortserve.bundle.manifest import BundleManifest

Described = tuple[list[tuple[str, str, list[int]]], list[tuple[str, str, list[int]]], dict[str, str | bool]]
"""ModelMetadata's (inputs, outputs, parameters): (name, datatype, shape) per tensor."""


@dataclass(frozen=True)
class ServedOutput:
    """A version's kind, its default output's wire name and (a classifier) its labels, whether they are independent
    (the manifest's multi_label: classification probabilities are a sigmoid per label), whether it takes pairs
    (TEXT_PAIR) and a reranker's score activation (its output is then SCORE)."""

    kind: Kind
    name: str
    labels: tuple[str, ...]
    columns: int
    multi_label: bool = False
    pairs: bool = False
    score: str = ""
    """A reranker's score activation ("sigmoid", "identity"); "" for every other version."""
    prompts: tuple[tuple[str, str], ...] = ()
    """(name, text) per prompt a call may name (`prompt_name`): an imported sentence-transformers model's."""
    widths: tuple[int, ...] = ()
    """An embedding model's widths a call may ask for (`dimensions`), its own first; () for other kinds."""
    ranges: tuple[tuple[int, tuple[float, ...]], ...] = ()
    """(width, starts then ends) per width an embedding model's manifest calibrated (`embedding_type` int8, uint8)."""
    wire: engine_ext.VersionOutput = field(init=False, compare=False, repr=False)
    """The same facts as the C++ wire rules read them (check_outputs, encode_outputs, the native route table)."""

    def __post_init__(self) -> None:
        also = [r.name for r in self.kind.replies[1:]]
        if self.score:  # a reranker: SCORE by default, its logit as LOGITS on request
            also = [self.kind.wire_output]
        wire = engine_ext.VersionOutput(
            self.kind.name, self.name, labels=list(self.labels), multi_label=self.multi_label, pairs=self.pairs,
            score=self.score, prompts=dict(self.prompts), widths=list(self.widths), also=also,
            per_token=self.kind.per_token, ranges={width: list(bounds) for width, bounds in self.ranges},
            sparse=self.kind.sparse)
        object.__setattr__(self, "wire", wire)

    @classmethod
    def of(cls, manifest: BundleManifest) -> ServedOutput:
        score = manifest.score_activation or ""
        return cls(kind=manifest.spec, name=engine_ext.SCORE_OUTPUT if score else manifest.spec.wire_output,
                   labels=tuple(manifest.labels), columns=manifest.columns, multi_label=manifest.multi_label,
                   pairs=manifest.pairs, score=score, prompts=tuple(sorted(manifest.prompts.items())),
                   widths=manifest.widths,
                   ranges=tuple(sorted((w, tuple(r)) for w, r in manifest.embedding_ranges.wire().items()))
                   if manifest.embedding_ranges else ())

    def metadata(self) -> Described:
        """What ModelMetadata says of the version: its inputs, its outputs (the default first) and parameters: its
        kind, a classifier's labels in LOGITS column order as a JSON array (labels may hold commas; the
        classification extension names them per call), and what a call may ask of it."""
        inputs = [(engine_ext.TEXT_INPUT, "BYTES", [-1])]
        outputs = [r.described(self.columns) for r in self.kind.replies]
        parameters: dict[str, str | bool] = {"kind": self.kind.name}
        if self.kind.labelled:
            parameters["labels"] = json.dumps(list(self.labels), ensure_ascii=False)
            if self.multi_label:  # labels independent: scores=probabilities gives a sigmoid per label
                parameters["multi_label"] = True
        if self.pairs:  # TEXT_PAIR [N], or [1]: one second text for every TEXT
            inputs.append((engine_ext.PAIR_INPUT, "BYTES", [-1]))
            parameters["pairs"] = True
        if self.score:  # a reranker: SCORE [N] (the default), its LOGITS [N, 1] on request
            parameters["score_activation"] = self.score
            outputs = [(engine_ext.SCORE_OUTPUT, "FP32", [-1]), *outputs]
        if self.prompts:  # the names a call may send as its prompt_name parameter
            parameters["prompts"] = json.dumps([name for name, _ in self.prompts], ensure_ascii=False)
        if len(self.widths) > 1:  # trained to be truncated (Matryoshka): the dimensions a call may ask for
            parameters["dimensions"] = json.dumps(list(self.widths))
        if self.widths:  # an embedding's types a call may ask for (embedding_type) at its own width
            ranged = any(width == self.widths[0] for width, _ in self.ranges)
            parameters["embedding_types"] = json.dumps(
                [t for t in engine_ext.EMBEDDING_TYPES if ranged or t not in ("int8", "uint8")])
        if self.kind.per_token:  # how ENTITIES groups tokens, the default first
            parameters["aggregation"] = json.dumps(list(engine_ext.AGGREGATIONS))
        if self.kind.sparse:  # the vocabulary's size, and what bounds a text's entries
            parameters["vocabulary"] = str(self.columns)
            parameters["sparse_bounds"] = json.dumps([engine_ext.TOP_K_PARAM, engine_ext.THRESHOLD_PARAM])
        return inputs, outputs, parameters

