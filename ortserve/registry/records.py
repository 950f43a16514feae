"""Registry records (the JSON stored under the store schema) and the names and keys they live at.

    <prefix>/models/<model>/versions/<version>   VersionRecord, immutable once written
    <prefix>/models/<model>/routing              Routing, CAS-updated, with a short rollback history
    <prefix>/rollouts/<model>/state              a rollout's record (registry/rollout.py), CAS-updated
    <prefix>/rollouts/<model>/figures/<replica>  what one replica saw of the rollout's current stage

Store keys here are relative to the store's prefix; the store backends add it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ortserve.bundle.manifest import BundleError, BundleManifest, parse_manifest

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
MODELS_PREFIX = "models/"
HISTORY_LIMIT = 10
# The bundle manifest's fields that a version record carries (precision and optimization only for optimised
# bundles, multi_label only for classifiers with independent labels, imported only for imported bundles,
# references only for bundles that carry reference answers).
MANIFEST_KEYS = ("format", "labels", "dim", "multi_label", "max_seq_len", "notes", "precision", "optimization",
                 "imported", "references")


class RecordError(ValueError):
    """A record or a name that does not follow the schema; one-line message."""


def check_name(kind: str, name: str) -> str:
    """Model and version names: 1-64 chars of [A-Za-z0-9._-], starting alphanumeric, never '..'."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
        raise RecordError(f"invalid {kind} name {name!r}: use 1-64 characters from A-Z a-z 0-9 . _ -, "
                          f"starting with a letter or digit (no '/', '..' or spaces)")
    return name


def model_prefix(model: str) -> str:
    return f"{MODELS_PREFIX}{check_name('model', model)}/"


def versions_prefix(model: str) -> str:
    return f"{model_prefix(model)}versions/"


def version_key(model: str, version: str) -> str:
    return f"{versions_prefix(model)}{check_name('version', version)}"


def routing_key(model: str) -> str:
    return f"{model_prefix(model)}routing"


@dataclass(frozen=True)
class ArtifactRef:
    """Where a packed bundle lives and what it must hash to."""

    uri: str
    sha256: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_dict(cls, data: Any) -> ArtifactRef:
        if not isinstance(data, dict):
            raise RecordError("artifact must be an object with uri, sha256, size")
        uri, sha, size = data.get("uri"), data.get("sha256"), data.get("size")
        if not isinstance(uri, str) or not uri:
            raise RecordError("artifact.uri must be a non-empty string")
        if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
            raise RecordError("artifact.sha256 must be 64 lowercase hex digits")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RecordError("artifact.size must be a non-negative integer")
        return cls(uri=uri, sha256=sha, size=size)


@dataclass(frozen=True)
class VersionRecord:
    model: str
    version: str
    artifact: ArtifactRef
    manifest: BundleManifest
    created_at: str
    created_by: str

    @property
    def labels(self) -> tuple[str, ...]:
        return self.manifest.labels

    @property
    def max_seq_len(self) -> int:
        return self.manifest.max_seq_len

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "artifact": self.artifact.to_dict(),
            "created_at": self.created_at,
            "created_by": self.created_by,
            # format, labels (a classifier) or dim (an embedding model), max_seq_len, notes; and, where the bundle
            # has them, "multi_label", "precision", "optimization", "imported" and "references" (plain records keep
            # their old shape).
            **self.manifest.to_dict(),
        }

    def to_json(self) -> bytes:
        return dump_record(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes, *, key: str = "version record") -> VersionRecord:
        data = load_record(raw, key)
        try:
            model = check_name("model", data.get("model"))
            version = check_name("version", data.get("version"))
            artifact = ArtifactRef.from_dict(data.get("artifact"))
            manifest = parse_manifest({k: data.get(k) for k in MANIFEST_KEYS if k in data}, key)
            created_at, created_by = data.get("created_at", ""), data.get("created_by", "")
            if not isinstance(created_at, str) or not isinstance(created_by, str):
                raise RecordError("created_at and created_by must be strings")
        except (RecordError, BundleError) as e:
            raise RecordError(f"{key}: {e}") from None
        return cls(model=model, version=version, artifact=artifact, manifest=manifest,
                   created_at=created_at, created_by=created_by)


