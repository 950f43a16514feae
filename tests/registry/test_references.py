"""Reference answers: which texts a bundle keeps (a pure choice over plain values), the file and its manifest entry,
and that every bundle writer of the project writes them."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from ortserve_devtools.bert_bundle import build_tiny_bundle, build_tiny_embedding_bundle

from ortserve.bundle.manifest import REFERENCES_FILE, BundleError, References, load_manifest
from ortserve.bundle.references import ReferenceSet, manifest_entry, read_references, token_counts
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare.accuracy import builtin_eval_set, make_batches, margins, open_session, run_outputs
from ortserve.prepare.reference_choice import (
    COUNT,
    attach,
    build,
    choose,
    decisive_rows,
    decisive_token_texts,
    script_of,
)

# -- choosing (plain values) ----------------------------------------------------------------------------


def _corpus(n: int = 200) -> tuple[list[str], list[int], np.ndarray]:
    """n texts: lengths 3..n+2 tokens, two in Cyrillic and one in CJK, logits with known margins."""
    texts = [f"text number {i}" for i in range(n)]
    texts[50], texts[51], texts[52] = "Привет мир", "Доброе утро", "你好世界"
    counts = [3 + i for i in range(n)]
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, (n, 2)).astype(np.float32)
    return texts, counts, logits


def test_choose_keeps_each_kind_of_text() -> None:
    texts, counts, logits = _corpus()
    picked = choose(texts, counts, logits, max_seq_len=150, classifier=True)
    rows = set(picked.rows)
    assert len(picked.rows) == COUNT and list(picked.rows) == sorted(rows)
    assert {0, 1, 2} <= rows  # the 3 shortest
    assert {199, 198, 197, 196} <= rows  # the 4 longest, all past max_seq_len (tokens 199..202)
    assert {50, 52} <= rows  # one per script: the first Cyrillic text and the CJK one
    assert script_of(texts[50]) == "CYRILLIC" and script_of(texts[52]) == "CJK" and script_of("plain") == ""
    decisive = decisive_rows(logits)
    lead = margins(logits)
    nearest = sorted(np.flatnonzero(decisive), key=lambda i: (lead[i], i))[:10]
    assert set(nearest) <= rows and lead[nearest[0]] >= 0.1  # the decisive texts nearest the margin
    assert picked.decisive == tuple(bool(decisive[i]) for i in picked.rows)
    top = logits.argmax(axis=1)
    assert {int(top[i]) for i in picked.rows if decisive[i]} == {0, 1}  # both labels represented


def test_choose_is_deterministic_and_fits_small_sets() -> None:
    texts, counts, logits = _corpus()
    assert choose(texts, counts, logits, max_seq_len=150, classifier=True) == choose(
        texts, counts, logits, max_seq_len=150, classifier=True)
    small = choose(texts[:10], counts[:10], logits[:10], max_seq_len=8, classifier=True)
    assert small.rows == tuple(range(10))
    embedding = choose(texts, counts, logits, max_seq_len=150, classifier=False)
    assert len(embedding.rows) == COUNT and not any(embedding.decisive)
    with pytest.raises(ValueError, match="do not line up"):
        choose(texts, counts[:-1], logits, max_seq_len=150, classifier=True)


def test_a_candidate_that_disagrees_or_hesitates_makes_a_text_not_decisive() -> None:
    source = np.array([[3.0, 0.0], [3.0, 0.0], [3.0, 0.0], [0.05, 0.0]], np.float32)
    candidate = np.array([[2.9, 0.0], [0.0, 3.0], [0.1, 0.0], [3.0, 0.0]], np.float32)
    assert decisive_rows(source).tolist() == [True, True, True, False]
    # Text 1 flipped, text 2 is a near-tie for the candidate, text 3 a near-tie for the source.
    assert decisive_rows(source, [candidate]).tolist() == [True, False, False, False]


# -- the file ---------------------------------------------------------------------------------------------


def _written(tmp_path: Path, refs: ReferenceSet) -> tuple[Path, References]:
    data = refs.encode()
    (tmp_path / REFERENCES_FILE).write_bytes(data)
    entry = manifest_entry(data, refs, "hand-made")
    return tmp_path, References(**entry)


def test_the_file_round_trips_float32_exactly(tmp_path: Path) -> None:
    values = np.array([[0.1, -1e-8], [3.4028235e38, 1 / 3]], np.float32)
    refs = ReferenceSet(texts=("a", "ünïcode ✓"), outputs=values, decisive=(True, False))
    root, entry = _written(tmp_path, refs)
    assert entry.sha256 == hashlib.sha256(refs.encode()).hexdigest() and entry.texts == 2
    back = read_references(root, entry, 2)
    assert back.texts == refs.texts and back.decisive == refs.decisive
    assert back.outputs.dtype == np.float32 and np.array_equal(back.outputs, values)
    assert refs.encode() == back.encode()  # same values, same bytes


@pytest.mark.parametrize(("change", "pattern"), [
    ("missing", "missing"),
    ("sha", "sha256 .* differs from the manifest's"),
    ("columns", "output must be 3 numbers"),
    ("count", "2 texts, the manifest says 3"),
    ("json", "line 1: not JSON"),
    ("nan", "outputs must be finite"),
])
def test_unusable_files_are_named(tmp_path: Path, change: str, pattern: str) -> None:
    refs = ReferenceSet(texts=("a", "b"), outputs=np.zeros((2, 2), np.float32), decisive=(True, True))
    root, entry = _written(tmp_path, refs)
    columns = 3 if change == "columns" else 2
    if change == "missing":
        (root / REFERENCES_FILE).unlink()
    elif change == "sha":
        (root / REFERENCES_FILE).write_bytes(refs.encode().replace(b'"a"', b'"c"'))
    elif change == "count":
        entry = References(entry.file, entry.sha256, 3, entry.outputs_from)
    elif change in ("json", "nan"):
        data = b"not json\n" if change == "json" else b'{"text":"a","output":[NaN,0],"decisive":true}\n'
        (root / REFERENCES_FILE).write_bytes(data)
        entry = References(entry.file, hashlib.sha256(data).hexdigest(), 1, entry.outputs_from)
    with pytest.raises(BundleError, match=pattern):
        read_references(root, entry, columns)


# -- the writers ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("refs") / "tiny"
    build_tiny_bundle(dest, seed=3)
    return dest


def test_the_builders_write_their_own_fp32_answers(tiny: Path, tmp_path: Path) -> None:
    manifest = validate_bundle(tiny)
    assert manifest.references is not None and manifest.references.texts == COUNT
    assert manifest.references.outputs_from.startswith("this bundle's model.onnx (sha256 ")
    refs = read_references(tiny, manifest.references, 2)
    # The outputs are what the model answers, run here again on the same texts.
    batches = make_batches(tiny / "tokenizer.json", manifest.max_seq_len, refs.texts, 16)
    again = run_outputs(open_session(tiny / "model.onnx", 1), batches, len(refs.texts))
    np.testing.assert_allclose(again, refs.outputs, rtol=0, atol=1e-5)
    assert set(refs.texts) <= set(builtin_eval_set().texts)
    counts = dict(zip(refs.texts, token_counts(tiny / "tokenizer.json", refs.texts), strict=True))
    assert any(n > manifest.max_seq_len for n in counts.values())  # truncation is checked too

    emb = build_tiny_embedding_bundle(tmp_path / "emb", seed=3).path
    entry = load_manifest(emb).references
    assert entry is not None
    vectors = read_references(emb, entry, 32)
    assert not any(vectors.decisive)
    np.testing.assert_allclose(np.linalg.norm(vectors.outputs, axis=1), 1.0, atol=1e-5)  # pooled and normalised


def test_a_bundle_with_its_own_eval_texts_chooses_from_them(tiny: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(tiny, bundle)
    texts = [f"review {i}: " + "good " * (i % 40) for i in range(60)]
    (bundle / "eval.txt").write_text("\n".join(texts) + "\n")
    refs = attach(bundle)
    assert set(refs.texts) <= {t.strip() for t in texts}
    assert "eval.txt" in load_manifest(bundle).references.outputs_from  # type: ignore[union-attr]


def test_publish_validation_refuses_references_that_do_not_match(tiny: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(tiny, bundle)
    lines = (bundle / REFERENCES_FILE).read_text().splitlines()
    row = json.loads(lines[0])
    row["output"][0] += 1.0
    lines[0] = json.dumps(row)
    (bundle / REFERENCES_FILE).write_text("\n".join(lines) + "\n")
    with pytest.raises(BundleError, match=r"references\.jsonl: sha256 .* differs from the manifest's"):
        validate_bundle(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["references"]["file"] = "../escape.jsonl"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"references\.file must be a file name beside model\.onnx"):
        load_manifest(bundle)


def test_build_takes_the_source_outputs_of_the_chosen_rows() -> None:
    texts, counts, logits = _corpus()
    refs = build(texts, counts, logits, max_seq_len=150, classifier=True)
    picked = choose(texts, counts, logits, max_seq_len=150, classifier=True)
    assert refs.texts == tuple(texts[i] for i in picked.rows)
    assert np.array_equal(refs.outputs, logits[list(picked.rows)])


# -- a token classifier's references: a row of logits per token -------------------------------------------


def _token_refs() -> ReferenceSet:
    rows = (np.array([[0.5, -1.0, 2.0]], np.float32), np.array([[1.0, 0.0, 0.0], [0.25, 0.5, -0.75]], np.float32))
    return ReferenceSet(texts=("Ana", "Ana à Lisboa 🙂"), outputs=np.concatenate(rows), decisive=(True, False),
                        tokens=(1, 2))


def test_token_rows_round_trip_one_list_of_label_logits_per_token(tmp_path: Path) -> None:
    refs = _token_refs()
    assert refs.per_token and [r.shape for r in refs.token_rows()] == [(1, 3), (2, 3)]
    first, second = refs.encode().decode("utf-8").splitlines()
    assert json.loads(first) == {"text": "Ana", "output": [[0.5, -1.0, 2.0]], "decisive": True}
    assert json.loads(second)["output"] == [[1.0, 0.0, 0.0], [0.25, 0.5, -0.75]]
    root, entry = _written(tmp_path, refs)
    back = read_references(root, entry, 3, per_token=True, max_seq_len=8)
    assert back.tokens == (1, 2) and back.texts == refs.texts and back.decisive == refs.decisive
    assert np.array_equal(back.outputs, refs.outputs) and back.encode() == refs.encode()
    with pytest.raises(ValueError, match="token_rows: these references hold one output row per text"):
        ReferenceSet(texts=("a",), outputs=np.zeros((1, 2), np.float32), decisive=(False,)).token_rows()
    with pytest.raises(ValueError, match="do not line up with 3 tokens"):
        ReferenceSet(texts=("a", "b"), outputs=np.zeros((2, 3), np.float32), decisive=(False, False), tokens=(1, 2))


@pytest.mark.parametrize(("output", "columns", "per_token", "pattern"), [
    ([[1, 2]], 3, True, r"token 0's output must be 3 numbers \(one per label\), got 2 values"),
    ([[1, 2, 3], [1, 2]], 3, True, r"token 1's output must be 3 numbers"),
    ([], 3, True, r"output must be a list of 1\.\.4 token rows \(the text's tokens, at most max_seq_len\), got 0"),
    ([[0, 0, 0]] * 5, 3, True, r"output must be a list of 1\.\.4 token rows .* got 5 values"),
    ([1, 2, 3], 3, True, r"output must be a list of 1\.\.4 token rows"),
    ([[1, True, 3]], 3, True, r"token 0's output must be 3 numbers"),
    ([[1, 2, 3]], 3, False, r"output is a list of token rows \(a token classifier's\), but this bundle answers one "
                            r"row of 3 numbers per text"),
], ids=["short token", "one short token", "no tokens", "past max_seq_len", "a flat row", "a bool",
        "token rows for a classifier"])
def test_token_rows_of_the_wrong_shape_are_named(tmp_path: Path, output: list, columns: int, per_token: bool,
                                                 pattern: str) -> None:
    data = (json.dumps({"text": "a", "output": output, "decisive": False}) + "\n").encode()
    (tmp_path / REFERENCES_FILE).write_bytes(data)
    entry = References(REFERENCES_FILE, hashlib.sha256(data).hexdigest(), 1, "hand-made")
    with pytest.raises(BundleError, match=r"references\.jsonl line 1: " + pattern):
        read_references(tmp_path, entry, columns, per_token=per_token, max_seq_len=4)


def test_build_and_choose_for_tokens() -> None:
    """Each text's token rows go in whole; a text is decisive when every token is; each label's most confident
    tokens bring their texts in."""
    rng = np.random.default_rng(1)
    texts = [f"text {i}" for i in range(80)]
    counts = [2 + i % 7 for i in range(80)]
    rows = [rng.normal(0.0, 3.0, (n, 4)).astype(np.float32) for n in counts]
    rows[9] = np.array([[9.0, 0.0, 0.0, 0.0], [9.0, 0.0, 0.0, 0.0]], np.float32)  # decisive, all label 0
    rows[10] = np.array([[0.0, 0.0, 0.0, 30.0], [9.0, 0.0, 0.0, 0.0]], np.float32)  # label 3's most confident
    counts[9] = counts[10] = 2
    refs = build(texts, counts, rows, max_seq_len=8, classifier=False, per_token=True)
    picked = choose(texts, counts, rows, max_seq_len=8, classifier=False, per_token=True)
    assert refs.texts == tuple(texts[i] for i in picked.rows) and 10 in picked.rows
    assert refs.tokens == tuple(counts[i] for i in picked.rows)
    for i, got in zip(picked.rows, refs.token_rows(), strict=True):
        assert np.array_equal(got, rows[i])
    decisive = decisive_token_texts(rows)
    assert decisive[9] and decisive[10] and picked.decisive == tuple(bool(decisive[i]) for i in picked.rows)
    flipped = [r.copy() for r in rows]
    flipped[10][1] = [0.0, 9.0, 0.0, 0.0]  # one token of text 10 takes another label in a candidate run
    again = choose(texts, counts, rows, max_seq_len=8, classifier=False, per_token=True, candidates=[flipped])
    assert 10 not in again.rows or not again.decisive[again.rows.index(10)]


def test_attach_writes_a_token_bundles_rows_as_the_server_reads_them(tmp_path: Path) -> None:
    from support.tiny_bundle import build_tiny_token_bundle

    bundle = build_tiny_token_bundle(tmp_path / "t", labels=("O", "B-PER", "I-PER", "B-LOC", "I-LOC"), max_seq_len=8)
    refs = attach(bundle)
    manifest = validate_bundle(bundle)
    assert manifest.references is not None
    back = read_references(bundle, manifest.references, 5, per_token=True, max_seq_len=8)
    assert back.tokens == refs.tokens and back.tokens is not None
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=8)
    assert list(back.tokens) == [len(tokenizer.encode(t).ids) for t in back.texts]
    assert max(back.tokens) == 8  # the long texts, truncated
    session = open_session(bundle / "model.onnx", 1)
    for text, rows in zip(back.texts, back.token_rows(), strict=True):
        ids = np.array([tokenizer.encode(text).ids], np.int64)
        (logits,) = session.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        np.testing.assert_allclose(logits[0], rows, rtol=0, atol=1e-5)


def test_publish_validation_refuses_token_rows_that_are_not_the_tokenizers_tokens(tmp_path: Path) -> None:
    from support.tiny_bundle import build_tiny_token_bundle

    bundle = build_tiny_token_bundle(tmp_path / "t", max_seq_len=8)
    attach(bundle)
    lines = (bundle / REFERENCES_FILE).read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[0])
    row["output"] = row["output"][:-1] if len(row["output"]) > 1 else row["output"] * 2  # a token too few (or many)
    lines[0] = json.dumps(row, ensure_ascii=False)
    data = ("\n".join(lines) + "\n").encode("utf-8")
    (bundle / REFERENCES_FILE).write_bytes(data)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["references"]["sha256"] = hashlib.sha256(data).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"references\.jsonl text 1 \(.*\): \d+ token rows, but tokenizer\.json "
                                          r"makes \d+ tokens of it \(truncated at max_seq_len 8\)"):
        validate_bundle(bundle)
