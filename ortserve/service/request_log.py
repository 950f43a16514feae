"""The one `request` log line and the request metrics of a ModelInfer call, whichever front end answered it.

The Python handler calls `finish_request` when a call ends; the native front end's event thread calls it for each
call the C++ side answered, so both write the same line and move the same series.
"""

from __future__ import annotations

from typing import Any

import structlog

from ortserve.service.metrics import Metrics

log = structlog.get_logger("ortserve.request")


def finish_request(metrics: Metrics, fields: dict[str, Any], code: str, version: str, total_s: float, *,
                   queue_s: float = 0.0, tokenize_s: float = 0.0, **extra: Any) -> None:
    """Count the call (`texts` from `fields` on OK) and log it: `fields`, then status, total_ms, then `extra`."""
    model = fields["model"] or "none"
    if code == "OK":
        m = metrics.for_version(model, version)
        m.ok.inc()
        m.request_seconds.observe(total_s)
        m.texts.inc(fields["texts"])
        m.queue_seconds.observe(queue_s)
        m.tokenize_seconds.observe(tokenize_s)
    else:
        metrics.requests.labels(model, version, code).inc()
    log.info("request", **fields, status=code, total_ms=ms(total_s), **extra)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
