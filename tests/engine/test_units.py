"""Quota values in units (``engine.units``): what people may write, and how values are shown.

Byte rates are whole bytes per second (Kafka's LONG) written and shown in binary units, as Kafka's
documentation counts (1 KiB = 1024 B); the other keys keep their own units.
"""

from __future__ import annotations

import pytest

from engine.entities import validate_quota_value
from engine.errors import QuotaValidationError
from engine.units import (
    BYTE_RATE_KEYS,
    UnitError,
    accepted_forms,
    format_byte_rate,
    format_exact,
    format_quota_value,
    is_byte_rate,
    parse_byte_rate,
    parse_quota_value,
)

PBR = "producer_byte_rate"

# ------------------------------------------------------------------ parsing byte rates

ACCEPTED = [
    ("1572864", 1_572_864),
    ("1.5 MiB/s", 1_572_864),
    ("1536 KiB/s", 1_572_864),
    ("1.5MiB/s", 1_572_864),  # the space is optional
    ("1.5 mib/s", 1_572_864),  # so is the case of the unit
    ("1.5 MIB", 1_572_864),  # and the "/s"
    ("1536kib", 1_572_864),
    ("  1572864 B/s  ", 1_572_864),
    ("1572864 b", 1_572_864),
    ("1572864/s", 1_572_864),
    ("2 GiB/s", 2 * 1024**3),
    ("0.5 KiB/s", 512),
    (".5 KiB/s", 512),
    ("1.25 KiB/s", 1280),
    ("1.0", 1),
    ("1 B/s", 1),
    ("9223372036854775807", 2**63 - 1),  # Long.MAX_VALUE, exactly (no float on the way)
    ("8589934591.999999999068677425384521484375 GiB/s", 2**63 - 1),
]

REFUSED = [
    ("1.3 B/s", "1.3 bytes per second, not a whole number of bytes"),
    ("1.5", "not a whole number of bytes"),  # no unit: bytes, and half a byte is not one
    ("0.1 KiB/s", "102.4 bytes per second, not a whole number of bytes"),
    ("1.5 MB/s", "decimal units such as MB/s are not taken"),  # SI units would be off by 4.9 %
    ("10 kB", "decimal units"),
    ("1.5 Mi/s", "is not a byte rate"),
    ("lots", "is not a byte rate"),
    ("", "is not a byte rate"),
    ("1,572,864", "is not a byte rate"),  # "1,5" could be a decimal comma: never guessed
    ("1e6", "is not a byte rate"),
    ("NaN", "is not a byte rate"),
    ("Infinity", "is not a byte rate"),
    ("1.5 MiB/s/s", "is not a byte rate"),
    ("1 TiB/s", "is not a byte rate"),
    ("9" * 80, "is not a byte rate"),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_byte_rates_are_read_exactly(text: str, expected: int) -> None:
    assert parse_byte_rate(text) == expected
    assert parse_quota_value(PBR, text) == expected
    assert isinstance(parse_quota_value(PBR, text), int)
    assert validate_quota_value(PBR, parse_quota_value(PBR, text)) == float(expected)


@pytest.mark.parametrize(("text", "fragment"), REFUSED)
def test_other_text_is_refused_naming_the_accepted_forms(text: str, fragment: str) -> None:
    with pytest.raises(UnitError) as refused:
        parse_quota_value("consumer_byte_rate", text)
    message = refused.value.message
    assert fragment in message and message.startswith("consumer_byte_rate: ")
    assert "1572864" in message and "1536 KiB/s, 1.5 MiB/s, 2 GiB/s" in message
    assert refused.value.code == "INVALID_REQUEST" and isinstance(refused.value, QuotaValidationError)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("-1 MiB/s", "greater than 0"), ("0", "greater than 0"), ("8 GiB/s", None), ("9000000000 GiB/s", "too large")],
)
def test_the_engine_still_judges_the_number(text: str, fragment: str | None) -> None:
    """Parsing gives the number; whether Kafka takes it (> 0, within a LONG) stays the engine's call."""
    number = parse_quota_value(PBR, text)
    if fragment is None:
        assert validate_quota_value(PBR, number) == 8 * 1024**3
    else:
        with pytest.raises(QuotaValidationError, match=fragment):
            validate_quota_value(PBR, number)


