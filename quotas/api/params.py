"""Integer inputs of the API, bounded as the columns they name: the schema and the check from one place.

A number past its column's range reached the database driver as it was (``OverflowError`` from SQLite, a numeric
comparison on PostgreSQL): a 500, or a silent empty answer. Every integer the API reads is bounded here or in its
serializer field (``min_value``/``max_value``, which the schema shows as ``minimum``/``maximum``), and
``tests/quotas/api/test_schema_promises.py`` fails naming any request-side integer of the schema without both bounds.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from portal.api.errors import ApiError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: A row id (BigAutoField: 1..2**63-1).
ID_MIN, ID_MAX = 1, INT64_MAX
#: Kafka's broker id (node.id), an INT32, and the column that keeps it.
BROKER_ID_MAX = 2**31 - 1
BROKER_ID_ERRORS = dict.fromkeys(
    ("min_value", "max_value"), f"A broker id is a whole number from 0 to {BROKER_ID_MAX} (Kafka's INT32)."
)


def int_schema(minimum: int, maximum: int) -> dict[str, Any]:
    """An OpenAPI integer with its bounds."""
    return {"type": "integer", "format": "int64", "minimum": minimum, "maximum": maximum}


def int_param(name: str, minimum: int, maximum: int, description: str = "") -> OpenApiParameter:
    """A query parameter that is a whole number from ``minimum`` to ``maximum`` (read with ``read_int``)."""
    return OpenApiParameter(name, int_schema(minimum, maximum), OpenApiParameter.QUERY, description=description)


def id_param(name: str, description: str) -> OpenApiParameter:
    """A query parameter naming a row by its id."""
    return int_param(name, ID_MIN, ID_MAX, description)


def id_field(**kwargs: Any) -> serializers.IntegerField:
    """A body field naming a row by its id."""
    return serializers.IntegerField(min_value=ID_MIN, max_value=ID_MAX, **kwargs)


def read_int(params: Any, name: str, minimum: int, maximum: int) -> int | None:
    """The query parameter ``name`` as a whole number from ``minimum`` to ``maximum``; None when absent or empty,
    else 400 INVALID_REQUEST naming it and its range."""
    raw = params.get(name, "")
    if raw == "":
        return None
    text = raw[1:] if raw[:1] == "-" else raw
    value = int(raw) if text.isascii() and text.isdigit() and len(text) <= 20 else None
    if value is None or not minimum <= value <= maximum:
        message = f"{name} must be a whole number from {minimum} to {maximum}, got {raw[:40]!r}."
        raise ApiError("INVALID_REQUEST", message, {name: [message]})
    return value


def read_id(params: Any, name: str) -> int | None:
    """The query parameter ``name`` as a row id (``read_int`` over the id range)."""
    return read_int(params, name, ID_MIN, ID_MAX)
