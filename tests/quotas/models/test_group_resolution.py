"""Groups and exempt principals in the quota the portal explains (issue 32): the effective quota's walk (resolver,
API, entity page) and the capacity check of a request and a plan follow the precedence of
docs/capabilities/group-quotas.md: exempt, then the levels naming the client, then the first group, then defaults.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotas.choices import BudgetScope, ConnectorKind
from quotas.models import (
    Alteration,
    Broker,
    Cluster,
    GroupKind,
    OwnedName,
    QuotaEntity,
    QuotaOp,
    Tenant,
    alter_client_quotas,
    create_group,
    effective_client_quotas,
    set_exempt,
    set_group_values,
)
from quotas.models.capacity import capacity_between, capacity_check
from quotas.workflow.quota_requests import approve, submit
from tests.people import api, make_tenant, make_user

pytestmark = pytest.mark.django_db
PBR, CBR, RP, CMR = "producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"
D = "<default>"
NAMING = [(1, "/config/users/svc-pay-1/clients/app"), (2, "/config/users/svc-pay-1/clients/<default>"),
          (3, "/config/users/svc-pay-1"), (4, "/config/users/<default>/clients/app"), (7, "/config/clients/app")]


@pytest.fixture
def kafka() -> Cluster:
    cluster = Cluster.objects.create(name="kres", connector=ConnectorKind.KAFKA)
    for i in range(3):
        Broker.objects.create(cluster=cluster, broker_id=i, host=f"b{i}:9092")
    return cluster


@pytest.fixture
def tenant() -> Tenant:
    t = make_tenant("payments", users=["svc-pay-*"])
    return t


def walk(cluster: Cluster, user: str, client_id: str) -> dict[str, object]:
    return {q.key: q for q in effective_client_quotas(cluster, user, client_id)}


def test_a_group_beats_the_defaults_and_loses_to_a_level_naming_the_client(kafka: Cluster, tenant: Tenant) -> None:
    alter_client_quotas(kafka, [
        Alteration([("user", None)], [QuotaOp(PBR, 500)]),  # level 6
        Alteration([("client-id", None)], [QuotaOp(CBR, 200)]),  # level 8
        Alteration([("user", "svc-pay-1")], [QuotaOp(RP, 50)]),  # level 3: names the member
    ])
    group = create_group(None, kafka, tenant, "payments", GroupKind.TENANT)
    set_group_values(None, group, {PBR: (3000.0, BudgetScope.CLUSTER_WIDE), CBR: (1000.0, None)})

    found = walk(kafka, "svc-pay-1", "app")
    pbr = found[PBR]
    assert (pbr.value, pbr.level, pbr.entity, pbr.tags, pbr.budget_scope, pbr.group, pbr.exempt) == (
        3000.0, None, "/groups/payments", "group@payments:", "cluster_wide", "payments", False)
    assert pbr.skipped == NAMING
    assert pbr.beaten == [(6, "/config/users/<default>")]
    cbr = found[CBR]
    assert (cbr.value, cbr.group, cbr.budget_scope) == (1000.0, "payments", "per_broker")
    assert cbr.beaten == [(8, "/config/clients/<default>")]
    assert (found[RP].value, found[RP].level, found[RP].group) == (50.0, 3, None), "a naming level wins"
    assert (found[CMR].value, found[CMR].group) == (None, None), "a group holds no controller mutation rate"

    # a value naming the member, at any naming level, beats the group
    alter_client_quotas(kafka, [Alteration([("user", None), ("client-id", "app")], [QuotaOp(PBR, 7)])])  # level 4
    assert (walk(kafka, "svc-pay-1", "app")[PBR].level, walk(kafka, "svc-pay-1", "app")[PBR].group) == (4, None)
    # not a member: Kafka's defaults
    other = walk(kafka, "svc-orders", "x")
    assert (other[PBR].value, other[PBR].level, other[PBR].group) == (500.0, 6, None)


def test_the_first_group_in_order_with_a_value_of_the_key_applies(kafka: Cluster, tenant: Tenant) -> None:
    under = create_group(None, kafka, tenant, "pay-fast", GroupKind.CLIENT_PREFIX, client_id_prefix="fast-",
                         prefix_principal="svc-pay-1")
    anyone = create_group(None, kafka, tenant, "fast", GroupKind.CLIENT_PREFIX, client_id_prefix="fast-")
    longer = create_group(None, kafka, tenant, "faster", GroupKind.CLIENT_PREFIX, client_id_prefix="fast-er")
    whole = create_group(None, kafka, tenant, "payments", GroupKind.TENANT)
    set_group_values(None, under, {PBR: (9.0, None)})
    set_group_values(None, anyone, {PBR: (5.0, None), CBR: (7.0, None)})
    set_group_values(None, longer, {CBR: (8.0, None)})
    set_group_values(None, whole, {CBR: (1000.0, None)})

    member = walk(kafka, "svc-pay-1", "fast-x")
    assert (member[PBR].group, member[CBR].group) == ("pay-fast", "payments"), "prefix under the principal, then tenant"
    assert walk(kafka, "svc-pay-2", "fast-x")[PBR].group == "fast", "another member: the prefix of any principal"
    stranger = walk(kafka, "bob", "fast-er-1")
    assert (stranger[PBR].group, stranger[CBR].group) == ("fast", "faster"), "the longer prefix first, per key"


def test_an_exempt_principal_gets_no_quota_for_any_key(kafka: Cluster, tenant: Tenant) -> None:
    alter_client_quotas(kafka, [Alteration([("user", "svc-pay-2")], [QuotaOp(PBR, 10), QuotaOp(CMR, 3)])])
    set_group_values(None, create_group(None, kafka, tenant, "payments", GroupKind.TENANT), {CBR: (1000.0, None)})
    set_exempt(None, kafka, "svc-pay-2", True, "replicator")
    for q in effective_client_quotas(kafka, "svc-pay-2", "app"):
        assert (q.value, q.level, q.entity, q.group, q.exempt, q.skipped) == (None, None, None, None, True, []), q.key
    assert not walk(kafka, "svc-pay-3", "app")[CBR].exempt


def test_the_api_and_the_entity_page_explain_groups_and_exemptions(kafka: Cluster, tenant: Tenant) -> None:
    alter_client_quotas(kafka, [Alteration([("user", "svc-pay-1")], [QuotaOp(RP, 50)]),
                                Alteration([("user", None)], [QuotaOp(PBR, 500)])])
    set_group_values(None, create_group(None, kafka, tenant, "payments", GroupKind.TENANT), {PBR: (3000.0, None)})
    admin = make_user("root", staff=True)
    body = api(admin).get(f"/api/clusters/{kafka.name}/effective-quota",
                          {"user": "svc-pay-1", "client_id": "app"}).json()
    pbr = body["quotas"][PBR]
    assert (pbr["group"], pbr["entity"], pbr["level"], pbr["exempt"], pbr["tags"]) == (
        "payments", "/groups/payments", None, False, "group@payments:")
    assert [s["level"] for s in pbr["skipped"]] == [1, 2, 3, 4, 7]
    assert pbr["beaten"] == [{"level": 6, "entity": "/config/users/<default>"}]
    assert body["quotas"][RP]["group"] is None and body["quotas"][RP]["beaten"] == []

    browser = Client()
    browser.force_login(admin)
    entity = QuotaEntity.objects.get(cluster=kafka, user="svc-pay-1", client_id=None)
    page = browser.get(f"/entities/{entity.pk}/").content.decode()
    assert 'data-group="payments"' in page and "group payments</span>, over 6:" in page

    set_exempt(None, kafka, "svc-pay-1", True)
    assert api(admin).get(f"/api/clusters/{kafka.name}/effective-quota",
                          {"user": "svc-pay-1", "client_id": "app"}).json()["quotas"][PBR]["exempt"] is True
    page = browser.get(f"/entities/{entity.pk}/").content.decode()
    assert page.count("unlimited (exempt principal)") == 4


def test_the_resolver_reads_the_groups_in_a_fixed_number_of_queries(kafka: Cluster, tenant: Tenant) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            walk(kafka, "svc-pay-1", "app")
        return len(ctx.captured_queries)

    set_group_values(None, create_group(None, kafka, tenant, "payments", GroupKind.TENANT), {PBR: (1.0, None)})
    one = queries()
    for i in range(6):
        other = Tenant.objects.create(name=f"t{i}")
        OwnedName.objects.create(tenant=other, entity_type="user", pattern=f"svc-{i}-*")
        set_group_values(None, create_group(None, kafka, other, f"g{i}", GroupKind.TENANT), {CBR: (1.0, None)})
        set_group_values(None, create_group(None, kafka, other, f"p{i}", GroupKind.CLIENT_PREFIX,
                                            client_id_prefix=f"p{i}-"), {CBR: (1.0, None)})
    assert queries() == one


def test_a_group_counts_once_in_the_capacity_check_not_once_per_member(kafka: Cluster, tenant: Tenant) -> None:
    kafka.capacity_in_bytes_per_s = 10**6
    kafka.save()
    alter_client_quotas(kafka, [
        Alteration([("user", None)], [QuotaOp(PBR, 100)]),
        Alteration([("user", "svc-pay-1")], [QuotaOp(CBR, 1)]),  # members the quotas name, behind the group
        Alteration([("user", "svc-pay-2")], [QuotaOp(CBR, 1)]),
        Alteration([("user", "svc-pay-4")], [QuotaOp(PBR, 50)]),  # a member with its own value: its own sensor
        Alteration([("user", "svc-pay-5")], [QuotaOp(PBR, 70)]),  # exempt: nothing
        Alteration([("user", "svc-orders")], [QuotaOp(CBR, 1)]),  # not a member: the <default> user
    ])
    set_exempt(None, kafka, "svc-pay-5", True)
    group = create_group(None, kafka, tenant, "payments", GroupKind.TENANT)
    member, admin = make_user("mia"), make_user("root", staff=True)
    tenant.members.add(member)
    request = submit(member, None, kafka, user=None, client_id=None, key=PBR, value=1000, group=group)
    check = capacity_check(request)
    # without: svc-pay-1, svc-pay-2 and svc-orders on the <default> user (3 x 100), svc-pay-4 50, x 3 brokers
    assert check.granted_without == (3 * 100 + 50) * 3
    # with: the group once (1000) for its two members, svc-orders on the default, svc-pay-4 its own, x 3 brokers
    assert check.granted_with == (1000 + 100 + 50) * 3
    assert check.groups == ("/groups/payments",) and check.budgets == ()
    assert "1 group once each" in check.counted and "/groups/payments" in check.counted
    shares = {d.entity: (d.applies_to, d.applies_to_without) for d in check.defaults}
    assert shares == {"/config/users/<default>": (1, 3)}, "the group takes its members off the <default> user"

    wide = submit(member, None, kafka, user=None, client_id=None, key=PBR, value=2000, group=group,
                  budget_scope=BudgetScope.CLUSTER_WIDE)
    check = capacity_check(wide)
    assert check.granted_with == (100 + 50) * 3 + 2000, "a cluster-wide group budget counts once"
    assert check.budgets == ("/groups/payments",) and check.budget_with == 2000

    approve(admin, request.pk)
    request.refresh_from_db()
    request.state = "applied"  # the push is not under test: the check of an applied request puts back what it replaced
    request.save()
    check = capacity_check(request)
    assert (check.granted_without, check.granted_with) == ((3 * 100 + 50) * 3, (1000 + 100 + 50) * 3)
    # another request's check now counts the group as it is
    other = submit(member, None, kafka, user="svc-pay-1", client_id=None, key=PBR, value=10)
    check = capacity_check(other)
    assert check.granted_without == (1000 + 100 + 50) * 3
    assert check.granted_with == (1000 + 10 + 100 + 50) * 3, "svc-pay-1 named: its own sensor, the group stays one"

    body = api(admin).get(f"/api/requests/{request.pk}/").json()
    assert body["capacity"]["groups"] == ["/groups/payments"]
    browser = Client()
    browser.force_login(admin)
    page = browser.get(f"/requests/{wide.pk}/").content.decode()
    assert 'data-figure="groups"' in page and "/groups/payments" in page


def test_a_plans_check_counts_the_clusters_groups_as_they_are(kafka: Cluster, tenant: Tenant) -> None:
    set_group_values(None, create_group(None, kafka, tenant, "payments", GroupKind.TENANT), {PBR: (1000.0, None)})
    set_group_values(None, create_group(None, kafka, tenant, "fast", GroupKind.CLIENT_PREFIX, client_id_prefix="f-"),
                     {PBR: (400.0, BudgetScope.CLUSTER_WIDE)})
    without = {("svc-pay-1", None): 10.0}
    with_ = {**without, ("svc-orders", None): 20.0}
    check = capacity_between(kafka, PBR, without, with_)
    assert (check.granted_without, check.granted_with) == ((1000 + 10) * 3 + 400, (1000 + 10 + 20) * 3 + 400)
    assert check.groups == ("/groups/payments", "/groups/fast") and check.budgets == ("/groups/fast",)


def test_which_groups_a_quota_on_kafka_shadows() -> None:
    """A level that names the client takes it out of its groups: a principal's quota shadows the groups it is a
    member of (a prefix group under it too), a client-id's shadows the prefix groups of any principal it starts,
    a <default> part or another key shadows nothing."""
    from engine.groups import GroupSpec
    from quotas.models.group_lookup import ClusterGroups

    pbr = "producer_byte_rate"
    groups = ClusterGroups((
        GroupSpec("pay", 1, users=("alice",), quotas={pbr: 1e6}),
        GroupSpec("apps", 2, any_user=True, prefix="app-", quotas={pbr: 2e6}),
        GroupSpec("alice-jobs", 3, users=("alice",), prefix="job-", quotas={pbr: 3e6}),
        GroupSpec("fetchers", 4, users=("bob",), quotas={"consumer_byte_rate": 1e6}),
    ))
    assert groups.shadowed(pbr, "alice", None) == ["pay", "apps", "alice-jobs"]
    assert groups.shadowed(pbr, "alice", "job-7") == ["pay", "alice-jobs"]
    assert groups.shadowed(pbr, None, "app-1") == ["apps"]
    assert groups.shadowed(pbr, "bob", None) == ["apps"]
    assert groups.shadowed(pbr, "bob", "web") == []
    assert groups.shadowed("consumer_byte_rate", "bob", None) == ["fetchers"]
    assert groups.shadowed(pbr, "<default>", None) == [] and groups.shadowed(pbr, "alice", "<default>") == []
