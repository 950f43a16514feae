"""The model bundle format: a directory with model.onnx, tokenizer.json and manifest.json.

Four kinds, told apart by the manifest's "format" (kinds.py holds each kind's spec):

    {"format": "onnx-text-classifier", "labels": ["negative", "positive"], "max_seq_len": 128, "notes": "..."}
        model.onnx outputs `logits` float32 [batch, len(labels)]
    {"format": "onnx-text-embedding", "dim": 384, "max_seq_len": 128, "notes": "..."}
        model.onnx outputs `embedding` float32 [batch, dim] (pooling and normalisation inside the graph)
    {"format": "onnx-token-classifier", "labels": ["O", "B-PER", "I-PER"], "max_seq_len": 128, "notes": "..."}
        model.onnx outputs `logits` float32 [batch, seq, len(labels)]: a label per token (named entities)
    {"format": "onnx-sparse-embedding", "dim": 30522, "max_seq_len": 128, "notes": "..."}
        model.onnx outputs `sparse` float32 [batch, dim]: a weight >= 0 per vocabulary entry, mostly zero (SPLADE:
        the masked LM's logits pooled inside the graph); dim is the vocabulary's size

All take the same inputs (`input_ids`, `attention_mask`, optional `token_type_ids`, int64 [batch, seq]).

`load_manifest` is cheap (the server calls it on every load); `validate_bundle` (validate.py) is the full check
the `registry publish` command runs before anything is uploaded.

An optimised bundle (`registry optimize`, see `optimize.py`) is an ordinary bundle whose manifest also says
what its graph needs and where it came from; plain bundles have neither key:

    "precision": "int8",
    "optimization": {"level": "int8", "source_sha256": "<sha256 of the source model.onnx>",
                     "tools": {"onnxruntime": "1.32.0", "onnx": "1.23.2"},
                     "accuracy": {...the gate's report against the source, see accuracy.py...}}

`accuracy` is carried as it was written (an object; readers that do not know it ignore it). An int8 bundle also
names its quantization form ("quantization"), so a server can tell a form that multiplies exactly on every x86 CPU
from one that needs VNNI.

Every bundle a writer of this project makes carries reference answers (references.py; which texts:
prepare/reference_choice.py): texts with the source model's FP32 outputs, which the server checks the version
against before it takes traffic:

    "references": {"file": "references.jsonl", "sha256": "...", "texts": 48, "outputs_from": "..."}

A classifier whose labels are independent (Hugging Face's problem_type multi_label_classification: each label a
yes or no of its own) says so; its probabilities are then a sigmoid per label, not a softmax over the labels:

    "multi_label": true

A classifier that reads a pair of texts (a cross-encoder: reranking, NLI, duplicates) says so; it is called with
`TEXT` and `TEXT_PAIR`, tokenized as its tokenizer makes a pair. A one-label one (a reranker) also names the
activation its score goes through (the checkpoint's: sentence-transformers' CrossEncoder applies a sigmoid), and
answers `SCORE` [N] with it by default:

    "pairs": true, "score_activation": "sigmoid"            (or "identity": the raw logit)

An embedding model trained to be truncated (Matryoshka representation learning: sentence-transformers'
MatryoshkaLoss) records the widths it was trained for, descending, its own `dim` included or implied; a call may then
ask for the first k components of its embedding (`dimensions`), renormalised to unit length:

    "matryoshka_dims": [384, 256, 128, 64]

A model whose weights do not fit in one model.onnx (protobuf's 2 GiB) keeps them in model.onnx.data beside it (ONNX
external data), which the manifest names with its size and sha256 (model_files.py):

    "model_data": {"file": "model.onnx.data", "bytes": 2384199680, "sha256": "..."}

A bundle imported from a Hugging Face checkpoint (`registry import`, prepare/importer) says where it came from and
the parity report that admitted it: the checkpoint, its architecture, the exporter and every tool's version, and
PyTorch against ONNX Runtime on the same texts. Carried as written (readers that do not know a key ignore it):

    "imported": {"from": "transformers", "checkpoint": "...", "architecture": "BertForSequenceClassification",
                 "exporter": {...}, "tools": {"torch": "2.13.0", ...}, "parity": {...}}
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortserve.bundle.embedding_ranges import MANIFEST_KEY as RANGES_KEY
from ortserve.bundle.embedding_ranges import EmbeddingRanges, parse_ranges
from ortserve.bundle.kinds import BY_FORMAT, Kind

MODEL_FILE = "model.onnx"
MODEL_DATA_FILE = "model.onnx.data"
"""model.onnx's weights, where they do not fit in it (ONNX external data; model_files.py)."""
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
REFERENCES_FILE = "references.jsonl"
REQUIRED_FILES = (MODEL_FILE, TOKENIZER_FILE, MANIFEST_FILE)
REQUIRED_INPUTS = ("input_ids", "attention_mask")
OPTIONAL_INPUTS = ("token_type_ids",)
MIN_SEQ_LEN = 8
PAD_TOKENS = ("[PAD]", "<pad>")
MAX_EMBEDDING_DIM = 65536
MAX_VOCABULARY = 2**18
"""A sparse embedding model's widest dim: its vocabulary (XLM-RoBERTa's 250,002 fits; a row is 1 MB of float32)."""
MAX_SEQ_LEN = 8192
# A manifest is a few KB; an embedding model's calibrated ranges add ~60 bytes a dimension per width as the writers
# indent them (Qwen3-Embedding-0.6B's 1024 dims: ~130 KB; 8B's 4096 with Matryoshka widths: under 1 MiB). Anything
# past 1 MiB is a mistake, not a manifest.
MAX_MANIFEST_BYTES = 1 << 20
SCORE_ACTIVATIONS = ("sigmoid", "identity")
"""What a reranker's one logit may go through on the way to its SCORE output."""
# What the graph's float weights and activations are; the wire (inputs, `logits`) stays int64/float32 either way.
PRECISIONS = ("fp32", "fp16", "int8", "bf16")
DEFAULT_PRECISION = "fp32"
# Publish-time optimisation levels and the precision each one produces (a new level adds a row here).
LEVEL_PRECISION = {"fuse": "fp32", "int8": "int8", "fp16": "fp16", "bf16": "bf16"}
OPTIMIZATION_LEVELS = tuple(LEVEL_PRECISION)
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class BundleError(ValueError):
    """A bundle that the server could not serve; the message names the file and the problem."""


