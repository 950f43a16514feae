"""An embedding bundle's calibrated ranges: what its int8 and uint8 answers read (the `embedding_type` request
parameter; the C++ rule is engine_ext/src/dataplane/embedding_types.h). Written at import
(prepare/embedding_calibration.py) as sentence-transformers' quantize_embeddings calibrates: each dimension's minimum
and maximum over the calibration texts' embeddings, at every width a call may ask for:

    "embedding_ranges": {"source": "built-in corpus", "texts": 1669,
                         "widths": {"384": [[start, ...], [end, ...]], "128": [[...], [...]]}}

A bundle without them answers float, binary and ubinary; int8 and uint8 are refused by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MANIFEST_KEY = "embedding_ranges"


@dataclass(frozen=True)
class EmbeddingRanges:
    source: str
    """The texts they were calibrated on ("built-in corpus", or the checkpoint's eval file)."""
    texts: int
    widths: dict[int, tuple[tuple[float, ...], tuple[float, ...]]]
    """Per width: each dimension's start (minimum), then each one's end (maximum)."""

    def wire(self) -> dict[int, list[float]]:
        """As the wire rules take them (engine_ext.VersionOutput's `ranges`): starts then ends, per width."""
        return {width: [*starts, *ends] for width, (starts, ends) in self.widths.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "texts": self.texts,
                "widths": {str(w): [list(s), list(e)] for w, (s, e) in sorted(self.widths.items(), reverse=True)}}


def parse_ranges(data: Any, widths: tuple[int, ...], where: str) -> EmbeddingRanges:
    """The manifest's entry, checked against the bundle's `widths` (dim first); ValueError saying what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("widths"), dict) or not data["widths"]:
        raise ValueError(f"{where}: {MANIFEST_KEY} must be an object with a non-empty 'widths' object of "
                         "{width: [[start, ...], [end, ...]]}")
    source, texts = data.get("source", ""), data.get("texts", 0)
    if not isinstance(source, str) or isinstance(texts, bool) or not isinstance(texts, int) or texts < 0:
        raise ValueError(f"{where}: {MANIFEST_KEY} 'source' must be a string and 'texts' a count")
    out: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    for key, pair in data["widths"].items():
        width = int(key) if isinstance(key, str) and key.isdigit() else -1
        if width not in widths:
            raise ValueError(f"{where}: {MANIFEST_KEY} width {key!r} is not one of the bundle's widths "
                             f"{list(widths)}")
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, list) and len(p) == width
                                                                  for p in pair)):
            raise ValueError(f"{where}: {MANIFEST_KEY} width {width} must be [[start] * {width}, [end] * {width}]")
        starts, ends = pair
        if not all(_finite(v) for v in (*starts, *ends)) or any(s > e for s, e in zip(starts, ends, strict=True)):
            raise ValueError(f"{where}: {MANIFEST_KEY} width {width} must hold finite numbers, each start <= its end")
        out[width] = (tuple(float(v) for v in starts), tuple(float(v) for v in ends))
    return EmbeddingRanges(source=source, texts=texts, widths=out)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
