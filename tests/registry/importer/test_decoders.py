"""Decoders imported as embedding models (Qwen3, Qwen2; issue 56): a directory shaped as Qwen3-Embedding's
(sentence-transformers: its causal LM, lasttoken Pooling, Normalize, its two prompts), each decoder's base model and a
Qwen3ForCausalLM (--task embed), tiny and random, with a byte-level BPE tokenizer that appends <|endoftext|> and pads
on the left, as Qwen3-Embedding's does. Each is held to sentence-transformers' encode or transformers with the same
pooling: short, long (cut at max_seq_len), multilingual texts, one and many; the graph pools the same token whichever
side a batch is padded on (the server pads on the right, sentence-transformers here on the left); the optimiser's gate
passes its int8 and bf16 copies (bf16 where this CPU has it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from support.bf16 import bf16_unavailable
from support.hf_checkpoints import (
    DECODER_MATRYOSHKA_DIMS,
    DECODER_SPECIALS,
    DECODERS,
    IMPORT_MAX_SEQ_LEN,
    QWEN3_EMBEDDING_PROMPTS,
)

from ortserve.bundle import tokenizer as bundle_tokenizer
from ortserve.bundle.manifest import load_manifest
from ortserve.prepare.accuracy import open_session
from ortserve.prepare.importer import MIN_COSINE, CheckpointError, ImportResult, import_checkpoint
from ortserve.prepare.importer.checkpoint import read_checkpoint

TEXTS = [
    "ok",
    "The battery died after two days and support never answered.",
    "Das Essen war ausgezeichnet, der Service freundlich.",
    "Обслуживание было медленным, но еда вкусная.",
    "最高の映画でした 🎉",
    "a long one: " + " ".join(["the plot kept going, scene after scene, and nobody could follow it"] * 6),
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def st_encode(path: Path, texts: list[str], **kwargs: Any) -> np.ndarray:
    """sentence-transformers' encode as users call it, truncating at the import's max_seq_len."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    model.max_seq_length = IMPORT_MAX_SEQ_LEN
    return np.asarray(model.encode(texts, convert_to_numpy=True, show_progress_bar=False, **kwargs), np.float32)


def padded(bundle: Path, texts: list[str], side: str) -> dict[str, np.ndarray]:
    """The texts tokenized as the server does, padded to the longest with the bundle's pad id on `side`."""
    from ortserve.bundle.manifest import read_pad_id

    tokenizer = bundle_tokenizer.load(bundle / "tokenizer.json", IMPORT_MAX_SEQ_LEN)
    rows = [tokenizer.encode(t).ids for t in texts]
    width = max(map(len, rows))
    ids = np.full((len(rows), width), read_pad_id(bundle / "tokenizer.json"), np.int64)
    mask = np.zeros_like(ids)
    for r, row in enumerate(rows):
        span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[r, span], mask[r, span] = row, 1
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("name", ["qwen3-st", "qwen3-lm", *DECODERS])
def test_decoders_import_as_last_token_embedding_bundles(decoder_imported: dict[str, ImportResult],
                                                         name: str) -> None:
    result = decoder_imported[name]
    manifest = load_manifest(result.path)
    assert (manifest.format, manifest.dim) == ("onnx-text-embedding", 32)
    assert manifest.imported is not None
    details = manifest.imported.details
    assert (details["pooling"], details["normalize"]) == (["lasttoken"], True)
    assert result.checkpoint.architecture.decoder
    assert result.parity.passed and result.parity.runs[0].min_cosine >= MIN_COSINE
    model = onnx.load(str(result.path / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask"]  # no cache, no positions
    assert [o.name for o in model.graph.output] == ["embedding"]


def test_qwen3_embedding_keeps_its_prompts_and_widths(decoder_imported: dict[str, ImportResult]) -> None:
    manifest = load_manifest(decoder_imported["qwen3-st"].path)
    assert manifest.prompts == QWEN3_EMBEDDING_PROMPTS
    assert manifest.widths == (32, *DECODER_MATRYOSHKA_DIMS)
    assert "sentence-transformers" in decoder_imported["qwen3-st"].parity.reference


def test_every_text_ends_with_the_end_token_even_when_cut(decoder_imported: dict[str, ImportResult]) -> None:
    """Qwen3-Embedding's tokenizer appends <|endoftext|>, the token pooled; truncation keeps it, as transformers'."""
    bundle = decoder_imported["qwen3-st"].path
    tokenizer = bundle_tokenizer.load(bundle / "tokenizer.json", IMPORT_MAX_SEQ_LEN)
    end = tokenizer.token_to_id(DECODER_SPECIALS[0])
    encoded = [tokenizer.encode(t).ids for t in TEXTS]
    assert all(ids[-1] == end for ids in encoded)
    assert len(encoded[-1]) == IMPORT_MAX_SEQ_LEN


@pytest.mark.parametrize("name", ["qwen3-st", "qwen2"])
def test_left_and_right_padding_pool_the_same_token(decoder_imported: dict[str, ImportResult], name: str) -> None:
    """A batch of mixed lengths padded on the right (the server's side) answers what the same batch padded on the left
    (Qwen3-Embedding's tokenizer's side) and each text alone answer."""
    bundle = decoder_imported[name].path
    session = open_session(bundle / "model.onnx", 1)
    right = session.run(["embedding"], padded(bundle, TEXTS, "right"))[0]
    left = session.run(["embedding"], padded(bundle, TEXTS, "left"))[0]
    alone = np.concatenate([session.run(["embedding"], padded(bundle, [t], "right"))[0] for t in TEXTS])
    for other in (left, alone):
        assert cosines(right, other).min() >= MIN_COSINE
        np.testing.assert_allclose(right, other, atol=1e-5, rtol=0)


def test_the_graph_answers_as_sentence_transformers_encode(decoder_imported: dict[str, ImportResult],
                                                          decoder_checkpoints: dict[str, Path]) -> None:
    """One text and many, with and without the query prompt, against encode (which pads on the left)."""
    bundle = decoder_imported["qwen3-st"].path
    session = open_session(bundle / "model.onnx", 1)
    for prompt_name in (None, "query"):
        prompt = QWEN3_EMBEDDING_PROMPTS[prompt_name] if prompt_name else ""
        texts = [prompt + t for t in TEXTS]
        got = session.run(["embedding"], padded(bundle, texts, "right"))[0]
        expected = st_encode(decoder_checkpoints["qwen3-st"], TEXTS, prompt_name=prompt_name)
        assert cosines(got, expected).min() >= MIN_COSINE
        one = session.run(["embedding"], padded(bundle, texts[:1], "right"))[0]
        assert cosines(one, expected[:1]).min() >= MIN_COSINE


def test_a_causal_lm_and_its_base_model_answer_alike(decoder_imported: dict[str, ImportResult],
                                                     decoder_checkpoints: dict[str, Path]) -> None:
    """--task embed on a Qwen3ForCausalLM leaves its head out: the answer is transformers' Qwen3Model's last token."""
    import torch
    import transformers

    bundle = decoder_imported["qwen3-lm"].path
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(decoder_checkpoints["qwen3-lm"]))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(decoder_checkpoints["qwen3-lm"])).eval()
    with torch.inference_mode():
        rows = []
        for text in TEXTS:
            encoded = tokenizer(text, truncation=True, max_length=IMPORT_MAX_SEQ_LEN, return_tensors="pt")
            hidden = model(**encoded, output_hidden_states=True).hidden_states[-1][0, -1]
            rows.append(torch.nn.functional.normalize(hidden, dim=0).numpy())
    got = open_session(bundle / "model.onnx", 1).run(["embedding"], padded(bundle, TEXTS, "right"))[0]
    assert cosines(got, np.stack(rows)).min() >= MIN_COSINE


