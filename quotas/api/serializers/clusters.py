"""Serializers of clusters: their brokers, listeners and budget enforcement."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas.budgets import enforcement
from quotas.choices import BudgetScope, ConnectorKind, QuotaScope
from quotas.models import Broker, Cluster, Listener, QuotaValue, push_wanted


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
        cluster-wide budgets, groups or exempt principals does not become one engine namespace (whose values take no
        budget scope and whose brokers read no scope hash)."""
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
            groups = self.instance.quota_groups.count() + self.instance.exempt_principals.count()
            if groups:
                raise serializers.ValidationError({"scope": (
                    f"Cluster {self.instance.name!r} has {groups} group(s) or exempt principal(s), which its brokers "
                    "read from the cluster's scope hash; a cluster_wide engine cluster has one namespace and no scope "
                    "hash: delete them first."
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
