"""Fixtures shared by every test layer.

Tests talk to a real redis-server (never a fake): the one scripts/run_tests.sh
started (QUOTAS_REDIS_URL), or else one this session starts on a free port.
"""

import os
from collections.abc import Iterator

import pytest
import redis

from devtools.redis_server import RedisServer
from tests.redis_keys import keys_cleared
from tests.services import point_portal_at

pytest_plugins = ["tests.kafka_fixtures", "tests.prometheus_fixtures", "tests.tiers"]

# Every Spark driver the tests start (the session fixture, the jobs' subprocesses, the workers' warm sessions, the
# benchmarks' smoke runs) is a short-lived JVM on tiny data: the client compiler alone (C1) spends about a third less
# CPU than tiered C2 there (a rollups run: 35 s of CPU instead of 55 s), as devtools' Spark daemons and Kafka tools
# already run. Inherited by every process started from here; a PYSPARK_SUBMIT_ARGS already set is kept.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis for this test session; the portal is pointed at it too."""
    from django.conf import settings

    old_env = os.environ.get("QUOTAS_REDIS_URL")
    server: RedisServer | None = None
    if old_env:
        url = old_env
    else:
        server = RedisServer(name="pytest").start()
        url = server.url
    os.environ["QUOTAS_REDIS_URL"] = url
    old_settings = point_portal_at(url)
    try:
        yield url
    finally:
        for name, value in old_settings.items():
            setattr(settings, name, value)
        if old_env is None:
            os.environ.pop("QUOTAS_REDIS_URL", None)
        if server is not None:
            server.stop()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A 3-master Redis Cluster of this session (``devtools.redis_cluster``), as a ``redis+cluster://`` URL."""
    from devtools.redis_cluster import RedisCluster

    with RedisCluster(name=f"pytest-{os.getpid()}") as cluster:
        yield cluster.url


@pytest.fixture(scope="session")
def engine_redis_url(request: pytest.FixtureRequest, redis_url: str) -> str:
    """The engine's Redis in the engine, conformance and push tests: the session's Redis, or the session's
    Redis Cluster when ``QUOTAS_TEST_REDIS_CLUSTER=1`` (the portal's own Redis, Celery's, stays standalone)."""
    if os.environ.get("QUOTAS_TEST_REDIS_CLUSTER", "0") not in ("", "0"):
        return request.getfixturevalue("redis_cluster_url")
    return redis_url


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    tmp_path_factory: pytest.TempPathFactory, django_db_modify_db_settings_parallel_suffix: None
) -> None:
    """SQLite tests use a database file (in pytest's temp dir), not Django's shared-cache in-memory database.

    Two connections to the shared-cache memory database fail at once with "database table is locked"
    instead of waiting, so tests with concurrent connections (the approval race) could not run; a file
    database waits on its busy timeout, as the portal's own SQLite does. Each pytest-xdist worker gets a database
    of its own (pytest-django's suffix, which this fixture replaces, is asked for).
    """
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        db.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


#: Keys of the portal's broker and cluster-wide namespaces and push bookkeeping (not the engine tests' namespaces).
PORTAL_KEYS = ("qe:{*.broker-*}*", "qe:{*.cluster}*", "portal:push-*")


@pytest.fixture
def engine_redis(redis_url: str) -> Iterator[redis.Redis]:
    """The test Redis, with no broker namespace left from another test (each test's database starts at version 0)."""
    with keys_cleared(redis_url, *PORTAL_KEYS) as client:
        yield client
