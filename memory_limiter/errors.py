"""The limiter's errors, named as Pulsar names them (``PermitAcquire*Exception``)."""

from __future__ import annotations

from engine.errors import JavaIllegalArgument, QuotaEngineError


class PermitAcquireException(QuotaEngineError):
    """An acquisition that failed through its future; Pulsar answers every such case with TooManyRequests."""

    code = "TOO_MANY_REQUESTS"
    java_class = "PermitAcquireException"


class PermitAcquireQueueFullException(PermitAcquireException):
    """The wait queue was full: rejected at once rather than queued without bound."""

    java_class = "PermitAcquireQueueFullException"


class PermitAcquireTimeoutException(PermitAcquireException):
    """The request waited ``timeout_ms`` in the queue without being granted."""

    java_class = "PermitAcquireTimeoutException"


class PermitAcquireCancelledException(PermitAcquireException):
    """The request's ``is_cancelled`` said true when the queue reached it (e.g. the client went away)."""

    java_class = "PermitAcquireCancelledException"


class PermitAcquireAlreadyClosedException(PermitAcquireException):
    """The semaphore was closed before the request could be granted."""

    java_class = "PermitAcquireAlreadyClosedException"


class IllegalArgumentException(JavaIllegalArgument):
    """A bad call, raised synchronously (Pulsar's IllegalArgumentException) so it cannot hang a caller."""
