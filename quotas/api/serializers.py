"""Serializers of the quota API: clusters, Kafka's client-quota requests and answers, tenants,
self-service quota requests and the audit trail.

Request serializers only shape the JSON; Kafka's rules (entity types, keys, values) are
judged by the engine in ``quotas.models.quotas``, so in AlterClientQuotas (Kafka's own API, whose
values are doubles) a value such as ``"100"`` reaches the engine untouched and is refused there with
Kafka's message, never silently coerced. Quota requests and previews are written by people: their
value may also be text in a form the key takes (``1.5 MiB/s``, ``1536 KiB/s``, ``1572864``; parsed by
``engine.units``), and other text is refused naming the accepted forms.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, Max, Min, Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.config import CLIENT_ID, USER
from engine.entities import DEFAULT, display_name, display_path
from engine.units import UnitError, is_byte_rate, parse_quota_value
from quotas.api.errors import unknown_name
from quotas.api.params import BROKER_ID_ERRORS, BROKER_ID_MAX, INT64_MAX, INT64_MIN, id_field, int_schema
from quotas.budgets import enforcement
from quotas.choices import BudgetScope, ConnectorKind, EntityType, MatchType, QuotaScope
from quotas.models import (
    AlterOutcome,
    Approval,
    AuditEntry,
    Broker,
    BrokerConfig,
    Cluster,
    ConfigOutcome,
    ConfigResource,
    Drift,
    DriftResolution,
    EffectiveQuota,
    EntryResult,
    Listener,
    OwnedName,
    Push,
    PushState,
    QuotaEntity,
    QuotaRequest,
    QuotaValue,
    RequestState,
    Tenant,
    TopicConfig,
    push_targets,
    push_wanted,
)
from quotas.models.capacity import capacity_check
from quotas.models.staleness import request_moved

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


# ------------------------------------------------------------------ clusters


class BrokerSerializer(serializers.ModelSerializer):
    """A broker as an admin registers it. ``engine_url`` is written, never shown: a Redis URL may hold a password,
    and every authenticated user reads clusters."""

    class Meta:
        model = Broker
        fields = ["broker_id", "host", "engine_url"]
        extra_kwargs = {"engine_url": {"write_only": True}}
        # (cluster, broker_id) is unique: checked over the whole list in ClusterSerializer.validate_brokers
        validators: list[Any] = []


class ListenerSerializer(serializers.ModelSerializer):
    class Meta:
        model = Listener
        fields = ["name", "is_inter_broker"]


class ClusterSerializer(serializers.ModelSerializer):
    """A cluster with its brokers, listeners and the version of its desired quota state."""

    brokers = BrokerSerializer(
        many=True,
        required=False,
        help_text="Brokers to register or change (by broker_id) with the cluster; brokers not listed are kept. "
        "A new broker, or one whose engine_url changed, gets the cluster's whole desired state pushed.",
    )
    listeners = ListenerSerializer(many=True, read_only=True)
    desired_state_version = serializers.IntegerField(
        source="desired_state.version", read_only=True, help_text="Bumped by every quota change of this cluster."
    )

    class Meta:
        model = Cluster
        fields = [
            "name",
            "description",
            "connector",
            "scope",
            "capacity_in_bytes_per_s",
            "capacity_out_bytes_per_s",
            "desired_state_version",
            "brokers",
            "listeners",
            "created",
            "last_updated",
        ]
        read_only_fields = ["created", "last_updated"]

    def validate_name(self, value: str) -> str:
        """The name is the engine's namespace and the URL; renaming would orphan what brokers hold."""
        if self.instance is not None and value != self.instance.name:
            raise serializers.ValidationError("A cluster cannot be renamed; create a new cluster instead.")
        return value

    def validate_brokers(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each broker id once: the database's unique (cluster, broker_id), said before it fails."""
        ids = [b["broker_id"] for b in value]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise serializers.ValidationError(f"broker_id {', '.join(map(str, twice))} is listed more than once.")
        return value

    def create(self, validated_data: dict[str, Any]) -> Cluster:
        """The cluster and its brokers in one transaction: all of them, or nothing."""
        brokers = validated_data.pop("brokers", [])
        with transaction.atomic():
            cluster = super().create(validated_data)
            self._save_brokers(cluster, brokers)
        return cluster

    def update(self, instance: Cluster, validated_data: dict[str, Any]) -> Cluster:
        brokers = validated_data.pop("brokers", [])
        with transaction.atomic():
            cluster = super().update(instance, validated_data)
            self._save_brokers(cluster, brokers)
        return cluster

    @staticmethod
    def _save_brokers(cluster: Cluster, brokers: list[dict[str, Any]]) -> None:
        """New brokers are created (``Broker.save`` queues their first push); a known one whose ``engine_url``
        changed now points at a namespace holding nothing, so it gets a push too (the whole state)."""
        known = {b.broker_id: b for b in cluster.brokers.select_for_update()}
        moved: list[int] = []
        for data in brokers:
            broker = known.get(data["broker_id"])
            if broker is None:
                Broker.objects.create(cluster=cluster, **data)
                continue
            old_url = broker.engine_url
            for field, value in data.items():
                setattr(broker, field, value)
            broker.save()
            if broker.engine_url != old_url and cluster.scope == QuotaScope.PER_BROKER:
                moved.append(broker.pk)
        if moved:
            transaction.on_commit(lambda: push_wanted.send(sender=Broker, cluster_id=cluster.pk, broker_pks=moved))

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The database check, said before it fails: Kafka brokers cannot share one namespace. And a cluster holding
        cluster-wide budgets does not become one engine namespace (whose values take no budget scope)."""
        connector = attrs.get("connector", getattr(self.instance, "connector", ConnectorKind.ENGINE))
        scope = attrs.get("scope", getattr(self.instance, "scope", QuotaScope.PER_BROKER))
        if connector == ConnectorKind.KAFKA and scope == QuotaScope.CLUSTER_WIDE:
            raise serializers.ValidationError(
                {"scope": "A kafka cluster can only be scoped per_broker; cluster_wide needs the engine connector."}
            )
        if self.instance is not None and connector != ConnectorKind.KAFKA and scope == QuotaScope.CLUSTER_WIDE:
            budgets = QuotaValue.objects.filter(entity__cluster=self.instance, budget_scope=BudgetScope.CLUSTER_WIDE)
            if budgets.exists():
                raise serializers.ValidationError({"scope": (
                    f"Cluster {self.instance.name!r} has {budgets.count()} cluster-wide quota value(s), which its "
                    "brokers share out; a cluster_wide engine cluster has one namespace and no budget scopes: make "
                    "them per_broker first (AlterClientQuotas with budget_scope per_broker)."
                )})
        return attrs


class BudgetRoundSerializer(serializers.Serializer):
    broker = serializers.IntegerField(help_text="Kafka's broker id.")
    ms_ago = serializers.IntegerField(help_text="How long ago its budget plugin last took its shares (Redis's clock).")


class BudgetEnforcementSerializer(serializers.Serializer):
    """Whether a cluster's cluster-wide budgets are enforced as budgets (``quotas.budgets``)."""

    state = serializers.ChoiceField(
        choices=["coordinated", "fallback", "off", "unknown"],
        help_text="coordinated: every broker's plugin took its shares within the lease; fallback: a broker is late (it "
        "enforces its last shares, then budget / live brokers); off: no plugin ever reported (Kafka enforces each "
        "value on every broker); unknown: the Redis of the rounds could not be read.",
    )
    degraded = serializers.BooleanField(help_text="fallback, or off/unknown while the cluster holds budgets.")
    cluster_wide_values = serializers.IntegerField(help_text="Quota values of the cluster that are cluster-wide.")
    brokers = serializers.IntegerField(help_text="Registered brokers.")
    reporting = serializers.IntegerField(help_text="Brokers whose last round is within the lease.")
    lease_ms = serializers.IntegerField()
    rounds = BudgetRoundSerializer(many=True)
    reason = serializers.CharField(help_text="What the state means for this cluster, and what to do.")


class ClusterDetailSerializer(ClusterSerializer):
    """A cluster as GET /api/clusters/{name}/ answers it: with its budget enforcement."""

    budget_enforcement = serializers.SerializerMethodField(
        help_text="Its cluster-wide budgets' enforcement; null for a cluster_wide engine cluster (one namespace, no "
        "budget scopes)."
    )

    class Meta(ClusterSerializer.Meta):
        fields = [*ClusterSerializer.Meta.fields, "budget_enforcement"]

    @extend_schema_field(BudgetEnforcementSerializer(allow_null=True))
    def get_budget_enforcement(self, obj: Cluster) -> dict[str, Any] | None:
        found = enforcement(obj)
        return None if found is None else BudgetEnforcementSerializer(found.as_dict()).data


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


# ------------------------------------------------------------------ broker and topic configs


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
        allow_null=True, help_text="1..8 (Kafka's precedence, most specific first); for an ip 1 = the ip, 2 = default."
    )
    entity = serializers.CharField(allow_null=True, help_text="The config path that supplied the value.")
    skipped = SkippedLevelSerializer(many=True)
    tags = serializers.CharField(allow_null=True, help_text="user:client-id tags of the sensor the engine records.")
    budget_scope = serializers.ChoiceField(
        choices=BudgetScope.choices,
        allow_null=True,
        help_text="What the value means: per_broker (the limit on each broker) or cluster_wide (a budget for the sum "
        "over the cluster's brokers, which they share out); null when no quota applies.",
    )

    def to_representation(self, instance: EffectiveQuota) -> dict[str, Any]:
        return {
            "value": instance.value,
            "level": instance.level,
            "entity": instance.entity,
            "skipped": [{"level": lv, "entity": path} for lv, path in instance.skipped],
            "tags": instance.tags,
            "budget_scope": instance.budget_scope,
        }


class EffectiveResponseSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    user = serializers.CharField(allow_null=True)
    client_id = serializers.CharField(allow_null=True)
    ip = serializers.CharField(allow_null=True, help_text="In canonical form.")
    quotas = serializers.DictField(child=EffectiveQuotaSerializer(), help_text="Quota key -> what applies.")


# ------------------------------------------------------------------ tenants


class TenantSerializer(serializers.ModelSerializer):
    """A tenant, its members (usernames) and the principal and client-id patterns it owns (fnmatch-style)."""

    members = serializers.SlugRelatedField(
        many=True,
        slug_field="username",
        queryset=get_user_model().objects.all(),
        required=False,
        error_messages={"does_not_exist": "No account with the username '{value}'; a member must have an account "
                        "(an admin creates it) before joining a tenant."},
    )
    principals = serializers.ListField(
        child=serializers.CharField(max_length=255),
        required=False,
        help_text="Owned principal patterns, fnmatch-style and case-sensitive: * any run, ? one character, [seq].",
    )
    client_ids = serializers.ListField(
        child=serializers.CharField(max_length=255), required=False, help_text="Owned client-id patterns (as above)."
    )

    class Meta:
        model = Tenant
        fields = ["name", "description", "members", "principals", "client_ids", "created"]
        read_only_fields = ["created"]

    def to_representation(self, instance: Tenant) -> dict[str, Any]:
        data = super().to_representation(instance)
        owned = list(instance.owned_names.all())
        data["principals"] = [o.pattern for o in owned if o.entity_type == USER]
        data["client_ids"] = [o.pattern for o in owned if o.entity_type == CLIENT_ID]
        return data

    def validate_name(self, value: str) -> str:
        if self.instance is not None and value != self.instance.name:
            raise serializers.ValidationError("A tenant cannot be renamed: requests and audit entries name it.")
        return value

    def _validate_patterns(self, entity_type: str, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if DEFAULT in pattern:
                raise serializers.ValidationError(f"{pattern!r}: the default entity cannot be owned by a tenant.")
        taken = OwnedName.objects.filter(entity_type=entity_type, pattern__in=patterns).select_related("tenant")
        if self.instance is not None:
            taken = taken.exclude(tenant=self.instance)
        for other in taken:
            raise serializers.ValidationError(f"{other.pattern!r} is already owned by tenant {other.tenant.name!r}.")
        return sorted(set(patterns))

    def validate_principals(self, value: list[str]) -> list[str]:
        return self._validate_patterns(USER, value)

    def validate_client_ids(self, value: list[str]) -> list[str]:
        return self._validate_patterns(CLIENT_ID, value)

    def _save_patterns(self, tenant: Tenant, entity_type: str, patterns: list[str] | None) -> None:
        if patterns is None:
            return
        tenant.owned_names.filter(entity_type=entity_type).exclude(pattern__in=patterns).delete()
        for pattern in patterns:
            OwnedName.objects.get_or_create(tenant=tenant, entity_type=entity_type, pattern=pattern)

    @transaction.atomic
    def create(self, validated_data: dict[str, Any]) -> Tenant:
        principals, client_ids = validated_data.pop("principals", []), validated_data.pop("client_ids", [])
        tenant = super().create(validated_data)
        self._save_patterns(tenant, USER, principals)
        self._save_patterns(tenant, CLIENT_ID, client_ids)
        return tenant

    @transaction.atomic
    def update(self, instance: Tenant, validated_data: dict[str, Any]) -> Tenant:
        principals, client_ids = validated_data.pop("principals", None), validated_data.pop("client_ids", None)
        tenant = super().update(instance, validated_data)
        self._save_patterns(tenant, USER, principals)
        self._save_patterns(tenant, CLIENT_ID, client_ids)
        return tenant


# ------------------------------------------------------------------ requests and approvals


class ApprovalSerializer(serializers.ModelSerializer):
    approver = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Approval
        fields = ["approver", "decision", "decision_reason", "comment", "decided_at"]
        extra_kwargs = {"decision_reason": {
            "help_text": "superseded: rejected because the value moved on since the request was submitted; else ''."
        }}


class HeldSerializer(serializers.Serializer):
    value = serializers.JSONField(allow_null=True, help_text="A quota's number (a plan's config: its text); null: no "
                                  "value.")
    budget_scope = serializers.CharField(allow_null=True, help_text="A quota value's; null: no value, or not a quota.")


class ChangedBySerializer(serializers.Serializer):
    audit = serializers.IntegerField(help_text="The audit entry of the change (GET /api/audit/).")
    request = serializers.IntegerField(allow_null=True, help_text="The quota request whose change it was.")
    plan = serializers.IntegerField(allow_null=True, help_text="The plan whose change it was.")
    plan_request = serializers.IntegerField(allow_null=True, help_text="The grouped plan request it was applied for.")
    actor = serializers.CharField()
    at = serializers.DateTimeField()
    label = serializers.CharField(help_text="As the message names it: #3, plan request #2, audit entry #17 by root.")


class MovedSerializer(serializers.Serializer):
    """A key that no longer holds what a request was submitted against."""

    entity = serializers.CharField()
    key = serializers.CharField()
    submitted_against = HeldSerializer()
    now = HeldSerializer()
    changed_by = ChangedBySerializer(allow_null=True, help_text="The newest audited change since; null: none found.")
    message = serializers.CharField(help_text="submitted against 512 KiB/s; now 2 MiB/s since #3")


class QuotaRequestSerializer(serializers.ModelSerializer):
    """A quota request as anyone allowed to see it reads it; ``approval`` is null until decided."""

    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    entity = serializers.CharField(read_only=True, help_text="Kafka's config path of the entity.")
    display = serializers.SerializerMethodField(
        help_text="The entity in words, as the pages and mails name it: 'svc-a (all client-ids)'."
    )
    approval = serializers.SerializerMethodField()
    stale = serializers.SerializerMethodField(
        help_text="A submitted request whose key moved on since it was submitted: what it was, what it is, what "
        "changed it (approve needs confirm_stale, else 409 STALE_REQUEST); null otherwise."
    )

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "tenant",
            "cluster",
            "requested_by",
            "user",
            "client_id",
            "entity",
            "display",
            "key",
            "value",
            "budget_scope",
            "reason",
            "expires_at",
            "state",
            "previous_value",
            "previous_budget_scope",
            "applied_version",
            "failure",
            "approval",
            "submitted_against",
            "stale",
            "created",
            "updated",
        ]
        read_only_fields = fields

    def get_display(self, obj: QuotaRequest) -> str:
        return display_name(obj.user, obj.client_id)

    @extend_schema_field(ApprovalSerializer(allow_null=True))
    def get_approval(self, obj: QuotaRequest) -> dict[str, Any] | None:
        approval = getattr(obj, "approval", None)
        return None if approval is None else ApprovalSerializer(approval).data

    @extend_schema_field(MovedSerializer(allow_null=True))
    def get_stale(self, obj: QuotaRequest) -> dict[str, Any] | None:
        moved = request_moved(obj) if obj.state == RequestState.SUBMITTED else None
        return None if moved is None else MovedSerializer(moved.as_dict()).data

    def to_representation(self, instance: QuotaRequest) -> dict[str, Any]:
        """Byte rates are whole bytes/s (Kafka's LONG): answered as integers, not as doubles."""
        data = super().to_representation(instance)
        if is_byte_rate(instance.key):
            for name in ("value", "previous_value"):
                if isinstance(data.get(name), float) and data[name].is_integer():
                    data[name] = int(data[name])
        return data


