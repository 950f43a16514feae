"""Hand-written JSON schemas for the custom resources in deploy/ (Istio, Prometheus Operator).

kubernetes-validate ships schemas for built-in kinds only; for a CRD it raises
SchemaNotFoundError (its CLI merely warns and exits 0). These schemas cover exactly the fields
deploy/ uses, with additionalProperties: false everywhere, so a typo (`wieght`), a wrong type
(`weight: "90"`) or a field in the wrong place fails. Field names follow istio/api
(networking/v1 VirtualService, DestinationRule) and prometheus-operator (ServiceMonitor and PrometheusRule v1);
adding a field to a manifest means adding it here, on purpose. CEL rules of the real CRDs are
not evaluated; manifest_rules.py checks the cross-field rules that matter here.
"""

from __future__ import annotations

from typing import Any

import jsonschema

Schema = dict[str, Any]


def _obj(properties: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> Schema:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
        **extra,
    }


STRING: Schema = {"type": "string", "minLength": 1}
DNS_LABEL: Schema = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
DURATION: Schema = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)$"}
LABELS: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
PORT_NUMBER: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}

METADATA = _obj(
    {"name": DNS_LABEL, "namespace": DNS_LABEL, "labels": LABELS, "annotations": LABELS},
    required=("name",),
)


def _resource(api_versions: list[str], kind: str, spec: Schema) -> Schema:
    return _obj(
        {"apiVersion": {"enum": api_versions}, "kind": {"const": kind}, "metadata": METADATA, "spec": spec},
        required=("apiVersion", "kind", "metadata", "spec"),
    )


# istio/api networking/v1 StringMatch: exactly one of exact, prefix, regex.
STRING_MATCH = _obj(
    {"exact": {"type": "string"}, "prefix": {"type": "string"}, "regex": {"type": "string"}}, maxProperties=1
)

HTTP_MATCH = _obj(
    {
        "name": STRING,
        # Header names in match rules must be lowercase (Envoy lowercases HTTP/2 headers).
        "headers": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": "^[a-z0-9][a-z0-9-]*$"},
            "additionalProperties": STRING_MATCH,
        },
        "uri": STRING_MATCH,
        "port": PORT_NUMBER,
    },
    minProperties=1,
)

DESTINATION = _obj(
    {"host": STRING, "subset": DNS_LABEL, "port": _obj({"number": PORT_NUMBER}, required=("number",))},
    required=("host",),
)

HTTP_ROUTE = _obj(
    {
        "name": STRING,
        "match": {"type": "array", "minItems": 1, "items": HTTP_MATCH},
        "route": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {"destination": DESTINATION, "weight": {"type": "integer", "minimum": 0, "maximum": 100}},
                required=("destination",),
            ),
        },
        "retries": _obj(
            {
                "attempts": {"type": "integer", "minimum": 0},
                "perTryTimeout": DURATION,
                "retryOn": {"type": "string", "pattern": "^[a-z0-9-]+(,[a-z0-9-]+)*$"},
            },
            required=("attempts",),
        ),
        "timeout": DURATION,
    },
    required=("route",),
)

VIRTUAL_SERVICE = _resource(
    ["networking.istio.io/v1", "networking.istio.io/v1beta1"],
    "VirtualService",
    _obj(
        {
            "hosts": {"type": "array", "minItems": 1, "items": STRING},
            "gateways": {"type": "array", "items": STRING},
            "http": {"type": "array", "minItems": 1, "items": HTTP_ROUTE},
        },
        required=("hosts", "http"),
    ),
)

LOAD_BALANCER = _obj(
    {
        "simple": {"enum": ["UNSPECIFIED", "RANDOM", "PASSTHROUGH", "ROUND_ROBIN", "LEAST_REQUEST", "LEAST_CONN"]},
        "consistentHash": _obj(
            {
                "httpHeaderName": STRING,
                "httpCookie": _obj({"name": STRING, "path": STRING, "ttl": DURATION}, required=("name",)),
                "useSourceIp": {"type": "boolean"},
                "httpQueryParameterName": STRING,
            },
            maxProperties=1,
        ),
    },
    minProperties=1,
    maxProperties=1,
)

TRAFFIC_POLICY = _obj(
    {
        "loadBalancer": LOAD_BALANCER,
        "outlierDetection": _obj(
            {
                "consecutiveGatewayErrors": {"type": "integer", "minimum": 0},
                "consecutive5xxErrors": {"type": "integer", "minimum": 0},
                "interval": DURATION,
                "baseEjectionTime": DURATION,
                "maxEjectionPercent": {"type": "integer", "minimum": 0, "maximum": 100},
            }
        ),
    }
)

