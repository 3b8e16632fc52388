"""Pushing in tests without a worker: what the Celery task does, called directly."""

from __future__ import annotations

from quotas import push
from quotas.models import Alteration, Cluster, QuotaOp, alter_client_quotas, push_targets


def push_everywhere(cluster: Cluster) -> list[push.PushOutcome]:
    """Push the cluster's desired state to every target now, as the Celery task would (no worker needed)."""
    return [push.push_target(cluster.pk, b.pk if b is not None else None) for b in push_targets(cluster)]


def set_quota(cluster: Cluster, user: str, value: float, key: str = "producer_byte_rate") -> int:
    """One quota of one user, through AlterClientQuotas; returns the desired-state version it made."""
    return alter_client_quotas(cluster, [Alteration([("user", user)], [QuotaOp(key, value)])]).version
