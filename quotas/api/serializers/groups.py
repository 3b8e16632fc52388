"""Serializers of group quotas (``quotas.models.groups``): reading groups, making them and changing their members and
values.

Request serializers only shape the JSON; the rules of a group (its name, its kind's members, what it may overlap,
the values it may hold) are ``quotas.models.groups.check_group`` and ``check_group_value``'s, so a refused group is
400 ``INVALID_GROUP`` (409 ``GROUP_OVERLAP``) with the field to change, the same sentence as on the pages.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.groups import GROUP_KEYS
from portal.api.errors import unknown_name
from quotas.api.serializers.fields import NAME_MAX, PassThroughNumberField
from quotas.choices import BudgetScope
from quotas.models import GroupKind, GroupValue, QuotaGroup, Tenant

#: A group's name and description, as their columns hold them (check_group says what a name may be).
GROUP_NAME_MAX = QuotaGroup._meta.get_field("name").max_length or 64
DESCRIPTION_MAX = QuotaGroup._meta.get_field("description").max_length or 200
#: One values call sets at most this many keys: a group holds three.
MAX_VALUE_OPS = 16


class GroupValueSerializer(serializers.ModelSerializer):
    """One value of a group: per broker (Kafka's meaning) or a cluster-wide budget for the sum over the brokers."""

    class Meta:
        model = GroupValue
        fields = ["key", "value", "budget_scope"]
        read_only_fields = fields


class QuotaGroupSerializer(serializers.ModelSerializer):
    """A group as a list shows it: who it holds, whose it is, its values."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    tenant = serializers.SlugRelatedField(slug_field="name", read_only=True)
    path = serializers.CharField(read_only=True, help_text="/groups/<name>: how audit entries and requests name it.")
    members = serializers.CharField(source="members_text", read_only=True,
                                    help_text="Who the group holds, in words.")
    values = GroupValueSerializer(many=True, read_only=True)

    class Meta:
        model = QuotaGroup
        fields = ["cluster", "name", "path", "tenant", "kind", "members", "principals", "client_id_prefix",
                  "prefix_principal", "description", "values", "created"]
        read_only_fields = fields


class QuotaGroupDetailSerializer(QuotaGroupSerializer):
    """A group with its place in the matching order (``docs/capabilities/group-quotas.md``, Precedence)."""

    order = serializers.SerializerMethodField(
        help_text="Its place among the cluster's groups a client matches (smaller first; ties by name): a "
        "client_prefix group under a principal (longer prefixes first), then tenant and principals groups, then a "
        "client_prefix group of any principal (longer prefixes first)."
    )
    patterns = serializers.SerializerMethodField(
        help_text="A tenant group's members now: the user patterns its tenant owns (empty for other kinds)."
    )

    class Meta(QuotaGroupSerializer.Meta):
        fields = [*QuotaGroupSerializer.Meta.fields, "order", "patterns"]
        read_only_fields = fields

    def get_order(self, obj: QuotaGroup) -> int:
        return obj.spec({v.key: v.value for v in obj.values.all()}).order

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_patterns(self, obj: QuotaGroup) -> list[str]:
        if obj.kind != GroupKind.TENANT:
            return []
        return sorted(obj.spec({}).patterns)


class QuotaGroupPageSerializer(serializers.Serializer):
    """One page of the list, as the cursor paginator answers it."""

    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last one.")
    previous = serializers.URLField(allow_null=True, help_text="The page before, or null on the first one.")
    results = QuotaGroupSerializer(many=True)


def _principals_field(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=NAME_MAX, trim_whitespace=False), max_length=1000, **kwargs
    )


class GroupCreateSerializer(serializers.Serializer):
    """A new group (no values yet: POST .../values sets them, or its tenant asks through POST /api/requests/)."""

    name = serializers.CharField(
        max_length=NAME_MAX, trim_whitespace=False,
        help_text="1 to 64 letters, digits, '.', '_' or '-'; unique on the cluster.",
    )
    tenant = serializers.SlugRelatedField(
        slug_field="name", queryset=Tenant.objects.all(), error_messages=unknown_name("tenant", "/api/tenants/"),
        help_text="The tenant that owns the group (its members ask for its values).",
    )
    kind = serializers.ChoiceField(
        choices=GroupKind.choices,
        help_text="tenant: every principal the tenant owns; principals: the ones listed; client_prefix: the "
        "client-ids starting client_id_prefix (under prefix_principal only, when given).",
    )
    principals = _principals_field(required=False, help_text="A principals group's members (each its tenant's).")
    client_id_prefix = serializers.CharField(
        required=False, max_length=NAME_MAX, trim_whitespace=False, help_text="A client_prefix group's prefix."
    )
    prefix_principal = serializers.CharField(
        required=False, allow_blank=True, max_length=NAME_MAX, trim_whitespace=False,
        help_text="A client_prefix group only under this principal (its tenant's); blank or left out: any.",
    )
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=DESCRIPTION_MAX)


class GroupMembersSerializer(serializers.Serializer):
    """New members of a group; its name, kind and tenant stay (a tenant group follows its tenant's patterns)."""

    principals = _principals_field(required=False, help_text="A principals group's members, all of them.")
    client_id_prefix = serializers.CharField(required=False, max_length=NAME_MAX, trim_whitespace=False)
    prefix_principal = serializers.CharField(required=False, allow_blank=True, max_length=NAME_MAX,
                                             trim_whitespace=False, help_text="Blank: any principal.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("Send the members to change: principals, or client_id_prefix and/or "
                                              "prefix_principal.")
        return attrs


@extend_schema_field({"type": "number", "format": "double", "nullable": True, "example": 1048576})
class GroupValueField(PassThroughNumberField):
    """A group value as sent (null removes the key): ``check_group_value`` judges it with Kafka's rules."""


class GroupValueOpSerializer(serializers.Serializer):
    key = serializers.CharField(max_length=64, help_text=", ".join(GROUP_KEYS) + ".")
    value = GroupValueField(allow_null=True, help_text="A finite number > 0 (whole bytes/s for byte rates); null "
                            "removes the value.")
    budget_scope = serializers.ChoiceField(
        choices=BudgetScope.choices, required=False, allow_null=True, default=None,
        help_text="per_broker or cluster_wide; left out: the scope the value has (per_broker for a new one).",
    )


class GroupValuesSerializer(serializers.Serializer):
    """Set or remove a group's values, all or none (as Kafka's AlterClientQuotas ops on one entity)."""

    ops = GroupValueOpSerializer(many=True, allow_empty=False, max_length=MAX_VALUE_OPS)
    validate_only = serializers.BooleanField(required=False, default=False,
                                             help_text="Judge the ops and change nothing (Kafka's validateOnly).")

    def validate_ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keys = [op["key"] for op in ops]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise serializers.ValidationError(f"Each key once per call; {twice[0]} is in more than one op.")
        return ops


class GroupValuesResultSerializer(serializers.Serializer):
    group = QuotaGroupDetailSerializer(help_text="The group after the call (as it was, for validate_only).")
    changed = serializers.BooleanField(help_text="Whether a value or scope changed.")
    version = serializers.IntegerField(allow_null=True, help_text="The cluster's desired-state version of the change "
                                       "(pushed to every broker); null: nothing changed.")
    validate_only = serializers.BooleanField()
