"""The engine connector: a cluster's brokers are namespaces of the quota engine in Redis.

A broker's ``host`` is the Redis URL its engine reads (empty: the portal's own Redis), so brokers of one
cluster may live on different Redis servers and one can be down while the others take pushes. The push
itself is ``NamespaceState.apply``: version-checked and atomic in one script, so it needs no lock.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from quotas.connectors.base import Applied, Delta, Item, PushError, State, Target
from quotas.engine.config import cluster_namespace, namespace_for_broker
from quotas.engine.desired import DELTA, FORCE, FULL, NamespaceState, NeedsFullState
from quotas.engine.errors import EngineUnavailable, QuotaEngineError
from quotas.engine.redis_backend import connect


class EngineConnector:
    """Pushes to and describes the engine's namespaces; one Redis client per distinct URL."""

    needs_lock = False

    def __init__(self, default_url: str, timeout_s: float = 2.0) -> None:
        self.default_url = default_url
        self.timeout_s = timeout_s
        self._clients: dict[str, redis.Redis] = {}

    def _state(self, target: Target) -> NamespaceState:
        url = target.address or self.default_url
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = connect(url, self.timeout_s)
        if target.broker_id is None:
            return NamespaceState(client, cluster_namespace(target.cluster))
        return NamespaceState(client, namespace_for_broker(target.cluster, target.broker_id), target.broker_id)

    def applied_version(self, target: Target) -> int | None:
        try:
            return self._state(target).applied_version()
        except EngineUnavailable as e:
            raise PushError("BROKER_NOT_AVAILABLE", f"{target.label}: {e.message}", retriable=True) from e

    def apply(self, target: Target, delta: Delta) -> Applied:
        mode = FORCE if delta.force else FULL if delta.full else DELTA
        try:
            changed, held = self._state(target).apply(delta.version, delta.changes, base=delta.base, mode=mode)
        except NeedsFullState as e:
            raise PushError(e.code, e.message, retriable=True, needs_full=True) from e
        except EngineUnavailable as e:
            raise PushError("BROKER_NOT_AVAILABLE", f"{target.label}: {e.message}", retriable=True) from e
        except QuotaEngineError as e:
            raise PushError(e.code, e.message, retriable=False) from e
        return Applied(changed, held)

    def describe(self, target: Target, desired: Mapping[Item, str]) -> tuple[int | None, State]:
        try:
            version, items = self._state(target).read()
        except EngineUnavailable as e:
            raise PushError("BROKER_NOT_AVAILABLE", f"{target.label}: {e.message}", retriable=True) from e
        return version, {Item(*k): v for k, v in items.items()}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
