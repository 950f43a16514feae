"""How a bundle writer (the importer's exporter, the optimiser) writes a model: in one model.onnx, or with its weights
in model.onnx.data beside it (ONNX external data; bundle/model_files.py says why and how it is read).

    write_model(model, directory, external=external_data(model, above))
        model.onnx alone, or model.onnx + model.onnx.data (every initializer of 1 KiB or more, one file, in order)
    copy_model(source_dir, directory)     the model's files byte for byte (the bf16 level keeps its source's graph)
    model_data_entry(directory)           the manifest's "model_data" for what was written there, or None

The rule (`external_data`): a model whose weights pass EXTERNAL_DATA_ABOVE bytes keeps them beside the graph. Below
protobuf's 2 GiB cap by a margin: the graph and the tensors' framing are counted on top of the weights. A lower
threshold (`registry import --external-data-mb`, 0 for always) gives a small model the same layout, for tests.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ortserve.bundle.manifest import MODEL_DATA_FILE, MODEL_FILE
from ortserve.bundle.model_files import file_sha256, model_files

EXTERNAL_DATA_ABOVE = 1 << 30
"""Weights (bytes) past which a written model keeps them in model.onnx.data: 1 GiB."""
INLINE_BELOW = 1024
"""Initializers smaller than this stay in model.onnx (shapes, scalars: what graph readers decode; onnx's default)."""


def weights_bytes(model: Any) -> int:
    """Bytes of the model's initializers, inline or already external."""
    import onnx

    total = 0
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            total += int({e.key: e.value for e in tensor.external_data}.get("length", 0))
        elif tensor.HasField("raw_data"):
            total += len(tensor.raw_data)
        else:
            total += tensor.ByteSize()
    return total


def external_data(model: Any, above: int = EXTERNAL_DATA_ABOVE) -> bool:
    """Whether `model` is written with its weights in model.onnx.data: they pass `above` bytes."""
    return weights_bytes(model) > above


def write_model(model: Any, directory: Path, *, external: bool) -> None:
    """Writes `model` (an onnx.ModelProto with every weight loaded) as model.onnx in `directory` (which holds no
    model yet), its weights in model.onnx.data when `external`. With `external` the proto is left pointing at the
    file (onnx converts it in place)."""
    import onnx

    path = directory / MODEL_FILE
    if (directory / MODEL_DATA_FILE).exists():  # onnx appends to an existing data file
        raise FileExistsError(f"{directory / MODEL_DATA_FILE}: exists; a model is written into a fresh directory")
    onnx.save_model(model, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=MODEL_DATA_FILE, size_threshold=INLINE_BELOW)


def copy_model(source_dir: Path, directory: Path) -> None:
    """The model's files in `source_dir` copied into `directory` byte for byte."""
    for path in model_files(source_dir):
        shutil.copyfile(path, directory / path.name)


def model_data_entry(directory: Path) -> dict[str, Any] | None:
    """The manifest's "model_data" for the model written in `directory`: None when it is one file."""
    path = directory / MODEL_DATA_FILE
    if not path.is_file():
        return None
    return {"file": MODEL_DATA_FILE, "bytes": path.stat().st_size, "sha256": file_sha256(path)}
