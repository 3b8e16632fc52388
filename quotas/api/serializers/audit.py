"""The audit trail's serializer."""

from __future__ import annotations

from rest_framework import serializers

from engine.entities import display_path
from quotas.models import AuditEntry


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
