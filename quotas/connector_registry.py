"""The process's connectors, made from the portal's settings: one per kind, kept for their pooled connections.

``quotas.connectors`` knows no Django (the import contracts keep it so); this module is where the settings meet it.
"""

from __future__ import annotations

from typing import Any

from quotas.connectors.base import Connector

_connectors: dict[str, Connector] = {}


def connector_for(kind: str) -> Connector:
    """The process's connector of a kind (``engine`` or ``kafka``), made once and kept (it pools connections)."""
    found = _connectors.get(kind)
    if found is not None:
        return found
    from django.conf import settings

    if kind == "engine":
        from quotas.connectors.engine import EngineConnector

        made: Connector = EngineConnector(
            settings.QUOTAS_ENGINE_REDIS_URL or settings.QUOTAS_REDIS_URL, settings.QUOTAS_ENGINE_TIMEOUT_S
        )
    elif kind == "kafka":
        from quotas.connectors.budget_scope import BudgetScopes
        from quotas.connectors.kafka import KafkaConnector

        made = KafkaConnector(budgets=BudgetScopes(budget_redis_url(settings), settings.QUOTAS_ENGINE_TIMEOUT_S))
    else:
        raise ValueError(f"Unknown connector {kind!r}; use engine or kafka.")
    _connectors[kind] = made
    return made


def budget_redis_url(settings: Any) -> str:
    """Where Kafka clusters' budget scopes and their brokers' rounds live: ``QUOTAS_BUDGET_REDIS_URL``, else the
    engine's Redis (``QUOTAS_ENGINE_REDIS_URL``, else ``QUOTAS_REDIS_URL``)."""
    return str(settings.QUOTAS_BUDGET_REDIS_URL or settings.QUOTAS_ENGINE_REDIS_URL or settings.QUOTAS_REDIS_URL)


def reset_connectors() -> None:
    """Close and forget every connector (settings changed, e.g. in tests, or after a fork)."""
    for connector in _connectors.values():
        connector.close()
    _connectors.clear()
