"""One import: a Hugging Face checkpoint directory in, a bundle proven against PyTorch out.

    import_checkpoint(source, dest, task=None, max_seq_len=None, pooling=None, pairs=None, progress=print)
        read the directory (checkpoint.py, no torch) -> load it with PyTorch (torch_side.py) -> the bundle's
        tokenizer.json (tokenizer_file.py) -> export to ONNX (export.py) -> PyTorch's answers and ONNX Runtime's,
        in batches and alone, on the evaluation texts and a few past max_seq_len -> the parity gate (parity.py),
        its table through `progress`, ParityRefused unless it passes -> model.onnx, tokenizer.json, the reference
        answers (PyTorch's, references.py), the evaluation file if the checkpoint has one, and manifest.json with
        the "imported" provenance, into a temp dir beside `dest` -> validated as a bundle -> renamed onto `dest`

A token classifier (checkpoint.py) is exported with `logits` [batch, sequence, labels], both axes dynamic; PyTorch's
answer for a text is its logits [T, labels] (T its tokens, truncated at max_seq_len), ONNX Runtime's the graph's rows
at the text's mask=1 positions, and the gate holds every token to the classifier's rule; its reference answers are a
row of logits per token (references.py).

A sparse embedding model (SPLADE; checkpoint.py) is exported with `sparse` [batch, vocabulary], the masked LM's
logits pooled inside the graph (torch_graph.SparseVector), so the server's engine never holds [batch, sequence,
vocabulary]; PyTorch's answer is SparseEncoder.encode's vector, and the gate holds every weight (parity.py); its
reference answers keep each text's non-zero weights (references.py).

A classifier of pairs (a cross-encoder; checkpoint.py) is judged on pairs: each evaluation text with another one as
its second text (PAIR_STEP texts on), the long ones among them, tokenized as the checkpoint's tokenizer makes a pair
(token types included) on both sides; its reference answers are pairs too.

On any failure `dest` is left as it was. CheckpointError, MissingDependency and DestinationError are the caller's
input (exit 2); ParityRefused and ExportError are the import's verdict (exit 1).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ortserve.bundle import references
from ortserve.bundle import tokenizer as bundle_tokenizer
from ortserve.bundle.cpu import cpu_info
from ortserve.bundle.kinds import CLASSIFIER
from ortserve.bundle.manifest import (
    MANIFEST_FILE,
    MODEL_DATA_FILE,
    MODEL_FILE,
    REFERENCES_FILE,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
    check_matryoshka_dims,
    pad_id,
)
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare import embedding_calibration, reference_choice
from ortserve.prepare.accuracy import (
    EVAL_JSONL_FILE,
    EVAL_TEXT_FILE,
    EvalSet,
    EvalSetError,
    load_eval_set,
    make_batches,
    open_session,
    run_outputs,
    run_token_outputs,
)
from ortserve.prepare.importer import torch_side
from ortserve.prepare.importer.checkpoint import Checkpoint, CheckpointError, read_checkpoint
from ortserve.prepare.importer.export import EXPORTER, ExportError, export
from ortserve.prepare.importer.parity import ParityReport, Run, TokenOutputs, judge
from ortserve.prepare.importer.tokenizer_file import bundle_ids, tokenizer_json
from ortserve.prepare.model_writer import EXTERNAL_DATA_ABOVE, copy_model, model_data_entry
from ortserve.prepare.output import dest_problem, write_atomically

Progress = Callable[[str], None]
BATCH_SIZE = 16
LONG_TEXTS = 3
"""Texts the gate adds past max_seq_len (built from the evaluation texts), so that truncation is always judged."""
THREADS = 2
PAIR_STEP = 7
"""A classifier of pairs is judged on (text i, text i + PAIR_STEP): unrelated texts, of every length mix."""


class DestinationError(ValueError):
    """--out names a path that cannot take a new bundle; one line."""


class ParityRefused(Exception):
    """The exported graph does not answer as PyTorch does; nothing was written. `report` has the figures."""

    def __init__(self, message: str, report: ParityReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class ImportResult:
    path: Path
    manifest: BundleManifest
    parity: ParityReport
    checkpoint: Checkpoint = field(repr=False)
    model_bytes: int
    seconds: float
    warnings: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        """The machine-readable form (`registry import --json`)."""
        m = self.manifest
        shape: dict[str, Any] = {"dim": m.dim}
        if m.spec is CLASSIFIER:
            shape = {"labels": list(m.labels), "multi_label": m.multi_label, "pairs": m.pairs,
                     "score_activation": m.score_activation}
        elif m.per_token:
            shape = {"labels": list(m.labels), "per_token": True}
        return {"bundle": str(self.path), "format": m.format, **shape, "max_seq_len": m.max_seq_len,
                "architecture": self.checkpoint.class_name, "from": self.checkpoint.layout,
                "model_bytes": self.model_bytes, "seconds": round(self.seconds, 3), "warnings": list(self.warnings),
                "imported": m.imported.to_dict() if m.imported else None, "parity": self.parity.to_dict()}


def import_checkpoint(source: str | Path, dest: str | Path, *, task: str | None = None,
                      max_seq_len: int | None = None, pooling: str | None = None, pairs: bool | None = None,
                      matryoshka_dims: Sequence[int] | None = None, progress: Progress | None = None,
                      external_data_above: int = EXTERNAL_DATA_ABOVE) -> ImportResult:
    """Imports the checkpoint at `source` as a bundle at `dest` (absent or an empty directory); see the module
    docstring for the steps and what each failure raises. `external_data_above`: weights (bytes) past which the
    bundle keeps them in model.onnx.data beside model.onnx (model_writer.py)."""
    report = progress or (lambda _line: None)
    started = time.perf_counter()
    out = Path(dest)
    if problem := dest_problem(out):
        raise DestinationError(problem)
    checkpoint = read_checkpoint(source, task=task, pooling=pooling, pairs=pairs)
    if matryoshka_dims is not None and not checkpoint.kind.dense:
        raise CheckpointError(f"{checkpoint.path}: matryoshka dims apply to a dense embedding model (the widths it "
                              f"was trained to be truncated to); {checkpoint.class_name} is imported as "
                              f"{checkpoint.kind.noun}")
    what = (f"a classifier{' of pairs' if checkpoint.pairs else ''} of {len(checkpoint.labels)} labels "
            f"({', '.join(checkpoint.labels)})" + (", multi-label" if checkpoint.multi_label else "")
            + (f", SCORE through a {checkpoint.score_activation}" if checkpoint.score_activation else "")
            if checkpoint.classifier
            else f"a token classifier of {len(checkpoint.labels)} labels ({', '.join(checkpoint.labels)})"
            if checkpoint.per_token
            else f"a sparse embedding model ({checkpoint.splade.describe()})" if checkpoint.splade is not None
            else f"an embedding model ({checkpoint.pooling.describe() if checkpoint.pooling else ''})")
    report(f"read {checkpoint.path}: {checkpoint.class_name} ({checkpoint.architecture.name}, {checkpoint.layout} "
           f"layout), imported as {what}")
    try:
        evals = load_eval_set(checkpoint.path, checkpoint.labels)
    except EvalSetError as e:
        raise CheckpointError(f"{checkpoint.path}: evaluation texts: {e}") from None

    t0 = time.perf_counter()
    model = torch_side.load(checkpoint, max_seq_len=max_seq_len)
    limit = model.max_seq_len
    report(f"loaded with PyTorch {model.tools['torch']} and transformers {model.tools['transformers']}: inputs "
           f"{', '.join(model.input_names)}, max_seq_len {limit} ({time.perf_counter() - t0:.1f}s)")
    widths = _matryoshka_dims(matryoshka_dims, model.columns, checkpoint.path)
    tokenizer_text = tokenizer_json(model.tokenizer, limit, lowercase=checkpoint.lowercase,
                                    wrap=model.wrap_ids if checkpoint.yes_no else None)
    texts = (*evals.texts, *_long_texts(evals.texts, tokenizer_text, limit))
    seconds = [texts[(i + PAIR_STEP) % len(texts)] for i in range(len(texts))] if checkpoint.pairs else None
    # A decoder reranker's server applies its text template to each pair, then reads one text (yes_no_reranker.py).
    served_texts, served_pairs = (([model.pair_template.format(q, d) for q, d in zip(texts, seconds, strict=True)],
                                   None) if checkpoint.yes_no and seconds is not None else (texts, seconds))

    with tempfile.TemporaryDirectory(prefix="ortserve-import-") as scratch:
        return _export_and_judge(checkpoint, model, evals=evals, texts=texts, seconds=seconds,
                                 served_texts=served_texts, served_pairs=served_pairs, tokenizer_text=tokenizer_text,
                                 widths=widths, out=out, scratch=Path(scratch), report=report, started=started,
                                 external_data_above=external_data_above)


def _export_and_judge(checkpoint: Checkpoint, model: torch_side.TorchModel, *, evals: EvalSet, texts: tuple[str, ...],
                      seconds: list[str] | None, served_texts: Sequence[str], served_pairs: Sequence[str] | None,
                      tokenizer_text: str, widths: tuple[int, ...], out: Path, scratch: Path, report: Progress,
                      started: float, external_data_above: int) -> ImportResult:
    """The export into `scratch` (model.onnx, and model.onnx.data past `external_data_above` bytes of weights), both
    sides' answers, the gate, and the bundle written from there."""
    limit = model.max_seq_len
    spec = json.loads(tokenizer_text)
    t0 = time.perf_counter()
    output = checkpoint.kind.graph_output
    exported_dir = scratch / "model"
    exported_dir.mkdir()
    exported = export(model.graph, model.input_names, output, columns=model.columns, max_seq_len=limit,
                      pad_id=pad_id(spec), example_id=_ordinary_id(model.tokenizer), directory=exported_dir,
                      per_token=checkpoint.per_token, external_data_above=external_data_above)
    layout = f", weights in {MODEL_DATA_FILE}" if exported.external else ""
    report(f"exported {MODEL_FILE}: {EXPORTER['name']} ({EXPORTER['mode']}, opset {EXPORTER['opset']}), "
           f"{exported.nodes} nodes, {exported.model_bytes / 2**20:.1f} MiB{layout} ({time.perf_counter() - t0:.1f}s)")

    t0 = time.perf_counter()
    reference: np.ndarray | TokenOutputs
    if checkpoint.per_token:
        reference = model.reference_token_outputs(texts)
        _check_token_shapes(reference, len(texts), model.columns, limit)
    else:
        reference = model.reference_outputs(texts, seconds)
        _check_shape(reference, len(texts), model.columns)
    report(f"PyTorch: {len(texts)} texts ({time.perf_counter() - t0:.1f}s)")
    t0 = time.perf_counter()
    tokenizer_path = scratch / TOKENIZER_FILE
    tokenizer_path.write_text(tokenizer_text, encoding="utf-8")
    runs = _onnx_runs(exported.path, tokenizer_path, limit, served_texts, output, served_pairs,
                      per_token=checkpoint.per_token)
    counts = references.token_counts(tokenizer_path, served_texts, served_pairs)
    report(f"ONNX Runtime: {len(texts)} texts in batches of {BATCH_SIZE} and alone ({time.perf_counter() - t0:.1f}s)")
    parity = judge(checkpoint.kind, texts, reference, runs,
                   reference_ids=model.reference_ids(texts, seconds),
                   bundle_ids=bundle_ids(tokenizer_text, served_texts, limit, served_pairs),
                   eval_name=evals.name, eval_sha256=evals.sha256, long_texts=len(texts) - len(evals.texts),
                   reference_name=model.reference_name, cpu=cpu_info(), labels=evals.labels)
    for line in parity.table():
        report(line)
    if not parity.passed:
        raise ParityRefused(f"{checkpoint.path}: the exported graph does not answer as PyTorch does: "
                            f"{'; '.join(parity.refusals)}; nothing written", parity)

    refs = reference_choice.build(texts, counts, reference, max_seq_len=limit, classifier=checkpoint.classifier,
                            candidates=[run.outputs for run in runs] if checkpoint.labelled else (), pairs=seconds,
                            per_token=checkpoint.per_token, sparse=checkpoint.kind.sparse)
    refs_bytes = refs.encode()
    outputs_from = f"PyTorch {model.tools['torch']} (eval, FP32, CPU): {model.reference_name}, {evals.name}"
    ranges = None
    if checkpoint.kind.dense:  # int8 and uint8 answers read these (calibrated on PyTorch's, evaluation texts only)
        assert isinstance(reference, np.ndarray)
        every_width = (model.columns, *(w for w in widths if w != model.columns))
        ranges = embedding_calibration.calibrate(reference[: len(evals.texts)], every_width, source=evals.name)
    manifest = _manifest(checkpoint, model, parity, limit, references.manifest_entry(refs_bytes, refs, outputs_from),
                         widths, ranges)
    if (model_data := model_data_entry(exported_dir)) is not None:
        manifest["model_data"] = model_data
    files = {TOKENIZER_FILE: tokenizer_text.encode("utf-8"), REFERENCES_FILE: refs_bytes,
             MANIFEST_FILE: (json.dumps(manifest, indent=2) + "\n").encode("utf-8")}
    found = [checkpoint.path / name for name in (EVAL_JSONL_FILE, EVAL_TEXT_FILE) if (checkpoint.path / name).is_file()]
    eval_file = found[0] if found else None
    written = write_atomically(out, lambda tmp: _write(tmp, exported_dir, files, eval_file))
    report(f"wrote {out} ({written.format}, {MODEL_FILE} {exported.model_bytes / 2**20:.1f} MiB{layout})")
    return ImportResult(path=out, manifest=written, parity=parity, checkpoint=checkpoint,
                        model_bytes=exported.model_bytes, seconds=time.perf_counter() - started,
                        warnings=checkpoint.warnings)