@dataclass(frozen=True)
class Optimization:
    """How an optimised bundle was made from its source bundle (the manifest's "optimization" object)."""

    level: str
    source_sha256: str  # of the source bundle's model.onnx
    tools: tuple[tuple[str, str], ...] = ()  # (package, version), sorted; a tuple keeps the manifest hashable
    # The accuracy gate's report (accuracy.GateReport.manifest_entry), kept as written; left out of the hash.
    accuracy: Mapping[str, Any] | None = field(default=None, hash=False)
    # int8: how weights and activations were quantized (optimize.INT8_FORM); None for other levels and for int8
    # bundles made before the form was recorded (full 8-bit weights).
    quantization: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_dict(self) -> dict[str, Any]:
        out = {"level": self.level, "source_sha256": self.source_sha256, "tools": dict(self.tools)}
        if self.quantization is not None:
            out["quantization"] = dict(self.quantization)
        if self.accuracy is not None:
            out["accuracy"] = dict(self.accuracy)
        return out

    @property
    def gate_max_abs_delta(self) -> float | None:
        """The largest |delta logit| the accuracy gate recorded against the source (in batches or one text at a
        time, whichever moved more), when it recorded one."""
        accuracy = self.accuracy or {}
        alone = accuracy.get("alone")
        values = [accuracy.get("max_abs_delta_logit"), alone.get("max_abs_delta_logit") if isinstance(alone, dict)
                  else None]
        found = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        return max(found) if found else None


