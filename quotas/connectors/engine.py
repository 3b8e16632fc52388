"""The engine connector: a cluster's brokers are namespaces of the quota engine in Redis.

A broker's ``host`` is the Redis URL its engine reads (empty: the portal's own Redis), so brokers of one
cluster may live on different Redis servers and one can be down while the others take pushes. The push
itself is ``NamespaceState.apply``: version-checked and atomic in one script, so it needs no lock.

A per-broker cluster's budget scopes (its cluster-wide values, ``budget-scope`` items) go to the cluster's scope hash
in the broker's Redis, in two steps around the namespace's write as a Kafka cluster's do
(``quotas.connectors.budget_scope``); every broker's push writes the same hash (idempotent: only a change is
written).
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from engine.config import cluster_namespace, namespace_for_broker
from engine.desired import DELTA, FORCE, FULL, NamespaceState, NeedsFullState
from engine.errors import EngineUnavailable, QuotaEngineError
from engine.redis_backend import connect
from quotas.connectors.base import SCOPE_KINDS, Applied, Delta, Item, PushError, State, Target
from quotas.connectors.budget_scope import BudgetScopes


class EngineConnector:
    """Pushes to and describes the engine's namespaces; one Redis client per distinct URL."""

    needs_lock = False

    def __init__(self, default_url: str, timeout_s: float = 2.0) -> None:
        self.default_url = default_url
        self.timeout_s = timeout_s
        self._clients: dict[str, redis.Redis] = {}

    def _client(self, target: Target) -> redis.Redis:
        url = target.address or self.default_url
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = connect(url, self.timeout_s)
        return client

    def _budgets(self, target: Target) -> BudgetScopes:
        url = target.address or self.default_url
        return BudgetScopes(url, self.timeout_s, self._client(target), unavailable="BROKER_NOT_AVAILABLE")

    def _state(self, target: Target) -> NamespaceState:
        client = self._client(target)
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
        changes = {i: v for i, v in delta.changes.items() if i.kind not in SCOPE_KINDS}
        scopes = {i: v for i, v in delta.changes.items() if i.kind in SCOPE_KINDS}
        if scopes and target.broker_id is None:
            raise PushError("INVALID_REQUEST", f"{target.label}: a cluster-wide namespace is one budget already; its "
                            "values take no budget scope.", retriable=False)

        def send() -> tuple[bool, int]:
            return self._state(target).apply(delta.version, changes, base=delta.base, mode=mode)

        try:
            if target.broker_id is None:
                (changed, held), moved = send(), False
            else:
                (changed, held), moved = self._budgets(target).around(target.cluster, scopes, delta.full, send)
        except NeedsFullState as e:
            raise PushError(e.code, e.message, retriable=True, needs_full=True) from e
        except EngineUnavailable as e:
            raise PushError("BROKER_NOT_AVAILABLE", f"{target.label}: {e.message}", retriable=True) from e
        except QuotaEngineError as e:
            raise PushError(e.code, e.message, retriable=False) from e
        return Applied(changed or moved, held)

    def describe(self, target: Target, desired: Mapping[Item, str]) -> tuple[int | None, State]:
        try:
            version, items = self._state(target).read()
        except EngineUnavailable as e:
            raise PushError("BROKER_NOT_AVAILABLE", f"{target.label}: {e.message}", retriable=True) from e
        state = {Item(*k): v for k, v in items.items()}
        if target.broker_id is not None:  # a per-broker cluster's budget scopes, in the broker's Redis
            state.update(self._budgets(target).describe(target.cluster))
        return version, state

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
