"""Typed errors of the quota engine; codes follow Kafka's error names."""

from __future__ import annotations


class QuotaEngineError(Exception):
    """Base class; ``code`` is a Kafka-style error name a caller can branch on."""

    code = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class QuotaValidationError(QuotaEngineError, ValueError):
    """A quota key or value that Kafka would refuse; nothing was changed."""

    code = "INVALID_REQUEST"


class UnknownQuotaKey(QuotaValidationError):
    code = "INVALID_REQUEST"


class EngineUnavailable(QuotaEngineError):
    """Redis could not be reached (or timed out) for a decision or a config change."""

    code = "ENGINE_UNAVAILABLE"


class ThrottlingQuotaExceeded(QuotaEngineError):
    """A strict controller-mutation quota rejected the request before recording it (KIP-599)."""

    code = "THROTTLING_QUOTA_EXCEEDED"

    def __init__(self, throttle_time_ms: int) -> None:
        super().__init__(f"The throttling quota has been exceeded; retry after {throttle_time_ms} ms.")
        self.throttle_time_ms = throttle_time_ms


class JavaIllegalArgument(QuotaEngineError, ValueError):
    """Where Kafka throws IllegalArgumentException (e.g. a throttle time asked of a non-Rate metric)."""

    code = "INVALID_REQUEST"
    java_class = "IllegalArgumentException"