class DefaultShareSerializer(serializers.Serializer):
    entity = serializers.CharField(help_text="The config path naming <default>, e.g. /config/users/<default>.")
    value = serializers.FloatField(allow_null=True, help_text="Its value, bytes/s; null: removed by the request.")
    applies_to = serializers.IntegerField(
        help_text="Known entities it applies to with the request (each its own sensor); it counts once for each."
    )
    applies_to_without = serializers.IntegerField(help_text="The same, without the request.")


class CapacitySerializer(serializers.Serializer):
    """The cluster's granted total of a byte-rate key without and with the request, in bytes/s it carries.

    Counted over the known entities (the principal/client-id combinations the cluster's quotas name, and the
    request's), each with the quota Kafka applies to it, each sensor once: a <default> counts once for every
    known entity it applies to (``defaults``); then a per-broker value x brokers for per_broker clusters, a
    cluster-wide budget once.
    """

    key = serializers.CharField()
    scope = serializers.CharField(help_text="The cluster's: per_broker: values count once per broker; cluster_wide "
                                  "(an engine cluster of one namespace): once.")
    brokers = serializers.IntegerField()
    multiplier = serializers.IntegerField(help_text="Brokers (at least 1) for per_broker clusters, 1 otherwise.")
    budgets = serializers.ListField(
        child=serializers.CharField(),
        help_text="The cluster-wide budgets that supply a sensor with the request (config paths): counted once.",
    )
    budget_with = serializers.FloatField(help_text="Of granted_with, the cluster-wide budgets' part (counted once).")
    budget_without = serializers.FloatField(help_text="Of granted_without, the cluster-wide budgets' part.")
    capacity = serializers.IntegerField(allow_null=True, help_text="The cluster's capacity; null = unknown.")
    granted_without = serializers.FloatField()
    granted_with = serializers.FloatField()
    known = serializers.IntegerField(help_text="Known entities the total was counted over.")
    defaults = DefaultShareSerializer(many=True, help_text="The <default> quotas of the key and whom they apply to.")
    counted = serializers.CharField(help_text="How the total was counted, in words.")
    exceeds = serializers.BooleanField()
    warning = serializers.CharField(allow_null=True)