def test_the_optimisers_gate_passes_int8_and_bf16(decoder_imported: dict[str, ImportResult], tmp_path: Path) -> None:
    """int8 and bf16 (where this CPU has it) pass the accuracy gate against the FP32 graph and keep the prompts; fuse
    and fp16 (ONNX Runtime's BERT fusion first) are refused naming why: a decoder's attention is not BERT's."""
    from ortserve.prepare.optimize import OptimizeError, optimize_bundle

    source = decoder_imported["qwen3-st"]
    for level in ["int8"] + ([] if bf16_unavailable() else ["bf16"]):
        result = optimize_bundle(source.path, tmp_path / level, level)
        assert result.gate is not None and result.gate.passed, level
        assert result.manifest.prompts == QWEN3_EMBEDDING_PROMPTS
    with pytest.raises(OptimizeError, match="BERT fusion matched no attention block"):
        optimize_bundle(source.path, tmp_path / "fuse", "fuse")


DECODER_REFUSALS = {
    "a causal LM without --task": ("qwen3-lm", {}, "Qwen3ForCausalLM is a causal language model; --task embed "
                                                   "imports it as an embedding model"),
    "a decoder as a classifier": ("qwen3", {"task": "classify"}, "has no sequence-classification head"),
    "a base decoder as a reranker": ("qwen3", {"task": "rerank"}, "--task rerank takes a decoder as a causal LM "
                                                                  "asked yes or no (Qwen3-Reranker's form, a "
                                                                  "*ForCausalLM), not Qwen3Model"),
    "pooling for a decoder reranker": ("qwen3-lm", {"task": "rerank", "pooling": "mean"},
                                       "--pooling applies to embedding models"),
}


@pytest.mark.parametrize("case", DECODER_REFUSALS, ids=list(DECODER_REFUSALS))
def test_what_a_decoder_cannot_be_is_refused_in_one_line(decoder_checkpoints: dict[str, Path], case: str) -> None:
    name, kwargs, message = DECODER_REFUSALS[case]
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(decoder_checkpoints[name], **kwargs)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_other_decoders_are_still_refused_by_name(decoder_checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Gemma's model_type with the same files is a decoder the import does not take: refused naming what it takes."""
    import shutil

    copy = tmp_path / "gemma"
    shutil.copytree(decoder_checkpoints["qwen3"], copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "gemma", "architectures": ["GemmaModel"]}))
    with pytest.raises(CheckpointError, match=r"decoder language model; .* models: Qwen2, Qwen3, Llama, Mistral"):
        import_checkpoint(copy, tmp_path / "out")
