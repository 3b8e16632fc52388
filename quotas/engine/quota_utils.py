"""Throttle-time math (``QuotaUtils`` and ``ControllerMutationQuotaManager.throttleTimeMs``)."""

from __future__ import annotations

from .errors import JavaIllegalArgument
from .javamath import java_div, java_round
from .sensor import QuotaViolation
from .stats import Rate


def rate_throttle_raw(observed: float, bound: float, window_ms: int) -> float:
    """X = (O - T) / T * W, evaluated left to right in doubles, before rounding."""
    return java_div(observed - bound, bound) * window_ms


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """The delay that brings observed rate O back to bound T over window W: O*W/(W+X) = T."""
    return java_round(rate_throttle_raw(observed, bound, window_ms))


def bounded_throttle_time_ms(observed: float, bound: float, window_ms: int, max_throttle_ms: int) -> int:
    """The request and connection quotas cap the delay at one quota window (KIP-124)."""
    return min(throttle_time_ms(observed, bound, window_ms), max_throttle_ms)


def token_bucket_throttle_raw(tokens: float, bound: float) -> float:
    return java_div(-tokens, bound) * 1000


def token_bucket_throttle_ms(tokens: float, bound: float) -> int:
    """KIP-599: the time to refill a negative balance, -K/Q seconds."""
    return java_round(token_bucket_throttle_raw(tokens, bound))


def throttle_time(e: QuotaViolation, t: int) -> int:
    """``QuotaUtils.throttleTime``: uses the rate's precise window at ``t``; non-Rate metrics are refused."""
    if not isinstance(e.metric.stat, Rate):
        raise JavaIllegalArgument(f"Metric {e.metric.name} is not a Rate metric, value {e.metric.stat!r}")
    return throttle_time_ms(e.value, e.bound, e.metric.stat.window_size(e.metric.config, t))


def bounded_throttle_time(e: QuotaViolation, max_throttle_ms: int, t: int) -> int:
    return min(throttle_time(e, t), max_throttle_ms)
