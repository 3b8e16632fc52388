"""Pushes to a real Apache Kafka cluster through the portal's pipeline (the session's 3-broker KRaft cluster).

A Kafka cluster is one push target: its quotas and dynamic configs live in the metadata log, so one write through
any broker reaches every broker. "Applied" means every broker answers the new version's values from its own
metadata; the push row keeps each broker's answer. Reconcile finds drift both ways, including quotas someone set
directly on Kafka, which an admin adopts into desired state or removes by re-applying it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from engine.budget_store import BudgetStore
from kafka_wire import BROKER_RESOURCE, MATCH_EXACT, AdminClient
from quotas.choices import ConnectorKind
from quotas.connectors.base import Delta, PushError, Target
from quotas.connectors.kafka import KafkaConnector
from quotas.models import (
    Alteration,
    AuditEntry,
    Broker,
    Cluster,
    ConfigOp,
    ConfigResource,
    DesiredStateVersion,
    Drift,
    OwnedName,
    Push,
    QuotaOp,
    QuotaRequest,
    QuotaValue,
    Tenant,
    TopicConfig,
    alter_client_quotas,
    alter_configs,
)
from quotas.push import reconcile, resolve, target_push
from quotas.workflow import quota_requests
from tests.people import make_user
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster(kafka_cluster, engine_redis: redis.Redis) -> Cluster:  # type: ignore[no-untyped-def]
    """A Kafka cluster of the portal: bootstrap servers, and its brokers as registered by an admin."""
    c = Cluster.objects.create(name=unique("kprod"), connector=ConnectorKind.KAFKA)
    for node in kafka_cluster.nodes:
        Broker.objects.create(cluster=c, broker_id=node.node_id, host=node.address("PLAINTEXT"))
    return c


@pytest.fixture
def bare_kafka(kafka_cluster) -> None:  # type: ignore[no-untyped-def]
    """The shared Kafka cluster with no quota or managed config left by other tests (a full push of nothing), so
    that reconcile sees only what a test puts there."""
    connector = KafkaConnector()
    try:
        connector.apply(Target("bare", None, kafka_cluster.bootstrap()), Delta(1, -1, True, {}))
    finally:
        connector.close()


def quotas_on(address: str, user: str) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """What one broker answers from its own metadata for ``user``'s entities."""
    with AdminClient(address) as client:
        response = client.describe_client_quotas([("user", MATCH_EXACT, user)], strict=False)
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


def each_broker(cluster: Cluster) -> list[str]:
    return [b.host for b in cluster.brokers.order_by("broker_id")]


def approved_request(cluster: Cluster, user: str, value: float = 4000) -> QuotaRequest:
    tenant = Tenant.objects.create(name=unique("team"))
    OwnedName.objects.create(tenant=tenant, entity_type="user", pattern=f"{user}*")
    OwnedName.objects.create(tenant=tenant, entity_type="client-id", pattern="app")
    alice, admin = make_user(unique("alice")), make_user(unique("root"), staff=True)
    tenant.members.add(alice)
    r = quota_requests.submit(alice, tenant, cluster, user=user, client_id="app", key=PBR, value=value)
    return quota_requests.approve(admin, r.pk)


def test_an_approved_quota_is_one_push_to_the_cluster_and_every_broker_answers_it(cluster: Cluster) -> None:
    user = unique("svc")
    request = approved_request(cluster, user)
    assert request.state == "applying"
    [row] = Push.objects.filter(cluster=cluster, version=request.applied_version)
    assert row.broker is None  # one target: the cluster

    outcome = target_push.push_target(cluster.pk, None)

    assert outcome.target == f"{cluster.name}/cluster" and outcome.changed
    row.refresh_from_db()
    assert row.state == "applied"
    assert row.answers == {str(b.broker_id): f"holds version {row.version}" for b in cluster.brokers.all()}
    for address in each_broker(cluster):
        assert quotas_on(address, user) == {(("client-id", "app"), ("user", user)): {PBR: 4000.0}}
    request.refresh_from_db()
    assert request.state == "applied"