def _onnx_runs(model_path: Path, tokenizer_path: Path, limit: int, texts: Sequence[str], output: str,
               pairs: Sequence[str] | None = None, *, per_token: bool = False) -> list[Run]:
    """The exported graph as the server feeds it: in batches of 16 in the texts' order, and one text at a time
    (with `pairs`: each text and its second text, one row; `per_token`: each text's rows at its mask=1 positions)."""
    run = run_token_outputs if per_token else run_outputs
    try:
        session = open_session(model_path, THREADS)
        batched = run(session, make_batches(tokenizer_path, limit, texts, BATCH_SIZE, by_length=False, pairs=pairs),
                      len(texts), output)
        alone = run(session, make_batches(tokenizer_path, limit, texts, 1, pairs=pairs), len(texts), output)
    except Exception as e:  # ORT raises its own types (Fail, InvalidGraph, RuntimeException...)
        raise ExportError(f"ONNX Runtime could not run the exported graph ({type(e).__name__}: "
                          f"{(str(e).strip().splitlines() or [''])[0][:200]})") from e
    return [Run(f"batches of {BATCH_SIZE}", batched), Run("one text at a time", alone)]


def _long_texts(texts: Sequence[str], tokenizer_text: str, limit: int) -> list[str]:
    """LONG_TEXTS texts past `limit` tokens, each the evaluation texts joined from a different starting point."""
    from tokenizers import Tokenizer

    tokenizer = bundle_tokenizer.set_up(Tokenizer.from_str(tokenizer_text), None)
    out = []
    for k in range(LONG_TEXTS):
        parts: list[str] = []
        tokens = 0
        while tokens <= limit + 8:
            part = texts[(k * 37 + len(parts)) % len(texts)]
            parts.append(part)
            tokens += len(tokenizer.encode(part, add_special_tokens=False).ids) + 1
        out.append(" ".join(parts))
    return out


