"""Offline validation of the Kubernetes, Istio and Prometheus manifests under deploy/.

Core kinds go through kubernetes-validate (strict, a fixed Kubernetes version); custom kinds through
the hand-written schemas in crd_schemas.py; the rules between objects through manifest_rules.py.
The mutation tests at the end break one field of a loaded manifest in memory and assert the
validators name the mistake, so none of these checks can pass vacuously.
"""

from __future__ import annotations

import ast
import copy
import re
import tomllib
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import pytest
from crd_schemas import SCHEMAS, crd_problems
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError
from manifest_files import DEPLOY_ROOT, REPO_ROOT, Manifest, is_kubernetes_object, load_docs, yaml_files
from manifest_rules import (
    LIVENESS_SERVICE,
    METRIC_LABELS,
    config_mount_problems,
    deployment_problems,
    hpa_problems,
    istio_problems,
    job_problems,
    load_toml_settings,
    pdb_problems,
    reference_problems,
    service_monitor_problems,
    service_problems,
)

# The oldest Kubernetes we support: native gRPC probes are GA since 1.27, and 1.33 is the
# oldest release still patched upstream when this was written.
K8S_VERSION = "1.33.0"
METRIC_CLASSES = {"Counter", "Gauge", "Histogram", "Summary", "GaugeMetricFamily", "CounterMetricFamily"}
CONSUL_README = DEPLOY_ROOT / "consul" / "README.md"


def documented_secrets() -> set[str]:
    """Secrets the Consul README tells operators to create (tokens never live in git)."""
    return set(re.findall(r"create secret generic ([a-z0-9-]+)", CONSUL_README.read_text()))


def console_scripts() -> set[str]:
    return set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def k8s_problems(doc: dict[str, Any]) -> list[str]:
    """kubernetes-validate for built-in kinds, crd_schemas for custom ones."""
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except SchemaNotFoundError:
        return crd_problems(doc)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []


def all_rule_problems(objects: list[Manifest]) -> list[str]:
    return (
        deployment_problems(objects)
        + config_mount_problems(objects)
        + reference_problems(objects, documented_secrets())
        + service_problems(objects)
        + hpa_problems(objects)
        + pdb_problems(objects)
        + service_monitor_problems(objects)
        + istio_problems(objects)
        + job_problems(objects, console_scripts())
    )


@pytest.mark.parametrize("path", list(yaml_files()), ids=lambda p: str(p.relative_to(DEPLOY_ROOT)))
def test_every_yaml_file_parses_into_mappings(path: Any) -> None:
    assert load_docs(path), f"{path} holds no YAML document"


def test_every_applied_object_validates(cluster_objects: list[Manifest]) -> None:
    problems = [f"{m.label()}: {p}" for m in cluster_objects for p in k8s_problems(m.doc)]
    assert problems == []


def test_the_install_has_every_kind_the_issue_asks_for(cluster_objects: list[Manifest]) -> None:
    kinds = {m.kind for m in cluster_objects}
    wanted = {
        "Namespace", "ServiceAccount", "ConfigMap", "PersistentVolumeClaim", "Service", "Deployment",
        "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor", "Job", "VirtualService",
        "DestinationRule", "PrometheusRule",
    }  # fmt: skip
    assert wanted <= kinds, f"missing {wanted - kinds}"
    assert {m.doc["metadata"]["labels"]["version"] for m in cluster_objects if m.kind == "Deployment"} == {"v1", "v2"}


def test_kubernetes_validate_does_not_know_custom_kinds(cluster_objects: list[Manifest]) -> None:
    # Its CLI only warns on CRDs and exits 0; the API raises, which is why crd_schemas exists.
    for manifest in cluster_objects:
        if manifest.kind in SCHEMAS:
            with pytest.raises(SchemaNotFoundError):
                kubernetes_validate.validate(manifest.doc, K8S_VERSION, strict=True)


def test_objects_agree_with_each_other(cluster_objects: list[Manifest]) -> None:
    assert all_rule_problems(cluster_objects) == []