def test_numbers_and_unknown_keys_are_left_to_the_engine() -> None:
    for value in (1000, 1.5, True, None, [1]):
        assert parse_quota_value(PBR, value) is value
    assert parse_quota_value("bogus_rate", "1.5 MiB/s") == "1.5 MiB/s"  # the engine names the bad key


# ------------------------------------------------------------------ the other keys keep their own units


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("request_percentage", "50", 50),
        ("request_percentage", "50 %", 50),
        ("request_percentage", "12.5%", 12.5),
        ("controller_mutation_rate", "10", 10),
        ("controller_mutation_rate", "2.5 mutations/s", 2.5),
        ("controller_mutation_rate", "10/s", 10),
        ("connection_creation_rate", "5 connections/s", 5),
        ("connection_creation_rate", "5", 5),
    ],
)
def test_other_keys_take_a_number_with_their_own_unit(key: str, text: str, expected: float) -> None:
    assert parse_quota_value(key, text) == expected


@pytest.mark.parametrize(
    ("key", "text"),
    [("request_percentage", "50 MiB/s"), ("request_percentage", "half"), ("controller_mutation_rate", "10 KiB/s"),
     ("connection_creation_rate", "5 %")],
)
def test_other_keys_refuse_byte_units_and_words(key: str, text: str) -> None:
    with pytest.raises(UnitError, match="is not understood; write a"):
        parse_quota_value(key, text)


# ------------------------------------------------------------------ showing values

SHOWN = [
    (0, "0 B/s", "0 B/s"),
    (1, "1 B/s", "1 B/s"),
    (1000, "1,000 B/s", "1,000 B/s"),  # under 1 KiB: bytes
    (1023, "1,023 B/s", "1,023 B/s"),
    (1024, "1 KiB/s", "1,024 B/s"),
    (1536, "1.5 KiB/s", "1,536 B/s"),
    (10_000, "9.77 KiB/s", "10,000 B/s"),  # up to 2 decimals, rounded
    (524_288, "512 KiB/s", "524,288 B/s"),
    (1_048_576, "1 MiB/s", "1,048,576 B/s"),
    (1_572_864, "1.5 MiB/s", "1,572,864 B/s"),
    (6 * 1024**2, "6 MiB/s", "6,291,456 B/s"),
    (60 * 1024**2 * 3, "180 MiB/s", "188,743,680 B/s"),
    (1024**3, "1 GiB/s", "1,073,741,824 B/s"),
    (5000 * 1024**3, "5,000 GiB/s", "5,368,709,120,000 B/s"),  # GiB/s is the largest unit
    (2**63 - 1, "8,589,934,592 GiB/s", "9,223,372,036,854,775,807 B/s"),
    (1234.5, "1.21 KiB/s", "1,234.5 B/s"),  # a measured rate: not whole
]


@pytest.mark.parametrize(("value", "shown", "exact"), SHOWN)
def test_byte_rates_are_shown_in_the_largest_binary_unit_with_the_exact_figure_for_hovering(
    value: float, shown: str, exact: str
) -> None:
    assert format_byte_rate(value) == shown
    assert format_quota_value(PBR, value) == shown
    assert format_quota_value("fetch", value) == shown  # a quota type names its key's unit too
    assert format_exact(PBR, value) == exact


def test_shown_values_read_back_as_the_same_unit() -> None:
    for value in (1024, 1536, 1_572_864, 6 * 1024**2, 2 * 1024**3):
        assert parse_byte_rate(format_byte_rate(value)) == value


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("request_percentage", 50.0, "50 %"),
        ("request", 12.5, "12.5 %"),
        ("controller_mutation_rate", 2.5, "2.5 mutations/s"),
        ("connection_creation_rate", 5, "5 connections/s"),
    ],
)
def test_other_keys_are_shown_in_their_own_units(key: str, value: float, shown: str) -> None:
    assert format_quota_value(key, value) == shown
    assert not is_byte_rate(key)


def test_the_byte_rate_keys_are_kafkas_two() -> None:
    assert BYTE_RATE_KEYS == {"producer_byte_rate", "consumer_byte_rate"}
    assert is_byte_rate("produce") and is_byte_rate("consumer_byte_rate")
    assert "MiB/s" in accepted_forms(PBR) and "%" in accepted_forms("request_percentage")
