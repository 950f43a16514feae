"""The manifest's `embedding_ranges` (issue 57): an embedding bundle's calibrated ranges per width, parsed and checked
against its widths; what is wrong is named (the bundle is refused at publish and at load)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ortserve.bundle.manifest import MANIFEST_FILE, BundleError, load_manifest, parse_manifest


def manifest(ranges: Any, **extra: Any) -> dict[str, Any]:
    return {"format": "onnx-text-embedding", "dim": 4, "max_seq_len": 16, "embedding_ranges": ranges, **extra}


def test_ranges_per_width_are_read_and_given_to_the_wire_rules() -> None:
    ranges = {"source": "built-in corpus", "texts": 3,
              "widths": {"4": [[-1, -0.5, 0, 0], [1, 0.5, 0, 2]], "2": [[-1, -1], [1, 1]]}}
    parsed = parse_manifest(manifest(ranges, matryoshka_dims=[4, 2])).embedding_ranges
    assert parsed is not None and parsed.source == "built-in corpus" and parsed.texts == 3
    assert parsed.wire() == {4: [-1.0, -0.5, 0.0, 0.0, 1.0, 0.5, 0.0, 2.0], 2: [-1.0, -1.0, 1.0, 1.0]}
    assert parse_manifest(manifest(ranges, matryoshka_dims=[4, 2])).to_dict()["embedding_ranges"] == {
        "source": "built-in corpus", "texts": 3,
        "widths": {"4": [[-1.0, -0.5, 0.0, 0.0], [1.0, 0.5, 0.0, 2.0]], "2": [[-1.0, -1.0], [1.0, 1.0]]}}


@pytest.mark.parametrize(("ranges", "message"), [
    ({"widths": {}}, "must be an object with a non-empty 'widths' object"),
    ([1, 2], "must be an object with a non-empty 'widths' object"),
    ({"widths": {"3": [[0] * 3, [1] * 3]}}, "width '3' is not one of the bundle's widths \\[4\\]"),
    ({"widths": {"4": [[0] * 4]}}, "width 4 must be \\[\\[start\\] \\* 4, \\[end\\] \\* 4\\]"),
    ({"widths": {"4": [[0] * 4, [1] * 3]}}, "width 4 must be"),
    ({"widths": {"4": [[0, 0, 2, 0], [1] * 4]}}, "each start <= its end"),
    ({"widths": {"4": [[0, 0, "x", 0], [1] * 4]}}, "must hold finite numbers"),
    ({"widths": {"4": [[0, 0, float("nan"), 0], [1] * 4]}}, "must hold finite numbers"),
    ({"widths": {"4": [[0] * 4, [1] * 4]}, "texts": -1}, "'texts' a count"),
])
def test_bad_ranges_are_refused_naming_what_is_wrong(ranges: Any, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        parse_manifest(manifest(ranges))


def test_a_qwen3_embedding_sized_manifest_loads(tmp_path: Path) -> None:
    """Ranges for 1024 dims and Qwen3-Embedding's Matryoshka widths (its card: 32..1024), written as the importer
    writes a manifest (indented), pass load_manifest's size cap: 64 KiB did not hold them."""
    rng = np.random.default_rng(0)
    widths = [1024, 768, 512, 256, 128, 64, 32]
    ranges = {"source": "built-in corpus", "texts": 1669,
              "widths": {str(w): [(-rng.random(w)).tolist(), rng.random(w).tolist()] for w in widths}}
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({**manifest(ranges, matryoshka_dims=widths), "dim": 1024},
                                                     indent=2))
    assert (tmp_path / MANIFEST_FILE).stat().st_size > 64 * 1024
    loaded = load_manifest(tmp_path).embedding_ranges
    assert loaded is not None and sorted(loaded.widths) == sorted(widths)
