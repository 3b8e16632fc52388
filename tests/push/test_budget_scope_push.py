"""Pushing a Kafka cluster's budget scopes (issue 28): with every push that changes one, the cluster's scope hash in
the engine's Redis (``qb:{<cluster>}:scope``, ``BudgetStore.set_scope``) says which values are cluster-wide.

Kafka is played by a connector whose Admin API calls stay in memory (what it is asked, and what the scope hash held at
that moment); the scope, the push bookkeeping, the retries and reconcile are the real ones, on the test Redis and
database. The same pushes against real Kafka brokers are in tests/push/test_kafka_pushes.py.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from devtools.redis_server import free_port
from engine.budget_store import BudgetStore
from quotas.choices import ConnectorKind
from quotas.connectors.base import BUDGET_SCOPE, QUOTA, Delta, Item, PushError, Target
from quotas.connectors.budget_scope import BudgetScopes, item_of
from quotas.connectors.kafka import KafkaConnector
from quotas.models import (
    Alteration,
    AuditEntry,
    Broker,
    Cluster,
    Drift,
    Push,
    QuotaOp,
    alter_client_quotas,
)
from quotas.push import reconcile, resolve, target_push
from quotas.workflow import quota_requests
from tests.people import make_tenant, make_user
from tests.push.fake_kafka import FakeKafka

pytestmark = pytest.mark.django_db
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
ALICE, BOB = '{"user":"alice"}', '{"user":"bob"}'


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster.objects.create(name="kprod", connector=ConnectorKind.KAFKA)
    for i in (1, 2, 3):
        Broker.objects.create(cluster=c, broker_id=i, host=f"b{i}:9092")
    return c


def scope_of(client: redis.Redis, cluster: Cluster) -> set[str]:
    return BudgetStore(client, cluster.name).scope()


def scope_version(client: redis.Redis, cluster: Cluster) -> int:
    version = (client.hget(f"qb:{{{cluster.name}}}:scope", "#version") or b"0").decode()
    return int(version.rsplit(":", 1)[-1])  # <epoch>:<n>


def alter(cluster: Cluster, user: str, key: str, value: float | None, scope: str | None = None) -> None:
    op = QuotaOp(key, remove=True) if value is None else QuotaOp(key, value, scope=scope)
    alter_client_quotas(cluster, [Alteration([("user", user)], [op])])


def test_a_push_writes_the_clusters_scope_and_kafka_keeps_the_value(
    kafka: FakeKafka, cluster: Cluster, budget_redis: redis.Redis
) -> None:
    alter(cluster, "alice", PBR, 3_000_000, "cluster_wide")
    alter(cluster, "alice", CBR, 1000)  # per broker: not in the scope
    alter(cluster, "bob", "request_percentage", 50, "cluster_wide")

    outcome = target_push.push_target(cluster.pk, None)

    assert outcome.changed and outcome.mode == "full"
    assert scope_of(budget_redis, cluster) == {f"produce {ALICE}", f"request {BOB}"}
    assert kafka.quotas[Item(QUOTA, ALICE, PBR)] == "3000000.0"  # the budget's value is Kafka's, as ever
    assert Push.objects.get(cluster=cluster, version=3).state == "applied"

    # the next change is a delta: a value that stops being cluster-wide leaves the scope, the rest stays
    alter(cluster, "bob", "request_percentage", 50, "per_broker")
    version_before = scope_version(budget_redis, cluster)
    assert target_push.push_target(cluster.pk, None).mode == "delta"
    assert scope_of(budget_redis, cluster) == {f"produce {ALICE}"}
    assert scope_version(budget_redis, cluster) == version_before + 1  # one write: the plugin re-reads once

    # a push that changes no scope leaves the hash alone (its version too)
    alter(cluster, "alice", PBR, 4_000_000)
    target_push.push_target(cluster.pk, None)
    assert scope_version(budget_redis, cluster) == version_before + 1
    assert scope_of(budget_redis, cluster) == {f"produce {ALICE}"}


def test_a_value_joins_the_scope_before_kafka_takes_it_and_leaves_after(
    kafka: FakeKafka, cluster: Cluster, budget_redis: redis.Redis
) -> None:
    """While Kafka and Redis disagree a client gets what the old or the new state allows: never the new budget on
    each broker (joining), never the old budget on each broker (leaving)."""
    alter(cluster, "alice", PBR, 1000)
    alter(cluster, "bob", PBR, 9000, "cluster_wide")
    target_push.push_target(cluster.pk, None)
    kafka.sent.clear()
    alter(cluster, "alice", PBR, 3000, "cluster_wide")  # alice joins
    alter(cluster, "bob", PBR, 3000, "per_broker")  # bob leaves

    target_push.push_target(cluster.pk, None)

    [(entries, scope_while_kafka_wrote)] = kafka.sent
    assert scope_while_kafka_wrote == {f"produce {ALICE}", f"produce {BOB}"}
    assert scope_of(budget_redis, cluster) == {f"produce {ALICE}"}


def test_a_push_whose_scope_cannot_be_written_is_retried_never_reported_applied(
    kafka: FakeKafka, cluster: Cluster, budget_redis: redis.Redis, redis_url: str
) -> None:
    tenant = make_tenant("team", users=["alice"])
    alice, root = make_user("alice"), make_user("root", staff=True)
    tenant.members.add(alice)
    asked = quota_requests.submit(alice, tenant, cluster, user="alice", client_id=None, key=PBR, value=3000,
                                  budget_scope="cluster_wide")
    request = quota_requests.approve(root, asked.pk)
    assert request.state == "applying"
    assert kafka.budgets is not None
    kafka.budgets = BudgetScopes(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)  # the engine's Redis is away

    with pytest.raises(PushError) as refused:
        target_push.push_target(cluster.pk, None)

    assert refused.value.retriable and refused.value.code == "BUDGET_STORE_UNAVAILABLE"
    row = Push.objects.get(cluster=cluster, version=request.applied_version)
    assert row.state == "pending" and row.error_code == "BUDGET_STORE_UNAVAILABLE"
    assert "the push is retried" in row.error
    request.refresh_from_db()
    assert request.state == "applying"  # not applied: the brokers would treat the budget as per broker

    kafka.budgets = BudgetScopes(redis_url)  # it is back: the retry lands, idempotently
    target_push.push_target(cluster.pk, None)
    assert scope_of(budget_redis, cluster) == {f"produce {ALICE}"}
    row.refresh_from_db()
    request.refresh_from_db()
    assert row.state == "applied" and request.state == "applied"
    assert [e for e in AuditEntry.objects.filter(request=request, action="budget_scope_altered")]


def test_a_refused_kafka_write_leaves_no_value_shared_out_at_its_new_number(
    kafka: FakeKafka, cluster: Cluster, budget_redis: redis.Redis
) -> None:
    """Kafka refusing the write after the scope step: the scope holds the joining value at its old number (shared
    out: less than before, never more), and the retry completes it."""
    alter(cluster, "alice", PBR, 1000)
    target_push.push_target(cluster.pk, None)
    alter(cluster, "alice", PBR, 3000, "cluster_wide")
    kafka.refuse = True
    with pytest.raises(PushError):
        target_push.push_target(cluster.pk, None)
    assert kafka.quotas[Item(QUOTA, ALICE, PBR)] == "1000.0"
    kafka.refuse = False
    target_push.push_target(cluster.pk, None)
    assert kafka.quotas[Item(QUOTA, ALICE, PBR)] == "3000.0"
    assert scope_of(budget_redis, cluster) == {f"produce {ALICE}"}


def test_reconcile_finds_a_scope_that_differs_and_re_applying_heals_it(
    kafka: FakeKafka, cluster: Cluster, budget_redis: redis.Redis
) -> None:
    alter(cluster, "alice", PBR, 3000, "cluster_wide")
    alter(cluster, "bob", PBR, 1000)
    target_push.push_target(cluster.pk, None)
    assert reconcile.reconcile_target(cluster, None).status == "in-sync"

    # someone's hand in Redis: alice's budget gone from the scope, bob's per-broker value made a budget
    BudgetStore(budget_redis, cluster.name).set_scope([f"produce {BOB}"])

    outcome = reconcile.reconcile_target(cluster, None, mode="report")

    assert (outcome.status, outcome.differences) == ("drift", 2)
    found = {(d.kind, d.resource, d.key, d.status, d.desired, d.actual) for d in Drift.objects.filter(cluster=cluster)}
    assert found == {
        (BUDGET_SCOPE, ALICE, PBR, "missing", "cluster_wide", None),
        (BUDGET_SCOPE, BOB, PBR, "extra", None, "cluster_wide"),
    }
    assert {d.path for d in Drift.objects.filter(cluster=cluster)} == {"/config/users/alice", "/config/users/bob"}
    with pytest.raises(resolve.NotAdoptable, match="re-apply desired state to write it back"):
        resolve.adopt(cluster, list(Drift.objects.filter(cluster=cluster).values_list("pk", flat=True)),
                      make_user("root", staff=True))

    resolve.heal(cluster, None, None)

    assert scope_of(budget_redis, cluster) == {f"produce {ALICE}"}
    assert reconcile.reconcile_target(cluster, None).status == "in-sync"
    assert set(Drift.objects.filter(cluster=cluster).values_list("resolution", flat=True)) == {"healed"}


def test_a_full_push_of_a_cluster_without_budgets_creates_no_scope_hash(
    kafka: FakeKafka, cluster: Cluster, budget_redis: redis.Redis
) -> None:
    """No portal data, no hash: the plugin then answers exactly as Kafka's default callback."""
    alter(cluster, "alice", PBR, 1000)
    target_push.push_target(cluster.pk, None)
    assert not budget_redis.exists(f"qb:{{{cluster.name}}}:scope")


