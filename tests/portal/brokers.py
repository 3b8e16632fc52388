"""Pushing in tests without a worker: what the Celery task does, called directly."""

from __future__ import annotations

from quotas import push
from quotas.models import Cluster, push_targets


def push_everywhere(cluster: Cluster) -> list[push.PushOutcome]:
    """Push the cluster's desired state to every target now, as the Celery task would (no worker needed)."""
    return [push.push_target(cluster.pk, b.pk if b is not None else None) for b in push_targets(cluster)]
