"""No stale approval (issue 29): a request records what its key held when it was submitted, and approving it once
that moved on (another approval, a boost, an admin's change, a value adopted from Kafka) needs a confirmation, or
the request is rejected as superseded in one call; a grouped plan request whose values moved is refused and says
what moved. Through the API, the pages' forms, and the migration's rule for requests made before it.
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.apps import apps
from django.test import Client
from django.utils import timezone

from engine.config import EntityRef
from quotas.models import (
    Alteration,
    Approval,
    AuditEntry,
    DesiredStateVersion,
    Drift,
    PlanRequest,
    QuotaOp,
    QuotaRequest,
    QuotaValue,
    audited_alter,
)
from quotas.push.resolve import adopt
from quotas.tasks import expire_boosts
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers
from tests.people import api, make_tenant, roles

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"
KiB, MiB = 1024, 1 << 20


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    """team-a (alice, alice2: users svc-a-*) on prod (two engine brokers), where svc-a-1 produces at 512 KiB/s."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], w["alice2"], users=["svc-a-*"])
    prod = cluster_with_brokers((1, 2), name="prod")
    audited_alter(prod, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 512 * KiB)])], w["admin"])
    w.update(a=a, prod=prod)
    return w


def ask(who: Any, value: str, user: str = "svc-a-1", **body: Any) -> dict[str, Any]:
    response = api(who).post("/api/requests/", {"cluster": "prod", "user": user, "key": PBR, "value": value, **body},
                             format="json")
    assert response.status_code == 201, response.content
    return response.json()


def value(w: dict[str, Any], user: str = "svc-a-1") -> float | None:
    return QuotaValue.objects.filter(entity__cluster=w["prod"], entity__user=user, key=PBR).values_list(
        "value", flat=True).first()


def version(w: dict[str, Any]) -> int:
    return DesiredStateVersion.objects.get(cluster=w["prod"]).version


