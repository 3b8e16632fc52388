"""The desired state of one push target as the database holds it, what changed in it since a version, and the newest
version the portal saw land on it."""

from __future__ import annotations

from django.db.models import Max

from engine.config import EntityRef
from quotas.choices import BudgetScope, ConnectorKind, QuotaScope
from quotas.connectors.base import BROKER, BUDGET_SCOPE, CLIENT_METRICS, CLUSTER_WIDE, QUOTA, TOPIC, Item, State
from quotas.models.broker_configs import BrokerConfig, TopicConfig
from quotas.models.client_metrics import ClientMetricsSubscription
from quotas.models.clusters import Broker, Cluster
from quotas.models.group_changes import cluster_group_items
from quotas.models.groups import takes_groups
from quotas.models.pushes import DesiredChange, Push, PushState
from quotas.models.quotas import QuotaValue


def _relevant(item: Item, broker_id: int | None, whole_cluster: bool = False) -> bool:
    """A target takes every item but other brokers' own configs (the engine's cluster-wide namespace only the
    default's); a Kafka cluster takes them all (it holds every broker's configs in its metadata)."""
    if item.kind != BROKER or item.resource == "" or whole_cluster:
        return True
    return broker_id is not None and item.resource == str(broker_id)


def desired_state(cluster: Cluster, broker: Broker | None) -> State:
    """The whole desired state of one target, from the database (with its budget scopes, but for a cluster_wide
    engine cluster's one namespace)."""
    state: State = {}
    whole = cluster.connector == ConnectorKind.KAFKA
    scoped = whole or cluster.scope == QuotaScope.PER_BROKER
    rows = QuotaValue.objects.filter(entity__cluster=cluster).values_list(
        "entity__user", "entity__client_id", "entity__ip", "key", "value", "budget_scope"
    )
    for user, client_id, ip, key, value, scope in rows.order_by():
        resource = EntityRef(user, client_id, ip).field()
        state[Item(QUOTA, resource, key)] = repr(float(value))
        if scoped and scope == BudgetScope.CLUSTER_WIDE:
            state[Item(BUDGET_SCOPE, resource, key)] = CLUSTER_WIDE
    broker_id = broker.broker_id if broker is not None else None
    for own_id, key, value in BrokerConfig.objects.filter(cluster=cluster).values_list(
        "broker__broker_id", "key", "value"
    ):
        item = Item(BROKER, "" if own_id is None else str(own_id), key)
        if _relevant(item, broker_id, whole):
            state[item] = value
    for topic, key, value in TopicConfig.objects.filter(cluster=cluster).values_list("topic", "key", "value"):
        state[Item(TOPIC, topic, key)] = value
    for sub in ClientMetricsSubscription.objects.filter(cluster=cluster).order_by():
        for key, value in sub.configs.items():  # every broker runs every subscription
            state[Item(CLIENT_METRICS, sub.name, key)] = value
    if takes_groups(cluster):  # a Kafka cluster's quota callback or a per-broker engine cluster's brokers
        state.update(cluster_group_items(cluster))
    return state


def changes_since(cluster: Cluster, broker: Broker | None, base: int, version: int) -> dict[Item, str | None]:
    """The items changed after ``base`` up to ``version``, each with its value at ``version`` (None = removed)."""
    broker_id = broker.broker_id if broker is not None else None
    whole = cluster.connector == ConnectorKind.KAFKA
    changes: dict[Item, str | None] = {}
    rows = DesiredChange.objects.filter(cluster=cluster, version__gt=base, version__lte=version)
    for kind, resource, key, value in rows.order_by("version", "pk").values_list("kind", "resource", "key", "value"):
        item = Item(kind, resource, key)
        if _relevant(item, broker_id, whole):
            changes[item] = value
    return changes


def portal_applied_version(cluster: Cluster, broker: Broker | None) -> int:
    """The newest version the portal saw land on a target (for connectors that cannot say: Kafka)."""
    found = Push.objects.filter(cluster=cluster, broker=broker, state=PushState.APPLIED).aggregate(v=Max("version"))
    return -1 if found["v"] is None else int(found["v"])
