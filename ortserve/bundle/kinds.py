"""The kinds of model a bundle holds: one spec each, the one place a kind's facts are written.

A kind is the manifest's "format" and everything that follows from it: the graph output the server reads and its
rank, whether that output's columns are the manifest's labels (else its `dim`), whether its rows are dense vectors or
a vocabulary's sparse weights (SPLADE: `sparse`), what a call's reply holds by default and what else it may ask for
(ModelMetadata lists them), and which manifest keys only it may carry. Code asks the spec (`manifest.spec.per_token`,
`spec.labelled`, `spec.dense`, `spec.sparse`), never a kind's name; the C++ data plane gets a version's facts through
the route table (`service/served_output.ServedOutput`), so it names no kind either.

The variants of a classifier (independent labels, pairs of texts, a reranker's activated score) are manifest keys of
the classifier kind (`manifest.py`), not kinds: the graph, the batcher's row and the judges are the classifier's.

The reply output names are the KServe V2 wire's (defined by the C++ wire rules, `infer_wire.h`, and checked equal to
them by tests/bundle/test_kinds.py); this module imports nothing, so `registry publish` needs no compiled engine.
"""

from __future__ import annotations

from dataclasses import dataclass

COLUMNS = -2
"""In a reply output's shape: the version's columns (its labels, or its embedding's dim)."""


@dataclass(frozen=True)
class ReplyOutput:
    """An output a call may ask for, as ModelMetadata describes it: its name, datatype and shape (-1 a dimension of
    any size, COLUMNS the version's columns)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def described(self, columns: int) -> tuple[str, str, list[int]]:
        return self.name, self.datatype, [columns if d == COLUMNS else d for d in self.shape]


@dataclass(frozen=True)
class Kind:
    name: str
    """What ModelMetadata's `kind` parameter, logs and `ortserve status` call it."""
    format: str
    """The manifest's "format"."""
    noun: str
    """How a message names a model of the kind ("a classifier", "an embedding model")."""
    graph_output: str
    """The ONNX graph output the server reads (float32)."""
    output_rank: int
    """2: [batch, columns]; 3: [batch, seq, columns], a row per token."""
    labelled: bool
    """The output's columns are the manifest's labels; else its `dim` (an embedding)."""
    replies: tuple[ReplyOutput, ...]
    """What a call may ask for, its default first (the C++ wire rules' EncodeOutputs says which a call that names
    none gets)."""
    keys: tuple[str, ...]
    """The manifest keys only this kind may carry (beside format, max_seq_len, notes and the provenance keys)."""
    sparse: bool = False
    """Its rows are a vocabulary's weights, mostly zero (a SPLADE model): a reply carries each text's kept entries
    (the wire rules' sparse_entries.h, VersionOutput.sparse), not the row; it has no narrower widths and no compact
    types, its reference answers keep the non-zero weights (references.py), and its answers are judged weight by
    weight as a classifier's logits are (the import's parity, the load-time check), not by cosine."""

    @property
    def dense(self) -> bool:
        """Its rows are dense vectors (an embedding model's): judged by cosine; widths (Matryoshka), calibrated
        ranges and compact types apply."""
        return not self.labelled and not self.sparse

    @property
    def per_token(self) -> bool:
        """The output holds a row of columns per token ([batch, seq, labels]), not per text."""
        return self.output_rank == 3

    @property
    def wire_output(self) -> str:
        """The reply output a call gets when it names none."""
        return self.replies[0].name


CLASSIFIER = Kind(
    name="classifier", format="onnx-text-classifier", noun="a classifier", graph_output="logits", output_rank=2,
    labelled=True, replies=(ReplyOutput("LOGITS", "FP32", (-1, COLUMNS)),),
    keys=("labels", "multi_label", "pairs", "score_activation"))
EMBEDDING = Kind(
    name="embedding", format="onnx-text-embedding", noun="an embedding model", graph_output="embedding",
    output_rank=2, labelled=False, replies=(ReplyOutput("EMBEDDING", "FP32", (-1, COLUMNS)),),
    keys=("dim", "matryoshka_dims", "embedding_ranges"))
TOKEN_CLASSIFIER = Kind(
    name="token-classifier", format="onnx-token-classifier", noun="a token classifier", graph_output="logits",
    output_rank=3, labelled=True,
    # ENTITIES (a JSON array per text) and CHARS_READ by default; each token's logits and character span on request.
    replies=(ReplyOutput("ENTITIES", "BYTES", (-1,)), ReplyOutput("CHARS_READ", "INT64", (-1,)),
             ReplyOutput("TOKEN_LOGITS", "FP32", (-1, -1, COLUMNS)),
             ReplyOutput("TOKEN_OFFSETS", "INT64", (-1, -1, 2))),
    keys=("labels",))

SPARSE_EMBEDDING = Kind(
    name="sparse-embedding", format="onnx-sparse-embedding", noun="a sparse embedding model", graph_output="sparse",
    output_rank=2, labelled=False, sparse=True,
    # Each text's kept weights (above `threshold`, at most `top_k`): their vocabulary columns, the weights, and how
    # many entries each text has; all three by default. `dim` is the vocabulary's size.
    replies=(ReplyOutput("SPARSE_INDICES", "INT64", (-1,)), ReplyOutput("SPARSE_VALUES", "FP32", (-1,)),
             ReplyOutput("SPARSE_COUNTS", "INT64", (-1,))),
    keys=("dim",))

KINDS: tuple[Kind, ...] = (CLASSIFIER, EMBEDDING, TOKEN_CLASSIFIER, SPARSE_EMBEDDING)
"""Every kind; a new kind adds its spec here (docs/architecture.md lists what else it touches)."""
BY_FORMAT: dict[str, Kind] = {k.format: k for k in KINDS}
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