def test_consul_values_and_registry_wiring(cluster_objects: list[Manifest]) -> None:
    (values,) = load_docs(DEPLOY_ROOT / "consul" / "values.yaml")
    replicas = values["server"]["replicas"]
    assert replicas >= 3 and replicas % 2 == 1, "Raft wants an odd number of servers, at least 3"
    assert values["server"]["bootstrapExpect"] == replicas
    assert values["global"]["acls"]["manageSystemACLs"] is True
    (registry,) = (m.doc["data"] for m in cluster_objects if m.name == "ortserve-registry")
    url = urlsplit(registry["ORTSERVE_REGISTRY"])
    # `helm install consul ... -n consul` names the servers' Service <global.name>-server.
    assert url.scheme == "consul"
    assert url.hostname == f"{values['global']['name']}-server.consul.svc"
    assert url.port == (8501 if values["global"]["tls"]["enabled"] else 8500)
    (prefix,) = parse_qs(url.query)["prefix"]
    for policy, access in (("ortserve-read.hcl", "read"), ("ortserve-publish.hcl", "write")):
        text = (DEPLOY_ROOT / "consul" / policy).read_text()
        assert re.search(rf'key_prefix "{re.escape(prefix)}" {{\s*policy = "{access}"', text), policy
    assert {"ortserve-consul-token", "ortserve-consul-publisher-token"} <= documented_secrets()


def test_liveness_service_matches_the_server() -> None:
    """The probe's service name is the constant ortserve/service/app.py registers (read, not imported)."""
    tree = ast.parse((REPO_ROOT / "ortserve" / "service" / "app.py").read_text())
    (value,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["LIVENESS_SERVICE"]
        and isinstance(node.value, ast.Constant)
    ]
    assert value == LIVENESS_SERVICE


