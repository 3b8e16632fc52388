"""Group quotas and exempt principals in the database (issue 32): made and refused by their rules, each change one
desired-state version of ``group``/``budget-scope``/``exempt`` items, audited; a tenant group follows its tenant's
patterns; a group's request goes through four-eyes approval into its values. The scope hash they are pushed to is
tests/push/test_group_push.py; enforcement on real Kafka tests/kafka/test_group_quotas.py.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from engine.groups import GroupSpec, entity_field, first_group, in_order
from quotas.choices import BudgetScope, ConnectorKind, QuotaScope
from quotas.connectors.base import BUDGET_SCOPE, EXEMPT, GROUP, Item
from quotas.models import (
    AuditAction,
    AuditEntry,
    Cluster,
    DesiredChange,
    DesiredStateVersion,
    GroupKind,
    GroupOverlap,
    InvalidGroup,
    OwnedName,
    QuotaRequest,
    RequestState,
    Tenant,
    create_group,
    delete_group,
    set_exempt,
    set_group_values,
)
from quotas.models.desired import desired_state
from quotas.workflow.boosts import expire_boosts
from quotas.workflow.errors import InvalidRequest, PermissionDenied
from quotas.workflow.quota_requests import approve, submit
from tests.people import make_tenant, make_user

pytestmark = pytest.mark.django_db
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"


@pytest.fixture
def kafka() -> Cluster:
    return Cluster.objects.create(name="kgroups", connector=ConnectorKind.KAFKA)


@pytest.fixture
def tenant() -> Tenant:
    t = make_tenant("payments", users=["svc-pay-*", "batch-pay"])
    return t


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def logged(cluster: Cluster, at: int) -> dict[Item, str | None]:
    return {c.item: c.value for c in DesiredChange.objects.filter(cluster=cluster, version=at)}


def spec_of(cluster: Cluster, name: str) -> GroupSpec:
    return GroupSpec.from_json(desired_state(cluster, None)[Item(GROUP, name, "spec")])


def test_a_tenant_group_holds_the_tenants_principals_and_follows_its_patterns(kafka: Cluster, tenant: Tenant) -> None:
    group = create_group(None, kafka, tenant, "payments", GroupKind.TENANT)
    set_group_values(None, group, {PBR: (3 * 2**20, BudgetScope.CLUSTER_WIDE)})
    spec = spec_of(kafka, "payments")
    assert spec.matches("svc-pay-1", "any") and spec.matches("batch-pay", "")
    assert not spec.matches("svc-orders", "x") and not spec.matches("batch-pay-2", "")
    state = desired_state(kafka, None)
    assert state[Item(BUDGET_SCOPE, entity_field("payments"), PBR)] == "cluster_wide"
    before = version(kafka)
    OwnedName.objects.create(tenant=tenant, entity_type="user", pattern="svc-ledger")
    assert version(kafka) == before + 1, "a new pattern of the tenant is a new version of its group"
    assert spec_of(kafka, "payments").matches("svc-ledger", "c")
    assert set(logged(kafka, before + 1)) == {Item(GROUP, "payments", "spec")}


def test_each_value_change_is_one_version_and_audited_as_the_groups(kafka: Cluster, tenant: Tenant) -> None:
    group = create_group(None, kafka, tenant, "pay-apps", GroupKind.PRINCIPALS, principals=["svc-pay-1", "batch-pay"])
    start = version(kafka)
    made = set_group_values(None, group, {PBR: (1e6, None), CBR: (2e6, BudgetScope.CLUSTER_WIDE)})
    assert made == start + 1
    changes = logged(kafka, made)
    assert json.loads(changes[Item(GROUP, "pay-apps", "spec")])["quotas"] == {CBR: 2e6, PBR: 1e6}
    assert changes[Item(BUDGET_SCOPE, entity_field("pay-apps"), CBR)] == "cluster_wide"
    assert set_group_values(None, group, {PBR: (1e6, None)}) is None, "the same value again changes nothing"
    removed = set_group_values(None, group, {CBR: (None, None)})
    assert logged(kafka, removed)[Item(BUDGET_SCOPE, entity_field("pay-apps"), CBR)] is None
    entries = AuditEntry.objects.filter(entity="/groups/pay-apps", action=AuditAction.QUOTA_ALTERED).order_by("pk")
    assert [(e.key, e.before, e.after) for e in entries] == [(PBR, None, 1e6), (CBR, None, 2e6), (CBR, 2e6, None)]
    delete_group(None, group)
    assert Item(GROUP, "pay-apps", "spec") not in desired_state(kafka, None)


def test_groups_are_refused_where_they_cannot_be_enforced_or_would_be_ambiguous(kafka: Cluster, tenant: Tenant) -> None:
    shared = Cluster.objects.create(name="eng", connector=ConnectorKind.ENGINE, scope=QuotaScope.CLUSTER_WIDE)
    with pytest.raises(InvalidGroup, match="engine cluster with one cluster-wide namespace"):
        create_group(None, shared, tenant, "g", GroupKind.TENANT)
    with pytest.raises(InvalidGroup, match="cannot have exempt principals"):
        set_exempt(None, shared, "replicator", True)
    with pytest.raises(InvalidGroup, match="does not own principal 'svc-orders'"):
        create_group(None, kafka, tenant, "g", GroupKind.PRINCIPALS, principals=["svc-orders"])
    with pytest.raises(InvalidGroup, match="1 to 64 letters"):
        create_group(None, kafka, tenant, "bad name", GroupKind.TENANT)
    create_group(None, kafka, tenant, "first", GroupKind.PRINCIPALS, principals=["svc-pay-1"])
    with pytest.raises(GroupOverlap, match="svc-pay-1 is in group first"):
        create_group(None, kafka, tenant, "second", GroupKind.PRINCIPALS, principals=["batch-pay", "svc-pay-1"])
    create_group(None, kafka, tenant, "apps", GroupKind.CLIENT_PREFIX, client_id_prefix="pay-")
    with pytest.raises(GroupOverlap, match="same prefix 'pay-'"):
        create_group(None, kafka, tenant, "apps2", GroupKind.CLIENT_PREFIX, client_id_prefix="pay-")
    create_group(None, kafka, tenant, "apps3", GroupKind.CLIENT_PREFIX, client_id_prefix="pay-",
                 prefix_principal="batch-pay")
    assert version(kafka) == 3, "a refused group writes nothing"


def test_the_order_between_groups_a_client_matches(kafka: Cluster, tenant: Tenant) -> None:
    for name, kind, extra in [
        ("tenant-wide", GroupKind.TENANT, {}),
        ("prefix", GroupKind.CLIENT_PREFIX, {"client_id_prefix": "pay-"}),
        ("longer-prefix", GroupKind.CLIENT_PREFIX, {"client_id_prefix": "pay-batch-"}),
        ("under-batch", GroupKind.CLIENT_PREFIX, {"client_id_prefix": "pay-", "prefix_principal": "batch-pay"}),
    ]:
        g = create_group(None, kafka, tenant, name, kind, **extra)
        set_group_values(None, g, {PBR: (1e6, None)})
    groups = in_order(GroupSpec.from_json(v) for i, v in desired_state(kafka, None).items() if i.kind == GROUP)
    assert [g.name for g in groups] == ["under-batch", "tenant-wide", "longer-prefix", "prefix"]
    assert first_group(groups, PBR, "batch-pay", "pay-batch-1").name == "under-batch"
    assert first_group(groups, PBR, "svc-pay-2", "pay-batch-1").name == "tenant-wide"
    assert first_group(groups, PBR, "svc-orders", "pay-batch-1").name == "longer-prefix"
    assert first_group(groups, PBR, "svc-orders", "pay-x").name == "prefix"
    assert first_group(groups, CBR, "svc-pay-2", "pay-x") is None, "a group without the key is passed over"


def test_exempt_principals_are_items_of_their_own_and_audited(kafka: Cluster) -> None:
    admin = make_user("root", staff=True)
    assert set_exempt(admin, kafka, "replicator", True, "MirrorMaker 2")
    assert not set_exempt(admin, kafka, "replicator", True), "already exempt: nothing written"
    assert desired_state(kafka, None)[Item(EXEMPT, "replicator", "exempt")] == "exempt"
    assert set_exempt(admin, kafka, "replicator", False)
    assert Item(EXEMPT, "replicator", "exempt") not in desired_state(kafka, None)
    entries = AuditEntry.objects.filter(action=AuditAction.EXEMPT_CHANGED).order_by("pk")
    assert [(e.before, e.after, e.actor_name) for e in entries] == [(False, True, "root"), (True, False, "root")]


def test_a_group_request_goes_through_four_eyes_into_the_groups_values(kafka: Cluster, tenant: Tenant) -> None:
    member, admin = make_user("mia"), make_user("root", staff=True)
    tenant.members.add(member)
    group = create_group(admin, kafka, tenant, "payments", GroupKind.TENANT)
    request = submit(member, None, kafka, user=None, client_id=None, key=PBR, value="2 MiB/s",
                     budget_scope=BudgetScope.CLUSTER_WIDE, group=group)
    assert request.entity == "/groups/payments" and request.value == 2 * 2**20
    with pytest.raises(PermissionDenied):
        approve(member, request.pk)
    approve(admin, request.pk)
    request.refresh_from_db()
    assert request.state == RequestState.APPLYING
    assert spec_of(kafka, "payments").quotas == {PBR: 2 * 2**20}
    assert AuditEntry.objects.filter(request=request, action=AuditAction.QUOTA_ALTERED, after=2 * 2**20).exists()
    with pytest.raises(InvalidRequest, match="must end in the future"):
        submit(member, None, kafka, user=None, client_id=None, key=PBR, value=1, group=group,
               expires_at=timezone.now() - timedelta(hours=1))
    with pytest.raises(InvalidRequest, match="holds producer_byte_rate"):
        submit(member, None, kafka, user=None, client_id=None, key="connection_creation_rate", value=5, group=group)
    with pytest.raises(InvalidRequest, match="per_broker as its only budget_scope: Kafka's controller enforces it"):
        submit(member, None, kafka, user=None, client_id=None, key="controller_mutation_rate", value=5, group=group,
               budget_scope=BudgetScope.CLUSTER_WIDE)
    outsider = Tenant.objects.create(name="other")
    stranger = make_user("sam")
    outsider.members.add(stranger)
    with pytest.raises(PermissionDenied):
        submit(stranger, None, kafka, user=None, client_id=None, key=PBR, value=1, group=group)


def test_a_group_boost_gives_the_groups_value_back_when_it_ends(kafka: Cluster, tenant: Tenant) -> None:
    member, admin = make_user("mia"), make_user("root", staff=True)
    tenant.members.add(member)
    group = create_group(admin, kafka, tenant, "payments", GroupKind.TENANT)
    set_group_values(admin, group, {PBR: (1e6, BudgetScope.CLUSTER_WIDE)})
    other = create_group(admin, kafka, tenant, "batch", GroupKind.CLIENT_PREFIX, client_id_prefix="batch-")
    set_group_values(admin, other, {PBR: (5e5, None)})
    ends = timezone.now() + timedelta(hours=1)
    boost = submit(member, None, kafka, user=None, client_id=None, key=PBR, value="4 MiB/s", group=group,
                   expires_at=ends)
    approve(admin, boost.pk)
    QuotaRequest.objects.filter(pk=boost.pk).update(state=RequestState.APPLIED)  # every broker took it
    assert spec_of(kafka, "payments").quotas == {PBR: 4 * 2**20}

    assert expire_boosts(ends + timedelta(seconds=1)) == [boost.pk]

    assert spec_of(kafka, "payments").quotas == {PBR: 1e6}, "the value from before the boost is back"
    assert group.values.get(key=PBR).budget_scope == BudgetScope.CLUSTER_WIDE, "and its scope"
    assert spec_of(kafka, "batch").quotas == {PBR: 5e5}, "another group's value is not another group's boost"
