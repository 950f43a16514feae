"""A strict subset of `kustomize build`, enough to render deploy/k8s without the binary.

Supported kustomization fields: resources (files and directories), patches (strategic merge,
by path), namespace, namePrefix/nameSuffix (with the name references this tree uses), labels
(pairs, includeSelectors, includeTemplates) and images. Anything else raises KustomizeError,
so a manifest that starts using a feature this renderer does not know fails loudly instead of
being rendered wrong. tests/deploy/test_kustomize.py compares the output with `kubectl kustomize`
wherever kubectl is installed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from manifest_files import load_docs

SUPPORTED_FIELDS = frozenset(
    {"apiVersion", "kind", "resources", "patches", "namespace", "namePrefix", "nameSuffix", "labels", "images"}
)
CLUSTER_SCOPED = frozenset({"Namespace", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass"})
# Strategic-merge list keys for the lists a patch here may touch; other lists are replaced.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
}
# Pod-template workloads whose selector/template kustomize's label transformer updates.
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"})

Obj = dict[str, Any]


class KustomizeError(Exception):
    """The kustomization is broken or uses something this renderer does not support."""


def load_kustomization(directory: Path) -> Obj:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    docs = load_docs(path)
    if len(docs) != 1:
        raise KustomizeError(f"{path}: expected one document, found {len(docs)}")
    unknown = set(docs[0]) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{path}: unsupported field(s) {sorted(unknown)}")
    return docs[0]


def render(directory: Path) -> list[Obj]:
    """Render one kustomization directory, like `kustomize build DIR` (document order aside)."""
    k = load_kustomization(directory)
    objects: list[Obj] = []
    for entry in k.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            objects += render(target)
        elif target.is_file():
            objects += [copy.deepcopy(doc) for doc in load_docs(target)]
        else:
            raise KustomizeError(f"{directory / 'kustomization.yaml'}: resource {entry!r} does not exist")
    _check_unique(objects, directory)
    if "namespace" in k:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = k["namespace"]
    for patch in k.get("patches", []):
        _apply_patch(objects, directory, patch)
    for labels in k.get("labels", []):
        _apply_labels(objects, labels, directory)
    if "namePrefix" in k or "nameSuffix" in k:
        _rename(objects, k.get("namePrefix", ""), k.get("nameSuffix", ""))
    for image in k.get("images", []):
        _apply_image(objects, image, directory)
    return objects


def _check_unique(objects: list[Obj], directory: Path) -> None:
    seen: set[tuple[str, str, str]] = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if key in seen:
            raise KustomizeError(f"{directory}: {key} appears twice")
        seen.add(key)


def _apply_patch(objects: list[Obj], directory: Path, patch: Obj) -> None:
    if set(patch) != {"path"}:
        raise KustomizeError(f"{directory}: only `patches: [{{path: FILE}}]` is supported, got {patch}")
    path = directory / patch["path"]
    if not path.is_file():
        raise KustomizeError(f"{directory / 'kustomization.yaml'}: patch {patch['path']!r} does not exist")
    for doc in load_docs(path):
        matches = [
            obj for obj in objects if obj["kind"] == doc["kind"] and obj["metadata"]["name"] == doc["metadata"]["name"]
        ]
        if len(matches) != 1:
            raise KustomizeError(
                f"{path}: patch target {doc['kind']}/{doc['metadata']['name']} matched {len(matches)} resources"
            )
        merged = strategic_merge(matches[0], doc)
        matches[0].clear()
        matches[0].update(merged)


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """Maps merge recursively, keyed lists merge by their key, other values replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        if "$patch" in patch:
            raise KustomizeError(f"$patch directives are not supported (at {key!r})")
        out = dict(base)
        for k, v in patch.items():
            out[k] = strategic_merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        out_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            index = next((i for i, b in enumerate(out_list) if b.get(merge_key) == item.get(merge_key)), None)
            if index is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[index] = strategic_merge(out_list[index], item, "")
        return out_list
    return copy.deepcopy(patch)


def _apply_labels(objects: list[Obj], entry: Obj, directory: Path) -> None:
    unknown = set(entry) - {"pairs", "includeSelectors", "includeTemplates"}
    if unknown:
        raise KustomizeError(f"{directory}: unsupported labels option(s) {sorted(unknown)}")
    pairs = entry["pairs"]
    selectors = bool(entry.get("includeSelectors", False))
    templates = selectors or bool(entry.get("includeTemplates", False))
    for obj in objects:
        obj["metadata"].setdefault("labels", {}).update(pairs)
        spec = obj.get("spec", {})
        if obj["kind"] in WORKLOAD_KINDS:
            if templates:
                spec["template"].setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
            if selectors:
                spec["selector"].setdefault("matchLabels", {}).update(pairs)
        elif obj["kind"] == "Job" and templates:
            spec["template"].setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
        elif selectors and obj["kind"] == "PodDisruptionBudget":
            spec["selector"].setdefault("matchLabels", {}).update(pairs)
        elif selectors and obj["kind"] == "Service":
            spec.setdefault("selector", {}).update(pairs)


def _rename(objects: list[Obj], prefix: str, suffix: str) -> None:
    renamed: dict[tuple[str, str], str] = {}
    for obj in objects:
        if obj["kind"] == "Namespace":
            continue
        old = obj["metadata"]["name"]
        obj["metadata"]["name"] = f"{prefix}{old}{suffix}"
        renamed[(obj["kind"], old)] = obj["metadata"]["name"]
    # References kustomize follows to a renamed object, limited to the ones this tree has.
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] == "HorizontalPodAutoscaler":
            ref = spec["scaleTargetRef"]
            ref["name"] = renamed.get((ref["kind"], ref["name"]), ref["name"])
        pod = spec.get("template", {}).get("spec")
        if pod is not None:
            _rename_pod_refs(pod, renamed)


def _rename_pod_refs(pod: Obj, renamed: dict[tuple[str, str], str]) -> None:
    def new(kind: str, name: str) -> str:
        return renamed.get((kind, name), name)

    if "serviceAccountName" in pod:
        pod["serviceAccountName"] = new("ServiceAccount", pod["serviceAccountName"])
    for volume in pod.get("volumes", []):
        if "configMap" in volume:
            volume["configMap"]["name"] = new("ConfigMap", volume["configMap"]["name"])
        if "secret" in volume:
            volume["secret"]["secretName"] = new("Secret", volume["secret"]["secretName"])
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            claim["claimName"] = new("PersistentVolumeClaim", claim["claimName"])
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        for env in container.get("env", []):
            source = env.get("valueFrom", {})
            if "configMapKeyRef" in source:
                source["configMapKeyRef"]["name"] = new("ConfigMap", source["configMapKeyRef"]["name"])
            if "secretKeyRef" in source:
                source["secretKeyRef"]["name"] = new("Secret", source["secretKeyRef"]["name"])


def split_image(ref: str) -> tuple[str, str]:
    """`host:5000/repo:tag` -> (`host:5000/repo`, `tag`); no tag -> (ref, "")."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, ""
    return name, tag


def _apply_image(objects: list[Obj], image: Obj, directory: Path) -> None:
    unknown = set(image) - {"name", "newName", "newTag"}
    if unknown:
        raise KustomizeError(f"{directory}: unsupported images option(s) {sorted(unknown)}")
    hits = 0
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            repo, tag = split_image(container["image"])
            if repo == image["name"]:
                new_tag = image.get("newTag", tag)
                container["image"] = image.get("newName", repo) + (f":{new_tag}" if new_tag else "")
                hits += 1
    if hits == 0:
        raise KustomizeError(f"{directory}: images entry {image['name']!r} matches no container")
