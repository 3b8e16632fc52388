"""Throttle-time math (``QuotaUtils`` and ``ControllerMutationQuotaManager.throttleTimeMs``)."""

from __future__ import annotations

from .javamath import java_div, java_round


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
