"""Reading the registry: a model's versions and routing, as plain data.

The watcher watches `model_prefix(model)` and turns each (index, entries) it gets into a
`ModelState` with `model_state_from_entries`; the CLI uses `read_model_state`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortserve.registry.records import (
    MODELS_PREFIX,
    NAME_RE,
    RecordError,
    Routing,
    VersionRecord,
    model_prefix,
    routing_key,
    versions_prefix,
)
from ortserve.registry.store import Entry, Store


@dataclass(frozen=True)
class ModelState:
    """One consistent read of a model (one list call): versions, routing, and their indexes."""

    model: str
    versions: dict[str, VersionRecord]
    routing: Routing | None
    version_indexes: dict[str, int] = field(default_factory=dict)
    routing_index: int = 0  # 0: no routing key (what a cas=0 write expects)
    # key -> why it could not be parsed; such records are skipped, never served.
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return bool(self.versions) or self.routing is not None


def model_state_from_entries(model: str, entries: list[Entry]) -> ModelState:
    vprefix, rkey = versions_prefix(model), routing_key(model)
    versions: dict[str, VersionRecord] = {}
    indexes: dict[str, int] = {}
    problems: dict[str, str] = {}
    routing: Routing | None = None
    routing_index = 0
    for entry in entries:
        try:
            if entry.key == rkey:
                routing_index = entry.modify_index
                routing = Routing.from_json(entry.value, key=entry.key)
            elif entry.key.startswith(vprefix) and "/" not in entry.key[len(vprefix):]:
                record = VersionRecord.from_json(entry.value, key=entry.key)
                name = entry.key[len(vprefix):]
                if (record.model, record.version) != (model, name):
                    raise RecordError(f"{entry.key}: record says {record.model}/{record.version}")
                versions[name] = record
                indexes[name] = entry.modify_index
        except RecordError as e:
            problems[entry.key] = str(e)
    return ModelState(model=model, versions=versions, routing=routing, version_indexes=indexes,
                      routing_index=routing_index, problems=problems)


def read_model_state(store: Store, model: str) -> ModelState:
    return model_state_from_entries(model, store.list(model_prefix(model)))


def list_models(store: Store) -> list[str]:
    names = set()
    for entry in store.list(MODELS_PREFIX):
        name = entry.key[len(MODELS_PREFIX):].split("/", 1)[0]
        if NAME_RE.fullmatch(name):
            names.add(name)
    return sorted(names)
