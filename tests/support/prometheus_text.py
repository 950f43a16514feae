"""Reading a server's Prometheus endpoint in tests: fetch the text, sum the matching samples."""

from __future__ import annotations

import re
import urllib.request


def scrape(metrics_port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()


def metric(body: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when there are none)."""
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", body, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total
