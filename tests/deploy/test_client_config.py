"""The service config deploy/ ships for gRPC callers (deploy/client/service-config.json) and how it sits with the
mesh's retries and the Services. tests/reload/test_replicas.py runs this same file against three replicas, one of
them SIGKILLed; here its shape, and that each check fails on a real mistake."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from manifest_files import DEPLOY_ROOT, Manifest
from manifest_rules import client_config_problems

from ortserve.proto import grpc_service_pb2

CONFIG = DEPLOY_ROOT / "client" / "service-config.json"
SERVICES = {s.full_name for s in grpc_service_pb2.DESCRIPTOR.services_by_name.values()}


def problems(config: dict[str, Any], objects: list[Manifest]) -> list[str]:
    return client_config_problems(config, objects, SERVICES)


def test_the_shipped_config_is_valid_and_matches_the_mesh(cluster_objects: list[Manifest]) -> None:
    assert {"inference.GRPCInferenceService"} == SERVICES
    assert problems(json.loads(CONFIG.read_text()), cluster_objects) == []


def _policy(config: dict[str, Any]) -> dict[str, Any]:
    return dict(config["methodConfig"][0]["retryPolicy"])


def _vs_route(objects: list[Manifest]) -> dict[str, Any]:
    (vs,) = [m for m in objects if m.kind == "VirtualService"]
    return dict(vs.doc["spec"]["http"][-1])


Mutation = Callable[[dict[str, Any], list[Manifest]], None]
MUTATIONS: list[tuple[str, Mutation, str]] = [
    ("pick-first", lambda c, o: c.update(loadBalancingConfig=[{"pick_first": {}}]), "must be round_robin"),
    ("service-typo", lambda c, o: c["methodConfig"][0]["name"][0].update(service="inference.GRPCInference"),
     "not one the server serves"),
    ("six-attempts", lambda c, o: c["methodConfig"][0]["retryPolicy"].update(maxAttempts=6), "must be 2..5"),
    ("backoff-ms", lambda c, o: c["methodConfig"][0]["retryPolicy"].update(initialBackoff="50ms"),
     "must be a duration in seconds"),
    ("code-typo", lambda c, o: c["methodConfig"][0]["retryPolicy"].update(retryableStatusCodes=["UNAVAILBLE"]),
     "'UNAVAILBLE' is no gRPC status code"),
    ("no-throttle", lambda c, o: c.pop("retryThrottling"), "retryThrottling needs"),
    ("mesh-retries-differ", lambda c, o: _vs_route(o)["retries"].update(attempts=4), "!= the client's maxAttempts"),
    ("mesh-not-on-unavailable", lambda c, o: _vs_route(o)["retries"].update(retryOn="connect-failure"),
     "lacks ['UNAVAILABLE']"),
]


@pytest.mark.parametrize(("mutate", "expected"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_checks_catch_a_broken_client_config(cluster_objects: list[Manifest], mutate: Mutation,
                                             expected: str) -> None:
    config = json.loads(CONFIG.read_text())
    objects = [Manifest(m.path, copy.deepcopy(m.doc)) for m in cluster_objects]
    mutate(config, objects)
    found = problems(config, objects)
    assert any(expected in p for p in found), f"expected {expected!r} among {found}"


def test_checks_catch_a_missing_headless_service_and_outlier_detection(cluster_objects: list[Manifest]) -> None:
    config = json.loads(CONFIG.read_text())
    objects = [Manifest(m.path, copy.deepcopy(m.doc)) for m in cluster_objects
               if not (m.kind == "Service" and m.doc["spec"].get("clusterIP") == "None")]
    for m in objects:
        if m.kind == "DestinationRule":
            m.doc["spec"]["trafficPolicy"].pop("outlierDetection")
    found = problems(config, objects)
    assert any("no headless Service" in p for p in found), found
    assert any("no outlierDetection" in p for p in found), found
