"""Every architecture the importer takes, both tasks: a tiny random checkpoint made offline, imported with real PyTorch,
torch.onnx and ONNX Runtime; the bundle is valid, its graph has the bundle format's wire, the parity gate passed on
its own figures, and the manifest says where it came from, in a form the registry's version records carry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from support.hf_checkpoints import ARCHITECTURES, DECODERS, TASKS
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN as MAX_SEQ_LEN

from ortserve.bundle.references import read_references
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare.accuracy import builtin_eval_set, make_batches, open_session, run_outputs
from ortserve.prepare.importer import LOGIT_TOLERANCE, MIN_COSINE, ImportResult
from ortserve.prepare.importer.architectures import SUPPORTED
from ortserve.registry.records import ArtifactRef, VersionRecord

Key = tuple[str, str]
CASES = [(arch, task) for arch in ARCHITECTURES for task in TASKS]
# The families whose tokenizers make token types, and whose models read them (type_vocab_size 2).
TOKEN_TYPES = {"bert", "electra"}


def test_the_tests_cover_every_supported_architecture() -> None:
    """Encoders here; decoders (embedding models only) in test_decoders.py."""
    assert set(ARCHITECTURES) == {t for t, a in SUPPORTED.items() if not a.decoder}
    assert set(DECODERS) == {t for t, a in SUPPORTED.items() if a.decoder}


@pytest.mark.parametrize("key", CASES, ids=["-".join(k) for k in CASES])
def test_imports_as_a_valid_bundle_with_the_wire_format(imported: dict[Key, ImportResult], key: Key) -> None:
    result = imported[key]
    manifest = validate_bundle(result.path)
    assert manifest == result.manifest
    arch, task = key
    model = onnx.load(str(result.path / "model.onnx"))
    inputs = [(vi.name, [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim])
              for vi in model.graph.input]
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if arch in TOKEN_TYPES else [])]
    assert inputs == [(name, ["batch", "sequence"]) for name in names]
    (output,) = model.graph.output
    columns = 2 if task == "classify" else 32
    assert output.name == ("logits" if task == "classify" else "embedding")
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["batch", columns]
    assert output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert manifest.max_seq_len == MAX_SEQ_LEN
    if task == "classify":
        assert (manifest.kind, manifest.labels, manifest.multi_label) == ("classifier", ("negative", "positive"), False)
    else:
        assert (manifest.kind, manifest.dim) == ("embedding", 32)


@pytest.mark.parametrize("key", CASES, ids=["-".join(k) for k in CASES])
def test_parity_with_pytorch_is_recorded(imported: dict[Key, ImportResult], key: Key) -> None:
    result = imported[key]
    parity = result.parity
    assert parity.passed and parity.tokenizer_mismatches == 0
    texts = len(builtin_eval_set().texts) + 3  # the built-in corpus + 3 past max_seq_len
    assert parity.long_texts == 3 and len(parity.texts) == texts
    for run in parity.runs:
        assert run.non_finite == 0
        if key[1] == "classify":
            assert run.agree == run.texts and run.max_relative_delta <= LOGIT_TOLERANCE
        else:
            assert run.min_cosine is not None and run.min_cosine >= MIN_COSINE
    assert {run.name for run in parity.runs} == {"batches of 16", "one text at a time"}
    imported_entry = result.manifest.imported
    assert imported_entry is not None
    entry = imported_entry.to_dict()
    assert entry["from"] == "transformers" and entry["model_type"] == key[0]
    assert entry["architecture"] == json.loads((result.checkpoint.model_dir / "config.json").read_text())[
        "architectures"][0]
    assert entry["exporter"]["opset"] == 17 and entry["parity"]["passed"] is True
    assert entry["parity"]["tokenizer_ids_identical"] == f"{texts}/{texts}"
    assert {"torch", "transformers", "onnx", "onnxruntime", "tokenizers"} <= set(entry["tools"])
    assert set(entry["checkpoint"]["weights"]) == {"model.safetensors"}


@pytest.mark.parametrize("key", [("roberta", "classify"), ("bert", "embed"), ("modernbert", "classify")],
                         ids=lambda k: "-".join(k))
def test_reference_answers_are_pytorchs_and_the_bundle_reproduces_them(imported: dict[Key, ImportResult],
                                                                       key: Key) -> None:
    result = imported[key]
    manifest = result.manifest
    assert manifest.references is not None
    assert manifest.references.outputs_from.startswith("PyTorch ")
    refs = read_references(result.path, manifest.references, manifest.columns)
    assert any(len(t.split()) > MAX_SEQ_LEN for t in refs.texts)  # truncation is among what a server checks
    session = open_session(result.path / "model.onnx", 1)
    got = run_outputs(session, make_batches(result.path / "tokenizer.json", manifest.max_seq_len, refs.texts, 4),
                      len(refs.texts), manifest.output_name)
    if manifest.kind == "classifier":
        scale = np.maximum(1.0, np.abs(refs.outputs).max(axis=1, keepdims=True))
        assert (np.abs(got - refs.outputs) <= LOGIT_TOLERANCE * scale).all()
    else:
        cosine = (got * refs.outputs).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(refs.outputs, axis=1)
        assert cosine.min() >= MIN_COSINE


def test_the_provenance_round_trips_through_a_version_record(imported: dict[Key, ImportResult]) -> None:
    manifest = imported[("xlm-roberta", "classify")].manifest
    record = VersionRecord(model="m", version="v1", artifact=ArtifactRef(uri="file:///x", sha256="0" * 64, size=1),
                           manifest=manifest, created_at="t", created_by="me")
    back = VersionRecord.from_json(record.to_json())
    assert back.manifest == manifest
    assert back.manifest.imported is not None and manifest.imported is not None
    assert back.manifest.imported.to_dict() == manifest.imported.to_dict()
    texts = len(builtin_eval_set().texts) + 3
    assert back.to_dict()["imported"]["parity"]["runs"]["batches of 16"]["argmax_agreement"] == f"{texts}/{texts}"


def test_same_checkpoint_same_bundle_bytes(checkpoints: dict[Key, Path], imported: dict[Key, ImportResult],
                                           tmp_path: Path) -> None:
    from ortserve.prepare.importer import import_checkpoint

    again = import_checkpoint(checkpoints[("distilbert", "classify")], tmp_path / "again", max_seq_len=MAX_SEQ_LEN)
    first = imported[("distilbert", "classify")].path
    for name in ("model.onnx", "tokenizer.json", "references.jsonl", "manifest.json"):
        assert (again.path / name).read_bytes() == (first / name).read_bytes(), name


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_an_imported_graph_fuses_and_keeps_its_provenance(imported: dict[Key, ImportResult], arch: str,
                                                          tmp_path: Path) -> None:
    """The exported graph is the pattern ONNX Runtime's transformer fusion recognises (export.py's reason for the
    TorchScript exporter): every attention block fuses, and the optimised bundle still says where it came from."""
    from ortserve.prepare.optimize import optimize_bundle

    source = imported[(arch, "classify")]
    result = optimize_bundle(source.path, tmp_path / "fused", "fuse")
    assert result.ops_after.get("Attention") == 2 and not result.ops_before.get("Attention")  # both layers
    assert result.gate is not None and result.gate.passed
    assert result.manifest.imported == source.manifest.imported
