"""Engine fixtures: a real Redis client, a fresh namespace per test, and both backends."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from engine.model import ModelBackend
from engine.redis_backend import RedisBackend, connect

_ns = itertools.count()

T0 = 1_700_000_000_000


@pytest.fixture(scope="session")
def redis_client(engine_redis_url: str) -> Iterator[redis.Redis]:
    """The engine's Redis: standalone, or a Redis Cluster with QUOTAS_TEST_REDIS_CLUSTER=1."""
    client = connect(engine_redis_url, timeout_s=5.0)
    yield client
    client.close()


@pytest.fixture
def namespace(redis_client: redis.Redis) -> Iterator[str]:
    """A namespace no other test uses; its keys are deleted afterwards."""
    ns = f"t{next(_ns)}-{id(object())}"
    yield ns
    keys = list(redis_client.scan_iter(match=f"qe:{{{ns}*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(params=["model", "redis"])
def backend(request: pytest.FixtureRequest, redis_client: redis.Redis) -> ModelBackend | RedisBackend:
    """Every behaviour test runs on the reference model and on Redis."""
    if request.param == "model":
        return ModelBackend()
    return RedisBackend(redis_client)
