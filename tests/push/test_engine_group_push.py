"""A per-broker engine cluster's groups and exempt principals (issue 32): each broker's push writes them to the
cluster's scope hash in that broker's Redis, and the engine brokers (``traffic.engine_budgets``) enforce them from
there as the Kafka brokers' quota callback does: a tenant's principals on two brokers held together to their group's
cluster-wide budget, an exempt principal never throttled.
"""

from __future__ import annotations

import pytest
import redis

from engine.budget_store import BudgetStore
from engine.config import QuotaEngine, namespace_for_broker
from engine.entities import QuotaType
from engine.groups import GroupSpec
from engine.managers import UsageRecord
from quotas.choices import BudgetScope
from quotas.models import Broker, Cluster, GroupKind, create_group, set_exempt, set_group_values
from quotas.push import reconcile, target_push
from tests.people import make_tenant
from traffic.engine_budgets import BrokerBudgets

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"
BUDGET = 100_000.0
T0 = 1_700_000_000_000


def test_a_group_on_a_per_broker_engine_cluster_is_pushed_and_enforced_by_its_brokers(
    budget_redis: redis.Redis,
) -> None:
    staging = Cluster.objects.create(name="gstaging")  # an engine cluster, per broker
    for i in (1, 2):
        Broker.objects.create(cluster=staging, broker_id=i, host=f"e{i}:9092")
    tenant = make_tenant("payments", users=["svc-pay-*"])
    group = create_group(None, staging, tenant, "payments", GroupKind.TENANT)
    set_group_values(None, group, {PBR: (BUDGET, BudgetScope.CLUSTER_WIDE)})
    set_exempt(None, staging, "replicator", True)

    for broker in staging.brokers.all():
        assert target_push.push_target(staging.pk, broker.pk).changed
    scope = BudgetStore(budget_redis, staging.name).scope()
    assert {'produce {"group":"payments"}', "exempt replicator"} <= scope
    [spec] = [GroupSpec.from_json(f.partition(" ")[2]) for f in scope if f.startswith("group ")]
    assert spec.name == "payments" and spec.matches("svc-pay-7", "any") and spec.quotas == {PBR: BUDGET}
    assert [reconcile.reconcile_target(staging, b).status for b in staging.brokers.all()] == ["in-sync", "in-sync"]

    # the engine brokers: svc-pay-1 producing on broker 1, svc-pay-2 on broker 2, each asking 300 KB/s
    brokers = []
    for broker_id in (1, 2):
        engine = QuotaEngine(budget_redis, namespace_for_broker(staging.name, broker_id))
        engine.refresh()
        brokers.append((engine, BrokerBudgets(BudgetStore(budget_redis, staging.name), broker_id, engine.managers, 2)))
    ready, taken = [0, 0], []
    for s in range(40):
        took = 0.0
        for ms in range(0, 1000, 33):
            t = T0 + s * 1000 + ms
            for i, (engine, budgets) in enumerate(brokers):
                if t >= ready[i]:
                    user = f"svc-pay-{i + 1}"
                    r = engine.manager("produce").record_many([UsageRecord(user, "app", 10_000.0, t)])[0]
                    budgets.note(QuotaType.PRODUCE, user, "app", 10_000.0, r.throttle_ms, t)
                    took, ready[i] = took + 10_000.0, t + r.throttle_ms
        taken.append(took)
        for _engine, budgets in brokers:
            budgets.round(T0 + (s + 1) * 1000)

    assert all(e.manager("produce").quota(f"svc-pay-{i + 1}", "x")[1] == "group@payments:"
               for i, (e, _b) in enumerate(brokers))
    assert sum(taken[20:]) / 20 == pytest.approx(BUDGET, rel=0.15), "the tenant is held to its group's budget"
    assert brokers[0][0].manager("produce").record("replicator", "mirror", 1e9, T0 + 40_000).throttle_ms == 0
