"""Importer fixtures: tiny random checkpoints of every architecture, both tasks, made offline in the session, and
their imports (real PyTorch, real torch.onnx export, real ONNX Runtime), made once and shared read-only; and the
same for token classifiers (every architecture with BIO tags, BERT also with IOBES), for the decoders imported
as embedding models, and for SPLADE-shaped sparse embedding models. A module that serves its imports (a `served`
fixture) gets a gRPC `stub` to it here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.hf_checkpoints import (
    ARCHITECTURES,
    DECODER_MATRYOSHKA_DIMS,
    DECODERS,
    IMPORT_MAX_SEQ_LEN,
    MASKED_LM_TASK,
    OFFLINE,
    TASKS,
    TOKEN_CASES,
    TOKEN_LABELS,
    make_checkpoint,
    make_decoder_checkpoint,
    make_decoder_sentence_transformer,
    make_sparse_encoder,
    make_token_checkpoint,
)
from support.server_process import ServerProcess, stub_for

from ortserve.prepare.importer import ImportResult, import_checkpoint

# No hub, ever; one torch thread: the suite runs servers beside these tests on two cores, where torch's OpenMP threads
# spin-wait for each other (a tiny forward pass took 60 ms at 2 threads under that load, 1 ms at 1).
os.environ.update(OFFLINE)
Key = tuple[str, str]


@pytest.fixture(scope="module")
def stub(served: ServerProcess) -> Iterator[Any]:
    """A gRPC stub to the module's `served` server."""
    channel, stub = stub_for(served.address)
    yield stub
    channel.close()


@pytest.fixture(scope="session")
def torch_one_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> dict[Key, Path]:
    """(architecture, task) -> a save_pretrained directory; read-only by convention."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {(arch, task): make_checkpoint(root / f"{arch}-{task}", arch, task=task, seed=n)
            for n, (arch, task) in enumerate((a, t) for a in ARCHITECTURES for t in TASKS)}


@pytest.fixture(scope="session")
def imported(checkpoints: dict[Key, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[Key, ImportResult]:
    """(architecture, task) -> its import at IMPORT_MAX_SEQ_LEN; the bundles are read-only by convention."""
    root = tmp_path_factory.mktemp("imported")
    return {key: import_checkpoint(path, root / f"{key[0]}-{key[1]}", max_seq_len=IMPORT_MAX_SEQ_LEN)
            for key, path in checkpoints.items()}


@pytest.fixture(scope="session")
def token_checkpoints(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> dict[Key, Path]:
    """(architecture, "bio" | "iobes") -> a *ForTokenClassification save_pretrained directory; read-only."""
    root = tmp_path_factory.mktemp("token-checkpoints")
    return {(arch, tags): make_token_checkpoint(root / f"{arch}-{tags}", arch, labels=TOKEN_LABELS[tags], seed=40 + n)
            for n, (arch, tags) in enumerate(TOKEN_CASES)}


@pytest.fixture(scope="session")
def token_imported(token_checkpoints: dict[Key, Path],
                   tmp_path_factory: pytest.TempPathFactory) -> dict[Key, ImportResult]:
    """(architecture, label set) -> its import at IMPORT_MAX_SEQ_LEN; the bundles are read-only by convention."""
    root = tmp_path_factory.mktemp("token-imported")
    return {key: import_checkpoint(path, root / f"{key[0]}-{key[1]}", max_seq_len=IMPORT_MAX_SEQ_LEN)
            for key, path in token_checkpoints.items()}



@pytest.fixture(scope="session")
def decoder_checkpoints(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> dict[str, Path]:
    """"qwen3-st": a directory shaped as Qwen3-Embedding's (its causal LM, lasttoken Pooling, Normalize, its prompts);
    "<arch>": each decoder's base model (Qwen3Model, Qwen2Model); "qwen3-lm": a Qwen3ForCausalLM. Read-only."""
    root = tmp_path_factory.mktemp("decoder-checkpoints")
    made = {"qwen3-st": make_decoder_sentence_transformer(root / "qwen3-st", "qwen3", seed=60),
            "qwen3-lm": make_decoder_checkpoint(root / "qwen3-lm", "qwen3", seed=61, causal_lm=True)}
    made.update({arch: make_decoder_checkpoint(root / arch, arch, seed=62 + n) for n, arch in enumerate(DECODERS)})
    return made


@pytest.fixture(scope="session")
def decoder_imported(decoder_checkpoints: dict[str, Path],
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, ImportResult]:
    """Each decoder checkpoint imported at IMPORT_MAX_SEQ_LEN (the causal LM with --task embed, the
    sentence-transformers one with DECODER_MATRYOSHKA_DIMS); read-only."""
    root = tmp_path_factory.mktemp("decoder-imported")
    return {name: import_checkpoint(path, root / name, max_seq_len=IMPORT_MAX_SEQ_LEN,
                                    task="embed" if name == "qwen3-lm" else None,
                                    matryoshka_dims=DECODER_MATRYOSHKA_DIMS if name == "qwen3-st" else None)
            for name, path in decoder_checkpoints.items()}


@pytest.fixture(scope="session")
def sparse_checkpoints(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> dict[str, Path]:
    """SPLADE-shaped directories: "bert-st" a SparseEncoder (MLMTransformer, SpladePooling max of relu),
    "distilbert-st" one of a fill-mask Transformer pooled by sum of log1p_relu, "bert-mlm" a bare BertForMaskedLM
    (imported with --task sparse). Read-only."""
    root = tmp_path_factory.mktemp("sparse-checkpoints")
    return {"bert-st": make_sparse_encoder(root / "bert-st", "bert", max_seq_length=IMPORT_MAX_SEQ_LEN, seed=70),
            "distilbert-st": make_sparse_encoder(root / "distilbert-st", "distilbert", strategy="sum",
                                                 activation="log1p_relu", max_seq_length=IMPORT_MAX_SEQ_LEN,
                                                 seed=71, fill_mask=True),
            "bert-mlm": make_checkpoint(root / "bert-mlm", "bert", task=MASKED_LM_TASK, seed=72)}


@pytest.fixture(scope="session")
def sparse_imported(sparse_checkpoints: dict[str, Path],
                    tmp_path_factory: pytest.TempPathFactory) -> dict[str, ImportResult]:
    """Each sparse checkpoint imported at IMPORT_MAX_SEQ_LEN (the bare masked LM with --task sparse); read-only."""
    root = tmp_path_factory.mktemp("sparse-imported")
    return {name: import_checkpoint(path, root / name, max_seq_len=IMPORT_MAX_SEQ_LEN,
                                    task="sparse" if name == "bert-mlm" else None)
            for name, path in sparse_checkpoints.items()}