def _ordinary_id(tokenizer: Any) -> int:
    """An id of an ordinary word, for the traced example (a special or pad id could take another path)."""
    ids = tokenizer("the", add_special_tokens=False)["input_ids"]
    return int(ids[0]) if ids else int(tokenizer.unk_token_id or 0)


def _matryoshka_dims(dims: Sequence[int] | None, width: int, path: Path) -> tuple[int, ...]:
    """The widths the caller says the model was trained to be truncated to (sentence-transformers records none in
    the checkpoint: MatryoshkaLoss's dims live only in the training script), checked against its width."""
    if dims is None:
        return ()
    try:
        return check_matryoshka_dims(list(dims), width)
    except ValueError as e:
        raise CheckpointError(f"{path}: matryoshka dims {e}") from None


def _manifest(checkpoint: Checkpoint, model: torch_side.TorchModel, parity: ParityReport, limit: int,
              refs_entry: dict[str, Any], matryoshka_dims: tuple[int, ...] = (),
              ranges: dict[str, Any] | None = None) -> dict[str, Any]:
    import onnx
    import onnxruntime
    import tokenizers

    kind: dict[str, Any]
    if checkpoint.per_token:
        kind = {"format": checkpoint.kind.format, "labels": list(checkpoint.labels)}
        task: dict[str, Any] = {"task": "tokens"}
    elif checkpoint.classifier:
        kind = {"format": checkpoint.kind.format, "labels": list(checkpoint.labels)}
        if checkpoint.multi_label:
            kind["multi_label"] = True
        task = {"task": "classify", "problem_type": checkpoint.config.get("problem_type")}
        if checkpoint.pairs:
            kind["pairs"] = True
            task = {**task, "task": "rerank" if checkpoint.score_activation else "classify pairs",
                    "cross_encoder": checkpoint.cross_encoder}
        if checkpoint.score_activation:
            kind["score_activation"] = checkpoint.score_activation
        if checkpoint.yes_no:  # the server puts each (query, document) into this text before its tokenizer
            task = {**task, "pair_template": model.pair_template.text_parts(), "answers": ["no", "yes"],
                    "score": "P(yes) = sigmoid(logit yes - logit no) at the last token"}
    elif checkpoint.splade is not None:  # dim: the vocabulary, one weight per entry
        kind = {"format": checkpoint.kind.format, "dim": model.columns}
        task = {"task": "sparse", "pooling": "splade", "splade": asdict(checkpoint.splade)}
        if checkpoint.prompts:
            task["prompts"] = dict(checkpoint.prompts)
    else:
        assert checkpoint.pooling is not None
        kind = {"format": checkpoint.kind.format, "dim": model.columns}
        if matryoshka_dims:  # a call may ask for one of these widths (`dimensions`)
            kind["matryoshka_dims"] = list(matryoshka_dims)
        if ranges is not None:  # what int8 and uint8 answers read (`embedding_type`)
            kind[embedding_calibration.MANIFEST_KEY] = ranges
        task = {"task": "embed", "pooling": list(checkpoint.pooling.modes), "normalize": checkpoint.pooling.normalize}
        if checkpoint.prompts:  # sentence-transformers' prompts, by name: a call asks for one (`prompt_name`)
            task["prompts"] = dict(checkpoint.prompts)
    tools = {**model.tools, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
             "tokenizers": tokenizers.__version__}
    verdict = parity.runs[0]
    figure = (f"max |delta logit| {max(r.max_abs_delta for r in parity.runs):.2g}, argmax identical on "
              f"{verdict.agree}/{verdict.texts}" if checkpoint.classifier
              else f"max |delta logit| {max(r.max_abs_delta for r in parity.runs):.2g}, argmax identical on "
              f"{verdict.agree}/{verdict.tokens} tokens" if checkpoint.per_token
              else f"max |delta weight| {max(r.max_abs_delta for r in parity.runs):.2g}, kept columns identical on "
              f"{verdict.agree}/{verdict.texts}" if checkpoint.kind.sparse
              else f"cosine >= {min(r.min_cosine or 0.0 for r in parity.runs):.7f}")
    notes = (f"{checkpoint.class_name} ({checkpoint.architecture.name}) imported from {checkpoint.path.name} "
             f"({checkpoint.layout}); PyTorch parity on {len(parity.texts)} texts: {figure}")
    imported = {"from": checkpoint.layout, "architecture": checkpoint.class_name,
                "model_type": checkpoint.architecture.model_type, **task,
                "checkpoint": {"name": checkpoint.path.name, "weights": _weights_digest(checkpoint.weights)},
                "inputs": list(model.input_names), "exporter": dict(EXPORTER), "tools": dict(sorted(tools.items())),
                "parity": parity.manifest_entry()}
    return {**kind, "max_seq_len": limit, "notes": notes, "imported": imported, "references": refs_entry}


