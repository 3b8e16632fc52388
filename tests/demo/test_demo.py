"""``python manage.py demo_data``: what it creates, that a second run changes nothing, and that the pushes queued
when it commits bring every broker to the newest desired-state version."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.utils import timezone

from demo.management.commands.demo_data import BOOST, DEMO_PASSWORD, PENDING, USERS
from engine.config import QuotaEngine, namespace_for_broker
from engine.desired import BrokerConfigStore, NamespaceState
from quotas.choices import BudgetScope
from quotas.models import (
    AuditEntry,
    Broker,
    BrokerConfig,
    Cluster,
    DesiredChange,
    DesiredStateVersion,
    Listener,
    OwnedName,
    Push,
    QuotaEntity,
    QuotaRequest,
    QuotaValue,
    Tenant,
    effective_client_quotas,
    effective_ip_quota,
    is_admin,
    is_auditor,
    owning_tenant,
)
from quotas.push import target_push
from quotas.workflow import quota_requests
from tests.brokers import queued_pushes
from traffic.workload import DEMO_TOPIC_BURSTS, DEMO_TRAFFIC, STORM_IP

pytestmark = pytest.mark.django_db
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def demo_data() -> str:
    out = io.StringIO()
    call_command("demo_data", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def snapshot() -> dict[str, Any]:
    """Everything demo_data writes, as comparable values."""
    return {
        "users": sorted(get_user_model().objects.values_list("username", "password", "is_staff", "is_superuser")),
        "clusters": sorted(Cluster.objects.values_list("name", "connector", "scope")),
        "brokers": sorted(Broker.objects.values_list("cluster__name", "broker_id", "host", "engine_url")),
        "listeners": sorted(Listener.objects.values_list("cluster__name", "name", "is_inter_broker")),
        "tenants": sorted(Tenant.objects.values_list("name", "members__username")),
        "owned": sorted(OwnedName.objects.values_list("tenant__name", "entity_type", "pattern")),
        "quotas": sorted(QuotaValue.objects.values_list("entity__cluster__name", "entity__pk", "key", "value")),
        "configs": sorted(BrokerConfig.objects.values_list("cluster__name", "broker__broker_id", "key", "value"),
                          key=str),
        "requests": sorted(QuotaRequest.objects.values_list("pk", "state", "value")),
        "versions": sorted(DesiredStateVersion.objects.values_list("cluster__name", "version")),
        "changes": DesiredChange.objects.count(),
        "pushes": Push.objects.count(),
        "audit": AuditEntry.objects.count(),
    }


def level(cluster: Cluster, user: str, client_id: str, key: str) -> tuple[float | None, int | None]:
    found = {e.key: (e.value, e.level) for e in effective_client_quotas(cluster, user, client_id)}
    return found[key]


def test_demo_data_creates_the_demo_world(engine_redis: redis.Redis) -> None:
    out = demo_data()
    assert "change(s)" in out and "Demo logins" in out
    for username in USERS:
        assert username in out
    assert DEMO_PASSWORD in out

    prod, staging = Cluster.objects.get(name="prod"), Cluster.objects.get(name="staging")
    for cluster in (prod, staging):
        assert cluster.connector == "engine" and cluster.scope == "per_broker"
        assert list(cluster.brokers.values_list("broker_id", "engine_url")) == [(1, ""), (2, ""), (3, "")]
        assert set(cluster.listeners.values_list("name", "is_inter_broker")) == {
            ("PLAINTEXT", False), ("INTERNAL", True)
        }

    # logins work, with their roles
    users = {u: authenticate(username=u, password=DEMO_PASSWORD) for u in USERS}
    assert all(users.values())
    assert is_admin(users["demo-admin"]) and users["demo-admin"].is_staff
    assert is_auditor(users["demo-auditor"]) and not is_admin(users["demo-auditor"])
    for tenant, member in (("payments", "demo-payments"), ("analytics", "demo-analytics"), ("search", "demo-search")):
        t = Tenant.objects.get(name=tenant)
        assert list(t.members.values_list("username", flat=True)) == [member]
        assert t.owns("user", f"svc-{tenant}-x") and t.owns("client-id", f"{tenant}-x")
        assert not is_admin(users[member])

    # quotas at several precedence levels, for both clusters
    for cluster in (prod, staging):
        assert level(cluster, "svc-payments-refunds", "payments-refunds", "producer_byte_rate") == (2 * MIB, 6)
        # the ledger's producer has a cluster-wide budget: its demand moves between partition leaders
        assert level(cluster, "svc-payments-ledger", "payments-ledger", "producer_byte_rate") == (1 * MIB, 3)
        ledger = QuotaValue.objects.get(entity__cluster=cluster, entity__user="svc-payments-ledger")
        assert ledger.budget_scope == BudgetScope.CLUSTER_WIDE
        assert level(cluster, "svc-payments-api", "payments-api-1", "producer_byte_rate") == (512 * 1024, 3)
        assert level(cluster, "svc-payments-api", "payments-api-1", "request_percentage") == (50.0, 8)
        assert level(cluster, "svc-search-query", "search-query", "request_percentage") == (20.0, 7)
        assert level(cluster, "svc-search-indexer", "search-indexer-admin", "controller_mutation_rate") == (3.0, 3)
        assert level(cluster, "svc-analytics-etl", "analytics-etl-admin", "controller_mutation_rate") == (5.0, 6)
        assert (effective_ip_quota(cluster, STORM_IP).value, effective_ip_quota(cluster, STORM_IP).level) == (10, 1)
        assert effective_ip_quota(cluster, "10.10.1.11").level == 2
        configs = dict(BrokerConfig.objects.filter(cluster=cluster, broker=None).values_list("key", "value"))
        assert configs["max.connections"] == "1000" and configs["max.connection.creation.rate"] == "200"
        assert BrokerConfig.objects.get(cluster=cluster, broker__broker_id=3).value == "800"
    # the boost holds analytics-spark's level-1 value on prod (staging keeps the base value)
    assert level(prod, "svc-analytics-etl", "analytics-spark", "consumer_byte_rate") == (6 * MIB, 1)
    assert level(staging, "svc-analytics-etl", "analytics-spark", "consumer_byte_rate") == (2 * MIB, 1)

    # set through AlterClientQuotas / IncrementalAlterConfigs: versioned, audited, a push pending per broker
    assert AuditEntry.objects.filter(action="quota_altered", cluster=prod).count() >= 10
    assert AuditEntry.objects.filter(action="config_altered", cluster=prod).count() == 5
    for cluster in (prod, staging):
        version = DesiredStateVersion.objects.get(cluster=cluster).version
        assert version >= 3
        newest = Push.objects.filter(cluster=cluster, version=version)
        assert sorted(newest.values_list("broker__broker_id", "state")) == [(i, "pending") for i in (1, 2, 3)]

    # one pending request that would relieve the throttled payments principal, one approved boost for an hour
    pending = QuotaRequest.objects.get(state="submitted")
    assert (pending.cluster, pending.tenant.name, pending.requested_by.username) == (prod, "payments", "demo-payments")
    assert (pending.user, pending.client_id, pending.key, pending.value) == (
        PENDING["user"], None, "producer_byte_rate", PENDING["value"]
    )
    assert pending.value > QuotaValue.objects.get(entity__user="svc-payments-api", entity__cluster=prod).value
    boost = QuotaRequest.objects.exclude(pk=pending.pk).get()
    assert boost.state == "applying" and boost.approval.approver.username == "demo-admin"
    assert (boost.user, boost.client_id, boost.value, boost.previous_value) == (
        BOOST["user"], BOOST["client_id"], 6 * MIB, 2 * MIB
    )
    assert timedelta(minutes=55) < boost.expires_at - timezone.now() <= timedelta(minutes=60)


def test_demo_data_a_second_time_changes_nothing_and_says_so(engine_redis: redis.Redis) -> None:
    demo_data()
    before = snapshot()
    out = demo_data()
    assert "nothing changed" in out and "change(s)" not in out
    assert snapshot() == before


def test_demo_data_never_overwrites_what_the_demo_changed(engine_redis: redis.Redis) -> None:
    demo_data()
    admin = get_user_model().objects.get(username="demo-admin")
    pending = QuotaRequest.objects.get(state="submitted")
    quota_requests.approve(admin, pending.pk)
    prod = Cluster.objects.get(name="prod")
    entity = QuotaEntity.objects.get(cluster=prod, user=None, client_id="search-query")
    entity.quota_values.update(value=30.0)  # an admin's own change in the demo
    before = snapshot()
    assert "nothing changed" in demo_data()
    assert snapshot() == before  # no second pending request, the approval and the 30 % stand
    assert level(prod, "svc-payments-api", "x", "producer_byte_rate") == (PENDING["value"], 3)


def test_demo_data_resets_a_changed_demo_password(engine_redis: redis.Redis) -> None:
    demo_data()
    user = get_user_model().objects.get(username="demo-search")
    user.set_password("something else")
    user.save()
    out = demo_data()
    assert "demo-search: password reset" in out
    assert authenticate(username="demo-search", password=DEMO_PASSWORD) is not None


def test_the_first_push_of_each_broker_lands_everything(
    engine_redis: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    engine_redis.delete("celery")
    with django_capture_on_commit_callbacks(execute=True):
        demo_data()
    queued = queued_pushes(engine_redis)
    engine_redis.delete("celery")
    brokers = {(b.cluster_id, b.pk): b for b in Broker.objects.select_related("cluster")}
    assert sorted(queued) == sorted(brokers)  # one push per broker, however many versions were committed
    for cluster_pk, broker_pk in queued:  # what the worker runs
        outcome = target_push.push_target(cluster_pk, broker_pk)
        assert outcome.mode == "full"
    for b in brokers.values():
        version = DesiredStateVersion.objects.get(cluster=b.cluster).version
        ns = namespace_for_broker(b.cluster.name, b.broker_id)
        assert NamespaceState(engine_redis, ns, b.broker_id).applied_version() == version
        engine = QuotaEngine(engine_redis, ns)
        engine.refresh()
        produce = engine.manager("produce")
        assert produce.quota("svc-payments-api", "payments-api-1") == (512 * 1024, "svc-payments-api:")
        props = BrokerConfigStore(engine_redis, ns).effective(b.broker_id)
        assert props["max.connections"] == ("800" if b.broker_id == 3 else "1000")
    assert not Push.objects.exclude(state="applied").exists()
    assert QuotaRequest.objects.get(reason__contains="Backfill").state == "applied"
    # nothing left to do: a run now queues nothing
    with django_capture_on_commit_callbacks(execute=True):
        assert "nothing changed" in demo_data()
    assert queued_pushes(engine_redis) == []


def test_the_load_generator_clients_are_the_demo_tenants_principals(engine_redis: redis.Redis) -> None:
    demo_data()
    for p in [*DEMO_TRAFFIC, *DEMO_TOPIC_BURSTS]:
        tenant = owning_tenant(p.user, p.client_id)
        if p.user == "ANONYMOUS":
            assert tenant is None  # nobody's: the defaults apply
        else:
            assert tenant is not None and tenant.name in p.user, p
    # the pending request is for a principal the load drives
    assert PENDING["user"] in {p.user for p in DEMO_TRAFFIC}
