"""Loaded model versions, their lifecycle, and the live route table.

Owned by the event loop: every method runs on the loop thread, and loads run in a loader thread.
That makes the loop itself the read-write lock of the design: `lease()` reads the table and takes
the version's lease in one synchronous step (the count its ServedVersion keeps for both front ends),
and a swap is one assignment of an immutable RouteTable, so a request sees the old table or the new
one, never a mix, and nobody ever waits on a lock.

For each model, one worker task converges on the newest desired state (`set_desired` supersedes):

    load what is missing, outside the table (fetch → verify → Engine → warm up)
      → swap the table (one assignment)  → drain leases of what left → close its engine

A version that fails any step changes no traffic: the previous route stays, the error is kept for
status and metrics, and the load is retried with backoff.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from ortserve import engine_ext
from ortserve.registry.desired import DesiredModel, DesiredState, DesiredVersion
from ortserve.service import version_plan
from ortserve.service.data_plane import VersionBatcher
from ortserve.service.errors import NotFound, Unavailable
from ortserve.service.instance import ModelInstance
from ortserve.service.lifecycle import State, check_transition
from ortserve.service.logs import iso_utc
from ortserve.service.verify import Verdict

log = structlog.get_logger("ortserve.manager")


class VersionFactory(Protocol):
    def load(self, model: str, spec: DesiredVersion) -> ModelInstance:
        """Fetch, verify, load and warm up; blocking (runs in the loader thread)."""

    def batcher(self, model: str, version: str, instance: ModelInstance) -> VersionBatcher:
        """Build the version's batcher (on the loop)."""

    async def verify(self, instance: ModelInstance, batcher: VersionBatcher) -> Verdict:
        """Check the version's answers to its bundle's reference texts through `batcher` (on the loop); raises
        when they differ and the version must not take traffic."""


class LifecycleObserver(Protocol):
    def __call__(self, event: str, model: str, version: str, **fields: Any) -> None: ...


@dataclass(eq=False)
class LoadedVersion:
    """One version of one model. Owned by the manager; its batcher's lease count (both front ends' calls) says who
    uses it."""

    model: str
    version: str
    spec: DesiredVersion
    state: State = State.NEW
    reason: str = ""
    instance: ModelInstance | None = None
    batcher: VersionBatcher | None = None
    verdict: Verdict | None = None
    """Its answers to the bundle's reference texts, checked before it took traffic."""

    @property
    def leases(self) -> int:
        """Calls holding it, from either front end."""
        return self.batcher.in_flight if self.batcher is not None else 0

    def transition(self, target: State, reason: str = "") -> None:
        check_transition(self.state, target)
        self.state = target
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ModelRoute:
    versions: Mapping[str, LoadedVersion]
    """READY versions that requests may use (by pin or by split)."""
    weights: Mapping[str, int]
    """The routing in force."""
    split: Any
    """engine_ext.Split: the weights laid out over the canary buckets (the native front end's code too)."""
    shadow: tuple[str, int] | None = None
    """(version, percent): a version without weight copied that share of the calls (shadow_copy.h); None: none."""


@dataclass(frozen=True, slots=True)
class RouteTable:
    models: Mapping[str, ModelRoute]


@dataclass(frozen=True, slots=True)
class Lease:
    version: LoadedVersion
    route: str
    """Why this version: "pin" or "bucket N"."""


@dataclass(slots=True)
class _LoadFailure:
    source: str
    error: str
    attempts: int
    retry_at: float


