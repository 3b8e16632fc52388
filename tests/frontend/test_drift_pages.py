"""The drift page (push status and open drift per broker, re-applying desired state) and the pushes of a request
on its page.

Brokers are engine namespaces in the test Redis, changed behind the portal's back by writing their hashes; the
re-apply button queues a real Celery message in the test Redis (the Celery broker), which the test then runs
with the queued arguments, as a worker would.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import Client

from engine.config import KEY_SEP, EntityRef, namespace_for_broker
from engine.desired import NamespaceState
from quotas.choices import QuotaScope
from quotas.connectors.base import PushError
from quotas.models import (
    AuditEntry,
    Broker,
    Cluster,
    Drift,
    QuotaRequest,
)
from quotas.push import reconcile, target_push
from quotas.tasks import heal
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers, push_everywhere, set_quota
from tests.people import make_tenant, make_user, roles

from .test_quota_pages import assert_accessible, browser, parse, text

pytestmark = pytest.mark.django_db

PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: a broker that is down
REAPPLY = "Re-apply desired state"


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    """The people, team-a (alice owns svc-a-*), cluster prod with 3 brokers, and the test Redis."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], w["alice2"], users=["svc-a-*"])
    prod = cluster_with_brokers(range(3), name="prod")
    w.update(a=a, prod=prod, redis=engine_redis)
    return w


def drifted(w: dict[str, Any]) -> Broker:
    """Two quotas pushed to every broker of prod; then broker 1 changed behind the portal's back and reconciled."""
    set_quota(w["prod"], "svc-a-1", 1000, PBR)
    set_quota(w["prod"], "svc-a-2", 2000, CBR)
    push_everywhere(w["prod"])
    state = NamespaceState(w["redis"], namespace_for_broker("prod", 1), 1)
    config = state.stores[0].hash_key
    w["redis"].hset(config, EntityRef(user="svc-a-1").field() + KEY_SEP + PBR, "5000.0")  # different
    w["redis"].hdel(config, EntityRef(user="svc-a-2").field() + KEY_SEP + CBR)  # missing
    w["redis"].hset(state.stores[1].hash_key, "1|max.connections", "10")  # extra, on the broker's own config
    broker = w["prod"].brokers.get(broker_id=1)
    assert reconcile.reconcile_target(w["prod"], broker, mode="report").status == "drift"
    return broker


def targets(response: Any) -> dict[str, list[str]]:
    """The summary rows of the drift page: target label -> its cells."""
    return {row[0]: row for row in parse(response).rows if row and row[0].startswith(("broker ", "the cluster-wide"))}


def drift_rows(response: Any) -> list[list[str]]:
    """The open drift items on the page: entity, key, status, desired, actual, version, since."""
    return [row for row in parse(response).rows if len(row) == 7 and row[2] in ("extra", "different", "missing")]