def test_the_next_push_sends_what_changed_and_a_removal_leaves_every_broker(cluster: Cluster) -> None:
    user, other = unique("svc"), unique("svc")
    approved_request(cluster, user)
    target_push.push_target(cluster.pk, None)
    alter_client_quotas(cluster, [Alteration([("user", other)], [QuotaOp(PBR, 10)])])
    alter_client_quotas(cluster, [Alteration([("user", user), ("client-id", "app")], [QuotaOp(PBR, remove=True)])])

    outcome = target_push.push_target(cluster.pk, None)

    assert outcome.mode == "delta"
    for address in each_broker(cluster):
        assert quotas_on(address, user) == {}
        assert quotas_on(address, other) == {(("user", other),): {PBR: 10.0}}


def test_broker_configs_reach_the_default_and_the_named_broker(cluster: Cluster) -> None:
    alter_configs(cluster, ConfigResource(broker_id=None), [ConfigOp("max.connections.per.ip", 5000)], None)
    alter_configs(cluster, ConfigResource(broker_id=2), [ConfigOp("leader.replication.throttled.rate", 10485760)], None)
    try:
        target_push.push_target(cluster.pk, None)
        for b in cluster.brokers.order_by("broker_id"):
            with AdminClient(b.host) as client:
                own = client.describe_configs([(BROKER_RESOURCE, str(b.broker_id), None)]).results[0]
            dynamic = {c.name: c.value for c in own.configs if c.config_source in (2, 3)}  # broker, default broker
            assert dynamic["max.connections.per.ip"] == "5000"
            assert dynamic.get("leader.replication.throttled.rate") == ("10485760" if b.broker_id == 2 else None)
    finally:
        alter_configs(cluster, ConfigResource(broker_id=None), [ConfigOp("max.connections.per.ip", op="DELETE")], None)
        alter_configs(
            cluster, ConfigResource(broker_id=2), [ConfigOp("leader.replication.throttled.rate", op="DELETE")], None
        )
        target_push.push_target(cluster.pk, None)


def test_kafkas_refusal_keeps_the_push_pending_and_the_retry_lands_once_it_can(
    kafka_cluster,
    cluster: Cluster,  # type: ignore[no-untyped-def]
) -> None:
    """A throttled-replicas list for a topic not created yet: Kafka answers UNKNOWN_TOPIC_OR_PARTITION (retriable);
    once the topic exists, the retry (what the task does with backoff) lands."""
    topic = unique("orders")
    alter_configs(cluster, ConfigResource(topic=topic), [ConfigOp("leader.replication.throttled.replicas", "*")], None)
    version = TopicConfig.objects.get(cluster=cluster, topic=topic).cluster.desired_state.version

    with pytest.raises(PushError) as raised:
        target_push.push_target(cluster.pk, None)

    assert (raised.value.code, raised.value.retriable) == ("UNKNOWN_TOPIC_OR_PARTITION", True)
    row = Push.objects.get(cluster=cluster, broker=None, version=version)
    assert (row.state, row.attempts, row.error_code) == ("pending", 1, "UNKNOWN_TOPIC_OR_PARTITION")
    admin = ConfluentAdmin({"bootstrap.servers": kafka_cluster.bootstrap()})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(30)

    target_push.push_target(cluster.pk, None)

    row.refresh_from_db()
    assert (row.state, row.attempts, row.error_code) == ("applied", 2, "")
    admin.delete_topics([topic])[topic].result(30)


