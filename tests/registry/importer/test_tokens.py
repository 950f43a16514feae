"""Token classifiers (named entities): a tiny random *ForTokenClassification of every architecture the importer takes,
made offline, imported with real PyTorch, torch.onnx and ONNX Runtime. The bundle is an onnx-token-classifier whose
graph answers `logits` [batch, sequence, labels] as transformers does for every real token (padding never counts),
on texts with accents, CJK and emoji and past max_seq_len; its reference answers are PyTorch's logits per token, one
row per token the server reads; what makes no sense for a token classifier is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from support.hf_checkpoints import BIO_LABELS, TOKEN_CASES, TOKEN_LABELS
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN as MAX_SEQ_LEN
from support.importing import run_registry

from ortserve.bundle.references import read_references
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare.accuracy import builtin_eval_set, make_batches, open_session, run_token_outputs
from ortserve.prepare.importer import LOGIT_TOLERANCE, ImportResult, ParityRefused, import_checkpoint
from ortserve.registry.cli import main as registry_main

Key = tuple[str, str]
TOKEN_TYPES = {"bert", "electra"}
TEXTS = (
    "José Müller wohnt in Zürich, près de Genève.",
    "山田太郎は東京に住んでいます。",
    "Meet Ana 🙂 in Lisbon 🇵🇹 tomorrow!",
    "Ça coûte 5 € à Ærøskøbing — naïve café",
    "Привет, Анна из Москвы",
    "x",
    " ".join(["Ana Silva lives in São Paulo 🌞 with 李小龙"] * 6),  # past max_seq_len: truncated
)


def _ids(key: Key) -> str:
    return "-".join(key)


def _pytorch(checkpoint: Path, texts: tuple[str, ...]) -> tuple[list[np.ndarray], list[list[int]]]:
    """transformers' answer, as a user runs the checkpoint: each text alone, truncated at MAX_SEQ_LEN."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    model = transformers.AutoModelForTokenClassification.from_pretrained(str(checkpoint)).eval()
    logits, ids = [], []
    with torch.inference_mode():
        for text in texts:
            encoded = tokenizer(text, truncation=True, max_length=MAX_SEQ_LEN, return_tensors="pt")
            logits.append(model(**encoded).logits[0].float().numpy())
            ids.append(encoded["input_ids"][0].tolist())
    return logits, ids


def _onnx(bundle: Path, texts: tuple[str, ...]) -> list[np.ndarray]:
    """The bundle's graph fed as the server feeds it: padded batches, rows cut at their mask=1 positions."""
    batches = make_batches(bundle / "tokenizer.json", MAX_SEQ_LEN, texts, 4, by_length=False)
    return run_token_outputs(open_session(bundle / "model.onnx", 1), batches, len(texts))


def _bundle_ids(bundle: Path, texts: tuple[str, ...]) -> list[list[int]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_SEQ_LEN)
    return [tokenizer.encode(text).ids for text in texts]


def _within_tolerance(got: np.ndarray, want: np.ndarray) -> bool:
    scale = np.maximum(1.0, np.abs(want).max(axis=1, keepdims=True))
    return bool((np.abs(got - want) <= LOGIT_TOLERANCE * scale).all())


@pytest.mark.parametrize("key", TOKEN_CASES, ids=[_ids(k) for k in TOKEN_CASES])
def test_imports_as_a_token_classifier_bundle(token_imported: dict[Key, ImportResult], key: Key) -> None:
    result = token_imported[key]
    manifest = validate_bundle(result.path)
    assert manifest == result.manifest
    labels = TOKEN_LABELS[key[1]]
    assert (manifest.format, manifest.kind, manifest.labels, manifest.per_token, manifest.max_seq_len) == (
        "onnx-token-classifier", "token-classifier", labels, True, MAX_SEQ_LEN)
    assert not manifest.multi_label and not manifest.pairs and manifest.dim is None
    model = onnx.load(str(result.path / "model.onnx"))
    inputs = [(vi.name, [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim])
              for vi in model.graph.input]
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if key[0] in TOKEN_TYPES else [])]
    assert inputs == [(name, ["batch", "sequence"]) for name in names]
    (output,) = model.graph.output
    assert output.name == "logits" and output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["batch", "sequence",
                                                                                       len(labels)]
    assert manifest.imported is not None
    entry = manifest.imported.to_dict()
    assert entry["task"] == "tokens" and entry["architecture"].endswith("ForTokenClassification")
    parity = entry["parity"]
    texts = len(builtin_eval_set().texts) + 3  # the built-in corpus + 3 past max_seq_len
    assert parity["passed"] is True and parity["tokenizer_ids_identical"] == f"{texts}/{texts}"
    assert parity["rule"].startswith("every token (mask=1): argmax identical")
    for run in result.parity.runs:
        assert run.tokens > texts * 2 and run.agree == run.tokens and run.length_mismatches == 0
        assert run.max_relative_delta <= LOGIT_TOLERANCE and run.non_finite == 0
        assert parity["runs"][run.name]["argmax_agreement"] == f"{run.tokens}/{run.tokens} tokens"
    assert "argmax identical on" in manifest.notes and "tokens" in manifest.notes


