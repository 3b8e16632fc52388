"""Serializers of a cluster's exempt principals (``quotas.models.groups.ExemptPrincipal``): principals no quota
applies to."""

from __future__ import annotations

from rest_framework import serializers

from quotas.api.serializers.fields import NAME_MAX
from quotas.models import ExemptPrincipal

REASON_MAX = ExemptPrincipal._meta.get_field("reason").max_length or 200


class ExemptPrincipalSerializer(serializers.ModelSerializer):
    """A principal of the cluster no quota applies to: never throttled, whatever quotas, groups or defaults exist."""

    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True,
                                              help_text="Null: the account was deleted since.")

    class Meta:
        model = ExemptPrincipal
        fields = ["cluster", "principal", "reason", "created_by", "created"]
        read_only_fields = fields


class ExemptCreateSerializer(serializers.Serializer):
    principal = serializers.CharField(max_length=NAME_MAX, trim_whitespace=False,
                                      help_text="The principal's name as Kafka sees it (a user principal).")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=REASON_MAX,
                                   help_text="Why it is exempt: shown on the cluster page and in the audit trail.")


class ExemptPrincipalPageSerializer(serializers.Serializer):
    """One page of the list, as the cursor paginator answers it."""

    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last one.")
    previous = serializers.URLField(allow_null=True, help_text="The page before, or null on the first one.")
    results = ExemptPrincipalSerializer(many=True)
