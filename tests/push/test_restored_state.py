"""After a restore the brokers' word stands: nothing pushes the restored (older) desired state over what they hold.

A restored database is fenced (every cluster's version moves past what the lost database handed out); one that is
not is caught by the push path (a target that holds a newer version than the database is never written, and
reconcile never heals it) until it is.
"""

from __future__ import annotations

import pytest
import redis

from quotas import push
from quotas.connectors.base import QUOTA, PushError
from quotas.engine.config import EntityRef, namespace_for_broker
from quotas.engine.desired import NamespaceState
from quotas.models import AuditEntry, Broker, Cluster, Drift, Push
from quotas.models.pushes import RESTORE_FENCE, fence_restored
from tests.portal.brokers import set_quota

PBR = "producer_byte_rate"


def item(user: str) -> tuple[str, str, str]:
    return (QUOTA, EntityRef(user=user).field(), PBR)


@pytest.mark.django_db
def test_a_broker_ahead_of_the_database_is_never_written_until_the_database_is_fenced(
    engine_redis: redis.Redis,
) -> None:
    prod = Cluster.objects.create(name="prod")
    b1, b2 = (Broker.objects.create(cluster=prod, broker_id=i, host=f"b{i}:9092") for i in (1, 2))
    v = set_quota(prod, "alice", 1000)
    push.push_target(prod.pk, b2.pk)
    broker1 = NamespaceState(engine_redis, namespace_for_broker("prod", 1), 1)
    broker1.apply(v + 5, {item("alice"): "4000.0", item("bob"): "10.0"}, mode="force")  # the lost database's later work
    set_quota(prod, "carol", 7)  # a change made on the restored database, at a version broker 1 claims to hold

    with pytest.raises(PushError) as refused:
        push.push_target(prod.pk, b1.pk)

    assert refused.value.code == "STALE_DESIRED_STATE" and not refused.value.retriable
    assert "restore_db --fence-only" in refused.value.message
    assert set(Push.objects.filter(broker=b1).values_list("state", "error_code")) == {("failed", "STALE_DESIRED_STATE")}
    assert AuditEntry.objects.filter(action="push_failed", entity="broker 1").exists()
    outcomes = {o.target: o.status for o in push.reconcile_all(mode="heal")}
    assert outcomes == {"prod/broker-1": "ahead", "prod/broker-2": "behind"}
    assert broker1.read() == (v + 5, {item("alice"): "4000.0", item("bob"): "10.0"})  # not healed either
    assert {(d.status, d.actual) for d in Drift.objects.filter(broker=b1)} == {
        ("different", "4000.0"), ("extra", "10.0"), ("missing", None)
    }

    assert [(c.name, before, fence) for c, before, fence in fence_restored()] == [("prod", v + 1, RESTORE_FENCE)]
    for b in (b1, b2):  # the fence's push sends nothing logged before it; carol's change shows as drift instead
        assert push.push_target(prod.pk, b.pk).mode == "delta"
    assert broker1.read() == (RESTORE_FENCE, {item("alice"): "4000.0", item("bob"): "10.0"})
    assert {o.status for o in push.reconcile_all(mode="heal")} == {"drift"}
    set_quota(prod, "dave", 8)  # after the fence: pushed
    push.push_target(prod.pk, b1.pk)
    assert broker1.read()[1][item("dave")] == "8.0"
