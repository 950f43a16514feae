"""Opening the store a registry URL names: the one place that knows every store (address.py parses the URL)."""

from __future__ import annotations

from ortserve.registry.address import FileAddress, parse_registry_url, registry_url
from ortserve.registry.store import Store


def open_store(url: str | None = None) -> Store:
    """Opens the store a URL names (None: env, then the default). Bad URL: ValueError."""
    address = parse_registry_url(registry_url(url))
    if isinstance(address, FileAddress):
        from ortserve.registry.filestore import FileStore

        return FileStore(address.root)
    from ortserve.registry.consulstore import ConsulStore  # lazy: py-consul pulls in requests

    return ConsulStore(address)
