"""Sparse embedding models (SPLADE) imported (issue 57 item 1): a sentence-transformers SparseEncoder directory (an
MLMTransformer, or a fill-mask Transformer, then SpladePooling) and a bare BertForMaskedLM given --task sparse, through
real PyTorch, torch.onnx and ONNX Runtime, held at import to SparseEncoder.encode weight by weight; the manifest says
the kind, the vocabulary and the pooling; the reference answers keep each text's non-zero weights; what does not fit
the kind is refused naming why (a bare masked LM without --task is still a dense embedding model, with a warning)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.hf_checkpoints import corpus, sparse_encoder_of

from ortserve.bundle.kinds import EMBEDDING, SPARSE_EMBEDDING
from ortserve.bundle.manifest import BundleError, parse_manifest
from ortserve.bundle.references import read_references
from ortserve.prepare.importer import CheckpointError, ImportResult, import_checkpoint
from ortserve.prepare.importer.checkpoint import Splade, read_checkpoint
from ortserve.prepare.importer.parity import LOGIT_TOLERANCE, Run, judge_run
from ortserve.prepare.optimize import OptimizeError, optimize_bundle

ABS, REL = 1e-4, 1e-4
"""|ours - SparseEncoder's| <= ABS + REL x |theirs| (test_sparse_vector's bound: FP32 on any CPU)."""


def test_the_checkpoint_reader_tells_a_sparse_encoder_and_a_masked_lm(sparse_checkpoints: dict[str, Path]) -> None:
    st = read_checkpoint(sparse_checkpoints["bert-st"])
    assert (st.kind, st.splade, st.layout) == (SPARSE_EMBEDDING, Splade("max", "relu"), "sentence-transformers")
    fill_mask = read_checkpoint(sparse_checkpoints["distilbert-st"])
    assert (fill_mask.kind, fill_mask.splade) == (SPARSE_EMBEDDING, Splade("sum", "log1p_relu"))
    bare = read_checkpoint(sparse_checkpoints["bert-mlm"], task="sparse")
    assert (bare.kind, bare.splade, bare.class_name) == (SPARSE_EMBEDDING, Splade(), "BertForMaskedLM")
    dense = read_checkpoint(sparse_checkpoints["bert-mlm"])
    assert dense.kind is EMBEDDING and "--task sparse" in dense.warnings[0]


@pytest.mark.parametrize(("name", "kwargs", "message"), [
    ("bert-st", {"task": "embed"}, "imports as a sparse embedding model; leave --task out"),
    ("bert-st", {"pooling": "mean"}, "--pooling applies to dense embedding models"),
    ("bert-mlm", {"task": "sparse", "pooling": "cls"}, "--pooling applies to dense embedding models"),
    ("bert-st", {"pairs": True}, "a cross-encoder"),
])
def test_what_does_not_fit_a_sparse_model_is_refused(sparse_checkpoints: dict[str, Path], name: str,
                                                      kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(sparse_checkpoints[name], **kwargs)


def test_a_model_without_a_masked_lm_head_is_not_sparse(tmp_path: Path) -> None:
    from support.hf_checkpoints import make_checkpoint

    base = make_checkpoint(tmp_path / "base", "bert", task="embed", seed=3)
    with pytest.raises(CheckpointError, match="no masked-LM head"):
        read_checkpoint(base, task="sparse")


def test_a_sparse_encoder_of_other_modules_is_refused(sparse_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    copy = shutil.copytree(sparse_checkpoints["bert-st"], tmp_path / "copy")
    modules = json.loads((copy / "modules.json").read_text())
    modules[1]["type"] = "sentence_transformers.sparse_encoder.modules.SparseStaticEmbedding"
    (copy / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CheckpointError, match="not inference-free"):
        read_checkpoint(copy)
    (copy / "modules.json").write_text(json.dumps(json.loads((sparse_checkpoints["bert-st"] / "modules.json")
                                                             .read_text())))
    config = copy / "1_SpladePooling" / "config.json"
    config.write_text(json.dumps({"pooling_strategy": "mean", "activation_function": "relu"}))
    with pytest.raises(CheckpointError, match="'mean' of 'relu' is not supported"):
        read_checkpoint(copy)


@pytest.mark.parametrize("name", ["bert-st", "distilbert-st", "bert-mlm"])
def test_the_import_answers_as_sparse_encoder(sparse_imported: dict[str, ImportResult],
                                              sparse_checkpoints: dict[str, Path], name: str) -> None:
    """The manifest, the parity report, and the bundle's graph against SparseEncoder.encode on texts short, long
    (truncated) and batched with padding."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    result = sparse_imported[name]
    manifest = result.manifest
    assert manifest.spec is SPARSE_EMBEDDING and manifest.format == "onnx-sparse-embedding"
    assert manifest.widths == () and manifest.embedding_ranges is None and manifest.matryoshka_dims == ()
    assert result.parity.passed and manifest.imported is not None
    assert manifest.imported.details["task"] == "sparse"
    assert manifest.imported.details["parity"]["rule"].startswith("every vocabulary weight")
    encoder = sparse_encoder_of(sparse_checkpoints[name], bare=name == "bert-mlm")
    texts = ["hello world", corpus()[4], " ".join(corpus()[10:16]), "x", ""]
    theirs = encoder.encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False).numpy()
    assert theirs.shape == (len(texts), manifest.dim)  # dim: the vocabulary
    tokenizer = Tokenizer.from_file(str(result.path / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0)
    encodings = tokenizer.encode_batch(texts)
    feeds = {"input_ids": np.asarray([e.ids for e in encodings], np.int64),
             "attention_mask": np.asarray([e.attention_mask for e in encodings], np.int64)}
    session = ort.InferenceSession(str(result.path / "model.onnx"), providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    if "token_type_ids" in wanted:
        feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    ours = session.run(["sparse"], {k: v for k, v in feeds.items() if k in wanted})[0]
    np.testing.assert_allclose(ours, theirs, atol=ABS, rtol=REL)
    assert not ((ours > ABS) & (theirs == 0)).any() and not ((theirs > ABS) & (ours == 0)).any()


def test_the_references_keep_the_non_zero_weights(sparse_imported: dict[str, ImportResult]) -> None:
    result = sparse_imported["bert-st"]
    lines = (result.path / "references.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    assert set(row["output"]) == {"indices", "values"} and 0 < len(row["output"]["indices"]) < result.manifest.dim
    assert row["output"]["indices"] == sorted(row["output"]["indices"])
    manifest = result.manifest
    assert manifest.references is not None
    refs = read_references(result.path, manifest.references, manifest.columns, sparse=True)
    assert refs.outputs.shape == (len(lines), manifest.dim) and (refs.outputs >= 0).all()
    np.testing.assert_array_equal(np.flatnonzero(refs.outputs[0]), row["output"]["indices"])


def test_the_parity_gate_refuses_a_moved_weight() -> None:
    want = np.zeros((3, 50), np.float32)
    want[:, [3, 7, 9]] = [[0.5, 2.0, 0.25]] * 3
    moved = want.copy()
    moved[1, 7] += 0.01  # past 1e-4 x max(1, 2.0)
    verdict = judge_run(SPARSE_EMBEDDING, want, Run("run 0", moved))
    assert verdict.over_tolerance == 1 and verdict.worst_text == 1 and verdict.agree == 3
    extra = want.copy()
    extra[2, 40] = 0.5 * LOGIT_TOLERANCE  # a new column within the bound of 0: the weights agree, the columns not
    verdict = judge_run(SPARSE_EMBEDDING, want, Run("run 0", extra))
    assert verdict.over_tolerance == 0 and verdict.agree == 2 and verdict.first_disagreement == 2


def test_manifest_refuses_dense_only_keys() -> None:
    shape = {"format": "onnx-sparse-embedding", "dim": 100, "max_seq_len": 16}
    assert parse_manifest(shape).widths == ()
    assert parse_manifest({**shape, "dim": 250002}).columns == 250002  # XLM-RoBERTa's vocabulary
    with pytest.raises(BundleError, match=r"dim \(the vocabulary's size\) must be an integer in 1..262144"):
        parse_manifest({**shape, "dim": 2**18 + 1})
    for key, value in (("matryoshka_dims", [100, 50]), ("embedding_ranges", {"widths": {}}), ("labels", ["a"])):
        with pytest.raises(BundleError, match=f"{key} appl(y|ies) to 'onnx-text-embedding'|{key} apply to"):
            parse_manifest({**shape, key: value})


def test_matryoshka_dims_and_the_optimiser_refuse_a_sparse_model(sparse_checkpoints: dict[str, Path],
                                                                  sparse_imported: dict[str, ImportResult],
                                                                  tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="matryoshka dims apply to a dense embedding model"):
        import_checkpoint(sparse_checkpoints["bert-st"], tmp_path / "m", matryoshka_dims=[64, 32])
    with pytest.raises(OptimizeError, match="a sparse embedding model"):
        optimize_bundle(sparse_imported["bert-st"].path, tmp_path / "o", "int8")


def test_the_cli_imports_publishes_and_shows_a_sparse_model(sparse_checkpoints: dict[str, Path],
                                                            sparse_imported: dict[str, ImportResult], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from ortserve.registry.cli import main as registry_main

    source = sparse_checkpoints["bert-mlm"]
    code = registry_main(["import", "--from", str(source), "--out", str(tmp_path / "b"), "--max-seq-len", "32",
                          "--task", "sparse"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "imported as a sparse embedding model (SPLADE: max over tokens of log(1 + relu(logit)))" in out
    assert "non-zero columns identical" in out and "verdict: pass" in out
    vocabulary = sparse_imported["bert-mlm"].manifest.dim
    assert f"BertForMaskedLM, onnx-sparse-embedding (vocabulary {vocabulary}), max_seq_len 32" in out.splitlines()[-1]
    store = f"file://{tmp_path / 'store'}"
    assert registry_main(["--registry", store, "publish", "--model", "splade", "--version", "v1", "--bundle",
                          str(sparse_imported["bert-st"].path)]) == 0
    assert registry_main(["--registry", store, "show", "splade"]) == 0
    assert f"(sparse embedding, vocabulary {vocabulary})" in capsys.readouterr().out
    code = registry_main(["--registry", store, "publish", "--model", "splade", "--version", "v2", "--from-hf",
                          str(sparse_checkpoints["bert-st"]), "--optimize", "int8"])
    captured = capsys.readouterr()
    assert code == 1 and "a sparse embedding model (onnx-sparse-embedding)" in captured.err
    assert "parity gate" not in captured.out  # refused before the import ran
