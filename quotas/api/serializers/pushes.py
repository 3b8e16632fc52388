"""Serializers of pushes, drift and re-applying desired state; the push summary of a cluster."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.entities import display_path
from quotas.api.params import BROKER_ID_ERRORS, BROKER_ID_MAX, id_field
from quotas.choices import QuotaScope
from quotas.models import Drift, DriftResolution, Push
from quotas.models.group_lookup import drift_shadows


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
    shadows_groups = serializers.SerializerMethodField(
        help_text="For an open quota Kafka holds for a member of quota groups holding that key: those groups, in "
        "order. The member's own quota wins over them (a level that names the client), so the group no longer "
        "bounds it; empty otherwise."
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
            "shadows_groups",
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

    def get_shadows_groups(self, obj: Drift) -> list[str]:
        # the page of rows shares one context: each cluster's groups are read once for all of its rows
        known = self.context.setdefault("_shadows", {})
        if obj.pk not in known:
            rows = getattr(self.parent, "instance", None) or [obj]
            known.update({r.pk: [] for r in rows})
            known.update(drift_shadows(rows))
        return known.get(obj.pk, [])


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