class PushSerializer(serializers.ModelSerializer):
    """The status of one desired-state version on one target (``broker`` null: the engine's cluster-wide namespace,
    or a Kafka cluster, whose brokers' answers are in ``answers``)."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    broker = serializers.SerializerMethodField(
        help_text="The engine broker's id; null for the cluster-wide namespace or a Kafka cluster."
    )

    class Meta:
        model = Push
        fields = [
            "cluster", "version", "broker", "state", "attempts", "error_code", "error", "answers", "applied_at",
            "updated",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "answers": {"help_text": "A Kafka cluster's push: broker id -> what that broker answered from metadata."}
        }

    def get_broker(self, obj: Push) -> int | None:
        return obj.broker.broker_id if obj.broker is not None else None


def pushes_of_request(obj: QuotaRequest) -> list[Push]:
    """The pushes of the desired-state version a request was applied at, one per target (cluster-wide first)."""
    if obj.applied_version is None:
        return []
    rows = Push.objects.filter(cluster_id=obj.cluster_id, version=obj.applied_version).select_related(
        "cluster", "broker"
    )
    return sorted(rows, key=lambda p: -1 if p.broker is None else p.broker.broker_id)


class QuotaRequestDetailSerializer(QuotaRequestSerializer):
    """A request with the capacity check an approver decides on (null for keys that are not byte rates),
    and the push of its desired-state version to each broker."""

    capacity = serializers.SerializerMethodField()
    pushes = serializers.SerializerMethodField()

    class Meta(QuotaRequestSerializer.Meta):
        fields = [*QuotaRequestSerializer.Meta.fields, "capacity", "pushes"]
        read_only_fields = fields

    @extend_schema_field(PushSerializer(many=True))
    def get_pushes(self, obj: QuotaRequest) -> list[dict[str, Any]]:
        return PushSerializer(pushes_of_request(obj), many=True).data

    @extend_schema_field(CapacitySerializer(allow_null=True))
    def get_capacity(self, obj: QuotaRequest) -> dict[str, Any] | None:
        check = capacity_check(obj)
        return None if check is None else CapacitySerializer(check).data


class QuotaRequestCreateSerializer(serializers.Serializer):
    """Submit a request: one key of one user/client-id entity of a cluster, for a tenant you are a member of."""

    tenant = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Tenant.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        error_messages=unknown_name("tenant", "/api/tenants/"),
        help_text="Your tenant; leave it out when you are a member of one tenant only (a member of several names one).",
    )
    cluster = serializers.SlugRelatedField(
        slug_field="name", queryset=Cluster.objects.all(), error_messages=unknown_name("cluster", "/api/clusters/")
    )
    user = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=NAME_MAX, help_text="A principal your tenant owns."
    )
    client_id = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=NAME_MAX,
        help_text="A client-id your tenant owns, or '<default>' under an owned user.",
    )
    key = serializers.CharField(
        max_length=KEY_MAX, help_text="producer_byte_rate, consumer_byte_rate, request_percentage, ..."
    )
    value = QuotaValueField(help_text="A finite number > 0 (whole bytes/s for byte rates), or text: 1.5 MiB/s.")
    budget_scope = serializers.ChoiceField(
        choices=BudgetScope.choices,
        required=False,
        allow_null=True,
        default=None,
        help_text="per_broker (a limit on each broker, Kafka's meaning) or cluster_wide (a budget for the sum over "
        "the cluster's brokers: producer_byte_rate, consumer_byte_rate and request_percentage of a Kafka cluster; "
        "else 400 INVALID_BUDGET_SCOPE). Left out: the scope the value has (per_broker for a new one).",
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=TEXT_MAX)
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Makes it a boost: the previous value returns then."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return with_parsed_value(attrs)


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=TEXT_MAX,
        help_text="Required to reject: what the tenant should change.",
    )


class ApproveSerializer(DecisionSerializer):
    confirm_stale = serializers.BooleanField(
        required=False, default=False,
        help_text="Approve although the value moved on since the request was submitted (its `stale`); without it "
        "such a request answers 409 STALE_REQUEST and nothing changes.",
    )


class RejectSerializer(DecisionSerializer):
    comment = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=TEXT_MAX,
        help_text="Required to reject, unless superseded: what the tenant should change.",
    )
    superseded = serializers.BooleanField(
        required=False, default=False,
        help_text="Reject because the value moved on since the request was submitted: the reason is recorded and "
        "the comment (optional then) says what changed; 400 when it did not.",
    )


# ------------------------------------------------------------------ audit


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True, help_text="The username, or 'system'.")
    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    request = serializers.PrimaryKeyRelatedField(read_only=True)
    before = serializers.JSONField(read_only=True, help_text="A value (quota_altered) or a state; null = none.")
    after = serializers.JSONField(read_only=True, help_text="A value (quota_altered) or a state; null = none.")
    display = serializers.SerializerMethodField(
        help_text="The entity in words (a quota entity's: 'svc-a (all client-ids)'; any other path as it is)."
    )

    def get_display(self, obj: AuditEntry) -> str:
        return display_path(obj.entity) if obj.entity else ""

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created",
            "actor",
            "action",
            "tenant",
            "cluster",
            "request",
            "entity",
            "display",
            "key",
            "before",
            "after",
            "comment",
        ]
        read_only_fields = fields


# ------------------------------------------------------------------ pushes, drift and re-applying desired state


class DriftSerializer(serializers.ModelSerializer):
    """One difference the reconcile job found between a broker and desired state (open until healed or gone)."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    broker = serializers.SerializerMethodField(help_text="Kafka's broker id; null for the cluster-wide namespace.")
    entity = serializers.SerializerMethodField(
        help_text="Kafka's config path of the resource: /config/users/alice, /config/brokers/<default>, "
        "/config/brokers/1, /config/topics/<topic>, /config/client-metrics/<name>."
    )
    display = serializers.SerializerMethodField(help_text="The resource in words (a quota entity's, as pages name it).")
    resource = serializers.CharField(
        read_only=True,
        help_text="As the connectors name it: the entity's JSON for quotas ({\"user\":\"alice\"}), a broker id "
        "('' = the default broker), a topic or a subscription name.",
    )
    desired = serializers.CharField(read_only=True, allow_null=True, help_text="null: not in desired state (extra).")
    actual = serializers.CharField(read_only=True, allow_null=True, help_text="null: not on the broker (missing).")
    resolution = serializers.SerializerMethodField(
        help_text="null while open; healed (desired state re-applied) or converged (the difference went away)."
    )

    class Meta:
        model = Drift
        fields = [
            "id",
            "cluster",
            "broker",
            "kind",
            "resource",
            "entity",
            "display",
            "key",
            "status",
            "desired",
            "actual",
            "version",
            "detected_at",
            "resolved_at",
            "resolution",
        ]
        read_only_fields = fields

    def get_broker(self, obj: Drift) -> int | None:
        return obj.broker.broker_id if obj.broker is not None else None

    def get_entity(self, obj: Drift) -> str:
        return obj.path

    def get_display(self, obj: Drift) -> str:
        return display_path(obj.path)

    @extend_schema_field(
        {"type": "string", "enum": [DriftResolution.HEALED, DriftResolution.CONVERGED], "nullable": True}
    )
    def get_resolution(self, obj: Drift) -> str | None:
        return obj.resolution or None


