"""How the suite runs: its quick tier (`QUICK_TIER`), and how it spreads over pytest-xdist's workers (`scripts/test`
runs `-n <cores> --dist loadfile`).

A work unit is a test file, so its module fixtures (a server, a bundle) are built once, on one worker; files that
share a costly session fixture go in one unit (`SHARED`), so that it too is built once and not once per worker.
Units holding a long run (`slow`) are handed out first and the shared units next: the workers then finish together,
instead of one idling while the other starts its last long file.
"""

from __future__ import annotations

from typing import Any

import pytest

SHARED = {
    # The `checkpoints` and `imported` session fixtures (tests/registry/importer/conftest.py): every architecture
    # imported through PyTorch, about a minute of CPU.
    "tests/registry/importer/test_architectures.py": "importer-checkpoints",
    "tests/registry/importer/test_bad_checkpoints.py": "importer-checkpoints",
    "tests/registry/importer/test_served.py": "importer-checkpoints",
    # The `decoder_checkpoints` and `decoder_imported` session fixtures: the Qwen decoders imported through PyTorch.
    "tests/registry/importer/test_decoders.py": "importer-decoders",
    "tests/registry/importer/test_decoders_served.py": "importer-decoders",
    # The `sparse_checkpoints` and `sparse_imported` session fixtures: SPLADE-shaped models imported through PyTorch.
    "tests/registry/importer/test_sparse_import.py": "importer-sparse",
    "tests/registry/importer/test_sparse_served.py": "importer-sparse",
}
"""test file -> the unit it shares with the other files that use the same costly session fixtures."""


QUICK_TIER = (
    # The pure and unit layers: rules, routing, admission, policies, records, manifests, the engine in-process.
    "tests/bench/test_corpus.py", "tests/bench/test_engine_settings.py", "tests/bench/test_prom.py",
    "tests/bundle/", "tests/dataplane/test_admission.py", "tests/dataplane/test_batch_policy.py",
    "tests/dataplane/test_call_path.py", "tests/dataplane/test_frontend_build.py",
    "tests/dataplane/test_lane_choice.py", "tests/dataplane/test_prepare_call.py", "tests/dataplane/test_priority.py",
    "tests/dataplane/test_route.py", "tests/dataplane/test_trace_context.py",
    "tests/deploy/", "tests/devtools/test_entity_head.py",
    "tests/engine/test_engine_run.py", "tests/engine/test_engine_load.py", "tests/engine/test_stubs.py",
    "tests/fuzz/test_harness.py",
    "tests/registry/test_address.py", "tests/registry/test_artifacts.py", "tests/registry/test_bundle.py",
    "tests/registry/test_bundle_tokenizer.py", "tests/registry/test_consulstore.py", "tests/registry/test_cpu.py",
    "tests/registry/test_records.py", "tests/registry/test_references.py",
    "tests/registry/importer/test_checkpoint.py", "tests/registry/importer/test_parity.py",
    "tests/service/test_call_crossings.py", "tests/service/test_instance_load.py", "tests/service/test_logs.py",
    "tests/service/test_manager.py", "tests/service/test_proto.py", "tests/service/test_router.py",
    "tests/service/test_settings_defaults.py", "tests/service/test_tokenization.py", "tests/service/test_verify.py",
    "tests/service/test_version_plan.py", "tests/test_import_direction.py", "tests/test_source_size.py",
    # End to end, once per front end: a real server on loopback gRPC and its calls.
    "tests/service/test_infer.py",
)
"""Paths (files, or rooms ending in /) of the quick tier, `scripts/test --quick`: their tests are marked `quick`."""


def unit_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return SHARED.get(path, path)


def unit_order(units_in_order: list[str], slow_units: set[str]) -> dict[str, int]:
    """unit -> its rank: units with a long run, then the shared units, then the rest, each in collection order."""
    def tier(unit: str) -> int:
        return 0 if unit in slow_units else 1 if unit in SHARED.values() else 2

    ranked = sorted(dict.fromkeys(units_in_order), key=tier)  # stable: collection order within a tier
    return {unit: rank for rank, unit in enumerate(ranked)}


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.nodeid.startswith(QUICK_TIER):
        item.add_marker(pytest.mark.quick)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture: a unit's tests keep their order
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "dist", "no") != "loadfile":
        return
    units = [unit_of(item.nodeid) for item in items]
    slow = {unit for unit, item in zip(units, items, strict=True) if item.get_closest_marker("slow")}
    rank = unit_order(units, slow)
    order = sorted(range(len(items)), key=lambda i: rank[units[i]])
    items[:] = [items[i] for i in order]


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: there only when it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if getattr(config.option, "dist", "no") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """xdist's scope scheduling over `unit_of`, handing units out in the workers' collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # keep the order above, not xdist's most-tests-first
    return UnitScheduling(config, log)