def test_a_quota_set_directly_on_kafka_is_drift_that_an_admin_adopts(cluster: Cluster, bare_kafka: None) -> None:
    user, stranger = unique("svc"), unique("set-by-hand")
    approved_request(cluster, user)
    target_push.push_target(cluster.pk, None)
    with AdminClient(each_broker(cluster)[0]) as client:  # kafka-configs behind the portal's back
        client.alter_client_quotas([({"user": stranger}, {PBR: 777.0})])
        client.alter_client_quotas([({"user": user, "client-id": "app"}, {PBR: 1.0})])
    wait_for(
        "the quotas set by hand on every broker",
        lambda: all(
            quotas_on(a, stranger) and quotas_on(a, user) == {(("client-id", "app"), ("user", user)): {PBR: 1.0}}
            for a in each_broker(cluster)
        ),
    )

    outcomes = reconcile.reconcile_all(mode="report")

    assert {o.target: o.status for o in outcomes if o.target.startswith(cluster.name)} == {
        f"{cluster.name}/cluster": "drift"
    }
    rows = {(d.resource, d.status, d.desired, d.actual): d for d in Drift.objects.filter(cluster=cluster)}
    extra = rows[(f'{{"user":"{stranger}"}}', "extra", None, "777.0")]
    different = rows[(f'{{"client-id":"app","user":"{user}"}}', "different", "4000.0", "1.0")]
    admin = make_user(unique("root"), staff=True)

    version = resolve.adopt(cluster, [extra.pk, different.pk], admin)

    assert QuotaValue.objects.get(entity__cluster=cluster, entity__user=stranger, key=PBR).value == 777
    assert QuotaValue.objects.get(entity__cluster=cluster, entity__user=user, entity__client_id="app").value == 1
    assert DesiredStateVersion.objects.get(cluster=cluster).version == version
    assert set(Drift.objects.filter(cluster=cluster).values_list("resolution", flat=True)) == {"adopted"}
    adopted = AuditEntry.objects.filter(cluster=cluster, action="drift_adopted").order_by("key", "entity")
    assert {(a.actor_name, a.entity) for a in adopted} == {
        (admin.username, f"/config/users/{stranger}"),
        (admin.username, f"/config/users/{user}/clients/app"),
    }
    target_push.push_target(cluster.pk, None)  # the adopted version changes nothing on the cluster
    outcomes = reconcile.reconcile_all(mode="report")
    assert {o.status for o in outcomes if o.target.startswith(cluster.name)} == {"in-sync"}
    alter_client_quotas(cluster, [Alteration([("user", stranger)], [QuotaOp(PBR, remove=True)])])
    target_push.push_target(cluster.pk, None)


def test_drift_an_admin_does_not_want_is_removed_by_re_applying(cluster: Cluster, bare_kafka: None) -> None:
    stranger = unique("set-by-hand")
    alter_client_quotas(cluster, [Alteration([("user", unique("svc"))], [QuotaOp(PBR, 5000)])])
    target_push.push_target(cluster.pk, None)
    with AdminClient(each_broker(cluster)[1]) as client:
        client.alter_client_quotas([({"user": stranger}, {PBR: 5.0})])
    wait_for("the quota set by hand on every broker", lambda: all(quotas_on(a, stranger) for a in each_broker(cluster)))
    reconcile.reconcile_all(mode="report")
    assert Drift.objects.filter(cluster=cluster, status="extra", resolved_at=None).count() == 1

    resolve.heal(cluster, None, None)

    for address in each_broker(cluster):
        assert quotas_on(address, stranger) == {}
    assert set(Drift.objects.filter(cluster=cluster).values_list("resolution", flat=True)) == {"healed"}


def test_a_cluster_wide_value_is_kafkas_value_and_the_engines_scope(
    cluster: Cluster, bare_kafka: None, redis_url: str
) -> None:
    """Kafka holds the budget's value (kafka-configs --describe shows it) and the cluster's scope hash in the engine's
    Redis says it is cluster-wide; reconcile compares both; making it per broker again leaves the value alone."""
    user = unique("svc")
    client = redis.Redis.from_url(redis_url)
    store = BudgetStore(client, cluster.name)
    try:
        alter_client_quotas(cluster, [Alteration([("user", user)], [QuotaOp(PBR, 3000, scope="cluster_wide")])])
        target_push.push_target(cluster.pk, None)
        for address in each_broker(cluster):
            assert quotas_on(address, user) == {(("user", user),): {PBR: 3000.0}}
        assert store.scope() == {f'produce {{"user":"{user}"}}'}
        assert reconcile.reconcile_target(cluster, None, mode="report").status == "in-sync"

        alter_client_quotas(cluster, [Alteration([("user", user)], [QuotaOp(PBR, 3000, scope="per_broker")])])
        target_push.push_target(cluster.pk, None)
        assert store.scope() == set()
        for address in each_broker(cluster):
            assert quotas_on(address, user) == {(("user", user),): {PBR: 3000.0}}
        alter_client_quotas(cluster, [Alteration([("user", user)], [QuotaOp(PBR, remove=True)])])
        target_push.push_target(cluster.pk, None)
    finally:
        client.delete(store.scope_key)
        client.close()


