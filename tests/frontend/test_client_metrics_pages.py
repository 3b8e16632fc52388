"""The client-metrics subscriptions page of a cluster: who sees what, admins' forms, tenants' requests, decisions."""

from __future__ import annotations

import html
from typing import Any

import pytest
import redis
from django.test import Client

from quotas.models import ClientMetricsSubscription, Cluster, SubscriptionRequest, Tenant, alter_subscription
from tests.brokers import push_everywhere
from tests.people import make_tenant, roles

pytestmark = pytest.mark.django_db
PAGE = "/clusters/prod/client-metrics/"


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], client_ids=["app-1"])
    prod = Cluster.objects.create(name="prod")
    prod.brokers.create(broker_id=1, host="b1:9092")
    w.update(a=a, prod=prod)
    return w


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def test_everyone_reads_the_page_and_only_admins_get_the_forms(w: dict[str, Any]) -> None:
    alter_subscription(w["prod"], "all-clients", {"metrics": "*"}, None)
    for who in ("admin", "auditor", "alice", "bob"):
        body = text(browser(w[who]).get(PAGE))
        assert "all-clients" in body
        assert ('id="subscription-form"' in body) == (who == "admin")
        assert ('id="subscription-request-form"' in body) == (who == "alice")
    assert Client().get(PAGE).status_code == 302
    assert browser(w["bob"]).get("/clusters/none/client-metrics/").status_code == 404
    assert "Client-metrics subscriptions of prod" in text(browser(w["bob"]).get("/clusters/prod/"))


def test_admins_create_edit_and_delete_with_kafkas_messages_on_refusal(w: dict[str, Any]) -> None:
    admin = browser(w["admin"])
    refused = admin.post(PAGE, {"action": "save", "mode": "create", "name": "s", "interval_ms": "5"})
    assert refused.status_code == 400
    assert "Invalid value 5 for interval.ms, interval must be between 100 and 3600000 (1 hour)" in text(refused)
    assert not ClientMetricsSubscription.objects.exists()
    bad = admin.post(PAGE, {"action": "save", "mode": "create", "name": "s", "match": "client_id=(x"})
    assert bad.status_code == 400 and "Illegal client matching pattern: client_id=(x" in text(bad)

    made = admin.post(PAGE, {"action": "save", "mode": "create", "name": "s", "metrics": "*", "match": "client_id=a"})
    assert made.status_code == 302
    assert admin.post(PAGE, {"action": "save", "mode": "create", "name": "s"}).status_code == 409
    assert 'value="client_id=a"' in text(admin.get(PAGE + "?edit=s"))
    assert admin.post(PAGE, {"action": "save", "mode": "update", "name": "s", "interval_ms": "1000"}).status_code == 302
    sub = ClientMetricsSubscription.objects.get(name="s")
    assert (sub.metrics, sub.interval_ms, sub.match) == ("", 1000, "")  # the form is the whole subscription
    assert browser(w["alice"]).post(PAGE, {"action": "delete", "name": "s"}).status_code == 403
    assert admin.post(PAGE, {"action": "delete", "name": "s"}).status_code == 302
    assert not ClientMetricsSubscription.objects.exists()


def test_a_tenant_asks_an_admin_decides_and_the_request_is_applied(w: dict[str, Any]) -> None:
    alice = browser(w["alice"])
    refused = alice.post(PAGE, {"action": "request", "tenant": "team-a", "name": "x", "match": "client_id=other"})
    assert refused.status_code == 403 and "does not own the client-id 'other'" in text(refused)
    asked = alice.post(
        PAGE, {"action": "request", "tenant": "team-a", "name": "mine", "metrics": "*", "match": "client_id=app-1"}
    )
    assert asked.status_code == 302
    r = SubscriptionRequest.objects.get()
    assert f"Withdraw #{r.pk}" in text(alice.get(PAGE))
    assert "mine" not in text(browser(w["bob"]).get(PAGE))  # another tenant's request is not shown
    admin = browser(w["admin2"])
    assert f"Approve #{r.pk}" in text(admin.get(PAGE))
    assert admin.post(PAGE, {"action": "reject", "request_id": r.pk}).status_code == 400  # say why
    assert admin.post(PAGE, {"action": "approve", "request_id": r.pk, "comment": "ok"}).status_code == 302
    push_everywhere(w["prod"])
    r.refresh_from_db()
    assert r.state == "applied" and ClientMetricsSubscription.objects.filter(name="mine").exists()
    assert browser(w["bob"]).post(PAGE, {"action": "withdraw", "request_id": r.pk}).status_code == 404


def test_a_member_of_one_tenant_asks_without_naming_it_and_of_several_chooses(w: dict[str, Any]) -> None:
    alice = browser(w["alice"])
    body = text(alice.get(PAGE))
    assert "Tenant: <strong>team-a</strong>" in body and 'name="tenant"' not in body
    asked = alice.post(PAGE, {"action": "request", "name": "mine", "metrics": "*", "match": "client_id=app-1"})
    assert asked.status_code == 302 and SubscriptionRequest.objects.get().tenant == w["a"]

    Tenant.objects.create(name="team-b").members.add(w["alice"])
    body = text(alice.get(PAGE))
    assert '<option value="">Choose a tenant</option>' in body and '<option value="team-b">' in body
    refused = alice.post(PAGE, {"action": "request", "name": "again", "metrics": "*", "match": "client_id=app-1"})
    assert refused.status_code == 400
    assert "You are a member of 2 tenants, team-a, team-b" in text(refused)
    assert "; team-a owns what you ask for" in text(refused)
    chosen = {"action": "request", "tenant": "team-a", "name": "again", "metrics": "*", "match": "client_id=app-1"}
    assert alice.post(PAGE, chosen).status_code == 302
