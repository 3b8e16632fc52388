"""Direct pushes: the committing process pushes a Kafka cluster itself when nobody else is pushing it, the Celery
task takes the rest; under concurrent commits every version lands once, in order, on the session's real Kafka."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from kafka_wire import MATCH_EXACT, AdminClient
from quotas.choices import ConnectorKind
from quotas.connector_registry import connector_for
from quotas.connectors.base import Delta, Target
from quotas.models import Alteration, Cluster, DesiredStateVersion, Push, PushState, QuotaOp, alter_client_quotas
from quotas.push import dispatch
from tests.celery_worker import Worker
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
PBR = "producer_byte_rate"
THREADS, COMMITS = 4, 6


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def answered(address: str, user: str) -> float | None:
    with AdminClient(address) as client:
        response = client.describe_client_quotas([("user", MATCH_EXACT, user)], strict=True)
    values = [v.value for entry in response.entries for v in entry.values if v.key == PBR]
    return values[0] if values else None


def test_concurrent_commits_land_each_version_once_in_order_directly_or_through_the_task(
    kafka_cluster: Any, worker_factory: Callable[..., Worker]
) -> None:
    worker_factory()
    cluster = Cluster.objects.create(
        name=unique("kdirect"), connector=ConnectorKind.KAFKA, bootstrap_servers=kafka_cluster.bootstrap()
    )
    # registered as holding its empty version 0, so pushes are deltas (a whole push would clear the shared cluster)
    Push.objects.create(cluster=cluster, version=0, state=PushState.APPLIED, applied_at=timezone.now())
    users = [unique("svc") for _ in range(3)]

    kafka = connector_for(ConnectorKind.KAFKA)
    original = kafka.apply
    seen: list[tuple[int, int]] = []  # (base, version) of every push this process sent, in the order they ran
    guard = threading.Lock()

    def recording(target: Target, delta: Delta) -> Any:
        with guard:  # the per-target lock already orders them: this one only keeps the record straight
            seen.append((delta.base, delta.version))
        return original(target, delta)

    kafka.apply = recording  # type: ignore[method-assign]
    committed: dict[int, dict[str, float]] = {}
    errors: list[BaseException] = []

    def commits(t: int) -> None:
        try:
            for i in range(COMMITS):
                user, value = users[(t + i) % len(users)], float(1024 * (100 * t + i + 1))
                v = alter_client_quotas(cluster, [Alteration([("user", user)], [QuotaOp(PBR, value)])]).version
                with guard:
                    committed[v] = {user: value}
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)
        finally:
            connection.close()

    try:
        threads = [threading.Thread(target=commits, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        last = DesiredStateVersion.objects.get(cluster=cluster).version
        assert sorted(committed) == list(range(1, THREADS * COMMITS + 1)) and last == THREADS * COMMITS
        rows = Push.objects.filter(cluster=cluster, version__gt=0)
        wait_for("every version's push row applied", lambda: not rows.exclude(state=PushState.APPLIED).exists(), 60)
        dispatch.wait_direct_pushes()
    finally:
        kafka.apply = original  # type: ignore[method-assign]

    # exactly once: each version was carried by one push that landed (attempts count the pushes that carried it)
    assert sorted(rows.values_list("version", "attempts")) == [(v, 1) for v in range(1, last + 1)]
    brokers = {str(n.node_id) for n in kafka_cluster.nodes}
    assert all(set(answers) == brokers for answers in rows.values_list("answers", flat=True))
    # in order: this process's pushes each started where an earlier push ended, versions only growing
    assert seen, "no commit was pushed by the committing process"
    for (_, version), (next_base, next_version) in zip(seen, seen[1:], strict=False):
        assert next_base >= version and next_version > version, seen
    # what every broker answers is each user's value at the last version that changed it
    final: dict[str, float] = {}
    for v in sorted(committed):
        final.update(committed[v])
    for node in kafka_cluster.nodes:
        assert {u: answered(node.address("PLAINTEXT"), u) for u in users} == final
    alter_client_quotas(cluster, [Alteration([("user", u)], [QuotaOp(PBR, remove=True)]) for u in users])
    first = kafka_cluster.nodes[0].address("PLAINTEXT")
    wait_for("the test's quotas removed", lambda: answered(first, users[0]) is None)
    dispatch.wait_direct_pushes()
