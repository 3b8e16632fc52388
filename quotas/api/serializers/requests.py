"""Serializers of self-service quota requests: reading, submitting and deciding them, and the capacity check."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.units import is_byte_rate
from portal.api.errors import unknown_name
from quotas.api.serializers.fields import KEY_MAX, NAME_MAX, TEXT_MAX, QuotaValueField, with_parsed_value
from quotas.api.serializers.pushes import PushSerializer
from quotas.choices import BudgetScope
from quotas.models import Approval, Cluster, QuotaRequest, RequestState, Tenant
from quotas.models.capacity import capacity_check
from quotas.models.staleness import request_moved
from quotas.queries import pushes_of_request


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
    display = serializers.CharField(
        read_only=True, help_text="The entity in words, as the pages and mails name it: 'svc-a (all client-ids)', "
        "'group payments'."
    )
    group = serializers.SerializerMethodField(
        help_text="A group quota's request: the group's name (user and client_id are null then); null otherwise."
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
            "group",
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

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_group(self, obj: QuotaRequest) -> str | None:
        return obj.group_name or None

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
    groups = serializers.ListField(
        child=serializers.CharField(),
        help_text="The groups holding a value of the key with the request (/groups/<name>): each one sensor, counted "
        "once however many members share it (x brokers when per broker; a cluster-wide one is among budgets too).",
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
    """Submit a request: one key of one user/client-id entity (or of one group) of a cluster, for a tenant you are a
    member of."""

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
    group = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=NAME_MAX,
        help_text="A group of the cluster your tenant owns (GET /api/clusters/{cluster}/groups/), instead of user and "
        "client_id: asks for the group's value (producer_byte_rate, consumer_byte_rate, request_percentage).",
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
        if attrs.get("group") is not None and (attrs.get("user") is not None or attrs.get("client_id") is not None):
            raise serializers.ValidationError({"group": ["Name a group, or a user and/or client_id; not both."]})
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