def test_a_scope_a_target_cannot_take_is_refused_before_kafka_is_asked(budget_redis: redis.Redis) -> None:
    connector = FakeKafka(BudgetScopes("redis://127.0.0.1:1/0"))
    scope = {Item(BUDGET_SCOPE, ALICE, "controller_mutation_rate"): "cluster_wide"}
    with pytest.raises(PushError, match="cannot be cluster-wide") as refused:
        connector.apply(Target("kprod", None, "b1:9092"), Delta(2, 1, False, scope))
    assert not refused.value.retriable and connector.sent == []
    without_redis = KafkaConnector()  # no engine Redis configured: it cannot take a scope
    with pytest.raises(PushError, match="only a Kafka cluster's target"):
        budget = {Item(BUDGET_SCOPE, ALICE, PBR): "cluster_wide"}
        without_redis.apply(Target("kprod", None, "b1:9092"), Delta(2, 1, False, budget))


def test_a_field_the_portal_would_not_write_stays_visible() -> None:
    assert item_of(f"fetch {ALICE}") == (Item(BUDGET_SCOPE, ALICE, CBR), "cluster_wide")
    assert item_of("nonsense") == (Item(BUDGET_SCOPE, "nonsense", "unknown"), "cluster_wide")


def test_an_engine_clusters_brokers_take_the_scope_from_their_own_redis(budget_redis: redis.Redis) -> None:
    """A per-broker engine cluster's brokers run the plugin's rounds too (traffic.engine_budgets): each broker's
    push writes the cluster's scope hash in that broker's Redis; reconcile compares it there."""
    staging = Cluster.objects.create(name="staging")
    for i in (1, 2):
        Broker.objects.create(cluster=staging, broker_id=i, host=f"e{i}:9092")
    alter(staging, "alice", PBR, 3000, "cluster_wide")
    alter(staging, "bob", PBR, 1000)
    for broker in staging.brokers.all():
        outcome = target_push.push_target(staging.pk, broker.pk)
        assert outcome.mode == "full" and outcome.changed
    assert scope_of(budget_redis, staging) == {f"produce {ALICE}"}
    assert [reconcile.reconcile_target(staging, b).status for b in staging.brokers.all()] == ["in-sync", "in-sync"]

    alter(staging, "alice", PBR, 3000, "per_broker")
    target_push.push_target(staging.pk, staging.brokers.get(broker_id=1).pk)
    assert scope_of(budget_redis, staging) == set()
    b2 = staging.brokers.get(broker_id=2)
    assert target_push.push_target(staging.pk, b2.pk).mode == "delta"  # nothing left to do

    budget_redis.hset(f"qb:{{{staging.name}}}:scope", f"fetch {BOB}", "cluster")  # a hand in Redis
    outcome = reconcile.reconcile_target(staging, staging.brokers.get(broker_id=1), mode="report")
    assert (outcome.status, outcome.differences) == ("drift", 1)
    drift = Drift.objects.get(cluster=staging)
    assert (drift.kind, drift.key, drift.status, drift.broker.broker_id) == (BUDGET_SCOPE, CBR, "extra", 1)


