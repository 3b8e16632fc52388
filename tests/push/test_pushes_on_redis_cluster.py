"""Pushes through a real Celery worker to engine brokers whose namespaces live on a Redis Cluster.

Brokers 0 and 1 are on the session's 3-master Redis Cluster (``redis+cluster://``), broker 2 on a Redis of its own;
the portal's own Redis (Celery, locks) stays standalone. The whole push suite runs this way with
``QUOTAS_TEST_REDIS_CLUSTER=1``; CI runs these on it every time.
"""

from __future__ import annotations

import pytest

from tests.push.test_worker_pushes import (  # noqa: F401 (fixtures and tests run here on the cluster)
    cluster,
    lone_redis,
    test_a_change_reaches_every_broker_and_its_request_status_says_so,
    test_an_older_version_arriving_late_is_ignored,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="session")
def engine_redis_url(redis_cluster_url: str) -> str:
    """Here the engine's Redis is always the session's Redis Cluster."""
    return redis_cluster_url


def test_brokers_0_and_1_are_on_the_cluster(cluster, redis_cluster_url: str) -> None:  # noqa: F811
    assert dict(cluster.brokers.values_list("broker_id", "engine_url"))[0] == redis_cluster_url
    assert redis_cluster_url.startswith("redis+cluster://")
