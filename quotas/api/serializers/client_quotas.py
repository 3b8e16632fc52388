"""Serializers of Kafka's client-quota operations: DescribeClientQuotas, AlterClientQuotas, the effective quota."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.entities import display_name
from quotas.api.serializers.fields import IP_MAX, MAX_ALTER_ENTRIES, NAME_MAX, PassThroughNumberField
from quotas.choices import BudgetScope, EntityType, MatchType
from quotas.models import AlterOutcome, EffectiveQuota, EntryResult, QuotaEntity

# ------------------------------------------------------------------ DescribeClientQuotas


class FilterComponentSerializer(serializers.Serializer):
    entity_type = serializers.ChoiceField(choices=EntityType.choices)
    match_type = serializers.ChoiceField(choices=MatchType.choices)
    match = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=NAME_MAX,
        help_text="The name, for match_type exact only.",
    )


class DescribeRequestSerializer(serializers.Serializer):
    components = FilterComponentSerializer(many=True, required=False, default=list)
    strict = serializers.BooleanField(
        default=False,
        help_text="true: only entities with exactly the filtered entity types; false: they may have more.",
    )


class DescribeEntrySerializer(serializers.Serializer):
    """One described entity: ``{"entity": {"user": "alice", "client-id": "<default>"}, "values": {...},
    "budget_scopes": {...}}``."""

    entity = serializers.SerializerMethodField(help_text="Entity type -> name; the default entity is '<default>'.")
    display = serializers.SerializerMethodField(help_text="The entity in words: 'client-id app (any principal)'.")
    values = serializers.SerializerMethodField(help_text="Quota key -> value (a double, as Kafka answers).")
    budget_scopes = serializers.SerializerMethodField(
        help_text="Quota key -> what its value means: per_broker (a limit on each broker, Kafka's meaning) or "
        "cluster_wide (a budget for the sum over the cluster's brokers)."
    )

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
    def get_entity(self, obj: QuotaEntity) -> dict[str, str]:
        return obj.components

    def get_display(self, obj: QuotaEntity) -> str:
        return display_name(obj.user, obj.client_id, obj.ip)

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "number", "format": "double"}})
    def get_values(self, obj: QuotaEntity) -> dict[str, float]:
        return {qv.key: qv.value for qv in sorted(obj.quota_values.all(), key=lambda qv: qv.key)}

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "string", "enum": BudgetScope.values}})
    def get_budget_scopes(self, obj: QuotaEntity) -> dict[str, str]:
        return {qv.key: qv.budget_scope for qv in sorted(obj.quota_values.all(), key=lambda qv: qv.key)}


class DescribePageSerializer(serializers.Serializer):
    """A page of described entities (for the schema); follow ``next`` with the same body."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = DescribeEntrySerializer(many=True)


# ------------------------------------------------------------------ AlterClientQuotas


class EntityComponentSerializer(serializers.Serializer):
    entity_type = serializers.CharField(help_text="user, client-id or ip (ip is never combined with the others).")
    name = serializers.CharField(  # its length is judged per entry with Kafka's answer (quotas.models.quotas)
        allow_null=True, allow_blank=True, help_text="The name; null or '<default>' for the default entity."
    )


class QuotaOpSerializer(serializers.Serializer):
    key = serializers.CharField(
        help_text="producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate "
        "(user/client-id entities) or connection_creation_rate (ip entities)."
    )
    value = PassThroughNumberField(
        required=False, allow_null=True, default=None, help_text="A finite number > 0; integral for byte rates."
    )
    remove = serializers.BooleanField(default=False, help_text="true deletes the key (value is then ignored).")
    budget_scope = serializers.ChoiceField(
        choices=BudgetScope.choices,
        required=False,
        allow_null=True,
        default=None,
        help_text="What the value means: per_broker (a limit on each broker, Kafka's meaning) or cluster_wide (a "
        "budget for the sum over the cluster's brokers; producer_byte_rate, consumer_byte_rate and "
        "request_percentage of a Kafka cluster only, else 400 INVALID_BUDGET_SCOPE). Left out: the value keeps its "
        "scope (per_broker for a new value).",
    )


class AlterEntrySerializer(serializers.Serializer):
    entity = EntityComponentSerializer(many=True)
    ops = QuotaOpSerializer(many=True)


class AlterRequestSerializer(serializers.Serializer):
    entries = AlterEntrySerializer(many=True, max_length=MAX_ALTER_ENTRIES)
    validate_only = serializers.BooleanField(default=False, help_text="true: validate everything, change nothing.")


