"""Fixtures for the offline checks of deploy/ (manifests, kustomize, Istio, Dockerfile).

The checks themselves live in small modules beside the tests (kustomize_lite, istio_schemas,
manifest_rules, dockerfile_check); this folder is put on sys.path so the tests import them by
name, which pytest's importlib mode does not do for sibling modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kustomize_lite import render
from manifest_files import DEPLOY_ROOT, K8S_ROOT, Manifest, load_docs


@pytest.fixture(scope="session")
def cluster_objects() -> list[Manifest]:
    """Everything a full install applies: the kustomize tree, the optional extras and Istio."""
    rendered = [Manifest(K8S_ROOT / "kustomization.yaml", doc) for doc in render(K8S_ROOT)]
    extras = [
        K8S_ROOT / "optional" / "servicemonitor.yaml",
        K8S_ROOT / "optional" / "prometheusrule.yaml",
        K8S_ROOT / "job-publish.yaml",
        *sorted((DEPLOY_ROOT / "istio").glob("*.yaml")),
    ]
    loose = [Manifest(path, doc) for path in extras for doc in load_docs(path)]
    return rendered + [m for m in loose if m.doc.get("kind") != "Kustomization"]
