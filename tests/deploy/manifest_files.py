"""Where the deploy artefacts live and how their YAML is read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_ROOT = REPO_ROOT / "deploy"
K8S_ROOT = DEPLOY_ROOT / "k8s"


@dataclass(frozen=True)
class Manifest:
    """One YAML document and the file it came from (for messages)."""

    path: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.doc.get("metadata", {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.doc.get("metadata", {}).get("namespace", ""))

    def label(self) -> str:
        return f"{self.kind}/{self.name} ({self.path.relative_to(REPO_ROOT)})"


def load_docs(path: Path) -> list[dict[str, Any]]:
    """All non-empty documents of a YAML file; each must be a mapping."""
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: document {index} is a {type(doc).__name__}, not a mapping")
    return docs


def yaml_files() -> Iterator[Path]:
    """Every YAML file under deploy/."""
    for pattern in ("*.yaml", "*.yml"):
        yield from sorted(DEPLOY_ROOT.rglob(pattern))


def is_kubernetes_object(doc: dict[str, Any]) -> bool:
    """Objects an API server would accept (not kustomizations, not Helm values)."""
    return {"apiVersion", "kind", "metadata"} <= doc.keys() and doc["kind"] != "Kustomization"