class EntryResultSerializer(serializers.Serializer):
    """Kafka's per-entry answer: the entity as sent, NONE or the error code, and the message."""

    entity = EntityComponentSerializer(many=True)
    error_code = serializers.CharField(help_text="NONE, INVALID_REQUEST, or INVALID_BUDGET_SCOPE (a budget_scope the "
                                       "value cannot have).")
    error_message = serializers.CharField(allow_null=True)

    def to_representation(self, instance: EntryResult) -> dict[str, Any]:
        return {
            "entity": [{"entity_type": t, "name": n} for t, n in instance.entity],
            "error_code": instance.error_code,
            "error_message": instance.error_message,
        }


class AlterResponseSerializer(serializers.Serializer):
    validate_only = serializers.BooleanField()
    changed = serializers.BooleanField(help_text="Whether any stored quota changed (false for validate_only).")
    version = serializers.IntegerField(help_text="The cluster's desired-state version after this request.")
    entries = EntryResultSerializer(many=True)

    def to_representation(self, instance: tuple[AlterOutcome, bool]) -> dict[str, Any]:
        outcome, validate_only = instance
        return {
            "validate_only": validate_only,
            "changed": outcome.changed,
            "version": outcome.version,
            "entries": EntryResultSerializer(outcome.results, many=True).data,
        }


# ------------------------------------------------------------------ effective quota


class EffectiveQuerySerializer(serializers.Serializer):
    """Who asks: a connection's user and client-id, or an IP address (never both)."""

    user = serializers.CharField(required=False, max_length=NAME_MAX, help_text="The principal name the broker sees.")
    client_id = serializers.CharField(
        required=False, allow_blank=True, max_length=NAME_MAX, help_text="The client-id the broker sees (may be empty)."
    )
    ip = serializers.CharField(required=False, max_length=IP_MAX, help_text="An IPv4 or IPv6 address; alone.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "ip" in attrs:
            if "user" in attrs or "client_id" in attrs:
                raise serializers.ValidationError("Ask for an ip alone, or for a user and a client_id, not both.")
        elif "user" not in attrs or "client_id" not in attrs:
            raise serializers.ValidationError(
                "Give both user and client_id (as the broker sees the connection; client_id may be empty), or ip."
            )
        return attrs


class SkippedLevelSerializer(serializers.Serializer):
    level = serializers.IntegerField()
    entity = serializers.CharField(help_text="The config path of that level, e.g. /config/users/alice.")


class EffectiveQuotaSerializer(serializers.Serializer):
    """The value of one key that applies, where it comes from, and the more specific levels that hold nothing."""

    value = serializers.FloatField(allow_null=True, help_text="null: no quota applies (unlimited).")
    level = serializers.IntegerField(
        allow_null=True, help_text="1..8 (Kafka's precedence, most specific first); for an ip 1 = the ip, 2 = default; "
        "null when no quota applies or a group's does."
    )
    entity = serializers.CharField(
        allow_null=True, help_text="The config path that supplied the value, or /groups/<name> for a group's."
    )
    skipped = SkippedLevelSerializer(many=True)
    tags = serializers.CharField(allow_null=True, help_text="user:client-id tags of the sensor the engine records.")
    budget_scope = serializers.ChoiceField(
        choices=BudgetScope.choices,
        allow_null=True,
        help_text="What the value means: per_broker (the limit on each broker) or cluster_wide (a budget for the sum "
        "over the cluster's brokers, which they share out); null when no quota applies.",
    )
    group = serializers.CharField(
        allow_null=True,
        help_text="The group whose value applies (entity /groups/<name>, tags group@<name>:, level null): no level "
        "that names the client holds a value, and the group's wins over Kafka's defaults (beaten). null otherwise.",
    )
    exempt = serializers.BooleanField(
        help_text="true: the principal is exempt on this cluster, so no quota applies to it (value, level and "
        "entity null), whatever the levels and groups hold."
    )
    beaten = SkippedLevelSerializer(
        many=True, help_text="When a group's value applies: Kafka's default levels (5, 6, 8) that hold a value the "
        "group's won over. Empty otherwise."
    )

    def to_representation(self, instance: EffectiveQuota) -> dict[str, Any]:
        return {
            "value": instance.value,
            "level": instance.level,
            "entity": instance.entity,
            "skipped": [{"level": lv, "entity": path} for lv, path in instance.skipped],
            "tags": instance.tags,
            "budget_scope": instance.budget_scope,
            "group": instance.group,
            "exempt": instance.exempt,
            "beaten": [{"level": lv, "entity": path} for lv, path in instance.beaten],
        }


class EffectiveResponseSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    user = serializers.CharField(allow_null=True)
    client_id = serializers.CharField(allow_null=True)
    ip = serializers.CharField(allow_null=True, help_text="In canonical form.")
    quotas = serializers.DictField(child=EffectiveQuotaSerializer(), help_text="Quota key -> what applies.")
