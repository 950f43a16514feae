"""The tiny sparse embedding bundle (ortserve_devtools.sparse_bundle, what the HTTP fuzz harness serves): a valid
onnx-sparse-embedding bundle, byte-identical for the same arguments, its graph SPLADE's max of log(1 + relu) over its
table's rows (restated in numpy), a few weights per text, and its references the non-zero weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from ortserve_devtools.sparse_bundle import build_tiny_sparse_bundle

from ortserve.bundle.validate import validate_bundle


def test_the_bundle_is_valid_deterministic_and_splade_shaped(tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    first = build_tiny_sparse_bundle(tmp_path / "a", seed=3)
    again = build_tiny_sparse_bundle(tmp_path / "b", seed=3)
    for name in first.file_sizes:
        assert (first.path / name).read_bytes() == (again.path / name).read_bytes(), name
    manifest = validate_bundle(first.path)
    assert (manifest.format, manifest.dim, manifest.widths) == ("onnx-sparse-embedding", 512, ())
    row = json.loads((first.path / "references.jsonl").read_text().splitlines()[0])
    assert set(row["output"]) == {"indices", "values"}

    table = numpy_helper.to_array(onnx.load(str(first.path / "model.onnx")).graph.initializer[0])
    ids = np.asarray([[2, 40, 41, 3, 0], [2, 50, 3, 0, 0]], np.int64)
    mask = (ids != 0).astype(np.int64)
    session = ort.InferenceSession(str(first.path / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["sparse"], {"input_ids": ids, "attention_mask": mask})[0]
    want = np.log1p(np.maximum(table[ids] * mask[..., None], 0)).max(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    nonzeros = (got > 0).sum(axis=1)
    assert (nonzeros > 0).all() and (nonzeros < 200).all(), nonzeros
