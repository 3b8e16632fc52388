"""The quota file's JSON Schema, for editors and for the API's documentation (no Django)."""

from __future__ import annotations

from typing import Any

from engine.config import CLIENT_ID, IP, USER
from quotafile import groups as _groups
from quotafile.common import (
    BUDGET_SCOPES,
)
from quotafile.state import (
    API_VERSION,
    KIND,
)


def json_schema() -> dict[str, Any]:
    """The file's JSON Schema (draft 2020-12), published at ``/api/schema/quotas-file.json``."""
    name = {"type": "string", "minLength": 1, "description": "A name, or '<default>' for Kafka's default entity."}
    byte_rate = {
        "oneOf": [{"type": "integer", "minimum": 1},
                  {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+\s*([KkMmGg][Ii])?[Bb]?(/[Ss])?\s*$"}],
        "description": "Bytes per second: a whole number, or with a binary unit (1536 KiB/s, 1.5 MiB/s).",
    }
    number = {"oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]}

    def scoped(value: dict[str, Any]) -> dict[str, Any]:
        """A value, or ``{value, budgetScope}``: per_broker (Kafka's meaning) or a cluster-wide budget."""
        return {"oneOf": [value, {
            "type": "object", "required": ["value"], "additionalProperties": False,
            "properties": {"value": value, "budgetScope": {"enum": list(BUDGET_SCOPES)}},
            "description": "budgetScope cluster_wide: a budget for the sum over the cluster's brokers.",
        }]}

    config_value = {"type": ["string", "integer", "number", "boolean"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "quotas-file.json",
        "title": "Cluster quotas file (quotas/v1)",
        "description": "One cluster's client quotas, managed broker and topic configs and KIP-714 client-metrics "
        "subscriptions. A section left out is not managed by the file.",
        "type": "object",
        "required": ["apiVersion", "kind", "cluster"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": KIND},
            "cluster": {"type": "string", "minLength": 1},
            "quotas": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["entity"],
                    "minProperties": 2,
                    "additionalProperties": False,
                    "properties": {
                        "entity": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": False,
                            "properties": {USER: name, CLIENT_ID: name, IP: name},
                            "description": "user and/or client-id, or ip alone.",
                        },
                        "producer_byte_rate": scoped(byte_rate),
                        "consumer_byte_rate": scoped(byte_rate),
                        "request_percentage": scoped(number),
                        "controller_mutation_rate": number,
                        "connection_creation_rate": number,
                    },
                },
            },
            "brokerConfigs": {
                "type": ["object", "null"],
                "propertyNames": {"pattern": r"^([0-9]+|<default>)$"},
                "additionalProperties": {"type": "object", "additionalProperties": config_value},
            },
            "topicConfigs": {
                "type": ["object", "null"],
                "additionalProperties": {"type": "object", "additionalProperties": config_value},
            },
            "clientMetrics": {
                "type": ["array", "null"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 255},
                        "metrics": {"type": "array", "items": {"type": "string"}},
                        "intervalMs": {"type": "integer", "minimum": 100, "maximum": 3_600_000},
                        "match": {"type": "array", "items": {"type": "string", "pattern": "^[a-z_]+=.*$"}},
                    },
                },
            },
            **_groups.schema(lambda key: number if key == "controller_mutation_rate"  # per broker only
                             else scoped(number if key == "request_percentage" else byte_rate)),
        },
    }
