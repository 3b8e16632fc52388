"""Budget scopes in tenants' requests, the capacity check and the pages (issue 28).

A tenant member asks for a cluster-wide budget (or a per-broker value) through the API or the request form; another
admin approves it through the same four-eyes path, and the audit says so; a boost gives back the scope it replaced.
The capacity check counts a per-broker value x the cluster's brokers and a cluster-wide budget once, and says so.
Kafka is the in-memory connector of tests/push/fake_kafka.py (the scopes go to the test Redis).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.test import Client
from django.utils import timezone

from quotas.choices import ConnectorKind
from quotas.models import (
    Alteration,
    AuditEntry,
    Cluster,
    QuotaOp,
    QuotaRequest,
    QuotaValue,
    alter_client_quotas,
)
from quotas.models.capacity import capacity_check
from quotas.tasks import expire_boosts
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers, push_everywhere
from tests.people import api, make_tenant, roles
from tests.push.fake_kafka import FakeKafka, installed
from tests.redis_keys import keys_cleared

pytestmark = pytest.mark.django_db
PBR, CBR, CMR = "producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate"


@pytest.fixture
def fake_kafka(redis_url: str, engine_redis: redis.Redis) -> Iterator[FakeKafka]:
    with keys_cleared(redis_url, "qb:*"), installed(redis_url) as fake:
        yield fake


@pytest.fixture
def w(fake_kafka: FakeKafka) -> dict[str, Any]:
    """team-a (alice) owns svc-a-*; a Kafka cluster of 3 brokers taking 10,000 B/s in; two admins and an auditor."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], users=["svc-a-*"])
    cluster = cluster_with_brokers(
        range(3), name="kprod", connector=ConnectorKind.KAFKA, capacity_in_bytes_per_s=10_000
    )
    w.update(a=a, cluster=cluster, kafka=fake_kafka)
    return w


def ask(who: Any, **body: Any) -> Any:
    payload = {"cluster": "kprod", "user": "svc-a-1", "key": PBR, "value": "3 KiB/s", **body}
    return api(who).post("/api/requests/", payload, format="json")


def stored(cluster: Cluster, user: str = "svc-a-1", key: str = PBR) -> tuple[float, str] | None:
    row = QuotaValue.objects.filter(entity__cluster=cluster, entity__user=user, key=key).first()
    return None if row is None else (row.value, row.budget_scope)


def test_a_member_asks_for_a_cluster_wide_budget_and_another_admin_approves_it(w: dict[str, Any]) -> None:
    response = ask(w["alice"], budget_scope="cluster_wide", reason="one budget whatever the leaders")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["budget_scope"], body["value"], body["previous_budget_scope"]) == ("cluster_wide", 3072, None)

    detail = api(w["admin"]).get(f"/api/requests/{body['id']}/").json()
    assert detail["capacity"]["budgets"] == ["/config/users/svc-a-1"]
    assert detail["capacity"]["granted_with"] == 3072.0  # once, not x 3 brokers

    approved = api(w["admin"]).post(f"/api/requests/{body['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    assert stored(w["cluster"]) == (3072.0, "cluster_wide")
    scope = AuditEntry.objects.get(request_id=body["id"], action="budget_scope_altered")
    assert (scope.before, scope.after, scope.actor_name, scope.entity) == (
        None, "cluster_wide", "root", "/config/users/svc-a-1"
    )
    push_everywhere(w["cluster"])
    assert QuotaRequest.objects.get(pk=body["id"]).state == "applied"
    assert w["kafka"].scope_now() == {'produce {"user":"svc-a-1"}'}


def test_a_request_without_a_scope_keeps_the_values_and_says_which(w: dict[str, Any]) -> None:
    alter_client_quotas(w["cluster"], [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 1000, scope="cluster_wide")])])
    body = ask(w["alice"], value=2000).json()
    assert body["budget_scope"] == "cluster_wide"  # a bigger number, still one budget: never silently x 3
    quota_requests.approve(w["admin"], body["id"])
    assert stored(w["cluster"]) == (2000.0, "cluster_wide")
    assert QuotaRequest.objects.get(pk=body["id"]).previous_budget_scope == "cluster_wide"
    assert ask(w["alice"], user="svc-a-2").json()["budget_scope"] == "per_broker"  # a new value: Kafka's meaning


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"key": CMR, "value": 5}, "A controller_mutation_rate value cannot be cluster-wide: only producer_byte_rate"),
        ({"budget_scope": "everywhere"}, "is not a valid choice"),
    ],
)
def test_a_scope_the_value_cannot_have_is_refused_naming_the_field(
    w: dict[str, Any], body: dict[str, Any], fragment: str
) -> None:
    response = ask(w["alice"], **{"budget_scope": "cluster_wide", **body})
    assert response.status_code == 400
    error = response.json()
    assert fragment in error["message"] and fragment in error["details"]["budget_scope"][0]
    assert error["code"] == ("INVALID_BUDGET_SCOPE" if body.get("key") == CMR else "INVALID_REQUEST")
    assert not QuotaRequest.objects.exists()


def test_a_one_namespace_clusters_request_cannot_be_cluster_wide(w: dict[str, Any]) -> None:
    Cluster.objects.create(name="staging", scope="cluster_wide")
    response = ask(w["alice"], cluster="staging", budget_scope="cluster_wide")
    assert response.status_code == 400 and response.json()["code"] == "INVALID_BUDGET_SCOPE"
    assert "Cluster 'staging' is cluster_wide: its brokers share one engine namespace" in (
        response.json()["details"]["budget_scope"][0]
    )


