"""The tenant serializer: members and the principal and client-id patterns it owns."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework import serializers

from engine.config import CLIENT_ID, USER
from engine.entities import DEFAULT
from quotas.models import OwnedName, Tenant


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
