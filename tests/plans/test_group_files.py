"""Groups and exempt principals in quotas as code (issue 32): the export writes them, a plan shows each group
created / deleted / member change / value change and exempt added / removed with what it reaches, applying writes
the whole file in one audited desired-state version, and a tenant member's round trip (export -> edit a group budget
-> plan -> apply -> an admin approves) changes the group's budget. The brokers' side is tests/kafka/."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import yaml
from django.test import Client

import quotafile
from quotas.choices import ConnectorKind
from quotas.connectors.base import BUDGET_SCOPE, EXEMPT, GROUP
from quotas.models import (
    Alteration,
    AuditEntry,
    Cluster,
    DesiredChange,
    DesiredStateVersion,
    ExemptPrincipal,
    GroupValue,
    PlanRequest,
    QuotaGroup,
    QuotaOp,
    alter_client_quotas,
    create_group,
    plan_groups,
    set_exempt,
    set_group_values,
)
from quotas.workflow import errors, plan_requests
from tests.brokers import cluster_with_brokers
from tests.people import api, make_tenant, roles

pytestmark = pytest.mark.django_db
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
MiB = 1 << 20
HEAD = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: kpay\n"


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    w: dict[str, Any] = roles()
    pay = make_tenant("payments", w["alice"], users=["svc-pay-*"])
    ops = make_tenant("ops", users=["ops-*"])
    kpay = cluster_with_brokers((1, 2, 3), name="kpay", connector=ConnectorKind.KAFKA, capacity_in_bytes_per_s=64 * MiB)
    group = create_group(w["admin"], kpay, pay, "payments", "tenant")
    set_group_values(w["admin"], group, {PBR: (3 * MiB, "cluster_wide"), CBR: (8 * MiB, None)})
    tools = create_group(w["admin"], kpay, ops, "ops-tools", "principals", principals=["ops-a"])
    set_group_values(w["admin"], tools, {CBR: (MiB, None)})
    set_exempt(w["admin"], kpay, "replicator", True, "MirrorMaker 2")
    alter_client_quotas(kpay, [Alteration([("user", "svc-pay-1")], [QuotaOp(PBR, MiB)])])
    w.update(pay=pay, ops=ops, kpay=kpay, group=group)
    return w


def export(client: Any) -> str:
    response = client.get("/api/clusters/kpay/state.yaml")
    assert response.status_code == 200, response.content
    return response.content.decode()


def plan(client: Any, document: str, status: int = 201, prune: bool = False, cluster: str = "kpay") -> dict[str, Any]:
    response = client.post(f"/api/clusters/{cluster}/plans/", {"document": document, "prune": prune}, format="json")
    assert response.status_code == status, response.content
    return response.json()


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def test_the_export_writes_groups_and_exempt_principals_and_planning_it_unchanged_changes_nothing(
    w: dict[str, Any],
) -> None:
    doc = yaml.safe_load(export(api(w["admin"])))
    assert doc["groups"] == [
        {"name": "ops-tools", "tenant": "ops", "members": {"principals": ["ops-a"]}, CBR: "1 MiB/s"},
        {"name": "payments", "tenant": "payments", "members": {"tenant": True},
         PBR: {"value": "3 MiB/s", "budgetScope": "cluster_wide"}, CBR: "8 MiB/s"},
    ]
    assert doc["exemptPrincipals"] == [{"principal": "replicator", "reason": "MirrorMaker 2"}]
    assert plan(api(w["admin"]), export(api(w["admin"])), prune=True)["changes"] == []
    mine = yaml.safe_load(export(api(w["alice"])))  # a member: its tenant's groups, no exempt principals
    assert [g["name"] for g in mine["groups"]] == ["payments"] and "exemptPrincipals" not in mine
    assert plan(api(w["alice"]), export(api(w["alice"])), prune=True)["changes"] == []


def test_a_members_round_trip_changes_a_group_budget_through_approval(w: dict[str, Any]) -> None:
    text = export(api(w["alice"]))
    edited = text.replace("{value: 3 MiB/s, budgetScope: cluster_wide}", "{value: 5 MiB/s, budgetScope: cluster_wide}")
    assert edited != text
    body = plan(api(w["alice"]), edited)
    [change] = body["changes"]
    assert (change["section"], change["path"], change["key"], change["action"]) == (GROUP, "/groups/payments", PBR,
                                                                                    "change")
    assert (change["old_display"], change["new_display"], change["old_scope"], change["new_scope"]) == (
        "3 MiB/s", "5 MiB/s", "cluster_wide", "cluster_wide")
    assert "every principal tenant payments owns" in change["reach"]
    assert "/config/users/svc-pay-1 producer_byte_rate names its clients, so it wins over group payments" in \
        change["warnings"][0]
    assert change["capacity"]["key"] == PBR
    assert "payments" in str(change["capacity"]["groups"]), "the group's budget is counted, once"

    before = version(w["kpay"])
    submitted = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {"reason": "peak"}, format="json")
    assert submitted.status_code == 202, submitted.content
    assert GroupValue.objects.get(group=w["group"], key=PBR).value == 3 * MiB  # nothing before the approval
    request_id = submitted.json()["request"]
    decided = api(w["admin"]).post(f"/api/plan-requests/{request_id}/approve/", {}, format="json")
    assert decided.status_code == 200, decided.content

    value = GroupValue.objects.get(group=w["group"], key=PBR)
    assert (value.value, value.budget_scope) == (5 * MiB, "cluster_wide")
    assert version(w["kpay"]) == before + 1
    assert PlanRequest.objects.get(pk=request_id).applied_version == before + 1
    [spec] = DesiredChange.objects.filter(cluster=w["kpay"], version=before + 1)
    assert (spec.kind, spec.resource) == (GROUP, "payments") and '"producer_byte_rate":5242880.0' in spec.value
    [audit] = AuditEntry.objects.filter(comment__contains=f"plan #{body['id']}")
    assert (audit.action, audit.entity, audit.key, audit.before, audit.after, audit.tenant) == (
        "quota_altered", "/groups/payments", PBR, 3 * MiB, 5 * MiB, w["pay"])
    assert plan(api(w["alice"]), edited)["changes"] == []


def test_an_admins_plan_creates_changes_and_deletes_groups_and_exempt_principals_in_one_version(
    w: dict[str, Any],
) -> None:
    text = HEAD + """groups:
  - name: payments
    tenant: payments
    members: {principals: [svc-pay-1, svc-pay-2]}
    producer_byte_rate: 3 MiB/s
    consumer_byte_rate: 8 MiB/s
  - name: pay-apps
    tenant: payments
    members: {clientIdPrefix: pay-, principal: svc-pay-9}
    request_percentage: 40