@dataclass(frozen=True)
class References:
    """The manifest's "references" object: where the bundle's reference answers are and what computed them."""

    file: str
    sha256: str  # of the file
    texts: int
    outputs_from: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "texts": self.texts, "outputs_from": self.outputs_from}


@dataclass(frozen=True)
class ModelData:
    """The manifest's "model_data": model.onnx's weights in the file beside it (model_files.py)."""

    file: str  # always MODEL_DATA_FILE
    bytes: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "bytes": self.bytes, "sha256": self.sha256}


@dataclass(frozen=True)
class Imported:
    """Where an imported bundle's model came from and how it was proven (the manifest's "imported" object)."""

    source: str
    """What read the checkpoint: "transformers" or "sentence-transformers"."""
    architecture: str
    """The checkpoint's class, e.g. BertForSequenceClassification."""
    tools: tuple[tuple[str, str], ...]  # (package, version), sorted
    # Everything else as written (checkpoint, exporter, parity...); left out of the hash like Optimization.accuracy.
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.source, "architecture": self.architecture, **dict(self.details),
                "tools": dict(self.tools)}


@dataclass(frozen=True)
class BundleManifest:
    format: str
    labels: tuple[str, ...]
    """A classifier's (or token classifier's) labels, one per `logits` column; () for an embedding bundle."""
    max_seq_len: int
    notes: str = ""
    precision: str = DEFAULT_PRECISION
    optimization: Optimization | None = None
    dim: int | None = None
    """An embedding bundle's `embedding` width (a sparse one's: its vocabulary's size); None for a classifier."""
    references: References | None = None
    """Where the bundle's reference answers are; None for a bundle without them (served, but unverified)."""
    multi_label: bool = False
    """A classifier whose labels are independent: probabilities are a sigmoid per label (softmax otherwise)."""
    imported: Imported | None = None
    """Where an imported bundle came from and its parity report; None for bundles this project built."""
    pairs: bool = False
    """A classifier of pairs of texts (a cross-encoder): called with TEXT and TEXT_PAIR."""
    score_activation: str | None = None
    """A one-label classifier of pairs (a reranker): what its logit goes through for SCORE (SCORE_ACTIVATIONS)."""
    matryoshka_dims: tuple[int, ...] = ()
    """An embedding bundle's widths it was trained to be truncated to, descending (as written); () for none."""
    embedding_ranges: EmbeddingRanges | None = None
    """An embedding bundle's calibrated ranges per width (int8 and uint8 answers read them); None when not recorded."""
    model_data: ModelData | None = None
    """model.onnx's weights in model.onnx.data (ONNX external data); None for a model in one file."""

    @property
    def spec(self) -> Kind:
        """The bundle's kind (kinds.py): everything its format decides."""
        return BY_FORMAT[self.format]

    @property
    def kind(self) -> str:
        """The kind's name: "classifier", "embedding" or "token-classifier"."""
        return self.spec.name

    @property
    def output_name(self) -> str:
        """The graph output the server reads: "logits" or "embedding"."""
        return self.spec.graph_output

    @property
    def columns(self) -> int:
        """Columns of that output per text (per token for a token classifier): the labels, or the embedding's dim."""
        return len(self.labels) if self.spec.labelled else int(self.dim or 0)

    @property
    def per_token(self) -> bool:
        """The output holds a row of `columns` per token ([batch, seq, labels]), not per text."""
        return self.spec.per_token

    @property
    def prompts(self) -> dict[str, str]:
        """The prompts an imported sentence-transformers model keeps by name (`imported.prompts`); {} for none."""
        prompts = self.imported.details.get("prompts") if self.imported is not None else None
        if not isinstance(prompts, dict):
            return {}
        return {k: v for k, v in prompts.items() if isinstance(k, str) and isinstance(v, str)}

    @property
    def pair_template(self) -> tuple[str, str, str] | None:
        """A decoder reranker's text around each pair (`imported.pair_template`: before the first text, between the
        two, after the second): the server reads `before + first + between + second + after` as one text. None for
        any other bundle (a pair is then the tokenizer's own pair)."""
        parts = self.imported.details.get("pair_template") if self.imported is not None else None
        if not (self.pairs and isinstance(parts, list) and len(parts) == 3 and all(isinstance(p, str) for p in parts)):
            return None
        return parts[0], parts[1], parts[2]

    @property
    def widths(self) -> tuple[int, ...]:
        """The embedding widths a call may ask for (`dimensions`), descending: its own dim, then the narrower ones it
        was trained to be truncated to; () for a classifier and a sparse embedding model (its width is its
        vocabulary)."""
        if self.dim is None or not self.spec.dense:
            return ()
        return (self.dim, *(d for d in self.matryoshka_dims if d != self.dim))

    def to_dict(self) -> dict[str, Any]:
        shape: dict[str, Any] = {"labels": list(self.labels)} if self.spec.labelled else {"dim": self.dim}
        if self.matryoshka_dims:
            shape["matryoshka_dims"] = list(self.matryoshka_dims)
        if self.embedding_ranges is not None:
            shape[RANGES_KEY] = self.embedding_ranges.to_dict()
        if self.multi_label:  # only where true, so other records keep their shape
            shape["multi_label"] = True
        if self.pairs:
            shape["pairs"] = True
        if self.score_activation is not None:
            shape["score_activation"] = self.score_activation
        files = {"model_data": self.model_data.to_dict()} if self.model_data is not None else {}
        return {"format": self.format, **shape, "max_seq_len": self.max_seq_len, "notes": self.notes, **files,
                **self.provenance()}

    def provenance(self) -> dict[str, Any]:
        """The "precision", "optimization", "imported" and "references" keys the bundle declares; {} for a plain
        bundle."""
        out: dict[str, Any] = {}
        if self.optimization is not None or self.precision != DEFAULT_PRECISION:
            out["precision"] = self.precision
        if self.optimization is not None:
            out["optimization"] = self.optimization.to_dict()
        if self.imported is not None:
            out["imported"] = self.imported.to_dict()
        if self.references is not None:
            out["references"] = self.references.to_dict()
        return out


