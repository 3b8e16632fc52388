"""Fixtures of the portal tests that push to brokers: the engine's broker namespaces in the test Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

#: Keys of the portal's broker and cluster-wide namespaces and push bookkeeping (not the engine tests' namespaces).
PORTAL_KEYS = ("qe:{*.broker-*}*", "qe:{*.cluster}*", "portal:push-*")


def _clear(client: redis.Redis) -> None:
    for pattern in PORTAL_KEYS:
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture
def engine_redis(redis_url: str) -> Iterator[redis.Redis]:
    """The test Redis, with no broker namespace left from another test (each test's database starts at version 0)."""
    client = redis.Redis.from_url(redis_url)
    _clear(client)
    yield client
    _clear(client)
    client.close()