exemptPrincipals:
  - {principal: inter-broker}
"""
    body = plan(api(w["admin"]), text, prune=True)
    changes = {(c["path"], c["key"]): c for c in body["changes"]}
    assert {k: c["action"] for k, c in changes.items()} == {
        ("/groups/ops-tools", "members"): "remove",
        ("/groups/ops-tools", CBR): "remove",
        ("/groups/pay-apps", "members"): "add",
        ("/groups/pay-apps", "request_percentage"): "add",
        ("/groups/payments", "members"): "change",
        ("/groups/payments", PBR): "change",
        ("/users/inter-broker", "exempt"): "add",
        ("/users/replicator", "exempt"): "remove",
    }
    members = changes[("/groups/payments", "members")]
    assert (members["old_display"], members["new_display"]) == ("the principals tenant payments owns",
                                                                "principals svc-pay-1, svc-pay-2")
    assert changes[("/groups/payments", PBR)]["old_scope"] == "cluster_wide"
    assert "fall back to their own quotas" in changes[("/groups/ops-tools", "members")]["reach"]
    assert "No quota applies to the clients of principal inter-broker" in \
        changes[("/users/inter-broker", "exempt")]["reach"]

    page = Client()
    page.force_login(w["admin"])
    shown = page.get(f"/plans/{body['id']}/").content.decode()
    assert "principals svc-pay-1, svc-pay-2" in shown and "exempt (MirrorMaker 2)" in shown
    assert "No quota applies to the clients of principal inter-broker" in shown  # each change's reach

    before = version(w["kpay"])
    applied = api(w["admin"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json")
    assert applied.status_code == 200, applied.content
    assert applied.json()["version"] == before + 1 and version(w["kpay"]) == before + 1

    payments = QuotaGroup.objects.get(cluster=w["kpay"], name="payments")  # made anew as a principals group
    assert (payments.kind, payments.principals) == ("principals", ["svc-pay-1", "svc-pay-2"])
    assert {v.key: (v.value, v.budget_scope) for v in payments.values.all()} == {
        PBR: (3 * MiB, "per_broker"), CBR: (8 * MiB, "per_broker")}
    apps = QuotaGroup.objects.get(cluster=w["kpay"], name="pay-apps")
    assert (apps.kind, apps.client_id_prefix, apps.prefix_principal) == ("client_prefix", "pay-", "svc-pay-9")
    assert not QuotaGroup.objects.filter(name="ops-tools").exists()
    assert list(ExemptPrincipal.objects.filter(cluster=w["kpay"]).values_list("principal", flat=True)) == [
        "inter-broker"]
    logged = {(c.kind, c.resource, c.value is None) for c in DesiredChange.objects.filter(cluster=w["kpay"],
                                                                                          version=before + 1)}
    assert logged == {(GROUP, "payments", False), (GROUP, "pay-apps", False), (GROUP, "ops-tools", True),
                      (BUDGET_SCOPE, '{"group":"payments"}', True), (EXEMPT, "inter-broker", False),
                      (EXEMPT, "replicator", True)}
    actions = sorted(AuditEntry.objects.filter(comment__contains=f"plan #{body['id']}")
                     .values_list("action", "entity"))
    assert actions == sorted([
        ("group_changed", "/groups/ops-tools"), ("group_changed", "/groups/pay-apps"),
        ("group_changed", "/groups/payments"), ("quota_altered", "/groups/pay-apps"),
        ("budget_scope_altered", "/groups/payments"), ("exempt_changed", "/users/inter-broker"),
        ("exempt_changed", "/users/replicator"),
    ])
    assert plan(api(w["admin"]), text, prune=True)["changes"] == []


@pytest.mark.parametrize(
    "section, line, fragment",
    [
        ("groups:\n  - name: g\n    tenant: nobody\n    members: {tenant: true}\n", 5, "No tenant named 'nobody'"),
        ("groups:\n  - name: g\n    tenant: ops\n    members: {principals: [ops-a]}\n", 7,
         "Principal ops-a is in group ops-tools already"),
        ("groups:\n  - name: g\n    tenant: ops\n    members: {principals: [svc-pay-1]}\n", 7,
         "does not own principal 'svc-pay-1'"),
    ],
)
def test_a_group_the_cluster_cannot_take_names_its_line(w: dict[str, Any], section: str, line: int,
                                                        fragment: str) -> None:
    body = plan(api(w["admin"]), HEAD + section, status=400)
    [error] = body["errors"]
    assert error["line"] == line and fragment in error["message"], error


def test_a_plan_may_move_a_principal_between_groups(w: dict[str, Any]) -> None:
    text = export(api(w["admin"])).replace("{principals: [ops-a]}", "{principals: [ops-b]}")
    text = text.replace("groups:\n", "groups:\n- {name: aa-ops, tenant: ops, members: {principals: [ops-a]}}\n")
    body = plan(api(w["admin"]), text)  # aa-ops comes first by name, yet takes ops-a only once ops-tools let it go
    applied = api(w["admin"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json")
    assert applied.status_code == 200, applied.content
    held = dict(QuotaGroup.objects.filter(cluster=w["kpay"], tenant=w["ops"]).values_list("name", "principals"))
    assert held == {"aa-ops": ["ops-a"], "ops-tools": ["ops-b"]}
    clash = text.replace("{principals: [ops-b]}", "{principals: [ops-a]}")
    [error] = plan(api(w["admin"]), clash, status=400)["errors"]
    assert "Principal ops-a is in group" in error["message"]


def test_a_plans_groups_after_are_the_specs_the_brokers_would_get(w: dict[str, Any]) -> None:
    text = export(api(w["admin"])).replace("consumer_byte_rate: 8 MiB/s", "consumer_byte_rate: 9 MiB/s")
    current, desired = quotafile.read(export(api(w["admin"]))), quotafile.read(text)
    held = {g.name: g.spec() for g in QuotaGroup.objects.filter(cluster=w["kpay"])}
    same, scopes = plan_groups.specs_of(w["kpay"], plan_groups.groups_after(w["kpay"], desired, []))
    assert {s.name: s for s in same} == held and scopes[("payments", PBR)] == "cluster_wide"
    changed, _ = plan_groups.specs_of(w["kpay"], plan_groups.groups_after(w["kpay"], desired,
                                                                          quotafile.diff(current, desired)))
    assert {s.name: s.quotas.get(CBR) for s in changed} == {"payments": 9 * MiB, "ops-tools": MiB}


def test_a_one_namespace_engine_clusters_file_cannot_hold_groups(w: dict[str, Any]) -> None:
    Cluster.objects.create(name="eng", scope="cluster_wide")
    assert "groups" not in yaml.safe_load(api(w["admin"]).get("/api/clusters/eng/state.yaml").content)
    text = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: eng\nexemptPrincipals: [replicator]\n"
    [error] = plan(api(w["admin"]), text, status=400, cluster="eng")["errors"]
    assert error["line"] == 4 and "cannot have exempt principals" in error["message"], error
    Cluster.objects.create(name="eng-pb")  # a per-broker engine cluster takes them, as its brokers enforce them
    assert yaml.safe_load(api(w["admin"]).get("/api/clusters/eng-pb/state.yaml").content)["groups"] == []
    body = plan(api(w["admin"]), text.replace("cluster: eng", "cluster: eng-pb"), cluster="eng-pb")
    assert [(c["path"], c["action"]) for c in body["changes"]] == [("/users/replicator", "add")]


def test_a_member_changes_only_its_tenants_groups_and_never_exempt_principals(w: dict[str, Any]) -> None:
    others = HEAD + "groups:\n  - name: ops2\n    tenant: ops\n    members: {principals: [ops-b]}\n"
    refused = plan(api(w["alice"]), others, status=403)
    assert "the group would belong to tenant 'ops'" in refused["message"]
    exempt = export(api(w["alice"])) + "exemptPrincipals: [svc-pay-1]\n"
    assert "exempt principals are for admins" in plan(api(w["alice"]), exempt, status=403)["message"]
    pruned = plan(api(w["alice"]), HEAD + "groups: []\n", prune=True)  # prune reaches its own group only
    assert {(c["path"], c["key"]) for c in pruned["changes"]} == {
        ("/groups/payments", "members"), ("/groups/payments", PBR), ("/groups/payments", CBR)}


def test_a_group_value_that_moved_since_the_plan_makes_a_grouped_request_stale(w: dict[str, Any]) -> None:
    edited = export(api(w["alice"])).replace("consumer_byte_rate: 8 MiB/s", "consumer_byte_rate: 9 MiB/s")
    body = plan(api(w["alice"]), edited)
    submitted = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json")
    assert submitted.status_code == 202, submitted.content
    set_group_values(w["admin"], w["group"], {CBR: (7 * MiB, None)})  # meanwhile, through the group's own form
    with pytest.raises(errors.PlanStaleError, match="/groups/payments consumer_byte_rate"):
        plan_requests.approve_plan(w["admin"], submitted.json()["request"])