class ReapplyRequestSerializer(serializers.Serializer):
    """Which target of the cluster gets its whole desired state again."""

    broker = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=BROKER_ID_MAX,
        error_messages=BROKER_ID_ERRORS,
        help_text="A broker id of a per_broker cluster; null (or absent) for a cluster_wide cluster's namespace.",
    )


class ReapplyResponseSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    broker = serializers.IntegerField(allow_null=True, help_text="null: the cluster-wide namespace.")
    task_id = serializers.CharField(help_text="The Celery task (quotas.tasks.heal) that re-applies it.")
    status = serializers.ChoiceField(choices=["queued"], help_text="Queued: a worker re-applies it shortly.")


class AdoptRequestSerializer(serializers.Serializer):
    """Which open quota drift of the cluster becomes desired state."""

    drift = serializers.ListField(
        child=id_field(), min_length=1, max_length=1000,
        help_text="Ids of open quota drift rows (GET /api/drift/?cluster=...).",
    )


class AdoptResponseSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    version = serializers.IntegerField(help_text="The desired-state version that now holds what the cluster held.")
    adopted = serializers.ListField(child=serializers.IntegerField(), help_text="The drift rows closed as adopted.")


class TargetPushSummarySerializer(serializers.Serializer):
    """Where one target (a broker, or the cluster-wide namespace) stands against the cluster's desired state."""

    broker = serializers.IntegerField(allow_null=True, help_text="Kafka's broker id; null: the cluster-wide namespace.")
    applied_version = serializers.IntegerField(
        allow_null=True, help_text="The newest version the portal saw land on it; null: none yet."
    )
    in_sync = serializers.BooleanField(help_text="It holds the desired version (or nothing was ever desired).")
    pending = serializers.IntegerField(help_text="Versions waiting to land (being pushed or retried).")
    failed = serializers.IntegerField(help_text="Versions the target refused (not retried until reconcile).")
    oldest_pending_at = serializers.DateTimeField(
        allow_null=True, help_text="When the oldest pending version was committed."
    )
    last_error_code = serializers.CharField(help_text="Kafka's error name of the newest outstanding failure, or ''.")
    last_error = serializers.CharField(help_text="Its message; '' when nothing outstanding failed.")
    last_error_at = serializers.DateTimeField(allow_null=True)
    open_drift = serializers.IntegerField(help_text="Differences from desired state found and not yet resolved.")


