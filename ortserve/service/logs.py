"""structlog set-up: JSON lines on stdout (or console output for people), request context in contextvars."""

from __future__ import annotations

import datetime as dt
import logging
import sys

import orjson
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_STAMPER = structlog.processors.TimeStamper(fmt="iso", utc=True)


def _timestamp(logger: object, method: str, event_dict: structlog.types.EventDict) -> structlog.types.EventDict:
    """Now, unless the line already says when it happened: the native front end's request lines are written by a
    thread that drains its records a little later, and carry the time the reply went out (`iso_utc`)."""
    if "timestamp" in event_dict:
        return event_dict
    return _STAMPER(logger, method, event_dict)


def iso_utc(unix_s: float) -> str:
    """`unix_s` as the log's timestamps read: ISO 8601, UTC, microseconds, `Z`."""
    return dt.datetime.fromtimestamp(unix_s, tz=dt.UTC).isoformat().replace("+00:00", "Z")


class _ReplyAfterCallEnded(logging.Filter):
    """grpc.aio logs ERROR with a traceback when a reply or status cannot be sent because the call already ended
    (its deadline passed, or its client went, while the handler ran): an outcome the caller has already seen, not a
    server fault. Such records become one line without the trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("ExecuteBatchError raised in core"):
            record.msg = "reply not sent: the call had already ended (deadline passed or client gone) [%s]"
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info = record.exc_text = None
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


class _ClientCausedHttpError(logging.Filter):
    """aiohttp logs ERROR with a traceback for a request it cannot parse (a malformed request line or header, a body
    that breaks its framing) and for a client gone mid-reply: the client's doing, not a server fault. Such records
    become one info line without the trace, counted by nothing else (the reply already said 400)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError  # aiohttp is the HTTP port's: imported with it

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError | ConnectionError):
            record.msg, record.args = "http request not served: %s: %s", (type(error).__name__, str(error)[:200])
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info = record.exc_text = None
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


def configure_logging(*, level: str = "info", fmt: str = "json") -> None:
    # orjson renders bytes straight to stdout's buffer: the request line is written on the event loop
    # once per call, and this halves its cost (measured 41 -> 18 us).
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(serializer=orjson.dumps)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    factory = (
        structlog.BytesLoggerFactory(file=sys.stdout.buffer)
        if fmt == "json"
        else structlog.WriteLoggerFactory(file=sys.stdout)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _timestamp,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    # Libraries that use stdlib logging (grpc, consul) go to stderr at the same threshold.
    logging.basicConfig(level=_LEVELS[level], stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    grpc_core = logging.getLogger("grpc._cython.cygrpc")
    if not any(isinstance(f, _ReplyAfterCallEnded) for f in grpc_core.filters):
        grpc_core.addFilter(_ReplyAfterCallEnded())
    aiohttp_server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _ClientCausedHttpError) for f in aiohttp_server.filters):
        aiohttp_server.addFilter(_ClientCausedHttpError())
