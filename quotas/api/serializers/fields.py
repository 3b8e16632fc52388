"""The limits and the value fields every resource's serializers share.

Lengths are checked here so that a long name is a 400 naming the field and the limit, never a database error.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.units import UnitError, parse_quota_value
from quotas.models import QuotaEntity

#: One request alters at most this many entries: a batch is validated and applied in memory, whole.
MAX_ALTER_ENTRIES = 1000
#: One broker-config batch alters at most this many keys of one resource (Kafka has a few dozen dynamic ones).
MAX_CONFIG_OPS = 200

# Lengths, checked here so that a long name is a 400 naming the field and the limit, never a database error
# (PostgreSQL refuses a value longer than its column with a 500; SQLite silently keeps it).
#: Principal and client-id names: Kafka's own limit is its protocol STRING (32,767 bytes); the portal keeps them in
#: 255-character columns (QuotaEntity, QuotaRequest), so that is the limit.
NAME_MAX = QuotaEntity._meta.get_field("user").max_length or 255
IP_MAX = QuotaEntity._meta.get_field("ip").max_length or 64
#: Quota keys, entity types and config keys: the longest real one is about 50 characters.
KEY_MAX = 255
#: Config values travel as Kafka protocol STRINGs: at most 32,767 bytes in UTF-8.
KAFKA_STRING_MAX_BYTES = 32767
#: Reasons and comments, written and read by people.
TEXT_MAX = 4000


def check_kafka_string(value: Any) -> None:
    """A config value Kafka could not carry (over 32,767 UTF-8 bytes, lists joined by commas) is refused here."""
    text = ",".join(map(str, value)) if isinstance(value, list) else value
    if isinstance(text, str) and len(text.encode("utf-8", "surrogatepass")) > KAFKA_STRING_MAX_BYTES:
        message = f"Ensure this value has no more than {KAFKA_STRING_MAX_BYTES} bytes (UTF-8), Kafka's string limit."
        raise serializers.ValidationError(message)


@extend_schema_field(OpenApiTypes.DOUBLE)
class PassThroughNumberField(serializers.Field):
    """A quota value exactly as sent (number, string, NaN...): the engine judges it with Kafka's messages."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(
    {
        "oneOf": [{"type": "number", "format": "double"}, {"type": "string"}],
        "description": "A number, or text with a unit: byte rates as 1572864, 1536 KiB/s, 1.5 MiB/s or 2 GiB/s "
        "(binary units B/s, KiB/s, MiB/s, GiB/s; any case; '/s' optional); request_percentage as 50 or 50 %; "
        "controller_mutation_rate as 10 or 10 mutations/s.",
        "example": "1.5 MiB/s",
    }
)
class QuotaValueField(PassThroughNumberField):
    """A quota value as a person writes it: a number, or text in a form the key takes (``with_parsed_value``)."""


def with_parsed_value(attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` with a text ``value`` made a number in the key's unit (``1.5 MiB/s`` -> 1572864).

    Text the key does not take is refused here, naming the accepted forms (400 INVALID_REQUEST, ``details.value``);
    numbers are left to the engine's rules.
    """
    try:
        return {**attrs, "value": parse_quota_value(attrs.get("key", ""), attrs.get("value"))}
    except UnitError as e:
        raise serializers.ValidationError({"value": [e.message]}) from e
