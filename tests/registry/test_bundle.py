"""Bundle validation: the tiny bundle passes; each way a bundle can be broken gets a one-line
BundleError naming the file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto
from support.tiny_bundle import build_tiny_bundle, build_tiny_embedding_bundle, build_tiny_token_bundle, tiny_model

from ortserve.bundle.manifest import BundleError, BundleManifest, load_manifest, pad_id, parse_manifest
from ortserve.bundle.validate import validate_bundle


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return build_tiny_bundle(tmp_path / "bundle")


def test_valid_bundle(bundle: Path) -> None:
    manifest = validate_bundle(bundle)
    assert manifest == BundleManifest(format="onnx-text-classifier", labels=("negative", "positive"),
                                      max_seq_len=32, notes="tiny test bundle")
    assert load_manifest(bundle) == manifest


def test_token_type_ids_and_three_labels_are_fine(tmp_path: Path) -> None:
    b = build_tiny_bundle(tmp_path / "b", labels=("a", "b", "c"), token_type_ids=True)
    assert validate_bundle(b).labels == ("a", "b", "c")


def _write_manifest(b: Path, **changes: object) -> None:
    data = json.loads((b / "manifest.json").read_text())
    data.update(changes)
    (b / "manifest.json").write_text(json.dumps(data))


def _save(model: onnx.ModelProto) -> Callable[[Path], None]:
    return lambda b: onnx.save(model, str(b / "model.onnx"))


BREAKAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing model": (lambda b: (b / "model.onnx").unlink(), r"model\.onnx: missing"),
    "missing tokenizer": (lambda b: (b / "tokenizer.json").unlink(), r"tokenizer\.json: missing"),
    "missing manifest": (lambda b: (b / "manifest.json").unlink(), r"manifest\.json: missing"),
    "not onnx": (lambda b: (b / "model.onnx").write_bytes(b"\x00garbage\xff" * 50), r"model\.onnx: not an ONNX"),
    "text not onnx": (lambda b: (b / "model.onnx").write_text("hello"), r"model\.onnx: not an ONNX"),
    "int32 inputs": (_save(tiny_model(input_type=TensorProto.INT32)), r"input 'input_ids' must be int64"),
    "float16 logits": (_save(tiny_model(output_type=TensorProto.FLOAT16)), r"output 'logits' must be float32"),
    "wrong output name": (_save(tiny_model(output_name="scores")), r"missing output 'logits'"),
    "label count": (_save(tiny_model(num_labels=3)), r"3 classes but manifest\.json lists 2"),
    "broken tokenizer": (lambda b: (b / "tokenizer.json").write_text('{"model": {"type": "Nope"}}'),
                         r"tokenizer\.json: not a loadable"),
    "tokenizer not json": (lambda b: (b / "tokenizer.json").write_text("{{{"), r"tokenizer\.json: not a loadable"),
    "manifest not json": (lambda b: (b / "manifest.json").write_text("nope"), r"manifest\.json: not valid JSON"),
    "wrong format": (lambda b: _write_manifest(b, format="pytorch"), r"format must be"),
    "empty labels": (lambda b: _write_manifest(b, labels=[]), r"labels must be a non-empty list"),
    "duplicate labels": (lambda b: _write_manifest(b, labels=["a", "a"]), r"labels must be unique"),
    "seq too small": (lambda b: _write_manifest(b, max_seq_len=4), r"max_seq_len must be in 8\.\.8192"),
    "seq not int": (lambda b: _write_manifest(b, max_seq_len="128"), r"max_seq_len must be an integer"),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_broken_bundles(bundle: Path, name: str) -> None:
    breakage, pattern = BREAKAGES[name]
    breakage(bundle)
    with pytest.raises(BundleError, match=pattern) as info:
        validate_bundle(bundle)
    assert "\n" not in str(info.value)


def test_missing_input(bundle: Path) -> None:
    model = tiny_model()
    del model.graph.input[1]  # attention_mask gone (the graph is invalid, which the check must not need)
    onnx.save(model, str(bundle / "model.onnx"))
    with pytest.raises(BundleError, match="missing input 'attention_mask'"):
        validate_bundle(bundle)


def test_rank_and_unexpected_inputs(bundle: Path) -> None:
    model = tiny_model()
    model.graph.input[0].type.tensor_type.shape.dim.pop()
    onnx.save(model, str(bundle / "model.onnx"))
    with pytest.raises(BundleError, match="must have rank 2, got rank 1"):
        validate_bundle(bundle)
    model = tiny_model()
    model.graph.input.append(onnx.helper.make_tensor_value_info("pixel_values", TensorProto.INT64, [1, 2]))
    onnx.save(model, str(bundle / "model.onnx"))
    with pytest.raises(BundleError, match="unexpected inputs"):
        validate_bundle(bundle)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not a directory"):
        validate_bundle(tmp_path / "nope")
    shutil.copy(__file__, tmp_path / "file")
    with pytest.raises(BundleError, match="not a directory"):
        validate_bundle(tmp_path / "file")


# ---- embedding bundles, and a graph that does not fit the declared kind ------------------------------------


def test_valid_embedding_bundle(tmp_path: Path) -> None:
    manifest = validate_bundle(build_tiny_embedding_bundle(tmp_path / "e", dim=6))
    assert manifest == BundleManifest(format="onnx-text-embedding", labels=(), max_seq_len=32,
                                      notes="tiny embedding test bundle", dim=6)
    assert (manifest.kind, manifest.output_name, manifest.columns) == ("embedding", "embedding", 6)
    assert manifest.to_dict() == {"format": "onnx-text-embedding", "dim": 6, "max_seq_len": 32,
                                  "notes": "tiny embedding test bundle"}
    assert parse_manifest(manifest.to_dict()) == manifest


def test_classifier_manifest_describes_its_output(bundle: Path) -> None:
    manifest = validate_bundle(bundle)
    assert (manifest.kind, manifest.output_name, manifest.columns, manifest.dim) == ("classifier", "logits", 2, None)


def test_embedding_manifest_over_a_classifier_graph_is_refused(bundle: Path) -> None:
    _write_manifest(bundle, format="onnx-text-embedding", dim=2, labels=None)
    with pytest.raises(BundleError) as info:
        validate_bundle(bundle)
    message = str(info.value)
    assert "missing output 'embedding' (outputs: ['logits'])" in message
    assert "declares format 'onnx-text-embedding'" in message and "the graph is a classifier" in message
    assert "declare format 'onnx-text-classifier'" in message and "\n" not in message


def test_classifier_manifest_over_an_embedding_graph_is_refused(tmp_path: Path) -> None:
    b = build_tiny_embedding_bundle(tmp_path / "e", dim=2)
    _write_manifest(b, format="onnx-text-classifier", labels=["a", "b"], dim=None)
    with pytest.raises(BundleError, match=r"missing output 'logits' \(outputs: \['embedding'\]\).*the graph is an "
                                          r"embedding \(output 'embedding'\); declare format 'onnx-text-embedding'"):
        validate_bundle(b)


# ---- token classifier bundles: logits [batch, seq, labels] ---------------------------------------------------


def test_valid_token_classifier_bundle(tmp_path: Path) -> None:
    manifest = validate_bundle(build_tiny_token_bundle(tmp_path / "t", labels=("O", "B-PER", "I-PER", "B-LOC")))
    assert manifest == BundleManifest(format="onnx-token-classifier", labels=("O", "B-PER", "I-PER", "B-LOC"),
                                      max_seq_len=32, notes="tiny token test bundle")
    assert (manifest.kind, manifest.output_name, manifest.columns, manifest.per_token) == (
        "token-classifier", "logits", 4, True)
    assert manifest.to_dict() == {"format": "onnx-token-classifier", "labels": ["O", "B-PER", "I-PER", "B-LOC"],
                                  "max_seq_len": 32, "notes": "tiny token test bundle"}
    assert parse_manifest(manifest.to_dict()) == manifest
    assert not validate_bundle(build_tiny_bundle(tmp_path / "c")).per_token


def test_a_classifier_graph_under_the_token_format_is_refused_and_the_reverse(tmp_path: Path) -> None:
    """Both kinds output `logits`: the rank tells them apart, and the message says which the graph is."""
    per_text = build_tiny_token_bundle(tmp_path / "t", per_token=False)
    with pytest.raises(BundleError) as info:
        validate_bundle(per_text)
    message = str(info.value)
    assert "output 'logits' must have rank 3, got rank 2" in message and "\n" not in message
    assert "the graph is a classifier's; declare format 'onnx-text-classifier'" in message
    per_token = build_tiny_token_bundle(tmp_path / "c")
    _write_manifest(per_token, format="onnx-text-classifier")
    with pytest.raises(BundleError, match=r"output 'logits' must have rank 2, got rank 3: manifest\.json declares "
                                          r"format 'onnx-text-classifier' \(classifier\) but the graph is a "
                                          r"token-classifier's; declare format 'onnx-token-classifier'"):
        validate_bundle(per_token)


@pytest.mark.parametrize(("extra", "message"), [
    ({"labels": None}, "labels must be a non-empty list of strings"),
    ({"labels": ["O", "O"]}, "labels must be unique"),
    ({"dim": 3}, "dim applies to 'onnx-text-embedding' and 'onnx-sparse-embedding' bundles"),
    ({"multi_label": True}, "multi_label applies to 'onnx-text-classifier' bundles"),
    ({"pairs": True}, "pairs applies to 'onnx-text-classifier' bundles"),
])
def test_bad_token_classifier_manifests(extra: dict, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        parse_manifest({"format": "onnx-token-classifier", "labels": ["O", "B-PER"], "max_seq_len": 32, **extra})


def test_token_labels_must_match_the_graphs_width(tmp_path: Path) -> None:
    b = build_tiny_token_bundle(tmp_path / "t", labels=("O", "B-PER", "I-PER"))
    _write_manifest(b, labels=["O", "B-PER"])
    with pytest.raises(BundleError, match=r"output 'logits' has 3 classes but manifest\.json lists 2 labels"):
        validate_bundle(b)


EMBEDDING_BREAKAGES: dict[str, tuple[dict[str, object], str]] = {
    "no dim": ({"dim": None}, r"dim \(the embedding width\) must be an integer in 1\.\.65536, got None"),
    "dim zero": ({"dim": 0}, r"must be an integer in 1\.\.65536, got 0"),
    "dim text": ({"dim": "384"}, r"got '384'"),
    "dim bool": ({"dim": True}, r"got True"),
    "labels on an embedding": ({"labels": ["a"]},
                               r"labels apply to 'onnx-text-classifier' and 'onnx-token-classifier' bundles"),
    "dim on a classifier": ({"format": "onnx-text-classifier", "labels": ["a", "b", "c", "d"]},
                            r"dim applies to 'onnx-text-embedding' and 'onnx-sparse-embedding' bundles"),
    "dim disagrees with the graph": ({"dim": 5}, r"output 'embedding' is 4 wide but manifest\.json declares dim 5"),
    "other format": ({"format": "onnx-text-regression"}, r"format must be one of 'onnx-text-classifier', "
                     r"'onnx-text-embedding', 'onnx-token-classifier', 'onnx-sparse-embedding', got "
                     r"'onnx-text-regression'"),
}


@pytest.mark.parametrize("name", sorted(EMBEDDING_BREAKAGES))
def test_broken_embedding_bundles(tmp_path: Path, name: str) -> None:
    b = build_tiny_embedding_bundle(tmp_path / "e", dim=4)
    changes, pattern = EMBEDDING_BREAKAGES[name]
    _write_manifest(b, **changes)
    with pytest.raises(BundleError, match=pattern) as info:
        validate_bundle(b)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("spec", "expected"), [
    ({"padding": {"pad_id": 7, "pad_token": "x"}, "model": {"vocab": {"[PAD]": 0}}}, 7),  # the file says so
    ({"padding": None, "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "[PAD]": 3}}}, 3),  # BERT
    ({"added_tokens": [{"id": 1, "content": "<pad>"}], "model": {"type": "BPE", "vocab": {"<s>": 0}}}, 1),  # RoBERTa
    ({"model": {"type": "Unigram", "vocab": [["<s>", 0.0], ["<pad>", 0.0], ["▁a", -1.0]]}}, 1),  # SentencePiece
    ({"model": {"type": "WordLevel", "vocab": {"a": 0}}}, 0),  # none named: 0, masked anyway
])
def test_one_pad_id_rule_for_every_tokenizer(spec: dict, expected: int) -> None:
    assert pad_id(spec) == expected


CLASSIFIER = {"format": "onnx-text-classifier", "labels": ["a", "b"], "max_seq_len": 32}
IMPORTED = {"from": "transformers", "architecture": "BertForSequenceClassification", "tools": {"torch": "2.13.0"},
            "parity": {"passed": True}}


def test_multi_label_and_imported_parse_and_round_trip() -> None:
    manifest = parse_manifest({**CLASSIFIER, "multi_label": True, "imported": IMPORTED})
    assert manifest.multi_label and manifest.imported is not None
    assert manifest.imported.to_dict() == {**IMPORTED, "from": "transformers"}
    assert parse_manifest(manifest.to_dict()) == manifest
    assert manifest.to_dict()["multi_label"] is True and manifest.provenance()["imported"] == IMPORTED
    plain = parse_manifest(CLASSIFIER)
    assert "multi_label" not in plain.to_dict() and "imported" not in plain.provenance()


@pytest.mark.parametrize(("extra", "message"), [
    ({"multi_label": "yes"}, "multi_label must be true or false"),
    ({"imported": ["x"]}, "imported must be an object"),
    ({"imported": {**IMPORTED, "from": ""}}, "imported.from must name what read the checkpoint"),
    ({"imported": {**IMPORTED, "architecture": 3}}, "imported.architecture must be the checkpoint's class name"),
    ({"imported": {**IMPORTED, "tools": {"torch": 2}}}, "imported.tools must be an object of package -> version"),
])
def test_bad_multi_label_or_imported_is_a_bundle_error(extra: dict, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        parse_manifest({**CLASSIFIER, **extra})


def test_multi_label_is_for_classifiers() -> None:
    with pytest.raises(BundleError, match="multi_label applies to 'onnx-text-classifier' bundles"):
        parse_manifest({"format": "onnx-text-embedding", "dim": 4, "max_seq_len": 32, "multi_label": True})


EMBEDDING = {"format": "onnx-text-embedding", "dim": 384, "max_seq_len": 32}


@pytest.mark.parametrize(("dims", "widths"), [
    ([256, 128, 64], (384, 256, 128, 64)),  # the model's own width implied
    ([384, 256, 128, 64], (384, 256, 128, 64)),  # or written first
    ([1], (384, 1)),
])
def test_matryoshka_dims_parse_and_round_trip(dims: list[int], widths: tuple[int, ...]) -> None:
    manifest = parse_manifest({**EMBEDDING, "matryoshka_dims": dims})
    assert manifest.matryoshka_dims == tuple(dims) and manifest.widths == widths
    assert manifest.to_dict()["matryoshka_dims"] == dims and parse_manifest(manifest.to_dict()) == manifest
    plain = parse_manifest(EMBEDDING)
    assert plain.widths == (384,) and "matryoshka_dims" not in plain.to_dict()


@pytest.mark.parametrize(("dims", "message"), [
    ([], r"must be a non-empty list of widths \(e\.g\. \[384, 192\]\), got \[\]"),
    (256, r"must be a non-empty list of widths .*got 256"),
    ([512, 256], r"widths must be integers in 1\.\.384 \(the embedding's dim\), got 512 in \[512, 256\]"),
    ([256, 0], r"got 0 in"),
    ([256, "128"], r"got '128' in"),
    ([256, True], r"got True in"),
    ([64, 128], r"widths must be descending without repeats \(widest first\), got \[64, 128\]"),
    ([128, 128], r"descending without repeats"),
])
def test_bad_matryoshka_dims_are_bundle_errors(dims: object, message: str) -> None:
    with pytest.raises(BundleError, match=message) as info:
        parse_manifest({**EMBEDDING, "matryoshka_dims": dims})
    assert str(info.value).startswith("manifest.json: matryoshka_dims ")


@pytest.mark.parametrize("manifest", [CLASSIFIER, {"format": "onnx-token-classifier", "labels": ["O"],
                                                   "max_seq_len": 32}])
def test_matryoshka_dims_are_for_embedding_bundles(manifest: dict) -> None:
    with pytest.raises(BundleError, match=r"matryoshka_dims applies to 'onnx-text-embedding' bundles \(the widths an "
                                          r"embedding was trained to be truncated to\), not to 'onnx-t"):
        parse_manifest({**manifest, "matryoshka_dims": [1]})


def test_an_embedding_bundle_with_matryoshka_dims_validates(tmp_path: Path) -> None:
    b = build_tiny_embedding_bundle(tmp_path / "e", dim=4)
    _write_manifest(b, matryoshka_dims=[2, 1])
    assert validate_bundle(b).widths == (4, 2, 1)
    _write_manifest(b, matryoshka_dims=[8, 2])
    with pytest.raises(BundleError, match=r"got 8 in \[8, 2\]"):
        validate_bundle(b)
