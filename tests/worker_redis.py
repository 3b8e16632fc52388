"""pytest plugin: each pytest-xdist worker but the first gets a Redis server of its own (``-p`` in addopts).

Tests clear key patterns of the shared Redis and count its commands (``INFO commandstats``), so two workers on one
server would see each other's keys and calls. The first worker (and a run without xdist) keeps the Redis of
``QUOTAS_REDIS_URL``; every other worker starts one on a free port before pytest-django reads the settings, points
``QUOTAS_REDIS_URL`` at it for itself and the processes it starts, and stops it when the session ends.
"""

from __future__ import annotations

import os
import shutil

import pytest

from devtools.redis_server import RedisServer

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_SERVER: RedisServer | None = None

if _WORKER not in ("", "gw0"):
    _SERVER = RedisServer(name=f"pytest-{_WORKER}-{os.getpid()}").start()
    os.environ["QUOTAS_REDIS_URL"] = _SERVER.url


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SERVER is not None:
        _SERVER.stop()
        shutil.rmtree(_SERVER.dir, ignore_errors=True)