class CeleryQueue:
    """Celery's default queue in the test Redis: the list "celery"; removes only this test's messages after."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.seen: list[bytes] = []

    def heal_messages(self) -> list[tuple[bytes, dict[str, Any], list[Any]]]:
        out = []
        for raw in self.client.lrange("celery", 0, -1):
            message = json.loads(raw)
            if message["headers"]["task"] == "quotas.tasks.heal":
                args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))  # message protocol 2
                out.append((raw, message["headers"], args))
        return out

    def new_since(self, before: list[Any]) -> list[tuple[bytes, dict[str, Any], list[Any]]]:
        old = {raw for raw, _, _ in before}
        found = [m for m in self.heal_messages() if m[0] not in old]
        self.seen += [raw for raw, _, _ in found]
        return found

    def clean(self) -> None:
        for raw in self.seen:
            self.client.lrem("celery", 0, raw)


@pytest.fixture
def queue(engine_redis: redis.Redis) -> Iterator[CeleryQueue]:
    q = CeleryQueue(engine_redis)
    yield q
    q.clean()


def csrf_client(user: Any) -> tuple[Client, str]:
    client = browser(user, csrf=True)
    assert client.get("/drift/").status_code == 200  # sets the CSRF cookie, as a browser would
    return client, client.cookies["csrftoken"].value


# ------------------------------------------------------------------ access


def test_drift_page_is_for_admins_and_auditors(w: dict[str, Any]) -> None:
    assert Client().get("/drift/")["Location"] == "/login/?next=/drift/"
    for who in ("alice", "bob"):
        response = browser(w[who]).get("/drift/")
        assert response.status_code == 403 and "for admins" in text(response)
        assert 'href="/drift/"' not in browser(w[who]).get("/").content.decode()
    for who in ("admin", "admin2", "auditor"):
        response = browser(w[who]).get("/drift/")
        assert response.status_code == 200
        assert_accessible(response)
        assert 'href="/drift/"' in browser(w[who]).get("/").content.decode()  # in the navigation
    assert REAPPLY in text(browser(w["admin"]).get("/drift/"))
    auditor = browser(w["auditor"]).get("/drift/").content.decode()
    assert REAPPLY not in auditor and 'action="/drift/reapply/"' not in auditor  # auditors read, never change


def test_drift_page_shows_each_target_against_desired_state(w: dict[str, Any]) -> None:
    Broker.objects.filter(cluster=w["prod"], broker_id=2).update(engine_url=DEAD_REDIS)
    set_quota(w["prod"], "svc-a-1", 1000, PBR)
    for broker in Broker.objects.filter(cluster=w["prod"]):
        try:
            target_push.push_target(w["prod"].pk, broker.pk)
        except PushError:
            pass
    set_quota(w["prod"], "svc-a-1", 2000, PBR)  # version 2, pushed nowhere yet
    response = browser(w["auditor"]).get("/drift/")
    page = text(response)
    assert "Desired-state version" in page
    rows = targets(response)
    assert list(rows) == ["broker 0", "broker 1", "broker 2"]
    # target, applied version, in sync, pending (since), failed, last error, open drift
    assert rows["broker 0"][1:3] == ["1", "behind"] and rows["broker 0"][3].startswith("1 since ")
    assert rows["broker 0"][4:7] == ["0", "—", "0"]
    assert rows["broker 2"][1:3] == ["—", "behind"] and rows["broker 2"][3].startswith("2 since ")
    assert rows["broker 2"][5].startswith("BROKER_NOT_AVAILABLE prod/broker-2")
    assert "No open drift on prod." in page

    push_everywhere_but = [b for b in Broker.objects.filter(cluster=w["prod"]) if b.broker_id != 2]
    for broker in push_everywhere_but:
        target_push.push_target(w["prod"].pk, broker.pk)
    rows = targets(browser(w["auditor"]).get("/drift/"))
    assert rows["broker 0"][1:5] == ["2", "yes", "0", "0"]


def test_a_cluster_wide_cluster_is_one_target(w: dict[str, Any]) -> None:
    shared = Cluster.objects.create(name="shared", scope=QuotaScope.CLUSTER_WIDE)
    set_quota(shared, "svc-a-1", 10, PBR)
    push_everywhere(shared)
    response = browser(w["admin"]).get("/drift/")
    assert targets(response)["the cluster-wide namespace"][1:5] == ["1", "yes", "0", "0"]
    body = response.content.decode()
    assert '<input type="hidden" name="cluster" value="shared">' in body


# ------------------------------------------------------------------ drift found, shown, healed


def test_drift_is_shown_then_healed_from_the_page(w: dict[str, Any], queue: CeleryQueue) -> None:
    broker = drifted(w)
    assert AuditEntry.objects.filter(action="drift_detected", cluster=w["prod"]).count() == 3
    response = browser(w["auditor"]).get("/drift/")
    page = text(response)
    assert "Open drift on broker 1 of prod" in page
    assert targets(response)["broker 1"][6] == "3"  # open drift
    assert [row[:6] for row in drift_rows(response)] == [
        ["/config/brokers/1", "max.connections", "extra", "—", "10", "2"],
        ["svc-a-1 (all client-ids)", PBR, "different", "1000.0", "5000.0", "2"],  # in words, the path on hover
        ["svc-a-2 (all client-ids)", CBR, "missing", "2000.0", "—", "2"],
    ]
    assert 'title="/config/users/svc-a-1">svc-a-1 (all client-ids)</span>' in page
    since = Drift.objects.filter(broker=broker).first().detected_at.strftime("%Y-%m-%d %H:%M:%S")
    assert {row[6] for row in drift_rows(response)} == {since}

    client, token = csrf_client(w["admin"])
    before = queue.heal_messages()
    form = {"cluster": "prod", "broker": "1"}
    assert client.post("/drift/reapply/", form).status_code == 403  # no CSRF token
    assert queue.new_since(before) == []
    response = client.post("/drift/reapply/", {**form, "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == "/drift/#cluster-prod"
    queued = queue.new_since(before)
    assert len(queued) == 1
    _raw, headers, args = queued[0]
    assert headers["task"] == "quotas.tasks.heal" and args == [w["prod"].pk, broker.pk, w["admin"].pk]
    page = text(client.get("/drift/"))
    assert f"Re-applying desired-state version 2 to broker 1 of prod (task {headers['id']})" in page
    assert len(drift_rows(client.get("/drift/"))) == 3  # still open: nothing ran yet

    heal(*args)  # what the worker runs with the queued arguments
    response = client.get("/drift/")
    assert drift_rows(response) == [] and "No open drift on prod." in text(response)
    assert targets(response)["broker 1"][6] == "0"
    healed = AuditEntry.objects.filter(action="drift_healed", cluster=w["prod"])
    assert healed.count() == 3 and {e.actor_name for e in healed} == {"root"}
    assert set(Drift.objects.values_list("resolution", flat=True)) == {"healed"}
    assert reconcile.reconcile_target(w["prod"], broker, mode="report").status == "in-sync"


def test_reapply_is_refused_to_auditors_and_members(w: dict[str, Any], queue: CeleryQueue) -> None:
    before = queue.heal_messages()
    staff_auditor = make_user("staff-audit", staff=True, groups=("auditors",))
    for who in (w["auditor"], staff_auditor, w["alice"]):
        response = browser(who).post("/drift/reapply/", {"cluster": "prod", "broker": "1"})
        assert response.status_code == 403 and "never auditors" in text(response)
    assert browser(w["admin"]).get("/drift/reapply/").status_code == 405  # POST only
    assert Client().post("/drift/reapply/", {"cluster": "prod", "broker": "1"}).status_code == 302  # to login
    assert queue.new_since(before) == []


@pytest.mark.parametrize(
    ("form", "status", "fragment"),
    [
        ({"cluster": "prod", "broker": ""}, 400, "is per_broker: each broker holds its own copy, so name the broker"),
        ({"cluster": "prod", "broker": "9"}, 400, "Cluster 'prod' has no broker 9; its brokers are 0, 1, 2."),
        ({"cluster": "prod", "broker": "x"}, 400, "broker: Enter a whole number."),
        ({"cluster": "nope", "broker": "1"}, 404, "Cluster 'nope' does not exist"),
        ({"broker": "1"}, 400, "cluster: This field is required."),
    ],
)
def test_reapply_from_the_page_is_validated_as_the_api(
    w: dict[str, Any], queue: CeleryQueue, form: dict[str, str], status: int, fragment: str
) -> None:
    before = queue.heal_messages()
    response = browser(w["admin"]).post("/drift/reapply/", form)
    assert response.status_code == status and fragment in text(response)
    assert_accessible(response)
    assert queue.new_since(before) == []


# ------------------------------------------------------------------ the request page's pushes


def push_table(response: Any) -> list[list[str]]:
    """Rows of the request page's push table: broker, state, attempts, error code, error, applied."""
    rows = parse(response).rows
    return [row for row in rows if len(row) == 6 and row[0] != "Broker"]