def test_approving_a_request_whose_value_moved_on_needs_confirm_stale(w: dict[str, Any]) -> None:
    pending = ask(w["alice"], "1.5 MiB/s", reason="the demo's own pending request")
    assert pending["submitted_against"] == {PBR: {"value": 512 * KiB, "budget_scope": "per_broker"}}
    assert pending["stale"] is None
    newcomer = ask(w["alice2"], "2 MiB/s")
    ok = api(w["admin"]).post(f"/api/requests/{newcomer['id']}/approve/", {}, format="json")
    assert ok.status_code == 200, ok.content

    sentence = f"submitted against 512 KiB/s; now 2 MiB/s since #{newcomer['id']}"
    detail = api(w["admin2"]).get(f"/api/requests/{pending['id']}/").json()
    assert detail["stale"]["message"] == sentence
    assert detail["stale"]["submitted_against"] == {"value": 512 * KiB, "budget_scope": "per_broker"}
    assert detail["stale"]["now"] == {"value": 2 * MiB, "budget_scope": "per_broker"}
    assert detail["stale"]["changed_by"]["request"] == newcomer["id"]
    listed = api(w["alice"]).get("/api/requests/", {"state": "submitted"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [r["stale"]["message"] for r in rows] == [sentence]  # the tenant reads it too

    before, audits = version(w), AuditEntry.objects.count()
    refused = api(w["admin2"]).post(f"/api/requests/{pending['id']}/approve/", {"comment": "ok"}, format="json")
    assert refused.status_code == 409, refused.content
    body = refused.json()
    assert body["code"] == "STALE_REQUEST"
    assert body["message"].startswith(f"Request #{pending['id']} was {sentence}; approving it sets 1.5 MiB/s.")
    assert "confirm_stale" in body["message"] and "superseded" in body["message"]
    assert body["details"]["changed_by"]["label"] == f"#{newcomer['id']}"
    # nothing applied: the value, the version, the state, no decision, no audit entry
    assert (value(w), version(w), AuditEntry.objects.count()) == (2 * MiB, before, audits)
    assert QuotaRequest.objects.get(pk=pending["id"]).state == "submitted"
    assert not Approval.objects.filter(request_id=pending["id"]).exists()

    confirmed = api(w["admin2"]).post(f"/api/requests/{pending['id']}/approve/",
                                      {"comment": "ok", "confirm_stale": True}, format="json")
    assert confirmed.status_code == 200, confirmed.content
    assert confirmed.json()["state"] in ("applying", "applied") and confirmed.json()["stale"] is None
    assert value(w) == 1.5 * MiB
    approved = AuditEntry.objects.get(request_id=pending["id"], action="approved")
    assert approved.comment == f"ok; approved although {sentence}"  # never unnoticed: the audit says what it replaced
    replaced = AuditEntry.objects.get(request_id=pending["id"], action="quota_altered")
    assert (replaced.before, replaced.after) == (2 * MiB, 1.5 * MiB)


def test_a_stale_request_is_rejected_as_superseded_in_one_call(w: dict[str, Any]) -> None:
    pending = ask(w["alice"], "1.5 MiB/s")
    fresh = ask(w["alice"], "1 MiB/s", user="svc-a-2")  # a key nobody changed: not superseded
    not_moved = api(w["admin"]).post(f"/api/requests/{fresh['id']}/reject/", {"superseded": True}, format="json")
    assert not_moved.status_code == 400 and not_moved.json()["code"] == "INVALID_REQUEST", not_moved.content
    assert "is not superseded" in not_moved.json()["message"]
    assert QuotaRequest.objects.get(pk=fresh["id"]).state == "submitted"
    assert fresh["submitted_against"] == {PBR: {"value": None, "budget_scope": None}}  # 'no value' is recorded too

    # an admin's own change (AlterClientQuotas): no request to name, so the audit entry and who made it
    response = api(w["admin"]).post("/api/clusters/prod/client-quotas/alter", {"entries": [
        {"entity": [{"entity_type": "user", "name": "svc-a-1"}], "ops": [{"key": PBR, "value": 3 * MiB}]}
    ]}, format="json")
    assert response.status_code == 200, response.content
    entry = AuditEntry.objects.filter(action="quota_altered", entity="/config/users/svc-a-1").latest("pk")
    expected = f"submitted against 512 KiB/s; now 3 MiB/s since audit entry #{entry.pk} by root"
    assert api(w["admin2"]).get(f"/api/requests/{pending['id']}/").json()["stale"]["message"] == expected

    rejected = api(w["admin2"]).post(f"/api/requests/{pending['id']}/reject/", {"superseded": True}, format="json")
    assert rejected.status_code == 200, rejected.content
    body = rejected.json()
    assert body["state"] == "rejected" and body["approval"]["decision_reason"] == "superseded"
    assert body["approval"]["comment"] == f"Superseded: {expected}."
    assert value(w) == 3 * MiB
    audit = AuditEntry.objects.get(request_id=pending["id"], action="rejected")
    assert audit.comment == f"Superseded: {expected}."


def test_a_boost_a_value_from_no_value_and_an_adopted_change_make_a_request_stale(w: dict[str, Any]) -> None:
    pending = ask(w["alice"], "1.5 MiB/s")
    boost = quota_requests.submit(w["alice2"], None, w["prod"], user="svc-a-1", client_id=None, key=PBR,
                                  value="4 MiB/s", expires_at=timezone.now() + timedelta(hours=1))
    quota_requests.approve(w["admin"], boost.pk)
    stale = api(w["admin2"]).get(f"/api/requests/{pending['id']}/").json()["stale"]
    assert stale["message"] == f"submitted against 512 KiB/s; now 4 MiB/s since #{boost.pk}"
    QuotaRequest.objects.filter(pk=boost.pk).update(state="applied")  # as its push would have settled it
    expire_boosts(now=timezone.now() + timedelta(hours=2))
    assert value(w) == 512 * KiB  # the value it was submitted against is back: values, not histories, are compared
    assert api(w["admin2"]).get(f"/api/requests/{pending['id']}/").json()["stale"] is None

    # a key with no value when it was asked for, which another request then set
    first = ask(w["alice"], "1 MiB/s", user="svc-a-3")
    second = quota_requests.submit(w["alice2"], None, w["prod"], user="svc-a-3", client_id=None, key=PBR, value=700)
    quota_requests.approve(w["admin"], second.pk)
    stale = api(w["admin2"]).get(f"/api/requests/{first['id']}/").json()["stale"]
    assert stale["message"] == f"submitted against no value; now 700 B/s since #{second.pk}"
    assert stale["submitted_against"] == {"value": None, "budget_scope": None}

    # a value found on Kafka and adopted into desired state
    drift = Drift.objects.create(
        cluster=w["prod"], kind="quota", resource=EntityRef("svc-a-1", None, None).field(), key=PBR,
        status="different", desired=repr(float(512 * KiB)), actual=repr(float(MiB)), version=version(w),
        detected_at=timezone.now(),
    )
    adopt(w["prod"], [drift.pk], w["admin"])
    label = api(w["admin2"]).get(f"/api/requests/{pending['id']}/").json()["stale"]["changed_by"]["label"]
    assert label.startswith("audit entry #") and label.endswith("by root (adopted from what the cluster holds)")


def test_a_grouped_plan_request_whose_values_moved_says_what_and_is_rejected_as_superseded(w: dict[str, Any]) -> None:
    document = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: prod\nquotas:\n" \
               "  - entity: {user: svc-a-1}\n    producer_byte_rate: 1 MiB/s\n"
    made = api(w["alice"]).post("/api/clusters/prod/plans/", {"document": document}, format="json")
    assert made.status_code == 201, made.content
    request_id = api(w["alice"]).post(f"/api/plans/{made.json()['id']}/apply/", {}, format="json").json()["request"]
    assert api(w["admin"]).get(f"/api/plan-requests/{request_id}/").json()["stale"] is None
    newcomer = ask(w["alice2"], "2 MiB/s")
    quota_requests.approve(w["admin"], newcomer["id"])

    sentence = f"submitted against 512 KiB/s; now 2 MiB/s since #{newcomer['id']}"
    detail = api(w["admin2"]).get(f"/api/plan-requests/{request_id}/").json()
    assert [(m["entity"], m["key"], m["message"]) for m in detail["stale"]] == [("/config/users/svc-a-1", PBR,
                                                                                  sentence)]
    refused = api(w["admin2"]).post(f"/api/plan-requests/{request_id}/approve/", {}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "PLAN_STALE", refused.content
    assert sentence in refused.json()["message"]
    assert [m["message"] for m in refused.json()["details"]["moved"]] == [sentence]
    assert value(w) == 2 * MiB

    admin = Client()
    admin.force_login(w["admin2"])
    queue = admin.get("/approvals/").content.decode()
    assert "<code>/config/users/svc-a-1</code> <code>producer_byte_rate</code>: submitted against 512 KiB/s; now " \
        f'2 MiB/s since <a href="/requests/{newcomer["id"]}/">#{newcomer["id"]}</a>.' in queue
    assert f"Reject plan request #{request_id} as superseded" in queue
    assert f"Approve plan request #{request_id}" not in queue  # a plan whose values moved is planned again

    # the page's one-click button (the API takes {"superseded": true} the same way)
    clicked = admin.post(f"/plan-requests/{request_id}/reject/",
                         {"superseded": "1", "comment": "plan it again", "next": "/approvals/"})
    assert clicked.status_code == 302 and clicked["Location"] == "/approvals/", clicked.content.decode()[:2000]
    rejected = api(w["alice"]).get(f"/api/plan-requests/{request_id}/")
    assert (rejected.json()["state"], rejected.json()["decision_reason"]) == ("rejected", "superseded")
    assert rejected.json()["decision_comment"] == f"Superseded: {sentence}. plan it again"
    assert rejected.json()["stale"] is None  # decided: nothing left to approve
    assert PlanRequest.objects.get(pk=request_id).decision_reason == "superseded"
    page = admin.get(f"/plans/{made.json()['id']}/").content.decode()
    assert f"Grouped request #{request_id}: Rejected by ops as superseded (Superseded: {sentence}. plan it again)" \
        in page


def test_the_pages_say_it_and_ask_for_the_confirmation(w: dict[str, Any]) -> None:
    pending = ask(w["alice"], "1.5 MiB/s")
    newcomer = ask(w["alice2"], "2 MiB/s")
    quota_requests.approve(w["admin"], newcomer["id"])
    admin = Client()
    admin.force_login(w["admin2"])
    queue = admin.get("/approvals/").content.decode()
    assert f"<strong>The value changed since #{pending['id']} was submitted:</strong> submitted against 512 KiB/s; " \
           f'now 2 MiB/s since <a href="/requests/{newcomer["id"]}/">#{newcomer["id"]}</a>.' in queue
    assert 'name="confirm_stale"' in queue and f"Reject #{pending['id']} as superseded" in queue

    refused = admin.post(f"/requests/{pending['id']}/approve/", {"comment": "fine"})
    assert refused.status_code == 409
    page = refused.content.decode()
    assert "<strong>Not done:</strong> Request #" in page and "submitted against 512 KiB/s; now 2 MiB/s" in page
    assert value(w) == 2 * MiB
    done = admin.post(f"/requests/{pending['id']}/approve/", {"comment": "fine", "confirm_stale": "1"})
    assert done.status_code == 302, done.content.decode()[:2000]
    assert value(w) == 1.5 * MiB
    detail = admin.get(f"/requests/{pending['id']}/").content.decode()
    assert "Submitted against</dt><dd data-submitted-against>512 KiB/s" in detail


def test_requests_waiting_before_the_migration_get_the_value_the_audit_trail_says_they_found(
    w: dict[str, Any]
) -> None:
    untouched = ask(w["alice"], "1.5 MiB/s")
    moved = ask(w["alice"], "1 MiB/s", user="svc-a-2")
    decided = ask(w["alice"], "3 MiB/s")
    quota_requests.reject(w["admin"], decided["id"], "no")
    QuotaRequest.objects.update(submitted_against=None)  # as before migration 0016
    newer = quota_requests.submit(w["alice2"], None, w["prod"], user="svc-a-2", client_id=None, key=PBR, value=2048)
    quota_requests.approve(w["admin"], newer.pk)
    QuotaRequest.objects.filter(pk=newer.pk).update(submitted_against=None)

    migration = importlib.import_module("quotas.migrations.0016_submitted_against")
    migration.record_waiting(apps, None)
    found = dict(QuotaRequest.objects.values_list("pk", "submitted_against"))
    assert found[untouched["id"]] == {PBR: {"value": 512 * KiB, "budget_scope": "per_broker"}}  # nothing changed it
    assert found[moved["id"]] == {PBR: {"value": None, "budget_scope": None}}  # what the first change replaced
    assert found[decided["id"]] is None and found[newer.pk] is None  # decided: nobody approves them again
    stale = api(w["admin"]).get(f"/api/requests/{moved['id']}/").json()["stale"]
    assert stale["message"] == f"submitted against no value; now 2 KiB/s since #{newer.pk}"