class ModelManager:
    def __init__(
        self,
        factory: VersionFactory,
        *,
        max_loaded_versions: int = 3,
        drain_timeout_s: float = 30.0,
        retry_backoff_s: tuple[float, float] = (1.0, 60.0),
        observer: LifecycleObserver | None = None,
        routes: Any = None,
        shadow_texts: bool = False,
    ) -> None:
        self._factory = factory
        self._routes = routes
        self._shadow_texts = shadow_texts  # shadow copies' events carry the texts (Settings.shadow_keep_texts)
        self._max_loaded = max_loaded_versions
        self._drain_timeout_s = drain_timeout_s
        self._backoff = retry_backoff_s
        self._observe = observer or (lambda *a, **k: None)
        self._table = RouteTable({})
        self._versions: dict[str, dict[str, LoadedVersion]] = {}  # every version not yet CLOSED
        self._desired: dict[str, DesiredModel] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._failures: dict[tuple[str, str], _LoadFailure] = {}
        self._loading: dict[tuple[str, str], LoadedVersion] = {}  # loads in progress, for status
        self._last_error: dict[str, str] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        # Versions replaced by a reload under the same name: the table may still route to them until the next swap.
        self._superseded: dict[str, list[LoadedVersion]] = {}
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ortserve-loader")
        self._state_index = 0
        self._busy = 0  # workers inside a converge pass
        self._closed = False

    # ---- request path -------------------------------------------------------------------------

    @property
    def route_table(self) -> RouteTable:
        return self._table

    @contextmanager
    def lease(self, model: str, *, version: str = "", routing_key: str) -> Iterator[Lease]:
        """Pick a version and hold it for the duration of one request."""
        route = self._table.models.get(model)
        if route is None:
            desired = self._desired.get(model)
            if desired is not None and desired.versions and not self._closed:
                raise Unavailable(self.not_ready_reason(model))
            raise NotFound(f"unknown model '{model}'; served models: {sorted(self._table.models) or 'none'}")
        if version:
            chosen = route.versions.get(version)
            if chosen is None:
                raise NotFound(f"model '{model}' has no loaded version '{version}'; loaded: {sorted(route.versions)}")
            reason = "pin"
        else:
            b = engine_ext.route_bucket(model, routing_key)
            picked = route.split.pick(b)
            if picked is None:
                raise Unavailable(f"model '{model}' has no routable version")
            chosen = route.versions[picked]
            reason = f"bucket {b}"
        batcher = chosen.batcher
        # The table routes only to READY versions, whose retirement starts after the swap that drops them: a
        # refusal here would be a bug, answered as a version going away.
        if batcher is None or not batcher.acquire():
            raise Unavailable(f"model '{model}' version '{chosen.version}' is being retired; retry")
        try:
            yield Lease(chosen, reason)
        finally:
            batcher.release()

    # ---- control path -------------------------------------------------------------------------

    def apply(self, state: DesiredState) -> None:
        """Make `state` the goal for every model it names; models it drops are unloaded."""
        self._state_index = state.index
        for name in set(self._desired) - set(state.models):
            self.set_desired(DesiredModel(name, {}))
        for desired in state.models.values():
            self.set_desired(desired)

    def set_desired(self, desired: DesiredModel) -> None:
        """The full desired set for one model; supersedes earlier calls. Returns at once."""
        if self._closed:
            return
        self._desired[desired.model] = desired
        self._wake.setdefault(desired.model, asyncio.Event()).set()
        if desired.model not in self._workers:
            self._workers[desired.model] = asyncio.create_task(
                self._worker(desired.model), name=f"ortserve-manager-{desired.model}"
            )

    async def wait_converged(self, timeout_s: float) -> None:
        """Wait until every worker has acted on its newest desired state (tests, start-up)."""
        deadline = time.monotonic() + timeout_s
        while any(e.is_set() for e in self._wake.values()) or self._busy:
            if time.monotonic() > deadline:
                raise TimeoutError("model manager did not converge in time")
            await asyncio.sleep(0.01)

    async def _worker(self, model: str) -> None:
        wake = self._wake[model]
        while not self._closed:
            await wake.wait()
            wake.clear()
            self._busy += 1
            try:
                retry_in = await self._converge(model, self._desired[model])
            except Exception as e:  # a bug here must not kill the worker: keep serving, say why
                log.exception("converge_failed", model=model)
                self._last_error[model] = f"internal error while converging: {e}"
                retry_in = self._backoff[1]
            finally:
                self._busy -= 1
            if retry_in is not None and not wake.is_set():
                asyncio.get_running_loop().call_later(retry_in, wake.set)

    async def _converge(self, model: str, desired: DesiredModel) -> float | None:
        """One pass towards `desired`; returns seconds until a retry is due, if any."""
        started = time.monotonic()
        loaded = self._versions.setdefault(model, {})
        for key in [k for k in self._failures if k[0] == model and k[1] not in desired.versions]:
            del self._failures[key]  # retired or never re-published: nothing left to retry or report
        plan = version_plan.plan_loads(
            desired,
            loaded={v: lv.spec.source() for v, lv in loaded.items()},
            failures={v: version_plan.Failure(f.source, f.retry_at) for (m, v), f in self._failures.items()
                      if m == model},
            max_loaded=self._max_loaded,
            now=time.monotonic(),
        )
        retry_in = plan.retry_in
        for version in plan.load:
            if self._desired[model] is not desired:
                return None  # superseded: the worker goes round again with the newest state
            if not await self._load(model, desired.versions[version]):
                failure = self._failures[(model, version)]
                wait = failure.retry_at - time.monotonic()
                retry_in = wait if retry_in is None else min(retry_in, wait)
        if self._desired[model] is not desired:
            return None
        self._swap(model, desired, started)
        return retry_in

    async def _load(self, model: str, spec: DesiredVersion) -> bool:
        lv = LoadedVersion(model, spec.version, spec)
        lv.transition(State.LOADING)
        self._loading[(model, spec.version)] = lv
        try:
            return await self._load_version(lv, spec)
        finally:
            del self._loading[(model, spec.version)]

    async def _load_version(self, lv: LoadedVersion, spec: DesiredVersion) -> bool:
        model = lv.model
        self._observe("loading", model, spec.version, source=spec.source())
        started = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
            lv.instance = await loop.run_in_executor(self._loader, self._factory.load, model, spec)
            lv.batcher = self._factory.batcher(model, spec.version, lv.instance)
            lv.verdict = await self._factory.verify(lv.instance, lv.batcher)  # invariant 1: before any traffic
        except Exception as e:
            lv.transition(State.FAILED, str(e))
            previous = self._failures.get((model, spec.version))
            attempts = previous.attempts + 1 if previous and previous.source == spec.source() else 1
            delay = min(self._backoff[1], self._backoff[0] * 2 ** (attempts - 1))
            self._failures[(model, spec.version)] = _LoadFailure(
                spec.source(), str(e), attempts, time.monotonic() + delay
            )
            self._last_error[model] = f"version {spec.version}: {e}"
            self._observe("failed", model, spec.version, error=str(e), attempts=attempts, retry_in_s=delay,
                          **getattr(e, "observed", {}))
            if lv.batcher is not None:  # never routed: nothing queued but what the check itself sent
                await lv.batcher.close(0.0)
            if lv.instance is not None:
                await loop.run_in_executor(self._loader, lv.instance.close)
            lv.transition(State.CLOSED, str(e))
            return False
        lv.transition(State.READY)
        self._failures.pop((model, spec.version), None)
        assert lv.instance is not None and lv.verdict is not None
        tokenizer = lv.instance.tokenizer
        fallback = {"tokenizer_fallback": tokenizer.fallback} if tokenizer.fallback else {}
        self._observe("loaded", model, spec.version, load_s=round(time.monotonic() - started, 3),
                      tokenizer=tokenizer.kind, **fallback, **lv.instance.describe(), verify=lv.verdict.result,
                      verify_s=round(lv.verdict.took_s, 3),
                      **({"verify_failed": lv.verdict.line()} if lv.verdict.failed else {}))
        replaced = self._versions[model].get(spec.version)
        self._versions[model][spec.version] = lv
        if replaced is not None:  # same version name, new bytes (a local bundle that changed)
            # Retired at the swap that routes its name to the new one, not now: until then it is still routed.
            self._superseded.setdefault(model, []).append(replaced)
        return True

    def _swap(self, model: str, desired: DesiredModel, started: float) -> None:
        loaded = self._versions[model]
        current = self._table.models.get(model)
        plan = version_plan.plan_route(
            desired,
            max_loaded=self._max_loaded,
            ready=[v for v, lv in loaded.items() if lv.state is State.READY],
            routed=current is not None,
            failing=[v for m, v in self._failures if m == model],
        )
        if not plan.apply:
            # Invariant 4: a version that is not ready changes no traffic. Keep the old route.
            self._last_error[model] = (
                f"routing {plan.weights} not applied: {', '.join(plan.unready)} not loaded "
                f"({self._last_error.get(model, 'loading')})"
            )
            return
        if plan.clear_error:
            self._last_error.pop(model, None)
        weights = plan.weights
        ready = {v: lv for v, lv in loaded.items() if v in plan.serve}  # load order, as before
        models = dict(self._table.models)
        if ready and sum(weights.values()) > 0:
            split = engine_ext.Split.of([(v, weights[v]) for v in plan.order])
            models[model] = ModelRoute(versions=dict(ready), weights=dict(weights), split=split, shadow=plan.shadow)
        else:
            models.pop(model, None)
        since = time.time()
        self._table = RouteTable(models)  # the swap: one assignment on the loop thread
        if self._routes is not None:
            self._routes.set(data_plane_routes(self._table, shadow_texts=self._shadow_texts))
        if models.get(model) != current:
            # Logged once the data plane's copy (which both front ends route by) has the table too, with `since`,
            # when the Python one took it: a call on this table took its lease between the two.
            self._observe("swapped", model, ",".join(sorted(ready)), weights=weights,
                          **({"shadow": f"{plan.shadow[0]}={plan.shadow[1]}%"} if plan.shadow else {}),
                          took_s=round(time.monotonic() - started, 4), since=iso_utc(since))
        for old in self._superseded.pop(model, []):
            self._start_retire(old)
        for version in plan.retire:
            self._start_retire(loaded[version])

    def _start_retire(self, lv: LoadedVersion) -> None:
        lv.transition(State.DRAINING)
        task = asyncio.create_task(self._retire(lv))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire(self, lv: LoadedVersion) -> None:
        """Invariant 3: close only after the last in-flight request finished (bounded)."""
        # Any route still pointing at lv is gone; leases taken before the swap (either front end's) finish normally.
        if lv.batcher is not None:  # its leases, then whatever is still queued
            await lv.batcher.close(self._drain_timeout_s)
        self._observe("drained", lv.model, lv.version)
        if lv.instance is not None:
            # Engine.close waits for running batches, so it runs off the loop.
            await asyncio.get_running_loop().run_in_executor(self._loader, lv.instance.close)
        lv.transition(State.CLOSED)
        versions = self._versions.get(lv.model, {})
        if versions.get(lv.version) is lv:
            del versions[lv.version]
        lv.instance = None
        lv.batcher = None
        self._observe("closed", lv.model, lv.version)

    # ---- status and shutdown ------------------------------------------------------------------

    def model_ready(self, model: str, version: str = "") -> bool:
        route = self._table.models.get(model)
        if route is None:
            return False
        return version in route.versions if version else True

    def served_models(self) -> list[str]:
        return sorted(self._table.models)

    def served_output(self, model: str, version: str) -> Any:
        """What a loaded version answers (its ServedOutput), None when it is not loaded. Any thread: it reads one
        snapshot of the route table (the shadow book judges copies by it on the events thread)."""
        route = self._table.models.get(model)
        lv = route.versions.get(version) if route is not None else None
        return lv.instance.served if lv is not None and lv.instance is not None else None

    def ready_for_traffic(self) -> bool:
        """Readiness of the whole server: something is routable and no model is still on its first load.

        A model whose every load failed does not hold the server back: it is reported (its own
        health entry, status, metrics), but one broken new model must not take every replica out
        of service while the models that work keep serving.
        """
        wanted = self.wanted_models()
        pending = [m for m in wanted if m not in self._table.models and not self._model_failed(m)]
        return bool(self._table.models) and not pending

    def not_ready_reason(self, model: str) -> str:
        if self._model_failed(model):
            return f"model '{model}' has no routable version: it failed to load ({self._last_error.get(model)})"
        return f"model '{model}' is loading; no version is ready yet, retry shortly"

    def _model_failed(self, model: str) -> bool:
        # A retry in progress keeps its failure recorded until it succeeds, so readiness does not flap.
        return any(m == model for m, _ in self._failures)

    def wanted_models(self) -> list[str]:
        return sorted(m for m, d in self._desired.items() if d.versions)

    def loaded_instances(self) -> list[tuple[str, str, ModelInstance]]:
        """(model, version, instance) of every version holding an engine (serving, draining, superseded)."""
        found = [(lv.model, lv.version, lv.instance) for versions in self._versions.values()
                 for lv in versions.values() if lv.instance is not None]
        found += [(lv.model, lv.version, lv.instance) for versions in self._superseded.values()
                  for lv in versions if lv.instance is not None]
        return found

    def instance_of(self, model: str, version: str) -> ModelInstance | None:
        """The engines and tokenizer of a version a call holds a lease on: the routed one, else one that left the
        table and drains (a version's record never changes, so a reload of the name has the same tokenizer)."""
        route = self._table.models.get(model)
        lv = route.versions.get(version) if route is not None else None
        if lv is None:
            lv = self._versions.get(model, {}).get(version)
        return lv.instance if lv is not None else None

    def version_failure(self, model: str, version: str) -> str | None:
        failure = self._failures.get((model, version))
        return failure.error if failure else None

    def status(self) -> dict[str, Any]:
        models: dict[str, Any] = {}
        for model in sorted(set(self._desired) | set(self._versions)):
            route = self._table.models.get(model)
            versions = {
                v: {
                    "state": lv.state.value,
                    "leases": lv.leases,
                    "source": lv.spec.source(),
                    "queue_depth": lv.batcher.queue_depth if lv.batcher else 0,
                    "tokenizer": lv.instance.tokenizer.kind if lv.instance else None,
                    **(lv.instance.describe() if lv.instance else {}),
                    **({"verify": lv.verdict.to_dict()} if lv.verdict else {}),
                }
                for v, lv in sorted(self._versions.get(model, {}).items())
            }
            # A retry of a failed version stays `failed` (with `retrying`) until it succeeds, as readiness does:
            # the status must not flap between failed and loading every backoff.
            for (m, v), failure in self._failures.items():
                if m == model and v not in versions:
                    versions[v] = {
                        "state": State.FAILED.value,
                        "error": failure.error,
                        "attempts": failure.attempts,
                        "source": failure.source,
                        **({"retrying": True} if (m, v) in self._loading else {}),
                    }
            for (m, v), lv in self._loading.items():
                if m == model and v not in versions:
                    versions[v] = {"state": lv.state.value, "leases": 0, "source": lv.spec.source(), "queue_depth": 0}
                    if lv.state is State.FAILED:  # failed, still closing what the attempt opened: say why already
                        versions[v]["error"] = lv.reason
            models[model] = {
                "routing": dict(route.weights) if route else {},
                **({"shadow": {"version": route.shadow[0], "percent": route.shadow[1]}}
                   if route and route.shadow else {}),
                "routable": sorted(route.versions) if route else [],
                "versions": versions,
                "last_error": self._last_error.get(model),
            }
        return {"registry_index": self._state_index, "models": models}

    async def close(self) -> None:
        """Stop converging, drain every version, close every engine."""
        self._closed = True
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        self._table = RouteTable({})
        if self._routes is not None:
            self._routes.set(data_plane_routes(self._table))
        superseded = [lv for versions in self._superseded.values() for lv in versions]
        self._superseded.clear()
        for lv in [*superseded, *(lv for versions in self._versions.values() for lv in versions.values())]:
            if lv.state is State.READY:
                self._start_retire(lv)
        await asyncio.gather(*self._retiring, return_exceptions=True)
        self._loader.shutdown(wait=True)


def data_plane_routes(table: RouteTable, *, shadow_texts: bool = False) -> dict[str, tuple[Any, ...]]:
    """The table as the data plane's `engine_ext.Routes` takes it (both front ends read that one C++ copy): each
    model's split, its versions' `ServedVersion`s (leases included), what each takes and answers, and its shadow
    (version, percent, whether the copies' events carry the texts) or None."""
    routes: dict[str, tuple[Any, ...]] = {}
    for model, route in table.models.items():
        versions: dict[str, Any] = {}
        outputs: dict[str, Any] = {}
        for name, lv in route.versions.items():
            if lv.batcher is not None and lv.instance is not None:  # READY versions always have both
                versions[name], outputs[name] = lv.batcher.native, lv.instance.served.wire
        shadow = (*route.shadow, shadow_texts) if route.shadow and route.shadow[0] in versions else None
        routes[model] = (list(route.split.order), list(route.split.upper), versions, outputs, shadow)
    return routes
