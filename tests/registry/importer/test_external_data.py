"""Bundles whose weights sit beside model.onnx in model.onnx.data (ONNX external data: what a model past protobuf's
2 GiB needs), made by forcing a tiny decoder's import to that layout (`registry import --external-data-mb 0`): the
layout and its manifest entry, validation refusing a damaged, missing or unnamed data file, the optimiser's int8 and
bf16 copies keeping the layout, the artifact store carrying it, and a server on a file registry answering as the
same checkpoint's one-file bundle does, each version through its load-time check."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from support.bf16 import bf16_unavailable
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN, make_decoder_checkpoint
from support.server_process import ServerProcess, infer_request, logits_of, serving_published, stub_for

from ortserve.bundle.manifest import MANIFEST_FILE, MODEL_DATA_FILE, MODEL_FILE, BundleError, load_manifest
from ortserve.bundle.model_files import check_present, file_sha256, model_digest
from ortserve.bundle.validate import validate_bundle
from ortserve.prepare.importer import import_checkpoint
from ortserve.prepare.model_writer import INLINE_BELOW
from ortserve.registry.cli import main as registry_main

TEXTS = ["ok", "The battery died after two days and support never answered.",
         "Обслуживание было медленным, но еда вкусная.", "最高の映画でした 🎉",
         "a long one: " + " ".join(["the plot kept going, scene after scene, and nobody could follow it"] * 6)]
SAME_GRAPH_ATOL = 1e-6
"""The same graph and weights on the same runtime: the two layouts' vectors differ by float rounding at most."""


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny Qwen3 checkpoint imported twice: "inline" (one model.onnx) and "external" (through the CLI, every
    weight of 1 KiB or more in model.onnx.data); read-only by convention."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("external-data")
    checkpoint = make_decoder_checkpoint(root / "qwen3", "qwen3", seed=11)
    inline = import_checkpoint(checkpoint, root / "inline", max_seq_len=IMPORT_MAX_SEQ_LEN).path
    external = root / "external"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = registry_main(["import", "--from", str(checkpoint), "--out", str(external), "--max-seq-len",
                              str(IMPORT_MAX_SEQ_LEN), "--external-data-mb", "0", "--json"])
    assert code == 0
    assert json.loads(printed.getvalue())["model_bytes"] == sum(p.stat().st_size for p in external.iterdir()
                                                                if p.name.startswith(MODEL_FILE))
    return {"inline": inline, "external": external}


def copy_of(bundle: Path, dest: Path) -> Path:
    shutil.copytree(bundle, dest)
    return dest


def test_the_weights_sit_in_one_file_beside_the_graph_named_in_the_manifest(bundles: dict[str, Path]) -> None:
    inline, external = bundles["inline"], bundles["external"]
    assert not (inline / MODEL_DATA_FILE).exists() and load_manifest(inline).model_data is None
    data = external / MODEL_DATA_FILE
    entry = load_manifest(external).model_data
    assert entry is not None
    assert (entry.file, entry.bytes, entry.sha256) == (MODEL_DATA_FILE, data.stat().st_size, file_sha256(data))
    graph = onnx.load(str(external / MODEL_FILE), load_external_data=False).graph
    outside = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert outside and all({e.key: e.value for e in t.external_data}["location"] == MODEL_DATA_FILE for t in outside)
    inside = [t for t in graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    assert all(len(t.raw_data) < INLINE_BELOW for t in inside)  # shapes and scalars stay in the graph
    assert (external / MODEL_FILE).stat().st_size < data.stat().st_size
    assert validate_bundle(external).model_data == entry
    # Same weights, another layout: the one-file bundle's initializers, byte for byte.
    full = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(external / MODEL_FILE)).graph.initializer}
    for t in onnx.load(str(inline / MODEL_FILE)).graph.initializer:
        np.testing.assert_array_equal(full[t.name], onnx.numpy_helper.to_array(t))
    assert model_digest(inline) == file_sha256(inline / MODEL_FILE)  # one file: its sha256, as it always was


