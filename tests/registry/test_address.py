"""Registry URL parsing: every accepted form, and one-line ValueErrors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from ortserve.registry.address import ConsulAddress, FileAddress, parse_registry_url, registry_url


def test_file_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_registry_url("file:///srv/models") == FileAddress(Path("/srv/models"))
    assert parse_registry_url("file://./model-store") == FileAddress(tmp_path / "model-store")
    assert parse_registry_url("file://rel/dir") == FileAddress(tmp_path / "rel" / "dir")


def test_default_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORTSERVE_REGISTRY", raising=False)
    assert registry_url(None) == "file://./model-store"
    monkeypatch.setenv("ORTSERVE_REGISTRY", "consul://c:8500")
    assert registry_url(None) == "consul://c:8500"
    assert registry_url("file:///x") == "file:///x"


def test_consul_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    a = parse_registry_url("consul://consul.svc:8500?prefix=ortserve/&token=abc&dc=eu1")
    assert a == ConsulAddress(host="consul.svc", port=8500, prefix="ortserve/", token="abc", dc="eu1")
    b = parse_registry_url("consul://h")
    assert isinstance(b, ConsulAddress) and b.port == 8500 and b.prefix == "ortserve/" and b.token is None
    c = parse_registry_url("consul+https://h?ca=/ca.pem&prefix=team")
    assert isinstance(c, ConsulAddress)
    assert (c.scheme, c.port, c.verify, c.prefix) == ("https", 8501, "/ca.pem", "team/")
    d = parse_registry_url("consul://h:8500?scheme=https&verify=false")
    assert isinstance(d, ConsulAddress) and d.scheme == "https" and d.verify is False
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "from-env")
    e = parse_registry_url("consul://h")
    assert isinstance(e, ConsulAddress) and e.token == "from-env"


@pytest.mark.parametrize("url", [
    "bogus://x", "consul://", "consul://h:notaport", "consul://h:99999", "consul://h/some/path",
    "consul://h?colour=blue", "consul://h?scheme=gopher", "consul://h?key=/k.pem", "file://",
    "file:///x?y=1", "consul://h?prefix=../etc", "consul://h?timeout=soon", "http://[::1",
])
def test_bad_urls_raise_one_line_value_errors(url: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_registry_url(url)
    message = str(info.value)
    assert "\n" not in message and url in message
