"""Quota values as people write and read them: byte rates in binary units, the other keys in their own.

Kafka keeps byte rates as whole bytes per second (LONG) and its documentation writes them in binary units
(1 MiB = 1,048,576 B), so the portal does too, in one place: the API's serializers, the page forms, the
templates' filters, the preview summaries and (mirrored in ``frontend/static/frontend/units.js``) the charts
and the form's "understood as" line all use these functions.

- Parse (``parse_quota_value``): a byte rate is a whole number of bytes/s (``1572864``) or a decimal with a
  unit, ``B/s``, ``KiB/s``, ``MiB/s`` or ``GiB/s`` (any case, a space or not, ``/s`` optional):
  ``1.5 MiB/s``, ``1536 KiB/s``, ``1536kib``. The result must be a whole number of bytes, computed exactly
  (``1.3 B/s`` and ``0.1 KiB/s`` are refused). The other keys take a number with their own unit optional
  (``50``, ``50 %``; ``10 mutations/s``; ``5 connections/s``). Anything else is a ``UnitError`` naming the
  accepted forms. Whether the number is allowed (> 0, within the key's Java type) stays ``validate_quota_value``'s
  call, with Kafka's messages.
- Format (``format_quota_value``): the largest binary unit the value reaches, up to 2 decimals, trailing
  zeros trimmed (``1.5 MiB/s``, ``1000 B/s``); ``format_exact`` is the whole figure (``1,572,864 B/s``) that
  pages put in a ``title`` for hovering.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from .entities import QUOTA_KEYS, QuotaType
from .errors import QuotaValidationError

#: The byte-rate quota keys (LONG bytes per second), and the capacity a cluster has of them.
BYTE_RATE_KEYS: frozenset[str] = frozenset({QuotaType.PRODUCE.config_key, QuotaType.FETCH.config_key})
#: Binary units, largest first (Kafka's documentation writes byte rates this way).
BINARY_UNITS: tuple[tuple[str, int], ...] = (("GiB/s", 1 << 30), ("MiB/s", 1 << 20), ("KiB/s", 1 << 10), ("B/s", 1))
#: The other keys' own units.
KEY_UNITS: dict[str, str] = {
    "request_percentage": "%",
    "controller_mutation_rate": "mutations/s",
    "connection_creation_rate": "connections/s",
}
BYTE_RATE_FORMS = (
    "a whole number of bytes per second (1572864) or a number with a binary unit: 1536 KiB/s, 1.5 MiB/s, "
    "2 GiB/s (units B/s, KiB/s, MiB/s, GiB/s, where 1 KiB = 1024 bytes; any case; '/s' optional)"
)
_FORMS = {
    "request_percentage": "a number of percent (50, 50 %, 12.5)",
    "controller_mutation_rate": "a number of mutations per second (10, 10 mutations/s, 2.5)",
    "connection_creation_rate": "a whole number of connections per second (5, 5 connections/s)",
}

_NUMBER = r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
_BYTE_RATE = re.compile(_NUMBER + r"\s*(?:(?P<unit>[kmg]i)?b)?(?:/s)?", re.IGNORECASE)
_DECIMAL_UNIT = re.compile(_NUMBER + r"\s*[kmgt]b?(?:ps|/s)?", re.IGNORECASE)
_UNIT_FACTOR = {None: 1, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}
_OWN_UNIT = {
    "request_percentage": re.compile(_NUMBER + r"\s*%?"),
    "controller_mutation_rate": re.compile(_NUMBER + r"\s*(?:(?:mutations?)?/s|mutations?)?", re.IGNORECASE),
    "connection_creation_rate": re.compile(_NUMBER + r"\s*(?:(?:connections?)?/s|connections?)?", re.IGNORECASE),
}
#: Longest text looked at (a LONG has 19 digits; anything far longer is not a rate someone typed).
_MAX_TEXT = 64


class UnitError(QuotaValidationError):
    """A value written in a form the key does not take; the message names the accepted forms.

    ``problem`` is what is wrong with the text alone (``'2 MB/s' is not a byte rate (...)``), for a form that
    lists the accepted forms beside the field already and so need not repeat them.
    """

    def __init__(self, key: str, problem: str, forms: str) -> None:
        super().__init__(f"{key}: {problem}; write {forms}.")
        self.problem = problem


def quota_key(name: str) -> str:
    """The config key of a key or of a quota type (``produce`` -> ``producer_byte_rate``), else ``name``."""
    if name in QUOTA_KEYS:
        return name
    try:
        return QuotaType(name).config_key
    except ValueError:
        return name


def is_byte_rate(name: str) -> bool:
    """Whether a quota key (or quota type) is a byte rate, shown and parsed in binary units."""
    return quota_key(name) in BYTE_RATE_KEYS


def accepted_forms(key: str) -> str:
    """What the key takes, in words, for refusals and help texts."""
    key = quota_key(key)
    return BYTE_RATE_FORMS if key in BYTE_RATE_KEYS else _FORMS.get(key, "a number")


def parse_byte_rate(text: str, key: str = "byte rate") -> int:
    """``1.5 MiB/s`` -> 1572864: a whole number of bytes/s, exactly (no float rounding), or UnitError.

    The sign is kept (``-1 MiB/s`` -> -1048576) so that ``validate_quota_value`` refuses it with Kafka's words.
    """
    match = _BYTE_RATE.fullmatch(text.strip()) if len(text) <= _MAX_TEXT else None
    if match is None:
        hint = ""
        if len(text) <= _MAX_TEXT and _DECIMAL_UNIT.fullmatch(text.strip()):
            hint = " (decimal units such as MB/s are not taken: byte rates are counted in binary units, as Kafka does)"
        raise UnitError(key, f"{text!r} is not a byte rate{hint}", BYTE_RATE_FORMS)
    unit = match["unit"].lower() if match["unit"] else None
    exact = Decimal(match["number"]) * _UNIT_FACTOR[unit]
    if exact != exact.to_integral_value():
        raise UnitError(key, f"{text.strip()} is {exact.normalize():f} bytes per second, not a whole number of bytes",
                        BYTE_RATE_FORMS)
    return int(exact)


def parse_quota_value(key: str, value: object) -> object:
    """A value as the API or a form received it, made a number when it is text in a form the key takes.

    Numbers (and values of unknown keys) are returned as they are: the engine's ``validate_quota_value`` judges
    them with Kafka's messages. Text of a byte-rate key becomes whole bytes/s (``parse_byte_rate``); text of
    another key a number, its own unit optional. Text in no accepted form is a UnitError naming the forms.
    """
    if not isinstance(value, str) or key not in QUOTA_KEYS:
        return value
    if key in BYTE_RATE_KEYS:
        return parse_byte_rate(value, key)
    match = _OWN_UNIT[key].fullmatch(value.strip()) if len(value) <= _MAX_TEXT else None
    if match is None:
        raise UnitError(key, f"{value!r} is not understood", accepted_forms(key))
    number = Decimal(match["number"])
    return int(number) if number == number.to_integral_value() else float(number)


def _trimmed(value: float, decimals: int = 2) -> str:
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_byte_rate(value: float) -> str:
    """``1572864`` -> ``1.5 MiB/s``: the largest binary unit the value reaches, up to 2 decimals, trimmed."""
    if not math.isfinite(value):
        return f"{value} B/s"
    magnitude = abs(value)
    for unit, size in BINARY_UNITS:
        if magnitude >= size or size == 1:
            return ("-" if value < 0 else "") + f"{_trimmed(magnitude / size)} {unit}"
    raise AssertionError("unreachable: B/s matches every value")


def format_exact(key: str, value: float) -> str:
    """The whole figure with its unit, for hovering: ``1,572,864 B/s``, ``12.5 %``."""
    key = quota_key(key)
    unit = "B/s" if key in BYTE_RATE_KEYS else KEY_UNITS.get(key, "")
    if isinstance(value, int):
        number = f"{value:,}"
    else:
        number = f"{value:,.0f}" if float(value).is_integer() else _trimmed(value, 6)
    return f"{number} {unit}".rstrip()


def format_quota_value(key: str, value: float) -> str:
    """A quota value (or a rate measured against one) as pages show it: binary units for byte rates,
    the key's own unit otherwise (``50 %``, ``10 mutations/s``); ``key`` may also be a quota type."""
    key = quota_key(key)
    if key in BYTE_RATE_KEYS:
        return format_byte_rate(value)
    number = _trimmed(value, 2) if math.isfinite(value) else str(value)
    unit = KEY_UNITS.get(key)
    return f"{number} {unit}" if unit else number


def unit_label(name: str) -> str:
    """The unit of a key or quota type in an axis title or a column head."""
    key = quota_key(name)
    return "bytes/s" if key in BYTE_RATE_KEYS else KEY_UNITS.get(key, "per second")

