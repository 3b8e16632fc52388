"""Budget scopes in quotas as code (issue 28): the export writes them, a plan shows a change of scope as a change
(with the capacity check counting budgets once), applying writes it in one audited version with its ``budget-scope``
item, a tenant member's grouped request carries it, and an engine cluster's file is refused naming the line."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import yaml

from history.models import ImpactPreview
from quotas.choices import ConnectorKind
from quotas.connectors.base import BUDGET_SCOPE
from quotas.models import (
    Alteration,
    AuditEntry,
    Cluster,
    DesiredChange,
    DesiredStateVersion,
    QuotaOp,
    QuotaValue,
    alter_client_quotas,
)
from quotas.workflow import errors, plan_requests
from tests.brokers import cluster_with_brokers
from tests.people import api, make_tenant, roles

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"
MiB = 1 << 20
HEAD = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: kprod\n"


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], users=["svc-a-*"])
    kprod = cluster_with_brokers(
        (1, 2, 3), name="kprod", connector=ConnectorKind.KAFKA, capacity_in_bytes_per_s=64 * MiB
    )
    alter_client_quotas(kprod, [
        Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 10 * MiB, scope="cluster_wide")]),
        Alteration([("user", "svc-a-2")], [QuotaOp(PBR, MiB)]),
    ])
    w.update(a=a, kprod=kprod)
    return w


def export(client: Any, cluster: str = "kprod") -> str:
    response = client.get(f"/api/clusters/{cluster}/state.yaml")
    assert response.status_code == 200, response.content
    return response.content.decode()


def plan(client: Any, document: str, status: int = 201, cluster: str = "kprod") -> dict[str, Any]:
    response = client.post(f"/api/clusters/{cluster}/plans/", {"document": document}, format="json")
    assert response.status_code == status, response.content
    return response.json()


def test_export_writes_the_scope_and_planning_it_unchanged_changes_nothing(w: dict[str, Any]) -> None:
    text = export(api(w["admin"]))
    doc = yaml.safe_load(text)
    assert doc["quotas"] == [
        {"entity": {"user": "svc-a-1"}, PBR: {"value": "10 MiB/s", "budgetScope": "cluster_wide"}},
        {"entity": {"user": "svc-a-2"}, PBR: "1 MiB/s"},
    ]
    assert plan(api(w["admin"]), text)["changes"] == []
    assert plan(api(w["alice"]), export(api(w["alice"])))["changes"] == []  # a member's export carries it too


def test_a_plan_shows_a_change_of_scope_and_applying_it_is_one_audited_version(w: dict[str, Any]) -> None:
    text = export(api(w["admin"]))
    text = text.replace("{value: 10 MiB/s, budgetScope: cluster_wide}", "10 MiB/s")  # back to per broker
    wide = "producer_byte_rate: {value: 1 MiB/s, budgetScope: cluster_wide}"
    text = text.replace("producer_byte_rate: 1 MiB/s", wide)
    body = plan(api(w["admin"]), text)

    changes = [(c["path"], c["action"], c["old"], c["new"], c["old_scope"], c["new_scope"]) for c in body["changes"]]
    assert changes == [
        ("/config/users/svc-a-1", "change", 10 * MiB, 10 * MiB, "cluster_wide", "per_broker"),
        ("/config/users/svc-a-2", "change", MiB, MiB, "per_broker", "cluster_wide"),
    ]
    assert body["summary"] == {"add": 0, "change": 2, "remove": 0}
    capacity = body["changes"][0]["capacity"]
    # without: 10 MiB/s once + 1 MiB/s x 3; with: 10 MiB/s x 3 + 1 MiB/s once
    assert (capacity["granted_without"], capacity["granted_with"]) == (13 * MiB, 31 * MiB)
    assert capacity["budgets"] == ["/config/users/svc-a-2"] and "cluster-wide budgets once" in capacity["counted"]
    previews = [ImpactPreview.objects.get(pk=c["impact"]["preview"]).scope for c in body["changes"]]
    assert previews == ["per_broker", "cluster_wide"]  # each replayed as what it becomes

    version = DesiredStateVersion.objects.get(cluster=w["kprod"]).version
    applied = api(w["admin"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json").json()
    assert applied["version"] == version + 1 and applied["changed"] is True
    scopes = dict(QuotaValue.objects.filter(entity__cluster=w["kprod"]).values_list("entity__user", "budget_scope"))
    assert scopes == {"svc-a-1": "per_broker", "svc-a-2": "cluster_wide"}
    logged = {(c.kind, c.resource, c.value) for c in DesiredChange.objects.filter(cluster=w["kprod"],
                                                                                 version=version + 1)}
    assert logged == {(BUDGET_SCOPE, '{"user":"svc-a-1"}', None), (BUDGET_SCOPE, '{"user":"svc-a-2"}', "cluster_wide")}
    audit = AuditEntry.objects.filter(comment__contains=f"plan #{body['id']}").order_by("entity")
    assert [(a.action, a.entity, a.before, a.after) for a in audit] == [
        ("budget_scope_altered", "/config/users/svc-a-1", "cluster_wide", "per_broker"),
        ("budget_scope_altered", "/config/users/svc-a-2", "per_broker", "cluster_wide"),
    ]
    assert plan(api(w["admin"]), text)["changes"] == []


def test_a_scope_that_moved_since_the_plan_makes_a_grouped_request_stale(w: dict[str, Any]) -> None:
    text = HEAD + (
        "quotas:\n  - entity: {user: svc-a-2}\n    producer_byte_rate: {value: 2 MiB/s, budgetScope: cluster_wide}\n"
    )
    body = plan(api(w["alice"]), text)
    assert [(c["action"], c["old_scope"], c["new_scope"]) for c in body["changes"]] == [
        ("change", "per_broker", "cluster_wide")
    ]
    submitted = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json")
    assert submitted.status_code == 202, submitted.content
    request_id = submitted.json()["request"]
    # meanwhile an admin made the same number a budget: the plan's "before" is no longer what is stored
    alter_client_quotas(w["kprod"], [Alteration([("user", "svc-a-2")], [QuotaOp(PBR, MiB, scope="cluster_wide")])])
    with pytest.raises(errors.PlanStaleError, match="svc-a-2 producer_byte_rate"):
        plan_requests.approve_plan(w["admin"], request_id)


def test_a_one_namespace_clusters_file_cannot_hold_a_budget(w: dict[str, Any]) -> None:
    Cluster.objects.create(name="staging", scope="cluster_wide")
    text = ("apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: staging\nquotas:\n"
            "  - entity: {user: svc-a-1}\n    producer_byte_rate: {value: 1 MiB/s, budgetScope: cluster_wide}\n")
    for who in ("admin", "alice"):
        body = plan(api(w[who]), text, status=400, cluster="staging")
        assert body["code"] == "INVALID_QUOTAS_FILE"
        [error] = body["errors"]
        assert (error["line"], error["key"]) == (6, PBR)
        assert "Cluster 'staging' is cluster_wide: its brokers share one engine namespace" in error["message"]
