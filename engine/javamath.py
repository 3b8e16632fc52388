"""Java's integer and rounding rules, so our numbers equal the broker's bit for bit."""

from __future__ import annotations

import math

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
DOUBLE_MAX = 1.7976931348623157e308
#: ``(double) Long.MAX_VALUE``: the bound Kafka gives a sensor that has no quota.
LONG_MAX_AS_DOUBLE = float(LONG_MAX)


def java_round(x: float) -> int:
    """``Math.round(double)``: the closest long, ties toward +infinity, computed exactly.

    ``floor(x + 0.5)`` in doubles is wrong for 0.49999999999999994 and for
    |x| >= 2**52, so the fraction is compared instead. NaN gives 0 and the
    result saturates at Long.MIN/MAX_VALUE, as Java does.
    """
    if math.isnan(x):
        return 0
    if x >= 9.223372036854775807e18:
        return LONG_MAX
    if x <= -9.223372036854775808e18:
        return LONG_MIN
    floor = math.floor(x)
    return int(floor) + (1 if x - floor >= 0.5 else 0)


def to_int(x: int) -> int:
    """Java's ``(int)`` cast of a long: keep the low 32 bits, signed."""
    return ((x + 2**31) % 2**32) - 2**31


def long_div(a: int, b: int) -> int:
    """Java's long division, truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def java_min(a: float, b: float) -> float:
    """``Math.min(double, double)``: NaN if either is NaN, and -0.0 below 0.0 (Python's min differs)."""
    if a != a:
        return a
    if b != b:
        return b
    if a == 0.0 and b == 0.0:
        return a if math.copysign(1.0, a) < 0 else b
    return a if a <= b else b


def java_div(a: float, b: float) -> float:
    """Double division as Java does it: x/0.0 is an infinity (NaN for 0/0), never an exception."""
    if b != 0.0:
        return a / b
    if a != a or a == 0.0:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)