def test_a_cluster_wide_boost_gives_back_the_per_broker_value_it_replaced(w: dict[str, Any]) -> None:
    t0 = timezone.now()
    cluster = w["cluster"]
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])])
    boost = quota_requests.submit(w["alice"], None, cluster, user="svc-a-1", client_id=None, key=PBR, value=6000,
                                  expires_at=t0 + timedelta(hours=1), now=t0, budget_scope="cluster_wide")
    quota_requests.approve(w["admin"], boost.pk, now=t0)
    assert stored(cluster) == (6000.0, "cluster_wide")
    push_everywhere(cluster)

    assert expire_boosts(now=t0 + timedelta(hours=1)) == [boost.pk]

    assert stored(cluster) == (500.0, "per_broker")
    back = AuditEntry.objects.get(request=boost, action="budget_scope_altered", before="cluster_wide")
    assert back.after == "per_broker" and back.actor_name == "system"


def test_the_capacity_check_counts_per_broker_values_per_broker_and_budgets_once(w: dict[str, Any]) -> None:
    cluster = w["cluster"]  # 3 brokers, 10,000 B/s in
    alter_client_quotas(cluster, [
        Alteration([("user", "svc-b-1")], [QuotaOp(PBR, 1000)]),  # per broker: 3,000 B/s of the cluster
        Alteration([("user", "svc-b-2")], [QuotaOp(PBR, 4000, scope="cluster_wide")]),  # a budget: 4,000 B/s
    ])
    request = quota_requests.submit(w["alice"], None, cluster, user="svc-a-1", client_id=None, key=PBR, value=1000)

    check = capacity_check(request)

    assert check is not None
    assert (check.granted_without, check.granted_with) == (7000.0, 10000.0)  # 3,000 + 4,000; + 1,000 x 3
    assert check.budgets == ("/config/users/svc-b-2",) and check.budget_with == 4000.0
    assert "per-broker values x 3 brokers (Kafka enforces each on every broker)" in check.counted
    assert "cluster-wide budgets once (the brokers share each one out: /config/users/svc-b-2" in check.counted

    wide = quota_requests.submit(w["alice"], None, cluster, user="svc-a-1", client_id=None, key=PBR, value=1000,
                                 budget_scope="cluster_wide")
    assert capacity_check(wide).granted_with == 8000.0  # the same number as a budget: once


def test_a_cluster_wide_default_counts_once_for_each_known_entity_it_applies_to(w: dict[str, Any]) -> None:
    """Kafka's default quota is one sensor per user: a cluster-wide default is a budget per user, each counted once."""
    cluster = w["cluster"]
    alter_client_quotas(cluster, [
        Alteration([("user", None)], [QuotaOp(PBR, 100, scope="cluster_wide")]),
        Alteration([("user", "svc-b-1")], [QuotaOp(CBR, 1)]),
    ])
    request = quota_requests.submit(w["alice"], None, cluster, user="svc-a-9", client_id=None, key=CBR, value=1)
    request.key = PBR  # svc-a-9 and svc-b-1 both get the default's budget
    check = capacity_check(request)
    assert check is not None and check.granted_without == 200.0


# ------------------------------------------------------------------ pages


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_request_form_asks_for_a_scope_and_the_pages_show_it(w: dict[str, Any]) -> None:
    alice = browser(w["alice"])
    form = alice.get("/requests/new/").content.decode()
    assert 'name="budget_scope"' in form and 'value="cluster_wide"' in form and "Keep the value&#x27;s scope" in form

    form_body = {"cluster": "kprod", "user": "svc-a-1", "key": PBR, "value": "2 KiB/s", "budget_scope": "cluster_wide"}
    response = alice.post("/requests/new/", form_body)
    created = QuotaRequest.objects.get()
    assert response.status_code == 302 and created.budget_scope == "cluster_wide"
    page = alice.get(f"/requests/{created.pk}/").content.decode()
    assert 'data-budget-scope="cluster_wide"' in page and "a budget for the sum over kprod's brokers" in page
    assert 'data-figure="budgets"' in page  # the capacity check names the budget it counted once

    quota_requests.approve(w["admin"], created.pk)
    entity = QuotaValue.objects.get().entity
    admin = browser(w["admin"])
    detail = admin.get(f"/entities/{entity.pk}/").content.decode()
    assert detail.count('data-budget-scope="cluster_wide"') == 2  # the stored value, and the effective one for svc-a-1
    listing = admin.get("/entities/?cluster=kprod").content.decode()
    assert "cluster-wide</span>" in listing
    assert "cluster-wide</span>" in admin.get("/requests/").content.decode()


def test_the_request_form_refuses_a_scope_as_the_api_does(w: dict[str, Any]) -> None:
    body = {"cluster": "kprod", "user": "svc-a-1", "key": CMR, "value": "5", "budget_scope": "cluster_wide"}
    answer = ask(w["alice"], key=CMR, value=5, budget_scope="cluster_wide").json()
    response = browser(w["alice"]).post("/requests/new/", body)
    assert response.status_code == 400
    assert answer["details"]["budget_scope"][0].replace("'", "&#x27;") in response.content.decode()
    assert not QuotaRequest.objects.exists()