def _weights_digest(paths: Sequence[Path]) -> dict[str, str]:
    """sha256 of each weight file (an index file stands for its shards: they are hashed too)."""
    out = {}
    for path in paths:
        names = [path]
        if path.name.endswith(".index.json"):
            shards = sorted(set((json.loads(path.read_bytes()).get("weight_map") or {}).values()))
            names += [path.parent / shard for shard in shards]
        for name in names:
            digest = hashlib.sha256()
            with name.open("rb") as f:
                for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                    digest.update(chunk)
            out[name.name] = digest.hexdigest()
    return out


def _write(tmp: Path, model_dir: Path, files: dict[str, bytes], eval_file: Path | None) -> BundleManifest:
    copy_model(model_dir, tmp)
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    if eval_file is not None:  # the optimiser's accuracy gate then runs on the same texts
        shutil.copyfile(eval_file, tmp / eval_file.name)
    try:
        return validate_bundle(tmp)
    except BundleError as e:  # a bug here, not in the checkpoint: say so
        raise ExportError(f"the imported bundle failed validation: {e}") from None



def _check_token_shapes(reference: TokenOutputs, texts: int, columns: int, limit: int) -> None:
    if len(reference) != texts or any(r.ndim != 2 or r.shape[1] != columns or not 1 <= len(r) <= limit
                                      for r in reference):
        shapes = sorted({str(list(r.shape)) for r in reference})[:3]
        raise ExportError(f"PyTorch answered {len(reference)} token outputs of shapes {', '.join(shapes)}, expected "
                          f"{texts} of [1..{limit}, {columns}]")


def _check_shape(reference: np.ndarray, texts: int, columns: int) -> None:
    if reference.shape != (texts, columns):
        raise ExportError(f"PyTorch answered shape {list(reference.shape)}, expected {[texts, columns]}")
