"""Pushes to a Kafka cluster through the portal's pipeline, against brokers that speak Kafka's wire protocol.

No Kafka broker runs here: each broker is the suite's responder (tests/connectors/kafka_responder.py), which
decodes the real request bytes with kafka-python's protocol classes and answers real response bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from quotas import push, workflow
from quotas.choices import ConnectorKind
from quotas.connectors.base import PushError
from quotas.models import (
    Alteration,
    AuditEntry,
    Broker,
    Cluster,
    ConfigOp,
    ConfigResource,
    Drift,
    OwnedName,
    Push,
    QuotaOp,
    QuotaRequest,
    Tenant,
    alter_client_quotas,
    alter_configs,
)
from tests.connectors.kafka_responder import KafkaResponder
from tests.portal.people import make_user

pytestmark = pytest.mark.django_db
ALTER_CLIENT_QUOTAS, INCREMENTAL_ALTER_CONFIGS = 49, 44
INVALID_REQUEST, POLICY_VIOLATION = 42, 44
PBR = "producer_byte_rate"


@pytest.fixture
def brokers() -> Iterator[list[KafkaResponder]]:
    responders = [KafkaResponder(broker_id=i).start() for i in (1, 2)]
    yield responders
    for r in responders:
        r.stop()
        assert r.errors == []


@pytest.fixture
def cluster(brokers: list[KafkaResponder], engine_redis: redis.Redis) -> Cluster:
    c = Cluster.objects.create(name="kprod", connector=ConnectorKind.KAFKA)
    for r in brokers:
        Broker.objects.create(cluster=c, broker_id=r.broker_id, host=r.address)
    return c


def approved_request(cluster: Cluster, value: float = 4000) -> QuotaRequest:
    tenant = Tenant.objects.create(name="team-a")
    OwnedName.objects.create(tenant=tenant, entity_type="user", pattern="svc-*")
    OwnedName.objects.create(tenant=tenant, entity_type="client-id", pattern="app")
    alice, admin = make_user("alice"), make_user("root", staff=True)
    tenant.members.add(alice)
    r = workflow.submit(alice, tenant, cluster, user="svc-1", client_id="app", key=PBR, value=value)
    return workflow.approve(admin, r.pk)


def push_all(cluster: Cluster) -> list[push.PushOutcome | PushError]:
    out: list[push.PushOutcome | PushError] = []
    for b in cluster.brokers.all():
        try:
            out.append(push.push_target(cluster.pk, b.pk))
        except PushError as e:
            out.append(e)
    return out


def test_an_approved_quota_goes_out_as_alter_client_quotas_to_every_broker(
    cluster: Cluster, brokers: list[KafkaResponder]
) -> None:
    request = approved_request(cluster)
    assert request.state == "applying"
    push_all(cluster)
    for r in brokers:
        (sent,) = r.requests_of(ALTER_CLIENT_QUOTAS)
        (entry,) = sent.entries
        assert sorted((e.entity_type, e.entity_name) for e in entry.entity) == [("client-id", "app"), ("user", "svc-1")]
        assert [(op.key, op.value, op.remove) for op in entry.ops] == [(PBR, 4000.0, False)]
        assert r.quota({"user": "svc-1", "client-id": "app"}) == {PBR: 4000.0}
    request.refresh_from_db()
    assert request.state == "applied"
    assert set(Push.objects.values_list("state", flat=True)) == {"applied"}


def test_the_next_push_sends_only_what_changed_and_removals_as_remove(
    cluster: Cluster, brokers: list[KafkaResponder]
) -> None:
    request = approved_request(cluster)
    push_all(cluster)
    alter_client_quotas(cluster, [Alteration([("user", "svc-2")], [QuotaOp(PBR, 10)])])
    alter_client_quotas(cluster, [Alteration([("user", "svc-1"), ("client-id", "app")], [QuotaOp(PBR, remove=True)])])
    push_all(cluster)
    for r in brokers:
        second = r.requests_of(ALTER_CLIENT_QUOTAS)[1]
        ops = {
            tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): [(o.key, o.remove) for o in entry.ops]
            for entry in second.entries
        }
        assert ops == {(("user", "svc-2"),): [(PBR, False)], (("client-id", "app"), ("user", "svc-1")): [(PBR, True)]}
        assert r.quota({"user": "svc-1", "client-id": "app"}) == {}
    assert request.state == "applying"  # as approved; the first push_all settled it in the database


def test_broker_configs_go_out_as_incremental_alter_configs(cluster: Cluster, brokers: list[KafkaResponder]) -> None:
    alter_configs(cluster, ConfigResource(broker_id=None), [ConfigOp("max.connections", 500)], None)
    alter_configs(cluster, ConfigResource(broker_id=2), [ConfigOp("leader.replication.throttled.rate", 1000)], None)
    push_all(cluster)
    one, two = brokers
    assert one.config(4, "") == {"max.connections": "500"} and one.config(4, "2") == {}
    assert two.config(4, "") == {"max.connections": "500"}
    assert two.config(4, "2") == {"leader.replication.throttled.rate": "1000"}
    (sent,) = two.requests_of(INCREMENTAL_ALTER_CONFIGS)
    assert sorted((r.resource_type, r.resource_name) for r in sent.resources) == [(4, ""), (4, "2")]


def test_an_error_response_fails_the_push_with_kafkas_error_name_and_fails_the_request(
    cluster: Cluster, brokers: list[KafkaResponder]
) -> None:
    brokers[1].fail_next(ALTER_CLIENT_QUOTAS, POLICY_VIOLATION, "quota too large for the policy")
    request = approved_request(cluster)
    first, second = push_all(cluster)
    assert isinstance(second, PushError) and not second.retriable and second.code == "POLICY_VIOLATION"
    row = Push.objects.get(broker__broker_id=2, version=request.applied_version)
    assert (row.state, row.error_code, row.attempts) == ("failed", "POLICY_VIOLATION", 1)
    assert "quota too large" in row.error
    assert Push.objects.get(broker__broker_id=1, version=request.applied_version).state == "applied"
    request.refresh_from_db()
    assert request.state == "failed" and "broker 2 refused the push: POLICY_VIOLATION" in request.failure
    assert AuditEntry.objects.filter(action="push_failed", comment__startswith="POLICY_VIOLATION").exists()


def test_a_dropped_connection_is_retriable_and_the_retry_lands(cluster: Cluster, brokers: list[KafkaResponder]) -> None:
    brokers[0].drop_next(ALTER_CLIENT_QUOTAS)
    request = approved_request(cluster)
    failed, _ = push_all(cluster)
    assert isinstance(failed, PushError) and failed.retriable
    row = Push.objects.get(broker__broker_id=1, version=request.applied_version)
    assert (row.state, row.attempts, row.error_code) == ("pending", 1, failed.code)
    push_all(cluster)  # what the task's retry does
    row.refresh_from_db()
    assert (row.state, row.attempts, row.error_code) == ("applied", 2, "")
    request.refresh_from_db()
    assert request.state == "applied"


def test_drift_on_a_kafka_broker_is_described_and_healed(cluster: Cluster, brokers: list[KafkaResponder]) -> None:
    approved_request(cluster)
    push_all(cluster)
    one = brokers[0]
    one.set_quota({"user": "svc-1", "client-id": "app"}, PBR, 1.0)  # changed with kafka-configs, behind our back
    one.set_config(4, "", "max.connections", "7")
    one.set_config(4, "", "num.io.threads", "16")  # not the portal's business: not drift

    outcomes = {o.target: o.status for o in push.reconcile_all(mode="report")}
    assert outcomes == {"kprod/broker-1": "drift", "kprod/broker-2": "in-sync"}
    assert sorted((d.kind, d.key, d.status, d.desired, d.actual) for d in Drift.objects.all()) == [
        ("broker", "max.connections", "extra", None, "7"),
        ("quota", PBR, "different", "4000.0", "1.0"),
    ]
    broker = Broker.objects.get(cluster=cluster, broker_id=1)
    push.heal(cluster, broker, None)
    assert one.quota({"user": "svc-1", "client-id": "app"}) == {PBR: 4000.0}
    assert "max.connections" not in one.config(4, "") and one.config(4, "")["num.io.threads"] == "16"
    assert {o.status for o in push.reconcile_all(mode="report")} == {"in-sync"}
    assert set(Drift.objects.values_list("resolution", flat=True)) == {"healed"}
