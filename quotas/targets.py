"""The engine clusters of the portal's database as the traffic sources see them (``traffic.loadgen.BrokerTarget``).

The traffic package knows no Django; the load generator's management command and the landing task read the
clusters to drive through this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from engine.config import cluster_namespace, namespace_for_broker
from quotas.choices import ConnectorKind, QuotaScope
from quotas.models import Cluster
from traffic.workload import BrokerTarget


def targets_from_db(cluster_names: Sequence[str] | None = None) -> dict[str, list[BrokerTarget]]:
    """The engine clusters of the portal's database (all, or those named) and their brokers, by cluster name."""
    clusters = Cluster.objects.filter(connector=ConnectorKind.ENGINE).prefetch_related("brokers", "listeners")
    if cluster_names:
        clusters = clusters.filter(name__in=list(cluster_names))
    out: dict[str, list[BrokerTarget]] = {}
    for cluster in clusters.order_by("name"):
        listeners = tuple(lst.name.upper() for lst in cluster.listeners.all()) or ("PLAINTEXT",)
        inter = next((lst.name.upper() for lst in cluster.listeners.all() if lst.is_inter_broker), None)
        brokers = []
        for b in sorted(cluster.brokers.all(), key=lambda b: b.broker_id):
            ns = (
                cluster_namespace(cluster.name)
                if cluster.scope == QuotaScope.CLUSTER_WIDE
                else namespace_for_broker(cluster.name, b.broker_id)
            )
            url = b.engine_url or settings.QUOTAS_ENGINE_REDIS_URL or settings.QUOTAS_REDIS_URL
            brokers.append(BrokerTarget(cluster.name, b.broker_id, url, ns, listeners, inter))
        if brokers:
            out[cluster.name] = brokers
    return out


def kafka_cluster_names() -> list[str]:
    """The Kafka clusters of the database: their clients' usage and samples live in the portal's own Redis."""
    return list(Cluster.objects.filter(connector=ConnectorKind.KAFKA).order_by("name").values_list("name", flat=True))
