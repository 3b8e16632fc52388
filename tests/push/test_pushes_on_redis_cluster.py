"""Pushes through a real Celery worker to engine brokers whose namespaces live on a Redis Cluster.

Brokers 0 and 1 are on the session's 3-master Redis Cluster (``redis+cluster://``), broker 2 on a Redis of its own;
the portal's own Redis (Celery, locks) stays standalone. The whole push suite runs this way with
``QUOTAS_TEST_REDIS_CLUSTER=1``; CI runs these on it every time.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.config import EntityRef
from engine.redis_backend import connect
from quotas.connectors.base import QUOTA
from quotas.models import Cluster
from tests.brokers import set_quota
from tests.celery_worker import Worker
from tests.people import api, make_user
from tests.push.test_worker_pushes import (  # noqa: F401 (fixtures and tests run here on the cluster)
    PBR,
    cluster,
    lone_redis,
    state_of,
    test_a_change_reaches_every_broker_and_its_request_status_says_so,
    test_an_older_version_arriving_late_is_ignored,
)
from tests.redis_keys import delete_matching
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="session")
def engine_redis_url(redis_cluster_url: str) -> str:
    """Here the engine's Redis is always the session's Redis Cluster."""
    return redis_cluster_url


def test_brokers_0_and_1_are_on_the_cluster(cluster, redis_cluster_url: str) -> None:  # noqa: F811
    assert dict(cluster.brokers.values_list("broker_id", "engine_url"))[0] == redis_cluster_url
    assert redis_cluster_url.startswith("redis+cluster://")


def test_an_admin_registers_brokers_on_the_cluster_through_the_api_and_pushes_reach_them(
    worker_factory: Callable[..., Worker], redis_cluster_url: str
) -> None:
    worker_factory()
    admin = api(make_user("rc-admin", staff=True))
    name = "rc-api"
    engine = connect(redis_cluster_url, 5.0)
    delete_matching(engine, f"qe:{{{name}.*}}*")
    try:
        brokers = [{"broker_id": i, "host": f"b{i}:9092", "engine_url": redis_cluster_url} for i in (0, 1)]
        body = {"name": name, "connector": "engine", "brokers": brokers}
        response = admin.post("/api/clusters/", body, format="json")
        assert response.status_code == 201, response.json()
        # the URL is stored, never shown (a Redis URL may hold a password)
        assert response.json()["brokers"] == [{"broker_id": 0, "host": "b0:9092"}, {"broker_id": 1, "host": "b1:9092"}]
        rc = Cluster.objects.get(name=name)
        assert dict(rc.brokers.values_list("broker_id", "engine_url")) == {0: redis_cluster_url, 1: redis_cluster_url}

        refused = [
            ({"broker_id": 3, "host": "b3:9092", "engine_url": "http://127.0.0.1:6379"}, "redis+cluster://"),
            ({"broker_id": 3, "host": "b3:9092", "engine_url": "cluster://127.0.0.1:6379"}, "redis+cluster://"),
        ]
        for bad, fragment in refused:
            response = admin.patch(f"/api/clusters/{name}/", {"brokers": [bad]}, format="json")
            assert response.status_code == 400 and response.json()["code"] == "INVALID_REQUEST", response.json()
            assert fragment in response.json()["message"]
        twice = [{"broker_id": 2, "host": "b2:9092"}, {"broker_id": 2, "host": "b2b:9092"}]
        response = admin.patch(f"/api/clusters/{name}/", {"brokers": twice}, format="json")
        assert response.status_code == 400 and "more than once" in response.json()["message"], response.json()
        assert sorted(rc.brokers.values_list("broker_id", flat=True)) == [0, 1]  # nothing half-applied

        third = {"broker_id": 2, "host": "b2:9092", "engine_url": redis_cluster_url}
        response = admin.patch(f"/api/clusters/{name}/", {"brokers": [third]}, format="json")
        assert response.status_code == 200, response.json()
        assert [b["broker_id"] for b in response.json()["brokers"]] == [0, 1, 2]

        v = set_quota(rc, "alice", 1000)
        on_cluster = {b: redis_cluster_url for b in (0, 1, 2)}

        def all_hold_it() -> bool:
            return all(state_of(rc, b, u).applied_version() == v for b, u in on_cluster.items())

        wait_for("every broker on the Redis Cluster to hold the change", all_hold_it)
        for b, u in on_cluster.items():
            assert state_of(rc, b, u).read() == (v, {(QUOTA, EntityRef(user="alice").field(), PBR): "1000.0"})
    finally:
        delete_matching(engine, f"qe:{{{name}.*}}*")
        engine.close()