def parse_manifest(data: Any, where: str = MANIFEST_FILE) -> BundleManifest:
    """Checks a decoded manifest object; `where` prefixes every error message."""
    if not isinstance(data, dict):
        raise BundleError(f"{where}: expected a JSON object, got {type(data).__name__}")
    fmt = data.get("format")
    if fmt not in BY_FORMAT:
        raise BundleError(f"{where}: format must be one of {', '.join(map(repr, BY_FORMAT))}, got {fmt!r}")
    spec = BY_FORMAT[fmt]
    for key in _KIND_KEYS:
        if key not in spec.keys and data.get(key) is not None and not (data[key] is False and key in _FLAGS):
            verb, hint = "apply" if key == "labels" else "applies", _KEY_HINTS.get(key, "")
            what, after = (hint, "") if hint.startswith(" (") else ("", hint)
            raise BundleError(f"{where}: {key} {verb} to {_formats_with(key)} bundles{what}, not to {fmt!r}{after}")
    labels: list[str] = []
    dim = None
    if spec.labelled:
        labels = _parse_labels(data.get("labels"), where)
    else:
        dim = data.get("dim")
        width, most = ("the vocabulary's size", MAX_VOCABULARY) if spec.sparse else ("the embedding width",
                                                                                      MAX_EMBEDDING_DIM)
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= most:
            raise BundleError(f"{where}: dim ({width}) must be an integer in 1..{most}, got {dim!r}")
    max_seq_len = data.get("max_seq_len")
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int):
        raise BundleError(f"{where}: max_seq_len must be an integer, got {max_seq_len!r}")
    if not MIN_SEQ_LEN <= max_seq_len <= MAX_SEQ_LEN:
        raise BundleError(f"{where}: max_seq_len must be in {MIN_SEQ_LEN}..{MAX_SEQ_LEN}, got {max_seq_len}")
    notes = data.get("notes", "")
    if not isinstance(notes, str):
        raise BundleError(f"{where}: notes must be a string")
    precision = data.get("precision", DEFAULT_PRECISION)
    if precision not in PRECISIONS:
        raise BundleError(f"{where}: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    optimization = None
    if data.get("optimization") is not None:
        optimization = _parse_optimization(data["optimization"], where)
        expected = LEVEL_PRECISION[optimization.level]
        if precision != expected:
            raise BundleError(f"{where}: precision {precision!r} contradicts optimization.level "
                              f"{optimization.level!r} (which produces {expected!r})")
    references = None
    if data.get("references") is not None:
        references = _parse_references(data["references"], where)
    multi_label = _flag(data, "multi_label", where)
    imported = None
    if data.get("imported") is not None:
        imported = _parse_imported(data["imported"], where)
    pairs = _flag(data, "pairs", where)
    score_activation = data.get("score_activation")
    if score_activation is not None:
        if score_activation not in SCORE_ACTIVATIONS:
            raise BundleError(f"{where}: score_activation must be one of {', '.join(SCORE_ACTIVATIONS)}, got "
                              f"{score_activation!r}")
        if not pairs or len(labels) != 1:
            raise BundleError(f"{where}: score_activation applies to a bundle of pairs with one label (a reranker), "
                              f"not to one with pairs={str(pairs).lower()} and {len(labels)} labels")
    matryoshka_dims = _parse_matryoshka_dims(data.get("matryoshka_dims"), dim if spec.dense else None, where)
    embedding_ranges = None
    if data.get(RANGES_KEY) is not None and dim is not None and spec.dense:
        widths = (dim, *(d for d in matryoshka_dims if d != dim))
        try:
            embedding_ranges = parse_ranges(data[RANGES_KEY], widths, where)
        except ValueError as e:
            raise BundleError(str(e)) from None
    model_data = _parse_model_data(data["model_data"], where) if data.get("model_data") is not None else None
    return BundleManifest(format=fmt, labels=tuple(labels), max_seq_len=max_seq_len, notes=notes,
                          precision=precision, optimization=optimization, dim=dim, references=references,
                          multi_label=multi_label, imported=imported, pairs=pairs, score_activation=score_activation,
                          matryoshka_dims=matryoshka_dims, embedding_ranges=embedding_ranges, model_data=model_data)


def check_matryoshka_dims(dims: Any, dim: int) -> tuple[int, ...]:
    """`dims` as the widths an embedding of width `dim` was trained to be truncated to: a non-empty list of integers,
    each in 1..dim, descending without repeats (`dim` itself may lead or be left implied). ValueError saying what is
    wrong otherwise; the one rule of the manifest and of `registry import --matryoshka-dims`."""
    if not isinstance(dims, list | tuple) or not dims:
        raise ValueError(f"must be a non-empty list of widths (e.g. [{dim}, {max(dim // 2, 1)}]), got {dims!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= dim:
            raise ValueError(f"widths must be integers in 1..{dim} (the embedding's dim), got {d!r} in "
                             f"{list(dims)!r}")
    if any(a <= b for a, b in itertools.pairwise(dims)):
        raise ValueError(f"widths must be descending without repeats (widest first), got {list(dims)!r}")
    return tuple(dims)


def _parse_matryoshka_dims(dims: Any, dim: int | None, where: str) -> tuple[int, ...]:
    if dims is None or dim is None:  # a kind without dim carries none (parse_manifest's key check)
        return ()
    try:
        return check_matryoshka_dims(dims, dim)
    except ValueError as e:
        raise BundleError(f"{where}: matryoshka_dims {e}") from None


_KIND_KEYS = tuple(dict.fromkeys(key for kind in BY_FORMAT.values() for key in kind.keys))
"""The manifest keys some kind owns (Kind.keys); any other kind's manifest leaves them out (or false)."""
_FLAGS = ("multi_label", "pairs")
"""Booleans a manifest of any kind may write as false (the kinds they do not apply to say nothing)."""
_KEY_HINTS = {"labels": "; an embedding bundle declares dim", "dim": "; a classifier's width is its labels",
              "pairs": " (a cross-encoder)",
              "matryoshka_dims": " (the widths an embedding was trained to be truncated to)",
              RANGES_KEY: " (an embedding's calibrated ranges, for int8 and uint8)"}


def _formats_with(key: str) -> str:
    return " and ".join(repr(kind.format) for kind in BY_FORMAT.values() if key in kind.keys)


def _flag(data: dict[str, Any], name: str, where: str) -> bool:
    """An optional boolean of the manifest (multi_label, pairs); false when absent."""
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise BundleError(f"{where}: {name} must be true or false, got {value!r}")
    return value


def _parse_imported(data: Any, where: str) -> Imported:
    # Unknown keys are kept as written, so a later importer can add figures without breaking readers.
    if not isinstance(data, dict):
        raise BundleError(f"{where}: imported must be an object with from, architecture, tools")
    source, architecture, tools = data.get("from"), data.get("architecture"), data.get("tools", {})
    if not isinstance(source, str) or not source:
        raise BundleError(f"{where}: imported.from must name what read the checkpoint, got {source!r}")
    if not isinstance(architecture, str) or not architecture:
        raise BundleError(f"{where}: imported.architecture must be the checkpoint's class name, got {architecture!r}")
    if not isinstance(tools, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tools.items()):
        raise BundleError(f"{where}: imported.tools must be an object of package -> version strings")
    details = {k: v for k, v in data.items() if k not in ("from", "architecture", "tools")}
    return Imported(source=source, architecture=architecture, tools=tuple(sorted(tools.items())), details=details)


def _parse_model_data(data: Any, where: str) -> ModelData:
    if not isinstance(data, dict):
        raise BundleError(f"{where}: model_data must be an object with file, bytes, sha256")
    file, size, sha = data.get("file"), data.get("bytes"), data.get("sha256")
    if file != MODEL_DATA_FILE:
        raise BundleError(f"{where}: model_data.file must be {MODEL_DATA_FILE!r} (model.onnx's weights beside it), "
                          f"got {file!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise BundleError(f"{where}: model_data.bytes must be a positive integer, got {size!r}")
    if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
        raise BundleError(f"{where}: model_data.sha256 must be 64 lowercase hex digits, got {sha!r}")
    return ModelData(file=file, bytes=size, sha256=sha)


def _parse_references(data: Any, where: str) -> References:
    if not isinstance(data, dict):
        raise BundleError(f"{where}: references must be an object with file, sha256, texts, outputs_from")
    file, sha, texts, outputs_from = (data.get(k) for k in ("file", "sha256", "texts", "outputs_from"))
    if not isinstance(file, str) or not _FILE_NAME_RE.fullmatch(file) or file in (*REQUIRED_FILES, MODEL_DATA_FILE):
        raise BundleError(f"{where}: references.file must be a file name beside model.onnx (e.g. "
                          f"{REFERENCES_FILE!r}), got {file!r}")
    if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
        raise BundleError(f"{where}: references.sha256 must be 64 lowercase hex digits, got {sha!r}")
    if isinstance(texts, bool) or not isinstance(texts, int) or texts < 1:
        raise BundleError(f"{where}: references.texts must be a positive integer, got {texts!r}")
    if not isinstance(outputs_from, str):
        raise BundleError(f"{where}: references.outputs_from must be a string")
    return References(file=file, sha256=sha, texts=texts, outputs_from=outputs_from)


def _parse_labels(labels: Any, where: str) -> list[str]:
    if not isinstance(labels, list) or not labels:
        raise BundleError(f"{where}: labels must be a non-empty list of strings")
    if not all(isinstance(label, str) and label for label in labels):
        raise BundleError(f"{where}: every label must be a non-empty string")
    if len(set(labels)) != len(labels):
        raise BundleError(f"{where}: labels must be unique, got {labels!r}")
    return labels


def _parse_optimization(data: Any, where: str) -> Optimization:
    # Unknown keys are ignored, so a later publisher can add some (an accuracy report) without breaking readers.
    if not isinstance(data, dict):
        raise BundleError(f"{where}: optimization must be an object with level, source_sha256, tools")
    level = data.get("level")
    if level not in OPTIMIZATION_LEVELS:
        raise BundleError(f"{where}: optimization.level must be one of {', '.join(OPTIMIZATION_LEVELS)}, "
                          f"got {level!r}")
    sha = data.get("source_sha256")
    if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
        raise BundleError(f"{where}: optimization.source_sha256 must be 64 lowercase hex digits, got {sha!r}")
    tools = data.get("tools", {})
    if not isinstance(tools, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tools.items()):
        raise BundleError(f"{where}: optimization.tools must be an object of package -> version strings")
    accuracy = data.get("accuracy")
    if accuracy is not None and not isinstance(accuracy, dict):
        raise BundleError(f"{where}: optimization.accuracy must be an object (the accuracy gate's report)")
    quantization = data.get("quantization")
    if quantization is not None and not isinstance(quantization, dict):
        raise BundleError(f"{where}: optimization.quantization must be an object (how the int8 graph was made)")
    return Optimization(level=level, source_sha256=sha, tools=tuple(sorted(tools.items())), accuracy=accuracy,
                        quantization=quantization)


def pad_id(tokenizer_spec: Mapping[str, Any]) -> int:
    """The id a bundle's batches are padded with, the one rule of the server, the gate and the reference writer:
    tokenizer.json's `padding.pad_id`, else the id of `[PAD]` or `<pad>` (added tokens first, then the vocabulary),
    else 0. Padding is masked, so it changes no answer; the model's own pad id keeps whatever a graph computes from
    the ids (RoBERTa's position ids) as in training."""
    padding = tokenizer_spec.get("padding")
    if isinstance(padding, dict) and isinstance(padding.get("pad_id"), int) and not isinstance(padding["pad_id"], bool):
        return int(padding["pad_id"])
    added = {t.get("content"): t.get("id") for t in tokenizer_spec.get("added_tokens") or [] if isinstance(t, dict)}
    vocab = (tokenizer_spec.get("model") or {}).get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        vocab = {row[0]: n for n, row in enumerate(vocab) if isinstance(row, list) and row}
    for token in PAD_TOKENS:
        for table in (added, vocab if isinstance(vocab, dict) else {}):
            found = table.get(token)
            if isinstance(found, int) and not isinstance(found, bool):
                return found
    return 0


def read_pad_id(tokenizer_json: str | Path) -> int:
    """`pad_id` of a tokenizer.json file."""
    with open(tokenizer_json, encoding="utf-8") as f:
        return pad_id(json.load(f))


def load_manifest(bundle_dir: str | Path) -> BundleManifest:
    """Reads and checks manifest.json only (no ONNX or tokenizer parsing)."""
    path = Path(bundle_dir) / MANIFEST_FILE
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise BundleError(f"{path}: missing") from None
    except OSError as e:
        raise BundleError(f"{path}: cannot read ({e.strerror})") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{path}: not valid JSON ({e})") from None
    return parse_manifest(data, str(path))