def test_request_page_shows_its_pushes(w: dict[str, Any]) -> None:
    request = quota_requests.submit(w["alice"], w["a"], w["prod"], user="svc-a-1", client_id=None, key=PBR, value=1000)
    alice = browser(w["alice"])
    page = alice.get(f"/requests/{request.pk}/")
    assert "Nothing to push: this request has not changed the desired state." in text(page)
    assert push_table(page) == []

    quota_requests.approve(w["admin"], request.pk)
    page = alice.get(f"/requests/{request.pk}/")
    assert "Pushes to brokers" in text(page) and "Desired-state version 1 of prod" in text(page)
    assert push_table(page) == [[str(i), "Pending", "0", "—", "—", "—"] for i in range(3)]
    assert 'href="/drift/' not in page.content.decode().split('id="pushes-h"')[1]  # the drift page is not hers
    assert_accessible(page)

    Broker.objects.filter(cluster=w["prod"], broker_id=2).update(engine_url=DEAD_REDIS)
    for broker in Broker.objects.filter(cluster=w["prod"]).order_by("broker_id"):
        try:
            target_push.push_target(w["prod"].pk, broker.pk)
        except PushError:
            pass
    rows = push_table(alice.get(f"/requests/{request.pk}/"))
    assert [row[:4] for row in rows] == [
        ["0", "Applied", "1", "—"],
        ["1", "Applied", "1", "—"],
        ["2", "Pending", "1", "BROKER_NOT_AVAILABLE"],
    ]
    assert rows[0][4] == "—" and rows[0][5] != "—"  # applied: no error, a time
    assert "prod/broker-2" in rows[2][4] and rows[2][5] == "—"

    Broker.objects.filter(cluster=w["prod"], broker_id=2).update(engine_url="")
    push_everywhere(w["prod"])
    page = alice.get(f"/requests/{request.pk}/")
    assert [row[:4] for row in push_table(page)] == [[str(i), "Applied", str(1 + (i == 2)), "—"] for i in range(3)]
    request.refresh_from_db()
    assert request.state == "applied"
    auditor = browser(w["auditor"]).get(f"/requests/{request.pk}/").content.decode()
    assert 'href="/drift/#cluster-prod"' in auditor  # operators jump to the cluster's push status


def test_a_rejected_request_has_no_pushes(w: dict[str, Any]) -> None:
    request = quota_requests.submit(w["alice"], w["a"], w["prod"], user="svc-a-1", client_id=None, key=PBR, value=1000)
    quota_requests.reject(w["admin"], request.pk, "no")
    page = browser(w["alice"]).get(f"/requests/{request.pk}/")
    assert "Nothing to push" in text(page) and push_table(page) == []
    assert not QuotaRequest.objects.filter(pk=request.pk, applied_version__isnull=False).exists()