def test_metric_label_list_covers_the_server_metrics() -> None:
    """METRIC_LABELS (scrape labels must not reuse them) holds every label name metrics.py declares."""
    declared: set[str] = set()
    for node in ast.walk(ast.parse((REPO_ROOT / "ortserve" / "service" / "metrics.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in METRIC_CLASSES:
            lists = [kw.value for kw in node.keywords if kw.arg in ("labels", "labelnames")] + node.args[2:3]
            declared |= {
                e.value for lst in lists if isinstance(lst, ast.List) for e in lst.elts if isinstance(e, ast.Constant)
            }
    assert declared, "found no metric label lists in metrics.py"
    assert declared <= METRIC_LABELS


def test_image_default_config_is_accepted_by_the_server() -> None:
    settings = load_toml_settings((DEPLOY_ROOT / "config" / "ortserve.toml").read_text())
    assert (settings.port, settings.metrics_port, settings.log_format) == (8001, 8002, "json")


# --- mutation tests: one realistic mistake each, and the validator that must name it ---------------


def _find(objects: list[Manifest], kind: str, name: str) -> dict[str, Any]:
    (doc,) = (m.doc for m in objects if m.kind == kind and m.name == name)
    return doc


def _container(objects: list[Manifest], deployment: str) -> dict[str, Any]:
    return _find(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]


def _split(objects: list[Manifest]) -> list[dict[str, Any]]:
    (route,) = (r for r in _find(objects, "VirtualService", "ortserve")["spec"]["http"] if "match" not in r)
    return route["route"]


def _typo_weight(objects: list[Manifest]) -> None:
    _split(objects)[1]["wieght"] = _split(objects)[1].pop("weight")


def _string_weight(objects: list[Manifest]) -> None:
    _split(objects)[0]["weight"] = "ninety"


def _weights_110(objects: list[Manifest]) -> None:
    _split(objects)[1]["weight"] = 20


def _catch_all_first(objects: list[Manifest]) -> None:
    http = _find(objects, "VirtualService", "ortserve")["spec"]["http"]
    http.insert(0, http.pop())


def _pin_to_wrong_subset(objects: list[Manifest]) -> None:
    http = _find(objects, "VirtualService", "ortserve")["spec"]["http"]
    http[0]["route"][0]["destination"]["subset"] = "v1"


def _uppercase_header(objects: list[Manifest]) -> None:
    match = _find(objects, "VirtualService", "ortserve")["spec"]["http"][0]["match"][0]
    match["headers"] = {"X-Ortserve-Release": match["headers"]["x-ortserve-release"]}


def _unknown_subset(objects: list[Manifest]) -> None:
    _split(objects)[1]["destination"]["subset"] = "v3"


def _subset_label_typo(objects: list[Manifest]) -> None:
    _find(objects, "DestinationRule", "ortserve")["spec"]["subsets"][1]["labels"] = {"version": "2"}


def _vs_wrong_port(objects: list[Manifest]) -> None:
    _split(objects)[0]["destination"]["port"] = {"number": 8002}


def _dr_wrong_host(objects: list[Manifest]) -> None:
    _find(objects, "DestinationRule", "ortserve")["spec"]["host"] = "ortserve.default.svc.cluster.local"


def _probe_wrong_port(objects: list[Manifest]) -> None:
    _container(objects, "ortserve-v1")["readinessProbe"]["grpc"]["port"] = 8002


def _probe_named_port(objects: list[Manifest]) -> None:
    _container(objects, "ortserve-v1")["livenessProbe"]["grpc"]["port"] = "grpc"


def _no_startup_probe(objects: list[Manifest]) -> None:
    del _container(objects, "ortserve-v2")["startupProbe"]


def _field_typo(objects: list[Manifest]) -> None:
    _container(objects, "ortserve-v1")["imagePulPolicy"] = "IfNotPresent"


def _writable_root(objects: list[Manifest]) -> None:
    _container(objects, "ortserve-v1")["securityContext"]["readOnlyRootFilesystem"] = False


def _short_grace(objects: list[Manifest]) -> None:
    _find(objects, "Deployment", "ortserve-v2")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 15


def _scrape_wrong_port(objects: list[Manifest]) -> None:
    notes = _find(objects, "Deployment", "ortserve-v1")["spec"]["template"]["metadata"]["annotations"]
    notes["prometheus.io/port"] = "8001"


def _config_port_drift(objects: list[Manifest]) -> None:
    data = _find(objects, "ConfigMap", "ortserve-config")["data"]
    data["ortserve.toml"] = data["ortserve.toml"].replace("port = 8001", "port = 9001")


def _config_http_port_drift(objects: list[Manifest]) -> None:
    data = _find(objects, "ConfigMap", "ortserve-config")["data"]
    data["ortserve.toml"] = data["ortserve.toml"].replace("http_port = 8000", "http_port = 9000")


def _config_unknown_key(objects: list[Manifest]) -> None:
    data = _find(objects, "ConfigMap", "ortserve-config")["data"]
    data["ortserve.toml"] = data["ortserve.toml"].replace("shutdown_grace_s", "shutdown_grace")


def _env_typo(objects: list[Manifest]) -> None:
    env = _container(objects, "ortserve-v1")["env"]
    (cache,) = (e for e in env if e["name"] == "ORTSERVE_ARTIFACT_CACHE")
    cache["name"] = "ORTSERVE_CACHE"


def _liveness_on_overall(objects: list[Manifest]) -> None:
    del _container(objects, "ortserve-v2")["livenessProbe"]["grpc"]["service"]


def _service_port_unnamed(objects: list[Manifest]) -> None:
    _find(objects, "Service", "ortserve")["spec"]["ports"][0]["name"] = "tcp"


def _service_wrong_target(objects: list[Manifest]) -> None:
    _find(objects, "Service", "ortserve")["spec"]["ports"][0]["targetPort"] = "grcp"


def _hpa_wrong_target(objects: list[Manifest]) -> None:
    _find(objects, "HorizontalPodAutoscaler", "ortserve-v2")["spec"]["scaleTargetRef"]["name"] = "ortserve"


def _pdb_overlaps(objects: list[Manifest]) -> None:
    _find(objects, "PodDisruptionBudget", "ortserve-v1")["spec"]["selector"]["matchLabels"] = {"app": "ortserve"}


def _monitor_wrong_port(objects: list[Manifest]) -> None:
    _find(objects, "ServiceMonitor", "ortserve")["spec"]["endpoints"][0]["port"] = "metrics"


def _monitor_selects_nothing(objects: list[Manifest]) -> None:
    _find(objects, "ServiceMonitor", "ortserve")["spec"]["selector"]["matchLabels"] = {"app": "ortsrve"}


def _monitor_shadows_version(objects: list[Manifest]) -> None:
    endpoint = _find(objects, "ServiceMonitor", "ortserve")["spec"]["endpoints"][0]
    endpoint["relabelings"][0]["targetLabel"] = "version"


def _job_wrong_command(objects: list[Manifest]) -> None:
    job = _find(objects, "Job", "ortserve-publish-sentiment-v2")
    job["spec"]["template"]["spec"]["containers"][0]["command"] = ["ortserve-registry"]


def _undocumented_secret(objects: list[Manifest]) -> None:
    env = _container(objects, "ortserve-v1")["env"]
    (token,) = (e for e in env if e["name"] == "CONSUL_HTTP_TOKEN")
    token["valueFrom"]["secretKeyRef"]["name"] = "consul-token"


def _missing_configmap_key(objects: list[Manifest]) -> None:
    (registry,) = (e for e in _container(objects, "ortserve-v2")["env"] if e["name"] == "ORTSERVE_REGISTRY")
    registry["valueFrom"]["configMapKeyRef"]["key"] = "REGISTRY"


def _alert_field_typo(objects: list[Manifest]) -> None:
    rule = _find(objects, "PrometheusRule", "ortserve")["spec"]["groups"][0]["rules"][0]
    rule["anotations"] = rule.pop("annotations")


Mutation = Callable[[list[Manifest]], None]
MUTATIONS: list[tuple[str, Mutation, str]] = [
    ("weight-typo", _typo_weight, "'wieght' was unexpected"),
    ("weight-string", _string_weight, "'ninety' is not of type 'integer'"),
    ("weights-not-100", _weights_110, "sum to 100"),
    ("catch-all-first", _catch_all_first, "rules after it never apply"),
    ("pin-wrong-subset", _pin_to_wrong_subset, "does not route to subset 'v2'"),
    ("uppercase-header", _uppercase_header, "'X-Ortserve-Release' does not match"),
    ("unknown-subset", _unknown_subset, "subset 'v3' is not defined"),
    ("subset-selects-nothing", _subset_label_typo, "subset v2 selects pods of []"),
    ("vs-pinned-port", _vs_wrong_port, "destination port 8002 without a match on port 8002"),
    ("config-http-port-drift", _config_http_port_drift, "ConfigMap http_port 9000 != container port named 'http' 8000"),
    ("dr-wrong-host", _dr_wrong_host, "is no Service here"),
    ("probe-wrong-port", _probe_wrong_port, "readinessProbe probes port 8002"),
    ("probe-named-port", _probe_named_port, "'grpc' is not of type 'integer'"),
    ("no-startup-probe", _no_startup_probe, "has no startupProbe"),
    ("field-typo", _field_typo, "'imagePulPolicy' was unexpected"),
    ("writable-root", _writable_root, "readOnlyRootFilesystem"),
    ("short-grace", _short_grace, "must exceed shutdown_grace_s"),
    ("scrape-wrong-port", _scrape_wrong_port, "prometheus.io/port '8001' != metrics port 8002"),
    ("config-port-drift", _config_port_drift, "!= container ports 8001/8002"),
    ("config-unknown-key", _config_unknown_key, "unknown setting 'shutdown_grace'"),
    ("env-typo", _env_typo, "name no server setting"),
    ("liveness-on-overall", _liveness_on_overall, "livenessProbe asks health service '', expected 'liveness'"),
    ("service-port-name", _service_port_unnamed, "must be named grpc*"),
    ("service-target", _service_wrong_target, "targets 'grcp'"),
    ("hpa-target", _hpa_wrong_target, "scaleTargetRef Deployment/ortserve is not a Deployment here"),
    ("pdb-overlap", _pdb_overlaps, "matches 2 Deployments' pods"),
    ("monitor-port", _monitor_wrong_port, "no port named 'metrics'"),
    ("monitor-selector", _monitor_selects_nothing, "selector matches no Service"),
    ("monitor-label-clash", _monitor_shadows_version, "collide with the server's metric labels"),
    ("job-command", _job_wrong_command, "is not a console script"),
    ("undocumented-secret", _undocumented_secret, "Secret 'consul-token' is neither defined nor documented"),
    ("configmap-key", _missing_configmap_key, "reads missing ConfigMap key"),
    ("alert-field-typo", _alert_field_typo, "'anotations' was unexpected"),
]


@pytest.mark.parametrize(("mutate", "expected"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_validators_catch_a_broken_manifest(cluster_objects: list[Manifest], mutate: Mutation, expected: str) -> None:
    objects = [Manifest(m.path, copy.deepcopy(m.doc)) for m in cluster_objects]
    mutate(objects)
    # Schema-check only what the mutation touched (the rest passed test_every_applied_object_validates):
    # kubernetes-validate reloads its definitions on every call.
    changed = [m for m, before in zip(objects, cluster_objects, strict=True) if m.doc != before.doc]
    assert changed, "the mutation changed nothing"
    problems = [p for m in changed if is_kubernetes_object(m.doc) for p in k8s_problems(m.doc)]
    problems += all_rule_problems(objects)
    assert any(expected in p for p in problems), f"expected {expected!r} among {problems}"