def test_kafka_takes_a_new_budget_only_once_every_live_broker_has_read_the_scope(
    kafka: FakeKafka, cluster: Cluster, budget_redis: redis.Redis
) -> None:
    """Taken by Kafka before a broker's plugin read the scope, a budget is a per-broker value there until its next
    round, and a new sensor admits ten seconds of it at once: the push waits for the brokers' rounds."""
    store = BudgetStore(budget_redis, cluster.name)
    answered: list[tuple[float, float, str]] = []  # each round: began, ended, the scope version it left the broker
    stop = threading.Event()

    def broker() -> None:  # a broker's plugin: a round every 100 ms, keeping the scope version it was answered
        held = ""
        while not stop.is_set():
            began = time.monotonic()
            held = store.round(1, [], scope_version=held).scope_version
            answered.append((began, time.monotonic(), held))
            stop.wait(0.1)

    player = threading.Thread(target=broker)
    player.start()
    try:
        while not answered:
            time.sleep(0.01)
        alter(cluster, "alice", PBR, 3000, "cluster_wide")
        target_push.push_target(cluster.pk, None)
    finally:
        stop.set()
        player.join()

    wrote = kafka.sent_at[-1]
    new_version = budget_redis.hget(f"qb:{{{cluster.name}}}:scope", "#version").decode()
    told = [ended for _, ended, version in answered if version == new_version and ended < wrote]
    assert told, "the broker was answered the new scope before Kafka took the value"
    told = min(told)
    assert any(told <= began < wrote for began, _, _ in answered), "and had applied it (its next round began)"