@pytest.mark.parametrize("key", TOKEN_CASES, ids=[_ids(k) for k in TOKEN_CASES])
def test_the_graph_answers_as_pytorch_per_token_on_accents_cjk_and_emoji(
        token_checkpoints: dict[Key, Path], token_imported: dict[Key, ImportResult], key: Key) -> None:
    bundle = token_imported[key].path
    want, want_ids = _pytorch(token_checkpoints[key], TEXTS)
    assert _bundle_ids(bundle, TEXTS) == want_ids
    got = _onnx(bundle, TEXTS)
    assert len(want[-1]) == MAX_SEQ_LEN  # the long text was truncated, and is judged on what was read
    for text, g, w in zip(TEXTS, got, want, strict=True):
        assert g.shape == w.shape == (len(w), len(TOKEN_LABELS[key[1]])), text
        assert _within_tolerance(g, w), text


@pytest.mark.parametrize("key", [("bert", "bio"), ("roberta", "bio"), ("bert", "iobes")], ids=_ids)
def test_references_are_pytorchs_logits_one_row_per_token_the_server_reads(
        token_checkpoints: dict[Key, Path], token_imported: dict[Key, ImportResult], key: Key) -> None:
    result = token_imported[key]
    manifest = result.manifest
    assert manifest.references is not None and manifest.references.outputs_from.startswith("PyTorch ")
    refs = read_references(result.path, manifest.references, manifest.columns, per_token=True,
                           max_seq_len=manifest.max_seq_len)
    assert refs.tokens is not None and len(refs.tokens) == len(refs.texts) == manifest.references.texts
    # T is the text's token count under the bundle's tokenizer.json, truncated at max_seq_len, specials included.
    assert list(refs.tokens) == [len(ids) for ids in _bundle_ids(result.path, refs.texts)]
    assert max(refs.tokens) == MAX_SEQ_LEN and min(refs.tokens) >= 1
    rows = (result.path / "references.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(rows[0])
    assert set(first) == {"text", "output", "decisive"} and len(first["output"][0]) == len(manifest.labels)
    want, _ = _pytorch(token_checkpoints[key], refs.texts)
    for text, stored, w in zip(refs.texts, refs.token_rows(), want, strict=True):
        np.testing.assert_allclose(stored, w, rtol=1e-6, atol=1e-6, err_msg=text)
    for text, stored, g in zip(refs.texts, refs.token_rows(), _onnx(result.path, refs.texts), strict=True):
        assert _within_tolerance(g, stored), text  # what the server's load-time check will hold the graph to


def test_same_token_checkpoint_same_bundle_bytes(token_checkpoints: dict[Key, Path],
                                                 token_imported: dict[Key, ImportResult], tmp_path: Path) -> None:
    again = import_checkpoint(token_checkpoints[("roberta", "bio")], tmp_path / "again", max_seq_len=MAX_SEQ_LEN)
    first = token_imported[("roberta", "bio")].path
    for name in ("model.onnx", "tokenizer.json", "references.jsonl", "manifest.json"):
        assert (again.path / name).read_bytes() == (first / name).read_bytes(), name


def test_the_cli_says_what_it_made_and_publish_show_and_optimize_fit_the_kind(
        token_checkpoints: dict[Key, Path], token_imported: dict[Key, ImportResult], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    source = token_checkpoints[("bert", "bio")]
    code = registry_main(["import", "--from", str(source), "--out", str(tmp_path / "b"), "--max-seq-len", "32"])
    out = capsys.readouterr().out
    assert code == 0
    assert "imported as a token classifier of 5 labels (O, B-PER, I-PER, B-LOC, I-LOC)" in out
    assert "argmax identical per token" in out and "verdict: pass" in out
    assert ("BertForTokenClassification, onnx-token-classifier (labels O, B-PER, I-PER, B-LOC, I-LOC, one per "
            "token), max_seq_len 32") in out.splitlines()[-1]
    code = registry_main(["import", "--from", str(source), "--out", str(tmp_path / "j"), "--max-seq-len", "32",
                          "--json", "--task", "tokens"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["format"] == "onnx-token-classifier" and summary["per_token"] is True
    assert summary["labels"] == list(BIO_LABELS) and summary["parity"]["passed"] is True

    store = f"file://{tmp_path / 'store'}"
    code = registry_main(["--registry", store, "publish", "--model", "ner", "--version", "v1", "--from-hf",
                          str(source), "--max-seq-len", "32"])
    assert code == 0 and "published ner/v1" in capsys.readouterr().out
    assert registry_main(["--registry", store, "show", "ner"]) == 0
    assert "O,B-PER,I-PER,B-LOC,I-LOC (per token)" in capsys.readouterr().out

    code = registry_main(["optimize", "--bundle", str(token_imported[("bert", "bio")].path), "--out",
                          str(tmp_path / "int8"), "--optimize", "int8"])
    err = capsys.readouterr().err
    assert code == 1 and "a token classifier (onnx-token-classifier); the accuracy gate compares one label per " \
                         "text" in err and "publish it without --optimize" in err
    assert not (tmp_path / "int8").exists()
    code = registry_main(["--registry", store, "publish", "--model", "ner", "--version", "v2", "--from-hf",
                          str(source), "--optimize", "int8"])
    captured = capsys.readouterr()
    assert code == 1 and "the accuracy gate compares one label per text" in captured.err
    assert "parity gate" not in captured.out  # refused before the import ran


@pytest.mark.parametrize(("extra", "expected"), [
    (["--pairs"], "BertForTokenClassification is a token classifier, which reads one text"),
    (["--task", "rerank"], "is a token classifier, which reads one text"),
    (["--task", "classify"], "is a token classifier (a label per token), not a sequence classifier"),
    (["--pooling", "mean"], "--pooling applies to embedding models; a token classifier answers per token"),
], ids=["pairs", "rerank", "classify", "pooling"])
def test_what_makes_no_sense_is_refused_in_one_line(token_checkpoints: dict[Key, Path], tmp_path: Path,
                                                    extra: list[str], expected: str) -> None:
    out = tmp_path / "bundle"
    result = run_registry("import", "--from", str(token_checkpoints[("bert", "bio")]), "--out", str(out), *extra,
                          cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("registry: error: ") and expected in line, line
    assert not out.exists()


def test_task_tokens_on_a_sequence_classifier_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from support.hf_checkpoints import make_checkpoint

    source = make_checkpoint(tmp_path / "ckpt", "bert")
    assert registry_main(["import", "--from", str(source), "--out", str(tmp_path / "b"), "--task", "tokens"]) == 2
    assert "BertForSequenceClassification has no token-classification head" in capsys.readouterr().err


def test_id2label_narrower_than_the_token_head_is_refused(token_checkpoints: dict[Key, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "ckpt"
    shutil.copytree(token_checkpoints[("bert", "bio")], source)
    config = json.loads((source / "config.json").read_text())
    config["id2label"] = {"0": "O", "1": "B-PER", "2": "I-PER"}
    config["label2id"] = {"O": 0, "B-PER": 1, "I-PER": 2}
    (source / "config.json").write_text(json.dumps(config))
    assert registry_main(["import", "--from", str(source), "--out", str(tmp_path / "b")]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line]
    assert ("config.json's id2label lists 3 labels but the checkpoint's classifier has 5 outputs "
            "(classifier.weight is [5, 32])") in line
    assert not (tmp_path / "b").exists()


def _nudged(delta: float, *, drop_last: bool = False) -> Any:
    """run_token_outputs as a graph with a fault would answer: one token of text 5 moved by `delta`, or every
    text's last token missing (a mask read one short)."""
    def run(*args: Any, **kwargs: Any) -> list[np.ndarray]:
        rows = [r.copy() for r in run_token_outputs(*args, **kwargs)]
        if drop_last:
            return [r[:-1] if len(r) > 1 else r for r in rows]
        rows[5][1, rows[5][1].argmin()] += delta  # the least likely label: 50 makes it the top one
        return rows

    return run


@pytest.mark.parametrize(("fault", "reason"), [
    (_nudged(1e-2), "1 of {tokens} tokens have a logit further than 0.0001 x max(1, |logit|) from PyTorch's"),
    (_nudged(50.0), "argmax differs from PyTorch's on 1 of {tokens} tokens (first in "),
    (_nudged(0.0, drop_last=True), "texts have another token count than PyTorch's (first "),
], ids=["a logit off", "a label flipped", "a token missing"])
def test_a_graph_that_answers_otherwise_on_one_token_is_refused(token_checkpoints: dict[Key, Path],
                                                                token_imported: dict[Key, ImportResult],
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                fault: Any, reason: str) -> None:
    from ortserve.prepare.importer import pipeline

    monkeypatch.setattr(pipeline, "run_token_outputs", fault)
    with pytest.raises(ParityRefused) as refused:
        import_checkpoint(token_checkpoints[("bert", "bio")], tmp_path / "b", max_seq_len=MAX_SEQ_LEN)
    tokens = token_imported[("bert", "bio")].parity.runs[0].tokens
    report = refused.value.report
    assert not report.passed and any(reason.format(tokens=tokens) in r for r in report.refusals), report.refusals
    assert "does not answer as PyTorch does" in str(refused.value) and not (tmp_path / "b").exists()