class PushSummarySerializer(serializers.Serializer):
    """A cluster's desired-state version and, per target, what landed, what waits and what failed."""

    cluster = serializers.CharField()
    scope = serializers.ChoiceField(choices=QuotaScope.choices)
    desired_version = serializers.IntegerField(help_text="Bumped by every change of the cluster's desired state.")
    targets = TargetPushSummarySerializer(many=True)


def push_summary(cluster: Cluster) -> dict[str, Any]:
    """The push summary of a cluster in a constant number of aggregate queries (whatever its history holds)."""
    desired = cluster.desired_state.version
    targets = push_targets(cluster)
    pushes = Push.objects.filter(cluster=cluster).order_by()
    outstanding = ~Q(state=PushState.APPLIED)
    per_target = {
        row["broker_id"]: row
        for row in pushes.values("broker_id").annotate(
            applied=Max("version", filter=Q(state=PushState.APPLIED)),
            pending=Count("pk", filter=Q(state=PushState.PENDING)),
            failed=Count("pk", filter=Q(state=PushState.FAILED)),
            oldest_pending=Min("created", filter=Q(state=PushState.PENDING)),
            error_version=Max("version", filter=outstanding & ~Q(error="")),
        )
    }
    # the newest outstanding error of each target: one row each, (cluster, broker, version) being unique
    wanted = Q(pk__in=[])
    for broker_id, row in per_target.items():
        if row["error_version"] is not None:
            wanted |= Q(broker_id=broker_id, version=row["error_version"])
    errors = {p.broker_id: p for p in pushes.filter(wanted).only("broker_id", "error_code", "error", "updated")}
    drift = dict(
        Drift.objects.filter(cluster=cluster, resolved_at=None)
        .order_by()
        .values("broker_id")
        .annotate(n=Count("pk"))
        .values_list("broker_id", "n")
    )
    out = []
    for broker in targets:
        pk = broker.pk if broker is not None else None
        row = per_target.get(pk, {})
        applied = row.get("applied")
        error = errors.get(pk)
        out.append(
            {
                "broker": broker.broker_id if broker is not None else None,
                "applied_version": applied,
                "in_sync": desired == 0 or (applied is not None and applied >= desired),
                "pending": row.get("pending", 0),
                "failed": row.get("failed", 0),
                "oldest_pending_at": row.get("oldest_pending"),
                "last_error_code": error.error_code if error else "",
                "last_error": error.error if error else "",
                "last_error_at": error.updated if error else None,
                "open_drift": drift.get(pk, 0),
            }
        )
    return {"cluster": cluster.name, "scope": cluster.scope, "desired_version": desired, "targets": out}
