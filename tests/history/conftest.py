"""Tenants, a cluster and a landing area of their own for the history tests; a real Celery worker on demand.

Usage lands the way it does in the portal: records appended to the cluster's usage log in the test Redis
(``engine.usage_log``, what the load generator writes), then ``pipeline.landing.land_all`` writes them
as Parquet under the test's landing root, which the worker's jobs read (``QUOTAS_LANDING_ROOT``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from engine import usage_log
from pipeline import landing
from quotas.models import OwnedName, Tenant
from tests.brokers import cluster_with_brokers
from tests.celery_worker import celery_queue_clean, worker_factory  # noqa: F401 (fixtures)
from tests.people import roles
from tests.redis_keys import keys_cleared

CLUSTER = "hist"
T0 = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC
Record = tuple[str, str, float, int]  # (user, client_id, value, t_ms)


@pytest.fixture
def world(engine_redis: redis.Redis) -> dict[str, Any]:
    """team-a (alice; owns svc-a-* and app-a-*), team-b (bob; svc-b-*), admins, an auditor, cluster ``hist``."""
    w: dict[str, Any] = roles()
    a, b = Tenant.objects.create(name="team-a"), Tenant.objects.create(name="team-b")
    a.members.add(w["alice"])
    b.members.add(w["bob"])
    OwnedName.objects.create(tenant=a, entity_type="user", pattern="svc-a-*")
    OwnedName.objects.create(tenant=a, entity_type="client-id", pattern="app-a-*")
    OwnedName.objects.create(tenant=b, entity_type="user", pattern="svc-b-*")
    w["cluster"] = cluster_with_brokers((1, 2), name=CLUSTER)
    return w


@pytest.fixture
def landing_root(tmp_path: Path) -> Path:
    """Where ``land`` lands: the test's own folder (a test class whose worker reads one area overrides it)."""
    return tmp_path / "landing"


@pytest.fixture
def land(settings: Any, landing_root: Path, redis_url: str) -> Iterator[Callable[[int, Sequence[Record]], Path]]:
    """``land(broker, records)``: produce usage logged and landed as the portal does; returns the landing root."""
    root = landing_root
    settings.QUOTAS_LANDING_ROOT = root
    with keys_cleared(redis_url, f"usage:{{{CLUSTER}}}*", f"land:{{{CLUSTER}}}*", f"mon:{{{CLUSTER}}}*") as client:

        def go(broker: int, records: Sequence[Record]) -> Path:
            for start in range(0, len(records), 100):  # batches, as record_many calls append them
                usage_log.append(client, CLUSTER, broker, "produce", records[start:start + 100])
            landing.land_all([(client, CLUSTER)], root)
            return root

        yield go


def steady(user: str, client_id: str, seconds: int, start_ms: int = T0, every_ms: int = 100,
           size: float = 100.0) -> list[Record]:
    """``size`` bytes every ``every_ms``: 1000 B/s by default."""
    return [(user, client_id, size, start_ms + i * every_ms) for i in range(seconds * 1000 // every_ms)]


def worker_env(root: Path) -> dict[str, str]:
    """A worker of the previews' queue (and the rollups', which these tests do not run), and the test's landing
    area."""
    return {"queues": "previews,pipeline", "QUOTAS_LANDING_ROOT": str(root)}

