"""Pushing a Kafka cluster's groups and exempt principals (issue 32) into its scope hash, where the brokers' quota
callback reads them: one ``group <spec>`` field per group (a new spec replaces the old in one write, never two specs
of one group), a budget scope per cluster-wide group value, one ``exempt <principal>`` field per exempt principal;
reconcile reports a group changed by hand in Redis and re-applying heals it.

Kafka is in memory (tests/push/fake_kafka.py): groups never reach Kafka's own quota configs; the scope hash is the real
one on the test Redis. Enforcement by real brokers is tests/kafka/test_group_quotas.py.
"""

from __future__ import annotations

import json

import pytest
import redis

from engine.budget_store import BudgetStore
from engine.groups import GroupSpec
from quotas.choices import BudgetScope, ConnectorKind
from quotas.connectors.base import GROUP
from quotas.models import Cluster, Drift, GroupKind, OwnedName, Tenant, create_group, set_exempt, set_group_values
from quotas.push import reconcile, resolve, target_push
from tests.people import make_tenant
from tests.push.fake_kafka import FakeKafka

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.objects.create(name="kgroup", connector=ConnectorKind.KAFKA)


@pytest.fixture
def tenant() -> Tenant:
    t = make_tenant("payments", users=["svc-pay-*"])
    return t


def groups_in(client: redis.Redis, cluster: Cluster) -> dict[str, GroupSpec]:
    fields = BudgetStore(client, cluster.name).scope()
    specs = [GroupSpec.from_json(f.partition(" ")[2]) for f in fields if f.startswith("group ")]
    assert len(specs) == len({s.name for s in specs}), f"one spec per group: {fields}"
    return {s.name: s for s in specs}


def test_groups_and_exempt_principals_land_in_the_scope_hash_not_in_kafka(
    kafka: FakeKafka, cluster: Cluster, tenant: Tenant, budget_redis: redis.Redis
) -> None:
    group = create_group(None, cluster, tenant, "payments", GroupKind.TENANT)
    set_group_values(None, group, {PBR: (3e6, BudgetScope.CLUSTER_WIDE)})
    set_exempt(None, cluster, "replicator", True)

    target_push.push_target(cluster.pk, None)

    scope = BudgetStore(budget_redis, cluster.name).scope()
    assert 'produce {"group":"payments"}' in scope and "exempt replicator" in scope
    assert groups_in(budget_redis, cluster)["payments"].quotas == {PBR: 3e6}
    assert kafka.quotas == {}, "Kafka's quota configs know no group"

    set_group_values(None, group, {PBR: (4e6, None), "controller_mutation_rate": (5.0, None)})
    target_push.push_target(cluster.pk, None)
    # the controller's callback reads the same spec for the controller mutation value, per broker only
    assert groups_in(budget_redis, cluster)["payments"].quotas == {PBR: 4e6, "controller_mutation_rate": 5.0}
    assert not any(f.startswith("controller_mutation ") for f in BudgetStore(budget_redis, cluster.name).scope())
    assert 'produce {"group":"payments"}' in BudgetStore(budget_redis, cluster.name).scope(), "the scope stays"

    OwnedName.objects.create(tenant=tenant, entity_type="user", pattern="ledger")  # the tenant's group follows
    target_push.push_target(cluster.pk, None)
    assert groups_in(budget_redis, cluster)["payments"].matches("ledger", "any-client")


def test_reconcile_reports_a_group_changed_in_redis_and_re_applying_heals_it(
    kafka: FakeKafka, cluster: Cluster, tenant: Tenant, budget_redis: redis.Redis
) -> None:
    group = create_group(None, cluster, tenant, "pay-apps", GroupKind.PRINCIPALS, principals=["svc-pay-1"])
    set_group_values(None, group, {PBR: (1e6, None)})
    target_push.push_target(cluster.pk, None)
    assert reconcile.reconcile_target(cluster, None).status == "in-sync"

    store = BudgetStore(budget_redis, cluster.name)
    widened = GroupSpec("pay-apps", 1000, users=("svc-pay-1", "intruder"), quotas={PBR: 1e6})
    store.set_scope([f"group {widened.to_json()}"])  # a member added on the cluster's side

    outcome = reconcile.reconcile_target(cluster, None, mode="report")

    assert outcome.status == "drift"
    [row] = Drift.objects.filter(cluster=cluster, kind=GROUP)
    assert (row.path, row.status) == ("/groups/pay-apps", "different")
    assert "intruder" in json.loads(row.actual)["users"] and "intruder" not in json.loads(row.desired)["users"]

    resolve.heal(cluster, None, None)
    assert groups_in(budget_redis, cluster)["pay-apps"].users == ("svc-pay-1",)
    assert reconcile.reconcile_target(cluster, None).status == "in-sync"
