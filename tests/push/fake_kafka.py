"""A Kafka cluster in memory for the budget-scope tests: a ``KafkaConnector`` whose Admin API calls stay in this
process (quotas as Kafka would hold them, and what the scope hash held when each AlterClientQuotas was sent), while
the budget scopes are the real ones, in the test Redis. Installed as the process's Kafka connector by ``kafka``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from engine.budget_store import BudgetStore
from quotas.choices import ConnectorKind
from quotas.connector_registry import _connectors, reset_connectors
from quotas.connectors.base import QUOTA, Item, State, Target
from quotas.connectors.budget_scope import BudgetScopes
from quotas.connectors.kafka import KafkaConnector
from tests.redis_keys import keys_cleared


class FakeAdmin:
    """The Admin API calls of one push, in memory: quotas as Kafka would hold them."""

    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka

    def alter_client_quotas(self, entries: list[Any]) -> Any:
        self.kafka.sent.append((entries, self.kafka.scope_now()))
        self.kafka.sent_at.append(time.monotonic())
        if self.kafka.refuse:
            return SimpleNamespace(entries=[SimpleNamespace(error_code=42, error_message="refused")])
        for entity, ops in entries:
            resource = _field(entity)
            for key, value in ops.items():
                item = Item(QUOTA, resource, key)
                if value is None:
                    self.kafka.quotas.pop(item, None)
                else:
                    self.kafka.quotas[item] = repr(float(value))
        return SimpleNamespace(entries=[SimpleNamespace(error_code=0, error_message=None)])


def _field(entity: Mapping[str, str | None]) -> str:
    return json.dumps({k: "<default>" if v is None else v for k, v in entity.items()}, separators=(",", ":"),
                      sort_keys=True)


class FakeKafka(KafkaConnector):
    """A Kafka cluster of one broker that holds quotas only (the budget scopes are the real ones, in Redis)."""

    def __init__(self, budgets: BudgetScopes) -> None:
        super().__init__(budgets=budgets)
        self.quotas: State = {}
        self.sent: list[tuple[Any, set[str]]] = []
        self.sent_at: list[float] = []  # time.monotonic() of each write
        self.refuse = False
        self.cluster = ""

    def scope_now(self) -> set[str]:
        assert self.budgets is not None
        return BudgetStore(redis.Redis.from_url(self.budgets.url), self.cluster).scope()

    def _client(self, target: Target) -> Any:
        self.cluster = target.cluster
        return FakeAdmin(self)

    def _brokers(self, client: Any, target: Target) -> dict[int, Any]:
        return {1: client}

    def _describe(self, client: Any, desired: Mapping[Item, str], brokers: Mapping[int, Any]) -> State:
        return dict(self.quotas)

    def _verify(self, target: Target, brokers: Any, changes: Any, version: int) -> dict[str, str]:
        return {"1": f"holds version {version}"}


@pytest.fixture
def budget_redis(redis_url: str, engine_redis: redis.Redis) -> Iterator[redis.Redis]:
    """The test Redis without budget keys (``qb:*``) before and after."""
    with keys_cleared(redis_url, "qb:*") as client:
        yield client


@contextmanager
def installed(redis_url: str) -> Iterator[FakeKafka]:
    """The process's Kafka connector, in memory, its budget scopes in the test Redis at ``redis_url``."""
    reset_connectors()
    fake = FakeKafka(BudgetScopes(redis_url))
    _connectors[ConnectorKind.KAFKA] = fake
    try:
        yield fake
    finally:
        reset_connectors()


@pytest.fixture
def kafka(budget_redis: redis.Redis, redis_url: str) -> Iterator[FakeKafka]:
    """``installed`` for a test."""
    with installed(redis_url) as fake:
        yield fake
