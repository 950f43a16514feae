"""Errors that carry their gRPC status code; `grpc_status` is the one place that maps them.

Every error a caller can see is one of these, with a message the caller can act on. Anything else
reaching the handler boundary is a bug: it is logged with its traceback and the caller gets INTERNAL
with the request id, never the traceback.
"""

from __future__ import annotations

import grpc


class ServiceError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class TooManyTexts(InvalidArgument):
    """Past max_texts_per_request: INVALID_ARGUMENT over gRPC, 413 (Payload Too Large) over HTTP."""


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class ResourceExhausted(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """How long the queued work takes to clear: sent as gRPC's `grpc-retry-pushback-ms` trailer, which
        gRPC clients with a retry policy wait before retrying. The whole drain time, not just the excess
        over the bound: every refused caller gets the same hint, and a short one brings them all back at once."""


class DeadlineExceeded(ServiceError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unavailable(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE


class Cancelled(ServiceError):
    code = grpc.StatusCode.CANCELLED


class Internal(ServiceError):
    code = grpc.StatusCode.INTERNAL
