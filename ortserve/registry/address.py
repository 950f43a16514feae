"""Registry addresses: which store a URL names (connect.py opens it).

    file:///abs/path  file://./relative/path  (default file://./model-store)
    consul://host:8500?prefix=ortserve/&token=T&dc=dc1
    consul+https://host:8501?ca=/etc/consul/ca.pem&cert=/c.pem&key=/k.pem   (or consul://...?scheme=https)

The URL may come from `--registry`, else env ORTSERVE_REGISTRY; a Consul token from the URL, else env
CONSUL_HTTP_TOKEN. Tokens in URLs end up in shell history, so prefer the env variable.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ortserve.registry.store import check_prefix

DEFAULT_REGISTRY = "file://./model-store"
DEFAULT_PREFIX = "ortserve/"
REGISTRY_ENV = "ORTSERVE_REGISTRY"
TOKEN_ENV = "CONSUL_HTTP_TOKEN"
CONSUL_QUERY_KEYS = {"prefix", "token", "dc", "scheme", "ca", "cert", "key", "verify", "timeout"}


@dataclass(frozen=True)
class FileAddress:
    root: Path


@dataclass(frozen=True)
class ConsulAddress:
    host: str
    port: int
    scheme: str = "http"
    prefix: str = DEFAULT_PREFIX
    token: str | None = None
    dc: str | None = None
    # requests' `verify`: True (system CAs), False (no check), or a CA bundle path.
    verify: bool | str = True
    cert: tuple[str, str] | str | None = None
    timeout_s: float = 10.0

    def describe(self) -> str:
        return f"consul {self.scheme}://{self.host}:{self.port} (prefix {self.prefix!r})"


def registry_url(explicit: str | None = None) -> str:
    return explicit or os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY


def parse_registry_url(url: str) -> FileAddress | ConsulAddress:
    """Raises ValueError with a one-line message naming the URL and what is wrong with it."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as e:
        raise ValueError(f"registry URL {url!r} does not parse: {e}") from None
    if parts.scheme == "file":
        return _parse_file(url, parts)
    if parts.scheme in ("consul", "consul+http", "consul+https"):
        return _parse_consul(url, parts)
    raise ValueError(f"registry URL {url!r}: unsupported scheme {parts.scheme!r} "
                     f"(use file:///path, file://./path or consul://host:port)")


def _parse_file(url: str, parts: urllib.parse.SplitResult) -> FileAddress:
    if parts.query or parts.fragment:
        raise ValueError(f"registry URL {url!r}: file URLs take no query or fragment")
    # file:///abs -> netloc '' ; file://./rel and file://rel/x -> netloc is the first path segment.
    raw = urllib.parse.unquote(parts.netloc + parts.path)
    if parts.netloc in ("", "localhost"):
        raw = urllib.parse.unquote(parts.path)
    if not raw:
        raise ValueError(f"registry URL {url!r}: no path (use file:///abs/path or file://./rel/path)")
    return FileAddress(root=Path(raw).absolute())


def _parse_consul(url: str, parts: urllib.parse.SplitResult) -> ConsulAddress:
    try:
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise ValueError(f"registry URL {url!r}: bad port ({e})") from None
    if not host:
        raise ValueError(f"registry URL {url!r}: no host (use consul://host:8500)")
    if parts.path not in ("", "/"):
        raise ValueError(f"registry URL {url!r}: put the key prefix in ?prefix=, not in the path")
    try:
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as e:
        raise ValueError(f"registry URL {url!r}: bad query ({e})") from None
    unknown = sorted(set(query) - CONSUL_QUERY_KEYS)
    if unknown:
        raise ValueError(f"registry URL {url!r}: unknown parameter(s) {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(CONSUL_QUERY_KEYS))})")
    q = {k: v[-1] for k, v in query.items()}
    scheme = "https" if parts.scheme == "consul+https" else q.get("scheme", "http")
    if scheme not in ("http", "https"):
        raise ValueError(f"registry URL {url!r}: scheme must be http or https, got {scheme!r}")
    prefix = q.get("prefix", DEFAULT_PREFIX).lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    try:
        check_prefix(prefix)
    except Exception:
        raise ValueError(f"registry URL {url!r}: bad prefix {prefix!r}") from None
    verify: bool | str = True
    if "ca" in q:
        verify = q["ca"]
    if q.get("verify", "").lower() in ("0", "false", "no"):
        verify = False
    cert: tuple[str, str] | str | None = None
    if "cert" in q:
        cert = (q["cert"], q["key"]) if "key" in q else q["cert"]
    elif "key" in q:
        raise ValueError(f"registry URL {url!r}: key= needs cert=")
    try:
        timeout_s = float(q.get("timeout", "10"))
    except ValueError:
        raise ValueError(f"registry URL {url!r}: timeout must be seconds, got {q['timeout']!r}") from None
    token = q.get("token") or os.environ.get(TOKEN_ENV) or None
    return ConsulAddress(host=host, port=port or (8501 if scheme == "https" else 8500), scheme=scheme,
                         prefix=prefix, token=token, dc=q.get("dc") or None, verify=verify, cert=cert,
                         timeout_s=timeout_s)