DESTINATION_RULE = _resource(
    ["networking.istio.io/v1", "networking.istio.io/v1beta1"],
    "DestinationRule",
    _obj(
        {
            "host": STRING,
            "trafficPolicy": TRAFFIC_POLICY,
            "subsets": {
                "type": "array",
                "minItems": 1,
                "items": _obj(
                    {"name": DNS_LABEL, "labels": {**LABELS, "minProperties": 1}, "trafficPolicy": TRAFFIC_POLICY},
                    required=("name", "labels"),
                ),
            },
        },
        required=("host",),
    ),
)

SERVICE_MONITOR = _resource(
    ["monitoring.coreos.com/v1"],
    "ServiceMonitor",
    _obj(
        {
            "selector": _obj({"matchLabels": {**LABELS, "minProperties": 1}}, required=("matchLabels",)),
            "namespaceSelector": _obj({"matchNames": {"type": "array", "minItems": 1, "items": DNS_LABEL}}),
            "endpoints": {
                "type": "array",
                "minItems": 1,
                "items": _obj(
                    {
                        # A Service port *name* (targetPort would be a pod port).
                        "port": DNS_LABEL,
                        "path": {"type": "string", "pattern": "^/"},
                        "interval": DURATION,
                        "scheme": {"enum": ["http", "https"]},
                        "relabelings": {
                            "type": "array",
                            "items": _obj(
                                {
                                    "sourceLabels": {"type": "array", "minItems": 1, "items": STRING},
                                    "targetLabel": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
                                    "action": {"enum": ["replace", "keep", "drop", "labelmap", "labeldrop"]},
                                },
                            ),
                        },
                    },
                    required=("port",),
                ),
            },
        },
        required=("selector", "endpoints"),
    ),
)

# prometheus-operator monitoring.coreos.com/v1 PrometheusRule: groups of alerting rules (deploy/ records none).
ALERT_RULE = _obj(
    {
        "alert": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
        "expr": STRING,
        "for": DURATION,
        "labels": LABELS,
        "annotations": LABELS,
    },
    required=("alert", "expr"),
)
PROMETHEUS_RULE = _resource(
    ["monitoring.coreos.com/v1"],
    "PrometheusRule",
    _obj(
        {
            "groups": {
                "type": "array",
                "minItems": 1,
                "items": _obj(
                    {
                        "name": STRING,
                        "interval": DURATION,
                        "rules": {"type": "array", "minItems": 1, "items": ALERT_RULE},
                    },
                    required=("name", "rules"),
                ),
            }
        },
        required=("groups",),
    ),
)

# fluxcd/flagger flagger.app/v1beta1 MetricTemplate: a provider and a query (with Flagger's {{ }} variables).
METRIC_TEMPLATE = _resource(
    ["flagger.app/v1beta1"],
    "MetricTemplate",
    _obj(
        {
            "provider": _obj(
                {"type": {"enum": ["prometheus"]}, "address": {"type": "string", "pattern": "^https?://"}},
                required=("type",),
            ),
            "query": STRING,
        },
        required=("provider", "query"),
    ),
)

# argoproj/argo-rollouts argoproj.io/v1alpha1 AnalysisTemplate: args and Prometheus metrics with conditions.
ANALYSIS_TEMPLATE = _resource(
    ["argoproj.io/v1alpha1"],
    "AnalysisTemplate",
    _obj(
        {
            "args": {"type": "array", "items": _obj({"name": STRING, "value": {"type": "string"}}, required=("name",))},
            "metrics": {
                "type": "array",
                "minItems": 1,
                "items": _obj(
                    {
                        "name": STRING,
                        "interval": DURATION,
                        "count": {"type": "integer", "minimum": 1},
                        "failureLimit": {"type": "integer", "minimum": 0},
                        "successCondition": STRING,
                        "failureCondition": STRING,
                        "provider": _obj(
                            {"prometheus": _obj({"address": {"type": "string", "pattern": "^https?://"},
                                                 "query": STRING}, required=("address", "query"))},
                            required=("prometheus",),
                        ),
                    },
                    required=("name", "provider"),
                ),
            },
        },
        required=("metrics",),
    ),
)

SCHEMAS: dict[str, Schema] = {
    "MetricTemplate": METRIC_TEMPLATE,
    "AnalysisTemplate": ANALYSIS_TEMPLATE,
    "VirtualService": VIRTUAL_SERVICE,
    "DestinationRule": DESTINATION_RULE,
    "ServiceMonitor": SERVICE_MONITOR,
    "PrometheusRule": PROMETHEUS_RULE,
}


def crd_problems(doc: dict[str, Any]) -> list[str]:
    """Schema violations of one custom resource, as readable strings; [] when valid."""
    schema = SCHEMAS.get(str(doc.get("kind")))
    if schema is None:
        return [f"no schema for custom kind {doc.get('kind')!r}: add one to crd_schemas.py"]
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]
