"""Java's rounding, casts and double rules, where Python's own differ."""

from __future__ import annotations

import math

from engine.javamath import LONG_MAX, LONG_MIN, java_div, java_min, java_round, long_div, to_int


def test_round_is_closest_long_with_ties_up() -> None:
    assert java_round(2.5) == 3
    assert java_round(-2.5) == -2
    assert java_round(-0.5) == 0
    assert java_round(1911.76) == 1912
    assert java_round(-1911.76) == -1912


def test_round_is_exact_where_floor_of_x_plus_half_is_not() -> None:
    x = 0.49999999999999994  # x + 0.5 rounds up to 1.0 in doubles
    assert math.floor(x + 0.5) == 1
    assert java_round(x) == 0
    big = 2.0**52 + 1  # an odd integer: x + 0.5 is not representable and rounds to the next even
    assert java_round(big) == 2**52 + 1


def test_round_saturates_and_maps_nan_to_zero() -> None:
    assert java_round(math.inf) == LONG_MAX
    assert java_round(9.223372036854776e18) == LONG_MAX
    assert java_round(-math.inf) == LONG_MIN
    assert java_round(math.nan) == 0


def test_int_cast_keeps_the_low_32_bits() -> None:
    assert to_int(LONG_MAX) == -1  # Kafka's throttle for a quota of 0
    assert to_int(2**31) == -(2**31)
    assert to_int(1_090_000) == 1_090_000


def test_min_and_division_follow_java() -> None:
    assert math.isnan(java_min(1.0, math.nan))
    assert math.copysign(1.0, java_min(0.0, -0.0)) == -1.0
    assert java_div(1.0, 0.0) == math.inf
    assert java_div(-1.0, 0.0) == -math.inf
    assert math.isnan(java_div(0.0, 0.0))
    assert long_div(-7, 2) == -3
