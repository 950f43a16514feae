"""Desired state: what the registry says one model should serve, as immutable plain data.

The watcher produces these (always the full set for a model; a later one supersedes earlier
ones); the server's manager decides how to get there. Nothing here loads anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    uri: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class DesiredVersion:
    version: str
    artifact: ArtifactRef | None = None
    """Where the bundle comes from in the registry; None for a local bundle."""
    bundle_dir: str | None = None
    """A local bundle directory (`ortserve serve --bundle`), used as is."""
    created_at: str = ""

    def source(self) -> str:
        """Identity of the bytes: a version whose source changes must be reloaded."""
        if self.artifact is not None:
            return f"sha256:{self.artifact.sha256}"
        return f"dir:{self.bundle_dir}"


@dataclass(frozen=True, slots=True)
class DesiredModel:
    model: str
    versions: Mapping[str, DesiredVersion]
    """Every published version."""
    weights: Mapping[str, int] = field(default_factory=dict)
    """Routing in percent, summing to 100; empty when the model has no routing yet."""
    shadow: tuple[str, int] | None = None
    """(version, percent): a version without weight that is to get a copy of that share of the calls; kept loaded."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))


@dataclass(frozen=True, slots=True)
class DesiredState:
    models: Mapping[str, DesiredModel]
    index: int = 0
    """The store index this snapshot was read at (for logs and status)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", MappingProxyType(dict(self.models)))
