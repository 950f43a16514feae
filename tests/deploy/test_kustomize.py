"""The kustomize tree under deploy/k8s: every reference resolves and the overlays render right.

kustomize_lite renders without the kustomize binary; where kubectl is installed, its built-in
kustomize must produce exactly the same objects.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kustomize_lite import KustomizeError, load_kustomization, render
from manifest_files import DEPLOY_ROOT, K8S_ROOT, load_docs, yaml_files

KUSTOMIZATIONS = sorted(DEPLOY_ROOT.rglob("kustomization.yaml"))
# Applied on their own, not through a kustomization (see the comments at their top).
STANDALONE = {K8S_ROOT / "job-publish.yaml", K8S_ROOT / "optional" / "servicemonitor.yaml",
              K8S_ROOT / "optional" / "prometheusrule.yaml",
              # Flagger's or Argo's, whichever a team runs (each needs its own CRDs): applied alone
              DEPLOY_ROOT / "analysis" / "flagger-metric-templates.yaml",
              DEPLOY_ROOT / "analysis" / "argo-analysis-template.yaml"}
HELM_VALUES = {DEPLOY_ROOT / "consul" / "values.yaml"}
PROMETHEUS_RULES = {DEPLOY_ROOT / "prometheus" / "ortserve-alerts.yaml"}  # a rules file, not a Kubernetes object


def _key(obj: dict) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: str(p.parent.relative_to(DEPLOY_ROOT)))
def test_kustomization_references_exist_and_render(path: Path) -> None:
    k = load_kustomization(path.parent)
    for entry in k.get("resources", []) + [p["path"] for p in k.get("patches", [])]:
        assert (path.parent / entry).exists(), f"{path}: {entry} does not exist"
    assert render(path.parent)


def test_no_manifest_is_orphaned() -> None:
    """Every YAML file is a kustomization, reached by one, or documented as applied on its own."""
    reached: set[Path] = set()
    for path in KUSTOMIZATIONS:
        k = load_kustomization(path.parent)
        reached |= {(path.parent / e).resolve() for e in k.get("resources", [])}
        reached |= {(path.parent / p["path"]).resolve() for p in k.get("patches", [])}
    orphans = [
        p
        for p in yaml_files()
        if p.name != "kustomization.yaml" and p.resolve() not in reached
        and p not in STANDALONE | HELM_VALUES | PROMETHEUS_RULES
    ]
    assert orphans == []


def test_overlays_make_two_distinct_releases() -> None:
    releases = {}
    for overlay, version in (("stable", "v1"), ("canary", "v2")):
        objects = {o["kind"]: o for o in render(K8S_ROOT / "overlays" / overlay)}
        dep = objects["Deployment"]
        assert dep["metadata"]["name"] == f"ortserve-{version}"
        assert dep["spec"]["selector"]["matchLabels"] == {"app": "ortserve", "version": version}
        assert dep["spec"]["template"]["metadata"]["labels"]["version"] == version
        assert objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]["version"] == version
        assert objects["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == f"ortserve-{version}"
        assert {o["metadata"]["namespace"] for o in objects.values()} == {"ortserve"}
        releases[version] = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert releases["v1"] != releases["v2"], "the canary must run a different image than stable"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with built-in kustomize) not installed")
@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: str(p.parent.relative_to(DEPLOY_ROOT)))
def test_renderer_matches_kubectl_kustomize(path: Path) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(path.parent)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    theirs = {_key(o): o for o in yaml.safe_load_all(out) if o}
    ours = {_key(o): o for o in render(path.parent)}
    assert ours == theirs


def _write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)


CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n"


@pytest.mark.parametrize(
    ("kustomization", "extra", "expected"),
    [
        ("resources: [missing.yaml]\n", {}, "resource 'missing.yaml' does not exist"),
        ("resources: [cm.yaml]\npatches: [{path: p.yaml}]\n", {}, "patch 'p.yaml' does not exist"),
        (
            "resources: [cm.yaml]\npatches: [{path: p.yaml}]\n",
            {"p.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata: {k: w}\n"},
            "patch target ConfigMap/b matched 0 resources",
        ),
        ("resources: [cm.yaml]\ncommonLabels: {a: b}\n", {}, "unsupported field(s) ['commonLabels']"),
        ("resources: [cm.yaml, cm.yaml]\n", {}, "appears twice"),
        ("resources: [cm.yaml]\nimages: [{name: nginx, newTag: '1'}]\n", {}, "matches no container"),
    ],
    ids=["missing-resource", "missing-patch", "patch-target", "unsupported-field", "duplicate", "image-name"],
)
def test_renderer_rejects_broken_kustomizations(
    tmp_path: Path, kustomization: str, extra: dict[str, str], expected: str
) -> None:
    _write(tmp_path, "kustomization.yaml", kustomization)
    _write(tmp_path, "cm.yaml", CONFIGMAP)
    for name, text in extra.items():
        _write(tmp_path, name, text)
    with pytest.raises(KustomizeError, match=re.escape(expected)):
        render(tmp_path)


def test_patch_merges_into_the_named_resource(tmp_path: Path) -> None:
    _write(tmp_path, "kustomization.yaml", "resources: [cm.yaml]\npatches: [{path: p.yaml}]\nnameSuffix: -x\n")
    _write(tmp_path, "cm.yaml", CONFIGMAP)
    _write(tmp_path, "p.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {j: w}\n")
    (cm,) = render(tmp_path)
    assert cm["metadata"]["name"] == "a-x"
    assert cm["data"] == {"k": "v", "j": "w"}
    assert load_docs(tmp_path / "cm.yaml")[0]["data"] == {"k": "v"}, "rendering must not touch the files"