def test_a_cluster_behind_scram_is_pushed_with_the_password_from_the_environment(
    kafka_cluster,
    engine_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """What a platform team sets to point the portal at its cluster: SASL bootstrap servers, the mechanism and user
    in the cluster's settings, the password in the workers' environment (never in the database)."""
    creds = kafka_cluster.admin_credentials()
    secured = Cluster.objects.create(
        name=unique("ksecure"),
        connector=ConnectorKind.KAFKA,
        bootstrap_servers=kafka_cluster.bootstrap("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=creds["username"],
    )
    user = unique("svc")
    alter_client_quotas(secured, [Alteration([("user", user)], [QuotaOp(PBR, 2048)])])

    with pytest.raises(PushError) as missing:
        target_push.push_target(secured.pk, None)
    assert (missing.value.code, missing.value.retriable) == ("SASL_AUTHENTICATION_FAILED", False)
    assert secured.password_env in missing.value.message

    monkeypatch.setenv(secured.password_env, "not-the-password")
    with pytest.raises(PushError) as refused:
        target_push.push_target(secured.pk, None)
    assert refused.value.code == "SASL_AUTHENTICATION_FAILED" and "not-the-password" not in str(refused.value)
    assert refused.value.retriable  # a secret rotated in Kafka before the portal's: retried until the new one is in

    monkeypatch.setenv(secured.password_env, creds["password"])
    outcome = target_push.push_target(secured.pk, None)

    assert sorted(outcome.answers) == sorted(str(n.node_id) for n in kafka_cluster.nodes)
    for node in kafka_cluster.nodes:
        assert quotas_on(node.address("PLAINTEXT"), user) == {(("user", user),): {PBR: 2048.0}}
    alter_client_quotas(secured, [Alteration([("user", user)], [QuotaOp(PBR, remove=True)])])
    target_push.push_target(secured.pk, None)


def test_a_password_rotated_in_its_secret_file_is_used_by_the_next_push(
    kafka_cluster: Any, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A mounted secret (``QUOTAS_KAFKA_PASSWORD_<NAME>_FILE``) wins over the variable and is read at each push, so a
    password rotated in Kafka and then in the file goes through with no restart; in between, the push is refused as
    retriable (nothing failed for good)."""
    creds = kafka_cluster.admin_credentials()
    secured = Cluster.objects.create(
        name=unique("krotate"), connector=ConnectorKind.KAFKA,
        bootstrap_servers=kafka_cluster.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512", sasl_username=creds["username"],
    )
    secret = tmp_path / "kafka-password"
    secret.write_text("an-old-password\n")
    monkeypatch.setenv(secured.password_env, creds["password"])  # the file wins over it
    monkeypatch.setenv(secured.password_env + "_FILE", str(secret))
    user = unique("svc")
    alter_client_quotas(secured, [Alteration([("user", user)], [QuotaOp(PBR, 4096)])])

    with pytest.raises(PushError) as refused:
        target_push.push_target(secured.pk, None)
    assert (refused.value.code, refused.value.retriable) == ("SASL_AUTHENTICATION_FAILED", True)
    assert "an-old-password" not in str(refused.value)

    secret.write_text(creds["password"] + "\n")  # the new secret in place: the next push reads it
    target_push.push_target(secured.pk, None)
    for node in kafka_cluster.nodes:
        assert quotas_on(node.address("PLAINTEXT"), user) == {(("user", user),): {PBR: 4096.0}}

    secret.unlink()  # a secret file that is gone: refused for good, naming both places
    alter_client_quotas(secured, [Alteration([("user", user)], [QuotaOp(PBR, remove=True)])])
    with pytest.raises(PushError) as missing:
        target_push.push_target(secured.pk, None)
    assert missing.value.retriable is False and f"{secured.password_env}_FILE" in missing.value.message