@dataclass(frozen=True)
class Routing:
    weights: Mapping[str, int]
    updated_at: str = ""
    updated_by: str = ""
    # Earlier weight maps, newest first, at most HISTORY_LIMIT; `rollback` pops the first.
    history: tuple[Mapping[str, int], ...] = field(default=())
    shadow: tuple[str, int] | None = None
    """(version, percent): a version with no weight that gets a copy of that share of the routed calls, its answers
    compared with the live ones and never returned; None: no shadow."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "weights": dict(sorted(self.weights.items())),
            "updated_at": self.updated_at,
            "updated_by": self.updated_by,
            "history": [dict(sorted(h.items())) for h in self.history[:HISTORY_LIMIT]],
        }
        if self.shadow is not None:  # routing without a shadow keeps its old shape
            out["shadow"] = {"version": self.shadow[0], "percent": self.shadow[1]}
        return out

    def to_json(self) -> bytes:
        return dump_record(self.to_dict())

    @classmethod
    def from_json(cls, raw: bytes, *, key: str = "routing") -> Routing:
        data = load_record(raw, key)
        try:
            weights = check_weights(data.get("weights"))
            history_raw = data.get("history", [])
            if not isinstance(history_raw, list):
                raise RecordError("history must be a list")
            history = tuple(check_weights(h) for h in history_raw[:HISTORY_LIMIT])
            updated_at, updated_by = data.get("updated_at", ""), data.get("updated_by", "")
            if not isinstance(updated_at, str) or not isinstance(updated_by, str):
                raise RecordError("updated_at and updated_by must be strings")
            shadow = check_shadow(data["shadow"], weights) if data.get("shadow") is not None else None
        except RecordError as e:
            raise RecordError(f"{key}: {e}") from None
        return cls(weights=weights, updated_at=updated_at, updated_by=updated_by, history=history, shadow=shadow)

    def weight_of(self, version: str) -> int:
        return self.weights.get(version, 0)


def check_weights(weights: Any, published: Iterable[str] | None = None) -> dict[str, int]:
    """Weights are ints >= 0 summing to 100; with `published`, every name must be one of them."""
    if not isinstance(weights, dict) or not weights:
        raise RecordError("weights must be a non-empty map of version -> percent")
    out: dict[str, int] = {}
    for version, weight in weights.items():
        check_name("version", version)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise RecordError(f"weight for {version!r} must be an integer >= 0, got {weight!r}")
        out[version] = weight
    total = sum(out.values())
    if total != 100:
        raise RecordError(f"weights must sum to 100, got {total} ({format_weights(out)})")
    if published is not None:
        unknown = sorted(set(out) - set(published))
        if unknown:
            raise RecordError(f"weights name unpublished version(s): {', '.join(unknown)}")
    return out


def check_shadow(shadow: Any, weights: Mapping[str, int]) -> tuple[str, int]:
    """A shadow is {"version", "percent"}: a version without weight, and 1..100 percent of the calls."""
    if isinstance(shadow, tuple | list) and len(shadow) == 2:
        shadow = {"version": shadow[0], "percent": shadow[1]}
    if not isinstance(shadow, dict):
        raise RecordError("shadow must be an object with version and percent")
    version, percent = check_name("version", shadow.get("version")), shadow.get("percent")
    if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100:
        raise RecordError(f"shadow percent must be an integer 1..100, got {percent!r}")
    if weights.get(version, 0) > 0:
        raise RecordError(f"shadow {version} has weight {weights[version]}: a shadow takes no traffic of its own")
    return version, percent


def format_weights(weights: Mapping[str, int]) -> str:
    return " ".join(f"{v}={w}" for v, w in sorted(weights.items()))


def dump_record(data: Mapping[str, Any]) -> bytes:
    # Sorted keys: identical records give identical bytes, which keeps idempotent writes cheap to spot.
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def load_record(raw: bytes, key: str) -> dict[str, Any]:
    """A record's JSON object, or RecordError naming `key` (every record type reads its bytes through this)."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{key}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{key}: expected a JSON object")
    return data
