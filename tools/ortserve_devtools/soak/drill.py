"""The cache drill: one flipped byte in a cached bundle file, which the server must detect (sha256) and refetch.

The byte flipped is the sign bit of the largest-magnitude value of `embeddings.LayerNorm.bias` (a tensor every
token passes through, so a model loaded from the corrupted file would answer with different logits); a graph
without that tensor gets the byte in the middle of the file. Either way the file keeps its size: only the sha256
tells it apart.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

TARGET_TENSOR = "embeddings.LayerNorm.bias"


@dataclass(frozen=True)
class Flip:
    path: Path
    offset: int
    before: int
    after: int
    where: str
    """What the byte belongs to (the tensor and element, or "middle of the file")."""


def choose_offset(model_path: Path) -> tuple[int, str]:
    """Where to flip a byte of `model_path`: (offset, what it is)."""
    data = model_path.read_bytes()
    model = onnx.load_model_from_string(data)
    for init in model.graph.initializer:
        if init.name != TARGET_TENSOR or not init.raw_data or init.data_type != onnx.TensorProto.FLOAT:
            continue
        raw = init.raw_data
        start = data.find(raw)
        if start < 0 or data.find(raw, start + 1) >= 0:
            break  # not found once exactly: fall back to the middle of the file
        values = numpy_helper.to_array(init).ravel()
        element = int(np.argmax(np.abs(values)))
        # Little-endian float32: the 4th byte holds the sign bit.
        return start + 4 * element + 3, f"{TARGET_TENSOR}[{element}] sign bit ({values[element]:+.4g})"
    return len(data) // 2, "middle of the file"


def flip_byte(path: Path, offset: int, *, mask: int = 0x80) -> tuple[int, int]:
    """XORs one byte of `path` in place (same size, same inode); returns (before, after)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        before = f.read(1)[0]
        after = before ^ mask
        f.seek(offset)
        f.write(bytes([after]))
        f.flush()
        os.fsync(f.fileno())
    return before, after


def corrupt_model(bundle_dir: Path) -> Flip:
    path = bundle_dir / "model.onnx"
    offset, where = choose_offset(path)
    before, after = flip_byte(path, offset, mask=0x80 if "sign bit" in where else 0xFF)
    return Flip(path, offset, before, after, where)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
