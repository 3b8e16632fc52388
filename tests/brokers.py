"""Pushing in tests without a worker: what the Celery task does, called directly."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

import redis

from quotas.models import Alteration, Cluster, QuotaOp, alter_client_quotas, push_targets
from quotas.push import dispatch, target_push


def push_everywhere(cluster: Cluster) -> list[target_push.PushOutcome]:
    """Push the cluster's desired state to every target now, as the Celery task would (no worker needed)."""
    return [target_push.push_target(cluster.pk, b.pk if b is not None else None) for b in push_targets(cluster)]


def set_quota(cluster: Cluster, user: str, value: float, key: str = "producer_byte_rate") -> int:
    """One quota of one user, through AlterClientQuotas; returns the desired-state version it made."""
    return alter_client_quotas(cluster, [Alteration([("user", user)], [QuotaOp(key, value)])]).version


def queued_push_messages(client: redis.Redis) -> list[tuple[str, list[object]]]:
    """(task name, arguments) of every push message waiting in Celery's queue (the test Redis is the broker)."""
    out = []
    for raw in client.lrange("celery", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] in (dispatch.PUSH_TASK, dispatch.PUSH_GROUP_TASK):
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))  # Celery's message protocol 2
            out.append((message["headers"]["task"], args))
    return out


def queued_pushes(client: redis.Redis) -> list[tuple[int, int | None]]:
    """(cluster pk, broker pk) of every target a waiting push message will push (a group message: each of its)."""
    out: list[tuple[int, int | None]] = []
    for task, args in queued_push_messages(client):
        if task == dispatch.PUSH_GROUP_TASK:
            cluster_pk, broker_pks = args
            out.extend((cluster_pk, pk) for pk in broker_pks)  # type: ignore[union-attr]
        else:
            out.append((args[0], args[1]))  # type: ignore[arg-type]
    return out


def cluster_with_brokers(broker_ids: Iterable[int], **fields: Any) -> Cluster:
    """A cluster of the portal (``fields`` as ``Cluster``'s) with brokers of these ids at ``b<id>:9092``."""
    cluster = Cluster.objects.create(**fields)
    for i in broker_ids:
        cluster.brokers.create(broker_id=i, host=f"b{i}:9092")
    return cluster
