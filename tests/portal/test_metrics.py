"""``GET /metrics``: the portal's own figures in Prometheus text format, read from the database and Redis, so every
replica answers the same."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from quotas.models import Alteration, Cluster, Push, QuotaOp, alter_client_quotas
from quotas.workflow import quota_requests
from tests.people import make_tenant, make_user

pytestmark = pytest.mark.django_db


def scrape(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def test_requests_pushes_latency_and_queues_are_counted(engine_redis: redis.Redis) -> None:
    cluster = Cluster.objects.create(name="prod")  # an engine cluster with no broker: versions, no push rows
    tenant = make_tenant("team", users=["svc-*"])
    alice = make_user("alice")
    tenant.members.add(alice)
    quota_requests.submit(alice, tenant, cluster, user="svc-1", client_id=None, key="producer_byte_rate", value=1024)
    alter_client_quotas(cluster, [Alteration([("user", "svc-2")], [QuotaOp("producer_byte_rate", 2048)])])
    now = timezone.now()
    Push.objects.create(cluster=cluster, version=90, state="applied", created=now, applied_at=now)
    fast = Push.objects.create(cluster=cluster, version=91, state="applied", applied_at=now)
    Push.objects.filter(pk=fast.pk).update(created=now - timedelta(seconds=0.2))
    slow = Push.objects.create(cluster=cluster, version=92, state="applied", applied_at=now)
    Push.objects.filter(pk=slow.pk).update(created=now - timedelta(seconds=7))
    Push.objects.create(cluster=cluster, version=93, state="failed")
    engine_redis.delete("celery")  # tasks an earlier test queued with no worker to take them
    engine_redis.rpush("celery", "x", "y")

    try:
        figures = scrape(Client())
    finally:
        engine_redis.delete("celery")

    assert figures[("quotas_requests", (("state", "submitted"),))] == 1
    assert figures[("quotas_requests", (("state", "applied"),))] == 0
    assert figures[("quotas_pushes", (("cluster", "prod"), ("state", "failed")))] == 1
    latency = {labels: v for (name, labels), v in figures.items() if name == "quotas_push_latency_seconds_bucket"}
    assert latency[(("le", "0.05"),)] == 1 and latency[(("le", "0.25"),)] == 2 and latency[(("le", "10.0"),)] == 3
    assert latency[(("le", "+Inf"),)] == 3
    assert figures[("quotas_push_latency_seconds_count", ())] == 3
    assert figures[("quotas_push_latency_seconds_sum", ())] == pytest.approx(7.2, abs=0.01)
    assert figures[("quotas_celery_queue_depth", (("queue", "celery"),))] == 2
    assert figures[("quotas_redis_up", ())] == 1


def test_a_token_guards_the_scrape_when_set(settings, engine_redis: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    settings.QUOTAS_METRICS_TOKEN = "s3cret"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert "quotas_requests" in str(scrape(Client(), HTTP_AUTHORIZATION="Bearer s3cret"))
