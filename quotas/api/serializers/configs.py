"""Serializers of broker and topic configs (Kafka's IncrementalAlterConfigs)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas.api.params import BROKER_ID_ERRORS, BROKER_ID_MAX, INT64_MAX, INT64_MIN, int_schema
from quotas.api.serializers.fields import MAX_CONFIG_OPS, check_kafka_string
from quotas.models import BrokerConfig, ConfigOutcome, ConfigResource, TopicConfig


class ConfigResourceSerializer(serializers.Serializer):
    """``{"broker": id}`` (null = every broker: Kafka's ``<default>`` broker) or ``{"topic": name}``, never both."""

    broker = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=BROKER_ID_MAX, error_messages=BROKER_ID_ERRORS,
        help_text="A broker id of the cluster, or null for the default broker.",
    )
    topic = serializers.CharField(required=False, help_text="A topic name (its throttled-replica lists).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("broker" in attrs) == ("topic" in attrs):
            raise serializers.ValidationError("Name exactly one of broker (null = the default broker) or topic.")
        return attrs

    def to_representation(self, instance: ConfigResource) -> dict[str, Any]:
        return {"topic": instance.topic} if instance.is_topic else {"broker": instance.broker_id}


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            int_schema(INT64_MIN, INT64_MAX),  # Kafka's INT and LONG configs; their own bounds are Kafka's check
            {"type": "array", "items": {"type": "string"}},
        ],
        "nullable": True,
    }
)
class PassThroughConfigValueField(serializers.Field):
    """A config value exactly as sent (text, number, or a list for replica lists): the engine judges it."""

    def to_internal_value(self, data: Any) -> Any:
        check_kafka_string(data)
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class ConfigOpSerializer(serializers.Serializer):
    key = serializers.CharField(
        max_length=255,
        help_text="Broker: max.connections, max.connections.per.ip, max.connections.per.ip.overrides, "
        "max.connection.creation.rate, listener.name.<L>.max.connections, "
        "listener.name.<L>.max.connection.creation.rate, leader.replication.throttled.rate, "
        "follower.replication.throttled.rate, replica.alter.log.dirs.io.max.bytes.per.second. Topic: "
        "leader.replication.throttled.replicas, follower.replication.throttled.replicas.",
    )
    value = PassThroughConfigValueField(
        required=False,
        allow_null=True,
        default=None, help_text="The value for SET (ignored for DELETE), as Kafka's config text."
    )
    op = serializers.ChoiceField(choices=["SET", "DELETE"], default="SET", help_text="DELETE: back to Kafka's default.")


class AlterConfigsRequestSerializer(serializers.Serializer):
    """Kafka's IncrementalAlterConfigs for one resource, validated whole against the combined configs."""

    resource = ConfigResourceSerializer()
    ops = ConfigOpSerializer(many=True, allow_empty=False, max_length=MAX_CONFIG_OPS)
    validate_only = serializers.BooleanField(default=False, help_text="true: validate everything, change nothing.")


class ConfigChangeSerializer(serializers.Serializer):
    key = serializers.CharField()
    before = serializers.CharField(allow_null=True, help_text="null = not set (Kafka's default).")
    after = serializers.CharField(allow_null=True, help_text="null = deleted (Kafka's default).")


class AlterConfigsResponseSerializer(serializers.Serializer):
    resource = ConfigResourceSerializer()
    validate_only = serializers.BooleanField()
    changed = serializers.BooleanField(help_text="Whether any stored config changed (false for validate_only).")
    version = serializers.IntegerField(help_text="The cluster's desired-state version after this request.")
    configs = serializers.DictField(
        child=serializers.CharField(), help_text="The resource's configs after the change (or as they would be)."
    )
    changes = ConfigChangeSerializer(many=True)

    def to_representation(self, instance: tuple[ConfigResource, ConfigOutcome, bool]) -> dict[str, Any]:
        resource, outcome, validate_only = instance
        return {
            "resource": ConfigResourceSerializer(resource).data,
            "validate_only": validate_only,
            "changed": outcome.changed,
            "version": outcome.version,
            "configs": dict(sorted(outcome.configs.items())),
            "changes": [{"key": k, "before": b, "after": a} for k, b, a in outcome.changes],
        }


class ConfigEntrySerializer(serializers.Serializer):
    """One stored config: its resource, key and value (text, as Kafka keeps it)."""

    resource = ConfigResourceSerializer()
    key = serializers.CharField()
    value = serializers.CharField()
    updated = serializers.DateTimeField()

    def to_representation(self, instance: BrokerConfig | TopicConfig) -> dict[str, Any]:
        if isinstance(instance, TopicConfig):
            resource = ConfigResource(topic=instance.topic)
        else:
            resource = ConfigResource(broker_id=instance.broker.broker_id if instance.broker else None)
        return {
            "resource": ConfigResourceSerializer(resource).data,
            "key": instance.key,
            "value": instance.value,
            "updated": serializers.DateTimeField().to_representation(instance.updated),
        }


class ConfigPageSerializer(serializers.Serializer):
    """A page of stored configs (for the schema)."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = ConfigEntrySerializer(many=True)
