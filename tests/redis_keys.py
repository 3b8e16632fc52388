"""Tests that write to the shared test Redis start and end without the keys they own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis


def delete_matching(client: redis.Redis, *patterns: str) -> None:
    for pattern in patterns:
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)


@contextmanager
def keys_cleared(redis_url: str, *patterns: str) -> Iterator[redis.Redis]:
    """A client of the test Redis; keys matching ``patterns`` are deleted before and after."""
    client = redis.Redis.from_url(redis_url)
    delete_matching(client, *patterns)
    try:
        yield client
    finally:
        delete_matching(client, *patterns)
        client.close()
