"""Groups and exempt principals on engine clusters (issue 32): a per-broker engine cluster's brokers enforce them
from the cluster's scope hash, so it takes them into its desired state; a cluster_wide one (one namespace, no scope
hash) refuses them and does not become one while it holds any. Pushing and enforcing: tests/push/
test_engine_group_push.py."""

from __future__ import annotations

import pytest

from engine.groups import entity_field
from quotas.choices import BudgetScope, ConnectorKind
from quotas.connectors.base import BUDGET_SCOPE, EXEMPT, GROUP, Item
from quotas.models import Broker, Cluster, GroupKind, Tenant, create_group, set_exempt, set_group_values
from quotas.models.desired import desired_state
from tests.people import api, make_tenant, make_user

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"


@pytest.fixture
def staging() -> Cluster:
    cluster = Cluster.objects.create(name="staging", connector=ConnectorKind.ENGINE)  # per broker
    Broker.objects.create(cluster=cluster, broker_id=1, host="e1:9092")
    return cluster


@pytest.fixture
def tenant() -> Tenant:
    t = make_tenant("payments", users=["svc-pay-*"])
    return t


def test_a_per_broker_engine_clusters_desired_state_holds_its_groups(staging: Cluster, tenant: Tenant) -> None:
    group = create_group(None, staging, tenant, "payments", GroupKind.TENANT)
    set_group_values(None, group, {PBR: (4e6, BudgetScope.CLUSTER_WIDE)})
    set_exempt(None, staging, "replicator", True)
    state = desired_state(staging, staging.brokers.get())
    assert Item(GROUP, "payments", "spec") in state
    assert state[Item(BUDGET_SCOPE, entity_field("payments"), PBR)] == "cluster_wide"
    assert Item(EXEMPT, "replicator", "exempt") in state


def test_an_engine_cluster_with_groups_does_not_become_one_namespace(staging: Cluster, tenant: Tenant) -> None:
    create_group(None, staging, tenant, "payments", GroupKind.TENANT)
    admin = api(make_user("root", staff=True))
    response = admin.patch("/api/clusters/staging/", {"scope": "cluster_wide"}, format="json")
    assert response.status_code == 400
    assert "1 group(s) or exempt principal(s)" in response.json()["message"]
    assert Cluster.objects.get(pk=staging.pk).scope == "per_broker"
