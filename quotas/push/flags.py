"""The portal's own Redis for pushes: a target's pending-push flag, and locks for work Kafka cannot order.

Commits set a target's flag (``quotas.push.dispatch``) and the push clears it when it starts, so a burst of changes
costs a few pushes, not one each.
"""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings

from engine.redis_backend import connect

PENDING_TTL_S = 600  # a pending flag outlives the longest backoff; reconcile re-enqueues if a flag is orphaned
_redis: dict[str, redis.Redis] = {}


def _client() -> redis.Redis:
    """The portal's Redis (pending flags, locks), one client per URL so tests may point settings elsewhere."""
    url = settings.QUOTAS_REDIS_URL
    if url not in _redis:
        _redis[url] = connect(url, 5.0)
    return _redis[url]


def _flag(cluster_id: int, broker_pk: int | None) -> str:
    return f"portal:push-pending:{cluster_id}:{broker_pk if broker_pk is not None else 'cluster'}"


def _stale_flag(cluster_id: int, broker_pk: int | None) -> bool:
    """A pending flag older than two reconcile rounds: its push was lost (not merely slow), so send another."""
    ttl = _client().ttl(_flag(cluster_id, broker_pk))
    return ttl >= 0 and PENDING_TTL_S - ttl > 2 * settings.QUOTAS_RECONCILE_SECONDS


def claim_retry(cluster_id: int, broker_pk: int | None) -> bool:
    """Before scheduling a retry: True unless another push to the target is already pending."""
    return bool(_client().set(_flag(cluster_id, broker_pk), 1, nx=True, ex=PENDING_TTL_S))


def portal_lock(name: str, timeout_s: float, wait_s: float) -> Any:
    """A lock in the portal's Redis (``portal:<name>``, released after ``timeout_s`` at the latest), for other work
    on a Kafka cluster that Kafka cannot order either (e.g. ``quotas.scram``'s changes of one principal)."""
    return _client().lock(f"portal:{name}", timeout=timeout_s, blocking_timeout=wait_s)
