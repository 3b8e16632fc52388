"""What an unreachable dependency looks like to the portal, for the API's error handler and the pages alike."""

from __future__ import annotations

import kombu.exceptions
import redis

#: What "Redis is down" looks like to the portal: redis-py's connection errors, kombu's when Celery cannot publish.
REDIS_DOWN: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    kombu.exceptions.OperationalError,
)