def test_a_damaged_missing_or_unnamed_data_file_is_refused_by_name(bundles: dict[str, Path], tmp_path: Path) -> None:
    flipped = copy_of(bundles["external"], tmp_path / "flipped")
    with (flipped / MODEL_DATA_FILE).open("r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(BundleError, match=r"model\.onnx\.data: sha256 .*another export's weights"):
        validate_bundle(flipped)

    short = copy_of(bundles["external"], tmp_path / "short")
    with (short / MODEL_DATA_FILE).open("r+b") as f:
        f.truncate(1000)
    with pytest.raises(BundleError, match=r"1000 bytes, manifest.json's model_data says"):
        check_present(short, load_manifest(short))  # what every load checks, before the engine opens the graph

    missing = copy_of(bundles["external"], tmp_path / "missing")
    (missing / MODEL_DATA_FILE).unlink()
    with pytest.raises(BundleError, match=r"model\.onnx\.data: missing \(manifest.json's model_data names it"):
        validate_bundle(missing)

    unnamed = copy_of(bundles["external"], tmp_path / "unnamed")
    manifest = json.loads((unnamed / MANIFEST_FILE).read_text())
    del manifest["model_data"]
    (unnamed / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"present, but manifest.json names no model_data"):
        validate_bundle(unnamed)
    (unnamed / MODEL_DATA_FILE).unlink()
    with pytest.raises(BundleError, match=r"weights are kept outside the file .* names no model_data"):
        validate_bundle(unnamed)

    inline = copy_of(bundles["inline"], tmp_path / "inline-named")
    manifest = json.loads((inline / MANIFEST_FILE).read_text())
    manifest["model_data"] = json.loads((bundles["external"] / MANIFEST_FILE).read_text())["model_data"]
    (inline / MANIFEST_FILE).write_text(json.dumps(manifest))
    shutil.copyfile(bundles["external"] / MODEL_DATA_FILE, inline / MODEL_DATA_FILE)
    with pytest.raises(BundleError, match=r"model.onnx keeps every weight inline"):
        validate_bundle(inline)


@pytest.fixture(scope="module")
def optimised(bundles: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The external bundle's int8 copy, and its bf16 one where this CPU has bf16."""
    from ortserve.prepare.optimize import optimize_bundle

    root = tmp_path_factory.mktemp("external-optimised")
    levels = ["int8"] + ([] if bf16_unavailable() else ["bf16"])
    return {level: optimize_bundle(bundles["external"], root / level, level).path for level in levels}


def test_the_optimisers_copies_keep_the_layout(bundles: dict[str, Path], optimised: dict[str, Path]) -> None:
    source = bundles["external"]
    for level, bundle in optimised.items():
        manifest = validate_bundle(bundle)
        assert manifest.model_data is not None, level
        assert manifest.optimization is not None and manifest.optimization.source_sha256 == model_digest(source)
    if "bf16" in optimised:  # the same graph, run by another runtime: the source's files byte for byte
        for name in (MODEL_FILE, MODEL_DATA_FILE):
            assert file_sha256(optimised["bf16"] / name) == file_sha256(source / name)


def test_the_artifact_store_carries_the_data_file(bundles: dict[str, Path], tmp_path: Path) -> None:
    from ortserve.registry.artifacts import ArtifactCache, ArtifactStore

    ref = ArtifactStore(tmp_path / "artifacts").upload(bundles["external"])
    fetched = ArtifactCache(tmp_path / "cache", allowed_roots=[tmp_path / "artifacts"]).fetch(ref)
    assert sorted(p.name for p in fetched.iterdir()) == sorted(p.name for p in bundles["external"].iterdir())
    assert validate_bundle(fetched).model_data == load_manifest(bundles["external"]).model_data


@pytest.fixture(scope="module")
def served(bundles: dict[str, Path], optimised: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    models = {**bundles, **{f"external-{level}": path for level, path in optimised.items()}}
    with serving_published(tmp_path_factory.mktemp("external-store"), models, ["--default-timeout-ms", "0"]) as server:
        yield server


@pytest.fixture(scope="module")
def stub(served: ServerProcess) -> Iterator[Any]:
    channel, stub = stub_for(served.address)
    yield stub
    channel.close()


def embed(stub: Any, model: str, texts: list[str]) -> np.ndarray:
    return np.asarray(logits_of(stub.ModelInfer(infer_request(texts, model=model))), np.float32)


def test_served_from_a_file_registry_it_answers_as_the_one_file_bundle(served: ServerProcess, stub: Any,
                                                                         optimised: dict[str, Path]) -> None:
    for model in ("inline", "external", *(f"external-{level}" for level in optimised)):
        assert served.wait_event("version_loaded", model=model)["verify"] == "passed", model
    expected = embed(stub, "inline", TEXTS)
    np.testing.assert_allclose(embed(stub, "external", TEXTS), expected, rtol=0, atol=SAME_GRAPH_ATOL)
    for text, row in zip(TEXTS, expected, strict=True):  # one text a call
        np.testing.assert_allclose(embed(stub, "external", [text])[0], row, rtol=0, atol=SAME_GRAPH_ATOL)
