"""The manager's decisions as plain data: which versions to keep, load, retry, route and retire."""

from __future__ import annotations

from ortserve.registry.desired import ArtifactRef, DesiredModel, DesiredVersion
from ortserve.service.version_plan import Failure, newest, plan_loads, plan_route, targets


def _model(weights: dict[str, int] | None = None, **created: str) -> DesiredModel:
    versions = {v: DesiredVersion(v, artifact=ArtifactRef(f"file:///a/{v}", v * 8, 1), created_at=at)
                for v, at in created.items()}
    return DesiredModel("m", versions, weights or {})


def _source(version: str) -> str:
    return f"sha256:{version * 8}"


def test_targets_keep_the_weighted_then_the_newest() -> None:
    desired = _model({"v1": 90, "v2": 10}, v1="2026-01", v2="2026-02", v3="2026-03", v4="2026-04")
    assert targets(desired, 3) == ["v1", "v2", "v4"]
    assert targets(desired, 1) == ["v1", "v2"]  # weighted ones stay whatever the cap
    unrouted = _model(v1="2026-01", v2="2026-02")
    assert newest(unrouted) == "v2" and targets(unrouted, 1) == ["v2"] and targets(unrouted, 2) == ["v2", "v1"]
    assert targets(_model({"v9": 100}, v1="2026-01"), 2) == ["v1"]  # routing to an unpublished version


def test_a_shadow_is_kept_loaded_whatever_the_cap_and_takes_no_weight() -> None:
    versions = {v: DesiredVersion(v, artifact=ArtifactRef(f"file:///a/{v}", v * 8, 1), created_at=f"2026-0{v[1]}")
                for v in ("v1", "v2", "v3")}
    desired = DesiredModel("m", versions, {"v1": 100}, shadow=("v2", 10))
    assert targets(desired, 1) == ["v1", "v2"]
    assert targets(desired, 3) == ["v1", "v2", "v3"]
    route = plan_route(desired, max_loaded=1, ready={"v1", "v2", "v3"}, routed=True, failing=())
    assert (route.weights, route.serve, route.retire) == ({"v1": 100}, ("v1", "v2"), ("v3",))
    assert route.shadow == ("v2", 10)  # in force once ready
    loading = plan_route(desired, max_loaded=1, ready={"v1"}, routed=True, failing=())
    assert loading.apply and loading.shadow is None  # copies wait for it; the routing does not
    gone = DesiredModel("m", versions, {"v1": 100}, shadow=("v9", 10))  # an unpublished shadow is not a target
    assert targets(gone, 1) == ["v1"]
    assert plan_route(gone, max_loaded=1, ready={"v1"}, routed=True, failing=()).shadow is None


def test_loads_skip_what_is_loaded_and_wait_out_a_backoff() -> None:
    desired = _model({"v1": 50, "v2": 50}, v1="2026-01", v2="2026-02", v3="2026-03")
    plan = plan_loads(desired, loaded={"v1": _source("v1")}, failures={}, max_loaded=3, now=100.0)
    assert plan.load == ("v2", "v3") and plan.retry_in is None
    backoff = {"v2": Failure(_source("v2"), retry_at=104.0), "v3": Failure(_source("v3"), retry_at=101.5)}
    plan = plan_loads(desired, loaded={"v1": _source("v1")}, failures=backoff, max_loaded=3, now=100.0)
    assert plan.load == () and plan.retry_in == 1.5
    assert plan_loads(desired, loaded={"v1": _source("v1")}, failures=backoff, max_loaded=3, now=104.0).load == ("v2",
                                                                                                                  "v3")
    # New bytes under a failed name load at once; a changed source reloads a loaded name.
    stale = {"v2": Failure("sha256:old", retry_at=1e9)}
    assert plan_loads(desired, loaded={"v1": "dir:/old"}, failures=stale, max_loaded=3, now=0.0).load == (
        "v1", "v2", "v3")


def test_a_route_waits_for_every_weighted_version() -> None:
    desired = _model({"v1": 80, "v2": 20}, v1="2026-01", v2="2026-02")
    held = plan_route(desired, max_loaded=3, ready=["v1"], routed=True, failing=["v2"])
    assert not held.apply and held.unready == ("v2",) and held.retire == () and not held.clear_error
    first = plan_route(desired, max_loaded=3, ready=["v1"], routed=False, failing=[])
    assert first.apply and first.weights == {"v1": 80} and first.serve == ("v1",)  # serve what is ready
    full = plan_route(desired, max_loaded=3, ready=["v2", "v1"], routed=True, failing=[])
    assert full.apply and full.weights == {"v1": 80, "v2": 20} and full.order == ("v1", "v2") and full.clear_error


def test_a_route_retires_what_is_no_longer_kept() -> None:
    desired = _model({"v3": 100}, v1="2026-01", v2="2026-02", v3="2026-03")
    plan = plan_route(desired, max_loaded=2, ready=["v1", "v2", "v3"], routed=True, failing=[])
    assert plan.apply and plan.serve == ("v2", "v3") and plan.retire == ("v1",)
    gone = plan_route(_model(), max_loaded=2, ready=["v1"], routed=True, failing=[])
    assert gone.apply and gone.weights == {} and gone.retire == ("v1",)
    failing = plan_route(desired, max_loaded=2, ready=["v3"], routed=True, failing=["v2"])
    assert failing.apply and not failing.clear_error  # a kept version still failing keeps the error
