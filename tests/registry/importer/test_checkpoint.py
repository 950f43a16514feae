"""Reading a checkpoint directory without torch: layouts, the task, labels, pooling, and the one-line refusals.

The directories here are written by hand (config.json and module files as transformers and sentence-transformers
write them, a placeholder weights file): reading never opens the weights, which is the point of the module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.hf_checkpoints import make_checkpoint

from ortserve.prepare.importer.checkpoint import (
    SENTENCE_TRANSFORMERS,
    TRANSFORMERS,
    CheckpointError,
    Pooling,
    read_checkpoint,
)

BERT = {"model_type": "bert", "architectures": ["BertForSequenceClassification"], "max_position_embeddings": 128,
        "id2label": {"0": "negative", "1": "positive"}}


def checkpoint(root: Path, config: dict[str, Any], *, weights: str = "model.safetensors",
               tokenizer: str = "tokenizer.json") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    (root / weights).write_bytes(b"placeholder: reading never opens the weights")
    (root / tokenizer).write_text("{}")
    return root


def sentence_transformers(root: Path, pooling: dict[str, Any], *, modules: list[str] | None = None,
                          extra: dict[str, Any] | None = None) -> Path:
    checkpoint(root, {"model_type": "bert", "architectures": ["BertModel"]})
    kinds = modules or ["Transformer", "Pooling", "Normalize"]
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize"}
    (root / "modules.json").write_text(json.dumps([
        {"idx": i, "name": str(i), "path": paths.get(kind, f"{i}_{kind}"),
         "type": f"sentence_transformers.models.{kind}"} for i, kind in enumerate(kinds)]))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    for name, data in (extra or {}).items():
        (root / name).write_text(json.dumps(data))
    return root


def test_a_sequence_classifier_is_a_classifier_with_its_labels_in_column_order(tmp_path: Path) -> None:
    config = {**BERT, "id2label": {"1": "positive", "0": "negative", "2": "neutral"}}
    found = read_checkpoint(checkpoint(tmp_path / "c", config))
    assert (found.layout, found.task, found.labels, found.multi_label) == (
        TRANSFORMERS, "classify", ("negative", "positive", "neutral"), False)
    assert found.architecture.name == "BERT" and found.class_name == "BertForSequenceClassification"
    assert found.pooling is None and found.warnings == ()


def test_multi_label_and_generic_labels(tmp_path: Path) -> None:
    config = {**BERT, "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "problem_type": "multi_label_classification"}
    found = read_checkpoint(checkpoint(tmp_path / "c", config))
    assert found.multi_label and found.labels == ("LABEL_0", "LABEL_1")
    (warning,) = found.warnings
    assert "id2label has only generic names (LABEL_0, LABEL_1); the bundle keeps them" in warning


def test_a_base_model_or_masked_lm_is_an_embedding_model_pooled_by_mean_unless_asked(tmp_path: Path) -> None:
    base = read_checkpoint(checkpoint(tmp_path / "b", {"model_type": "roberta", "architectures": ["RobertaModel"]}))
    assert (base.task, base.pooling) == ("embed", Pooling(modes=("mean",), normalize=True))
    masked = read_checkpoint(checkpoint(tmp_path / "m", {"model_type": "bert", "architectures": ["BertForMaskedLM"]}),
                             pooling="cls")
    assert masked.pooling == Pooling(modes=("cls",), normalize=True)
    as_embedding = read_checkpoint(checkpoint(tmp_path / "c", BERT), task="embed")
    assert (as_embedding.task, as_embedding.labels) == ("embed", ())


def test_other_layouts_of_weights_and_tokenizers(tmp_path: Path) -> None:
    found = read_checkpoint(checkpoint(tmp_path / "c", BERT, weights="pytorch_model.bin", tokenizer="vocab.txt"))
    assert [p.name for p in found.weights] == ["pytorch_model.bin"]
    sharded = read_checkpoint(checkpoint(tmp_path / "s", BERT, weights="model.safetensors.index.json",
                                         tokenizer="sentencepiece.bpe.model"))
    assert [p.name for p in sharded.weights] == ["model.safetensors.index.json"]


@pytest.mark.parametrize(("pooling", "modes"), [
    ({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}, ("mean",)),
    ({"word_embedding_dimension": 32, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True},
     ("cls", "mean")),
    ({"embedding_dimension": 32, "pooling_mode": "max", "include_prompt": True}, ("max",)),
    ({"embedding_dimension": 32, "pooling_mode": ["mean", "mean_sqrt_len_tokens"]}, ("mean", "mean_sqrt_len_tokens")),
], ids=["legacy mean", "legacy cls+mean", "v6 max", "v6 list"])
def test_sentence_transformers_pooling_in_both_config_forms(tmp_path: Path, pooling: dict[str, Any],
                                                            modes: tuple[str, ...]) -> None:
    found = read_checkpoint(sentence_transformers(tmp_path / "st", pooling))
    assert (found.layout, found.task, found.pooling) == (SENTENCE_TRANSFORMERS, "embed", Pooling(modes, True))
    plain = read_checkpoint(sentence_transformers(tmp_path / "plain", pooling, modules=["Transformer", "Pooling"]))
    assert plain.pooling == Pooling(modes, False)


def test_sentence_transformers_lowercasing_is_kept(tmp_path: Path) -> None:
    found = read_checkpoint(sentence_transformers(tmp_path / "st", {"pooling_mode": "mean"},
                                                  extra={"sentence_bert_config.json": {"do_lower_case": True}}))
    assert found.lowercase


REFUSALS = {
    "no model_type": (lambda p: checkpoint(p, {"architectures": ["X"]}), {}, "no model_type"),
    "a generative head": (lambda p: checkpoint(p, {"model_type": "bert", "architectures": ["BertLMHeadModel"]}), {},
                          "BertLMHeadModel (model_type bert) is a decoder language model"),
    "a decoder config": (lambda p: checkpoint(p, {"model_type": "bert", "is_decoder": True}), {},
                         "is a decoder language model"),
    "another head": (lambda p: checkpoint(p, {"model_type": "bert", "architectures": ["BertForQuestionAnswering"]}),
                     {}, "BertForQuestionAnswering is neither a sequence or token classifier nor a plain encoder; "
                         "--task embed imports its encoder alone"),
    "pooling for a classifier": (lambda p: checkpoint(p, BERT), {"pooling": "mean"},
                                 "--pooling applies to embedding models"),
    "a label named twice": (lambda p: checkpoint(p, {**BERT, "id2label": {"0": "a", "1": "a"}}), {},
                            "id2label names a label twice"),
    "not a pooling it has": (lambda p: sentence_transformers(p, {"pooling_mode": "cls"}), {"pooling": "mean"},
                             "its 1_Pooling/config.json pools with cls; --pooling mean would answer differently"),
    "weighted mean pooling": (lambda p: sentence_transformers(p, {"pooling_mode": "weightedmean"}), {},
                              "pooling mode weightedmean is not supported"),
    "a default prompt": (lambda p: sentence_transformers(p, {"pooling_mode": "mean"}, extra={
        "config_sentence_transformers.json": {"default_prompt_name": "query", "prompts": {"query": "query: "}}}), {},
        "puts the default prompt 'query: ' before every text"),
    "a module path outside": (lambda p: _escaping(p), {}, "module path '../elsewhere' leaves the directory"),
}


def _escaping(root: Path) -> Path:
    sentence_transformers(root, {"pooling_mode": "mean"})
    modules = json.loads((root / "modules.json").read_text())
    modules[0]["path"] = "../elsewhere"
    (root / "modules.json").write_text(json.dumps(modules))
    return root


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_refusals_are_one_line_naming_the_problem(tmp_path: Path, case: str) -> None:
    make, options, expected = REFUSALS[case]
    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(make(tmp_path / "ckpt"), **options)
    message = str(refused.value)
    assert expected in message and "\n" not in message


def test_pairs_are_read_from_the_cross_encoder_layout_and_the_flags(tmp_path: Path) -> None:
    """A CrossEncoder directory is a classifier of pairs with its activation; --task rerank and --pairs ask for one;
    an activation a SCORE cannot reproduce, or --pairs on an embedding, is refused."""
    one = make_checkpoint(tmp_path / "one", "bert", labels=("score",))
    plain = read_checkpoint(one)
    assert not plain.pairs and plain.score_activation is None
    for asked in (read_checkpoint(one, task="rerank"), read_checkpoint(one, pairs=True)):
        assert asked.pairs and asked.task == "classify" and asked.score_activation == "sigmoid"
    st_config = {"model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.linear.Identity"}
    (one / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    (one / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "",
                                                   "type": "sentence_transformers.base.modules.Transformer"}]))
    found = read_checkpoint(one)
    assert found.pairs and found.cross_encoder and found.score_activation == "identity"
    assert not read_checkpoint(one, pairs=False).pairs
    st_config["activation_fn"] = "torch.nn.modules.activation.Tanh"
    (one / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    with pytest.raises(CheckpointError, match=r"activation_fn torch\.nn\.modules\.activation\.Tanh"):
        read_checkpoint(one)
    with pytest.raises(CheckpointError, match="pairs applies to classifiers"):
        read_checkpoint(one, task="embed", pairs=True)
    base = make_checkpoint(tmp_path / "base", "bert", task="embed")
    with pytest.raises(CheckpointError, match="has no sequence-classification head; a classifier of pairs"):
        read_checkpoint(base, pairs=True)
    three = make_checkpoint(tmp_path / "three", "bert", labels=("a", "b", "c"))
    nli = read_checkpoint(three, pairs=True)
    assert nli.pairs and nli.score_activation is None


NER = {"model_type": "bert", "architectures": ["BertForTokenClassification"], "max_position_embeddings": 128,
       "id2label": {"0": "O", "2": "I-PER", "1": "B-PER"}}


def test_a_token_classifier_is_read_as_one_with_its_labels_in_column_order(tmp_path: Path) -> None:
    found = read_checkpoint(checkpoint(tmp_path / "ner", NER))
    assert (found.task, found.labels, found.per_token, found.classifier, found.labelled) == (
        "tokens", ("O", "B-PER", "I-PER"), True, False, True)
    assert found.pooling is None and not found.pairs and not found.multi_label
    assert read_checkpoint(checkpoint(tmp_path / "asked", NER), task="tokens").task == "tokens"
    unnamed = {k: v for k, v in NER.items() if k != "architectures"}  # a config that names no class: ask for it
    assert read_checkpoint(checkpoint(tmp_path / "unnamed", unnamed), task="tokens").labels == ("O", "B-PER", "I-PER")
    with pytest.raises(CheckpointError, match="bert is neither a sequence or token classifier nor a plain encoder"):
        read_checkpoint(checkpoint(tmp_path / "unnamed2", unnamed))  # unasked, it is no kind the import can tell
    encoder = read_checkpoint(checkpoint(tmp_path / "encoder", NER), task="embed")  # its encoder alone
    assert (encoder.task, encoder.labels) == ("embed", ())


TOKEN_REFUSALS = {
    "--pairs": ({"pairs": True}, NER, "BertForTokenClassification is a token classifier, which reads one text; a "
                                      "classifier of pairs (a cross-encoder: --pairs, --task rerank) needs a "
                                      "sequence-classification head"),
    "--task rerank": ({"task": "rerank"}, NER, "is a token classifier, which reads one text"),
    "--task tokens --pairs": ({"task": "tokens", "pairs": True}, BERT,
                              "--pairs applies to sequence classifiers (a cross-encoder); a token classifier "
                              "(--task tokens) reads one text"),
    "--task classify": ({"task": "classify"}, NER, "BertForTokenClassification is a token classifier (a label per "
                                                   "token), not a sequence classifier; leave --task out"),
    "--pooling": ({"pooling": "mean"}, NER, "--pooling applies to embedding models; a token classifier answers per "
                                            "token"),
    "--task tokens on a sequence classifier": ({"task": "tokens"}, BERT,
                                               "BertForSequenceClassification has no token-classification head, so "
                                               "it cannot be imported as a token classifier"),
    "--task tokens on a base model": ({"task": "tokens"}, {**BERT, "architectures": ["BertModel"]},
                                      "BertModel has no token-classification head"),
    "a label named twice": ({}, {**NER, "id2label": {"0": "O", "1": "O"}}, "id2label names a label twice"),
    "id2label with a gap": ({}, {**NER, "id2label": {"0": "O", "2": "B-PER"}},
                            "id2label keys must be the column indices 0..1, got [0, 2]"),
}


@pytest.mark.parametrize("case", TOKEN_REFUSALS, ids=list(TOKEN_REFUSALS))
def test_what_makes_no_sense_for_a_token_classifier_is_refused(tmp_path: Path, case: str) -> None:
    options, config, expected = TOKEN_REFUSALS[case]
    with pytest.raises(CheckpointError) as refused:
        read_checkpoint(checkpoint(tmp_path / "ckpt", config), **options)
    message = str(refused.value)
    assert expected in message and "\n" not in message


def test_a_cross_encoder_layout_around_a_token_classifier_is_refused(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ce", NER)
    (root / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "CrossEncoder"}))
    with pytest.raises(CheckpointError, match="is a token classifier, which reads one text"):
        read_checkpoint(root)
