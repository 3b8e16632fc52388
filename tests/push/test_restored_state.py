"""After a restore the brokers' word stands: nothing pushes the restored (older) desired state over what they hold.

A database restored by ``restore_db`` is fenced (every cluster's version moves past what the lost database handed
out); one restored by other means is caught by the push path (a target that holds a newer version than the database
is never written, and reconcile never heals it) until ``restore_db --fence-only``. A Kafka cluster, which holds no
version of its own, keeps what it holds even when the backup booked no push to it.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest
import redis
from django.core.management import call_command

from engine.config import EntityRef, namespace_for_broker
from engine.desired import NamespaceState
from quotas.choices import ConnectorKind
from quotas.connectors.base import QUOTA, PushError
from quotas.models import AuditEntry, Broker, Cluster, DesiredStateVersion, Drift, Push, QuotaValue
from quotas.models.pushes import RESTORE_FENCE
from quotas.push import reconcile, resolve, target_push
from quotas.workflow import quota_requests
from tests.brokers import set_quota
from tests.database import drop_database
from tests.people import make_tenant, make_user
from tests.push.test_kafka_pushes import bare_kafka, each_broker, quotas_on  # noqa: F401 (a fixture)

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
    target_push.push_target(prod.pk, b2.pk)
    broker1 = NamespaceState(engine_redis, namespace_for_broker("prod", 1), 1)
    broker1.apply(v + 5, {item("alice"): "4000.0", item("bob"): "10.0"}, mode="force")  # the lost database's later work
    set_quota(prod, "carol", 7)  # a change made on the restored database, at a version broker 1 claims to hold

    with pytest.raises(PushError) as refused:
        target_push.push_target(prod.pk, b1.pk)

    assert refused.value.code == "STALE_DESIRED_STATE" and not refused.value.retriable
    assert "restore_db --fence-only" in refused.value.message
    assert set(Push.objects.filter(broker=b1).values_list("state", "error_code")) == {("failed", "STALE_DESIRED_STATE")}
    assert AuditEntry.objects.filter(action="push_failed", entity="broker 1").exists()
    outcomes = {o.target: o.status for o in reconcile.reconcile_all(mode="heal")}
    assert outcomes == {"prod/broker-1": "ahead", "prod/broker-2": "behind"}
    assert broker1.read() == (v + 5, {item("alice"): "4000.0", item("bob"): "10.0"})  # not healed either
    assert {(d.status, d.actual) for d in Drift.objects.filter(broker=b1)} == {
        ("different", "4000.0"), ("extra", "10.0"), ("missing", None)
    }

    out = io.StringIO()
    call_command("restore_db", fence_only=True, stdout=out)

    assert f"prod: desired-state version {v + 1} -> {RESTORE_FENCE} (restore fence)" in out.getvalue()
    for b in (b1, b2):  # the fence's push sends nothing logged before it; carol's change shows as drift instead
        assert target_push.push_target(prod.pk, b.pk).mode == "delta"
    assert broker1.read() == (RESTORE_FENCE, {item("alice"): "4000.0", item("bob"): "10.0"})
    assert {o.status for o in reconcile.reconcile_all(mode="heal")} == {"drift"}
    set_quota(prod, "dave", 8)  # after the fence: pushed
    target_push.push_target(prod.pk, b1.pk)
    assert broker1.read()[1][item("dave")] == "8.0"


@pytest.mark.django_db(transaction=True)
def test_kafka_keeps_what_it_holds_though_the_backup_booked_no_push_to_it(
    kafka_cluster, bare_kafka: None, engine_redis: redis.Redis, tmp_path: Path  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    cluster = Cluster.objects.create(name=f"kprod-{uuid.uuid4().hex[:6]}", connector=ConnectorKind.KAFKA)
    for node in kafka_cluster.nodes:
        Broker.objects.create(cluster=cluster, broker_id=node.node_id, host=node.address("PLAINTEXT"))
    team = make_tenant("team-a", users=["svc-*"])
    alice, root, ops = make_user("alice"), make_user("root", staff=True), make_user("ops", staff=True)
    team.members.add(alice)

    a, b = f"svc-{uuid.uuid4().hex[:8]}", f"svc-{uuid.uuid4().hex[:8]}"

    def approve(user: str, value: float) -> None:
        request = quota_requests.submit(alice, team, cluster, user=user, client_id=None, key=PBR, value=value)
        quota_requests.approve(root, request.pk)

    approve(a, 1000)  # approved, its push not yet booked when the backup is taken
    backup = tmp_path / "portal.backup"
    call_command("backup_db", str(backup), stdout=io.StringIO())
    target_push.push_target(cluster.pk, None)
    approve(b, 2000)
    target_push.push_target(cluster.pk, None)
    drop_database()
    call_command("restore_db", str(backup), stdout=io.StringIO())

    # the backup books no push to the cluster: a full push would remove b's quota; the restore's push sends nothing
    assert target_push.push_target(cluster.pk, None).mode == "delta"
    assert {o.status for o in reconcile.reconcile_all(mode="heal") if o.target.startswith(cluster.name)} == {"drift"}
    for address in each_broker(cluster):
        assert quotas_on(address, a) == {(("user", a),): {PBR: 1000.0}}
        assert quotas_on(address, b) == {(("user", b),): {PBR: 2000.0}}
    [extra] = Drift.objects.filter(cluster=cluster, resolved_at=None)
    assert (extra.status, extra.resource, extra.actual) == ("extra", EntityRef(user=b).field(), "2000.0")

    resolve.adopt(cluster, [extra.pk], ops)

    target_push.push_target(cluster.pk, None)
    assert {o.status for o in reconcile.reconcile_all(mode="heal") if o.target.startswith(cluster.name)} == {"in-sync"}
    assert QuotaValue.objects.get(entity__cluster=cluster, entity__user=b).value == 2000
    assert DesiredStateVersion.objects.get(cluster=cluster).version > RESTORE_FENCE
