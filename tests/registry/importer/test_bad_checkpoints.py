"""A checkpoint `registry import` cannot take gets one line on stderr naming the problem, exit 2, and nothing written
(not even a temp dir beside --out); a graph that does not answer as PyTorch does gets the parity report, exit 1, and
nothing written. The refusals that need no weights run the CLI in a subprocess; those that load the weights call the
same entry point in-process, to spare a torch import per case."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.hf_checkpoints import make_checkpoint, make_sentence_transformer, make_tokenizer
from support.importing import run_registry

from ortserve.registry.cli import main as registry_main

Make = Callable[[Path], Path]


def _file(root: Path) -> Path:
    (root / "model.safetensors").write_bytes(b"not a directory")
    return root / "model.safetensors"


def _empty(root: Path) -> Path:
    (root / "ckpt").mkdir()
    return root / "ckpt"


def _without(*names: str) -> Make:
    def make(root: Path) -> Path:
        checkpoint = make_checkpoint(root / "ckpt", "bert")
        for name in names:
            (checkpoint / name).unlink()
        return checkpoint

    return make


def _decoder(root: Path) -> Path:
    import transformers

    out = root / "ckpt"
    config = transformers.GPT2Config(vocab_size=600, n_positions=64, n_embd=16, n_layer=1, n_head=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(out)
    make_tokenizer("roberta").save_pretrained(out)
    return out


def _albert(root: Path) -> Path:
    import transformers

    out = root / "ckpt"
    config = transformers.AlbertConfig(vocab_size=600, embedding_size=16, hidden_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64)
    transformers.AlbertForSequenceClassification(config).save_pretrained(out)
    make_tokenizer("bert").save_pretrained(out)
    return out


def _dense(root: Path) -> Path:
    out = make_sentence_transformer(root / "ckpt", "bert")
    modules = json.loads((out / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (out / "modules.json").write_text(json.dumps(modules))
    return out


def _edit_config(**changes: object) -> Make:
    def make(root: Path) -> Path:
        checkpoint = make_checkpoint(root / "ckpt", "bert")
        config = json.loads((checkpoint / "config.json").read_text())
        config.update(changes)
        (checkpoint / "config.json").write_text(json.dumps(config))
        return checkpoint

    return make


def _small_embedding_table(root: Path) -> Path:
    return make_checkpoint(root / "ckpt", "bert", config_overrides={"vocab_size": 100})


def _without_head(root: Path) -> Path:
    from safetensors.torch import load_file, save_file

    checkpoint = make_checkpoint(root / "ckpt", "bert")
    weights = {k: v for k, v in load_file(checkpoint / "model.safetensors").items() if not k.startswith("classifier")}
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    return checkpoint


NO_WEIGHTS_NEEDED = {
    "not a directory": (_file, [], "not a directory"),
    "no config.json": (_empty, [], "no config.json"),
    "no weights": (_without("model.safetensors"), [], "no weights (model.safetensors or pytorch_model.bin)"),
    "no tokenizer": (_without("tokenizer.json", "tokenizer_config.json"), [], "no tokenizer"),
    "a decoder language model": (_decoder, [], "GPT2LMHeadModel (model_type gpt2) is a decoder language model; "
                                                "`registry import` takes encoders: BERT, DistilBERT, RoBERTa, "
                                                "XLM-RoBERTa, ELECTRA, MPNet, DeBERTa-v2, ModernBERT; and decoders, "
                                                "as embedding models: Qwen2, Qwen3, Llama, Mistral"),
    "an architecture it does not take": (_albert, [], "architecture AlbertForSequenceClassification (model_type "
                                                      "albert) is not supported; supported: BERT, DistilBERT"),
    "a module it cannot put in a graph": (_dense, [], "the module(s) Dense cannot be imported"),
    "max_seq_len below the format's": (_without(), ["--max-seq-len", "4"],
                              "--max-seq-len: must be 8..8192, got 4"),
    "id2label keys not columns": (_edit_config(id2label={"0": "a", "2": "b"}), [],
                                  "id2label keys must be the column indices 0..1, got [0, 2]"),
    "matryoshka dims of a classifier": (_without(), ["--matryoshka-dims", "16,8"],
                                        "matryoshka dims apply to a dense embedding model (the widths it was trained "
                                        "to be truncated to); BertForSequenceClassification is imported as a "
                                        "classifier"),
    "matryoshka dims not numbers": (_without(), ["--matryoshka-dims", "16,eight"],
                                    "--matryoshka-dims: expected widths separated by commas, e.g. 256,128,64; got "
                                    "'16,eight'"),
}
WEIGHTS_NEEDED = {
    "ids past the embedding table": (_small_embedding_table, [], "the tokenizer has 600 tokens but the embedding "
                                                                 "table has 100 rows"),
    "id2label wider than the classifier": (_edit_config(id2label={"0": "a", "1": "b", "2": "c"},
                                                        label2id={"a": 0, "b": 1, "c": 2}), [],
                                           "config.json's id2label lists 3 labels but the checkpoint's classifier "
                                           "has 2 outputs (classifier.weight is [2, 32])"),
    "matryoshka dims past the width": (lambda root: make_sentence_transformer(root / "ckpt", "bert"),
                                       ["--matryoshka-dims", "64,16"],
                                       "matryoshka dims widths must be integers in 1..32 (the embedding's dim), got "
                                       "64 in [64, 16]"),
    "matryoshka dims ascending": (lambda root: make_sentence_transformer(root / "ckpt", "bert"),
                                  ["--matryoshka-dims", "8,16"],
                                  "matryoshka dims widths must be descending without repeats (widest first), got "
                                  "[8, 16]"),
    "weights that do not match the config": (_edit_config(hidden_size=64), [],
                                             "the weights do not match config.json: bert.embeddings"),
    "a classifier without its head's weights": (_without_head, [], "classifier.bias is missing (and 1 more); "
                                                                   "transformers would start it at random"),
    "max_seq_len past the positions": (_without(), ["--max-seq-len", "512"], "--max-seq-len 512 is past the 128 "
                                                                             "positions BertForSequenceClassification"),
}


def _nothing_written(out: Path) -> None:
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


@pytest.mark.parametrize("case", NO_WEIGHTS_NEEDED, ids=list(NO_WEIGHTS_NEEDED))
def test_refused_before_the_weights_load(case: str, tmp_path: Path, torch_one_thread: None) -> None:
    make, extra, expected = NO_WEIGHTS_NEEDED[case]
    source, out = make(tmp_path), tmp_path / "bundle"
    result = run_registry("import", "--from", str(source), "--out", str(out), *extra, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("registry: error: ") and expected in line, line
    _nothing_written(out)


@pytest.mark.parametrize("case", WEIGHTS_NEEDED, ids=list(WEIGHTS_NEEDED))
def test_refused_when_the_weights_load(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       torch_one_thread: None) -> None:
    make, extra, expected = WEIGHTS_NEEDED[case]
    source, out = make(tmp_path), tmp_path / "bundle"
    code = registry_main(["import", "--from", str(source), "--out", str(out), *extra])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    (line,) = [line for line in captured.err.splitlines() if line]
    assert line.startswith("registry: error: ") and expected in line, line
    _nothing_written(out)


def test_a_base_model_is_no_classifier(checkpoints: dict[tuple[str, str], Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = registry_main(["import", "--from", str(checkpoints[("roberta", "embed")]), "--out", str(tmp_path / "b"),
                          "--task", "classify"])
    assert code == 2
    assert "RobertaModel has no sequence-classification head" in capsys.readouterr().err


def test_an_occupied_destination_is_refused(checkpoints: dict[tuple[str, str], Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    code = registry_main(["import", "--from", str(checkpoints[("bert", "embed")]), "--out", str(tmp_path / "taken")])
    assert code == 2 and "taken: not empty" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


def test_a_model_whose_answers_are_not_finite_fails_the_parity_gate(checkpoints: dict[tuple[str, str], Path],
                                                                    tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    source = tmp_path / "ckpt"
    shutil.copytree(checkpoints[("bert", "classify")], source)
    weights = load_file(source / "model.safetensors")
    weights["classifier.bias"][0] = float("nan")
    save_file(weights, source / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "bundle"
    result = run_registry("import", "--from", str(source), "--out", str(out), "--max-seq-len", "16", cwd=tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("registry: error: ") and "does not answer as PyTorch does" in line
    assert "texts got non-finite outputs" in line and "nothing written" in line
    assert "parity gate:" in result.stdout and "verdict: refused" in result.stdout  # the report, printed
    _nothing_written(out)
    as_json = run_registry("import", "--from", str(source), "--out", str(out), "--max-seq-len", "16", "--json",
                           cwd=tmp_path)
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["parity"]["passed"] is False and report["parity"]["refusals"]
    _nothing_written(out)
