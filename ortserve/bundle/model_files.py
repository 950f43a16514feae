"""A bundle's model: model.onnx alone, or model.onnx and its weights in model.onnx.data (ONNX external data).

protobuf holds at most 2 GiB in one message, so one model.onnx cannot hold a model whose weights pass that (a 0.6B
decoder in FP32 is 2.4 GB). Such a bundle keeps its graph in model.onnx and its large weights in one file beside it,
`model.onnx.data`: each of those initializers names the file, an offset and a length (ONNX's external_data), and
ONNX Runtime and OpenVINO read it relative to model.onnx's directory, so the engine opens the bundle by path as for
any other. The manifest names the file with its size and sha256, so that a graph never runs on another export's
weights:

    "model_data": {"file": "model.onnx.data", "bytes": 2384199680, "sha256": "..."}

Who writes which layout: prepare/model_writer.py (the importer's exporter and the optimiser). Who checks: validate.py
(every external initializer in the named file and inside it, size and sha256; publish and both writers run it) and
`check_present` (at every load: the file is there at its size, a stat, no hashing).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ortserve.bundle.manifest import MODEL_DATA_FILE, MODEL_FILE, BundleError, BundleManifest

CHUNK = 1 << 20


def model_files(bundle_dir: str | Path) -> tuple[Path, ...]:
    """The model's files in the bundle: model.onnx, then model.onnx.data where there is one."""
    root = Path(bundle_dir)
    data = root / MODEL_DATA_FILE
    return (root / MODEL_FILE, data) if data.is_file() else (root / MODEL_FILE,)


def model_size(bundle_dir: str | Path) -> int:
    """Bytes of the model's files (the weights, inline or beside the graph)."""
    return sum(path.stat().st_size for path in model_files(bundle_dir))


def model_digest(bundle_dir: str | Path) -> str:
    """sha256 over the model's files in order (model.onnx, then model.onnx.data): for a model in one file, the sha256
    of model.onnx, as an optimised bundle's `source_sha256` has always been."""
    digest = hashlib.sha256()
    for path in model_files(bundle_dir):
        _hash_into(digest, path)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    _hash_into(digest, path)
    return digest.hexdigest()


def _hash_into(digest: Any, path: Path) -> None:
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)


def check_present(bundle_dir: str | Path, manifest: BundleManifest) -> None:
    """What a load checks before the engine opens model.onnx (cheap: a stat): the data file the manifest names is
    there, a regular file of its size; a data file the manifest does not name is refused too."""
    root = Path(bundle_dir)
    path = root / MODEL_DATA_FILE
    if manifest.model_data is None:
        if path.exists():
            raise BundleError(f"{path}: present, but manifest.json names no model_data; a bundle's weights beside "
                              f"model.onnx are named in its manifest (the importer and the optimiser write it)")
        return
    if path.is_symlink() or not path.is_file():
        raise BundleError(f"{path}: missing (manifest.json's model_data names it: model.onnx keeps its weights there)")
    size = path.stat().st_size
    if size != manifest.model_data.bytes:
        raise BundleError(f"{path}: {size} bytes, manifest.json's model_data says {manifest.model_data.bytes} (a "
                          f"truncated copy, or another export's weights)")
