"""The push and drift API: push status per version and broker, drift found by reconcile and closed by healing,
the per-cluster push summary, and re-applying desired state through a real Celery message.

Brokers are engine namespaces in the test Redis (cluster "prod" broker 1 is namespace "prod.broker-1"); a broker
is changed "behind the portal's back" by writing its hashes directly, as someone with access to it would.
The test Redis is also the Celery broker: a queued task is a message on its "celery" list.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from engine.config import KEY_SEP, EntityRef, namespace_for_broker
from engine.desired import NamespaceState
from quotas.choices import QuotaScope
from quotas.connectors.base import PushError
from quotas.models import (
    AuditEntry,
    Broker,
    Cluster,
    QuotaRequest,
)
from quotas.push import reconcile, resolve, target_push
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers, push_everywhere, set_quota
from tests.people import api, make_tenant, make_user, roles

pytestmark = pytest.mark.django_db

PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: a broker that is down


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    """The people, team-a (alice owns svc-a-*), cluster prod (3 brokers) and dev (1 broker), and the Redis."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], users=["svc-a-*"])
    prod = cluster_with_brokers(range(3), name="prod")
    dev = Cluster.objects.create(name="dev")
    dev.brokers.create(broker_id=0, host="d0:9092")
    w.update(a=a, prod=prod, dev=dev, redis=engine_redis)
    return w


def approved(w: dict[str, Any], value: float = 1000) -> QuotaRequest:
    """A request of alice's, approved by the other admin: its version is committed, its pushes pending."""
    request = quota_requests.submit(w["alice"], w["a"], w["prod"], user="svc-a-1", client_id=None, key=PBR, value=value)
    quota_requests.approve(w["admin2"], request.pk)
    request.refresh_from_db()
    return request


def assert_error(response: Any, status: int, code: str, fragment: str = "") -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and fragment in body["message"], body
    assert set(body) == {"code", "message", "details"}
    return body


def results(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


def broker_state(w: dict[str, Any], cluster: Cluster, broker_id: int) -> NamespaceState:
    return NamespaceState(w["redis"], namespace_for_broker(cluster.name, broker_id), broker_id)


def quota_field(user: str, key: str) -> str:
    """The field of a user's quota key in a namespace's config hash (``engine/desired.py``)."""
    return EntityRef(user=user).field() + KEY_SEP + key


# ------------------------------------------------------------------ GET /api/pushes/


def test_pushes_are_listed_per_version_and_broker_with_filters(w: dict[str, Any]) -> None:
    request = approved(w)  # prod version 1: a pending push per broker
    push_everywhere(w["prod"])
    set_quota(w["prod"], "svc-a-2", 2000, PBR)  # prod version 2, not pushed
    set_quota(w["dev"], "svc-a-1", 10, PBR)  # dev version 1, not pushed
    auditor = api(w["auditor"])

    everything = results(auditor.get("/api/pushes/"))
    assert len(everything) == 7
    assert [(p["cluster"], p["version"], p["broker"]) for p in everything] == [  # newest first
        ("dev", 1, 0),
        ("prod", 2, 2),
        ("prod", 2, 1),
        ("prod", 2, 0),
        ("prod", 1, 2),
        ("prod", 1, 1),
        ("prod", 1, 0),
    ]
    first = everything[-1]
    assert set(first) == {
        *("cluster", "version", "broker", "state", "attempts", "error_code", "error", "answers"),
        *("applied_at", "updated"),
    }
    assert (first["state"], first["attempts"], first["error_code"], first["error"]) == ("applied", 1, "", "")
    assert first["applied_at"] is not None and request.applied_version == 1

    def listed(**params: Any) -> set[tuple[str, int, int | None, str]]:
        rows = results(auditor.get("/api/pushes/", params))
        return {(p["cluster"], p["version"], p["broker"], p["state"]) for p in rows}

    assert listed(cluster="prod", version=1) == {("prod", 1, i, "applied") for i in range(3)}
    assert listed(broker=1) == {("prod", 1, 1, "applied"), ("prod", 2, 1, "pending")}
    assert listed(state="pending") == {("prod", 2, i, "pending") for i in range(3)} | {("dev", 1, 0, "pending")}
    assert listed(cluster="dev", broker=0, state="pending", version=1) == {("dev", 1, 0, "pending")}
    assert listed(state="failed") == set()
    assert listed(cluster="nope") == set()
    assert listed(broker="null") == set()  # no cluster-wide namespace here

    page = auditor.get("/api/pushes/", {"page_size": 2}).json()
    assert len(page["results"]) == 2 and "cursor=" in page["next"] and page["previous"] is None
    assert len(results(auditor.get(page["next"]))) == 2
    assert len(results(api(w["admin"]).get("/api/pushes/"))) == 7  # admins read them too


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"state": "done"}, "state must be one of pending, applied, failed, got 'done'"),
        ({"version": "v1"}, "version must be a whole number"),
        ({"version": "-1"}, "version must be a whole number"),
        ({"broker": "one"}, "broker must be a broker id, or null for the cluster-wide namespace"),
    ],
)
def test_pushes_filters_are_validated(w: dict[str, Any], params: dict[str, str], fragment: str) -> None:
    body = assert_error(api(w["auditor"]).get("/api/pushes/", params), 400, "INVALID_REQUEST", fragment)
    assert list(body["details"]) == list(params)


def test_members_see_their_pushes_on_the_request_not_in_the_list(w: dict[str, Any]) -> None:
    approved(w)
    for who in ("alice", "bob"):
        assert_error(
            api(w[who]).get("/api/pushes/"), 403, "PERMISSION_DENIED", "GET /api/requests/{id}/ (its `pushes`)"
        )
    assert_error(APIClient().get("/api/pushes/"), 401, "NOT_AUTHENTICATED")
    assert_error(api(w["admin"]).post("/api/pushes/", {}, format="json"), 405, "METHOD_NOT_ALLOWED")


def test_cluster_wide_pushes_have_no_broker(w: dict[str, Any]) -> None:
    shared = Cluster.objects.create(name="shared", scope=QuotaScope.CLUSTER_WIDE)
    shared.brokers.create(broker_id=0, host="s0:9092")
    set_quota(shared, "svc-a-1", 10, PBR)
    push_everywhere(shared)
    rows = results(api(w["auditor"]).get("/api/pushes/", {"broker": "null"}))
    assert [(p["cluster"], p["version"], p["broker"], p["state"]) for p in rows] == [("shared", 1, None, "applied")]
    assert results(api(w["auditor"]).get("/api/pushes/", {"cluster": "shared", "broker": 0})) == []


# ------------------------------------------------------------------ the request's own pushes


def test_request_detail_lists_its_pushes_pending_then_applied(w: dict[str, Any]) -> None:
    request = approved(w)
    alice = api(w["alice"])
    body = alice.get(f"/api/requests/{request.pk}/").json()
    assert body["state"] == "applying"
    fields = ("cluster", "version", "broker", "state", "attempts", "applied_at")
    pushes = [tuple(p[f] for f in fields) for p in body["pushes"]]
    assert pushes == [("prod", 1, i, "pending", 0, None) for i in range(3)]

    push_everywhere(w["prod"])
    body = alice.get(f"/api/requests/{request.pk}/").json()
    assert body["state"] == "applied"
    assert [(p["broker"], p["state"], p["attempts"], p["error_code"]) for p in body["pushes"]] == [
        (i, "applied", 1, "") for i in range(3)
    ]
    assert all(p["applied_at"] for p in body["pushes"])
    # a later version does not change which pushes are this request's
    set_quota(w["prod"], "svc-a-2", 5, PBR)
    assert [p["version"] for p in alice.get(f"/api/requests/{request.pk}/").json()["pushes"]] == [1, 1, 1]


def test_request_detail_shows_a_broker_that_is_down(w: dict[str, Any]) -> None:
    Broker.objects.filter(cluster=w["prod"], broker_id=2).update(engine_url=DEAD_REDIS)
    request = approved(w)
    outcomes = []
    for broker in Broker.objects.filter(cluster=w["prod"]).order_by("broker_id"):
        try:
            outcomes.append(target_push.push_target(w["prod"].pk, broker.pk).changed)
        except PushError as e:
            outcomes.append(e.code)
    assert outcomes == [True, True, "BROKER_NOT_AVAILABLE"]
    body = api(w["alice"]).get(f"/api/requests/{request.pk}/").json()
    assert body["state"] == "applying"  # not every broker holds it yet
    down = body["pushes"][2]
    assert (down["broker"], down["state"], down["attempts"], down["error_code"]) == (
        2, "pending", 1, "BROKER_NOT_AVAILABLE"
    )
    assert "prod/broker-2" in down["error"] and down["applied_at"] is None


# ------------------------------------------------------------------ drift: reconcile finds it, heal closes it


def tamper(w: dict[str, Any], broker_id: int = 1) -> None:
    """Change broker 1 of prod behind the portal's back: one value differs, one is gone, two are extra."""
    state = broker_state(w, w["prod"], broker_id)
    config, broker_configs = state.stores[0].hash_key, state.stores[1].hash_key
    w["redis"].hset(config, quota_field("svc-a-1", PBR), "5000.0")
    w["redis"].hdel(config, quota_field("svc-a-2", CBR))
    w["redis"].hset(config, quota_field("mallory", PBR), "7.0")
    w["redis"].hset(broker_configs, "<default>|max.connections", "10")


def drifted(w: dict[str, Any]) -> Broker:
    """prod with two quotas pushed everywhere, then broker 1 changed behind the portal's back and reconciled."""
    set_quota(w["prod"], "svc-a-1", 1000, PBR)
    set_quota(w["prod"], "svc-a-2", 2000, CBR)
    push_everywhere(w["prod"])
    tamper(w)
    broker = w["prod"].brokers.get(broker_id=1)
    for b in w["prod"].brokers.all():
        outcome = reconcile.reconcile_target(w["prod"], b, mode="report")
        assert (outcome.status, outcome.differences) == (("drift", 4) if b == broker else ("in-sync", 0))
    return broker


DRIFT = {
    ("/config/users/svc-a-1", PBR): ("quota", '{"user":"svc-a-1"}', "different", "1000.0", "5000.0"),
    ("/config/users/svc-a-2", CBR): ("quota", '{"user":"svc-a-2"}', "missing", "2000.0", None),
    ("/config/users/mallory", PBR): ("quota", '{"user":"mallory"}', "extra", None, "7.0"),
    ("/config/brokers/<default>", "max.connections"): ("broker", "", "extra", None, "10"),
}


def by_entity(rows: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[Any, ...]]:
    return {(r["entity"], r["key"]): (r["kind"], r["resource"], r["status"], r["desired"], r["actual"]) for r in rows}


def test_drift_is_found_listed_audited_and_healed(w: dict[str, Any]) -> None:
    broker = drifted(w)
    auditor = api(w["auditor"])
    rows = results(auditor.get("/api/drift/"))
    assert by_entity(rows) == DRIFT
    for r in rows:
        assert (r["cluster"], r["broker"], r["version"]) == ("prod", 1, 2)
        assert r["detected_at"] and r["resolved_at"] is None and r["resolution"] is None
    assert set(rows[0]) == {
        *("id", "cluster", "broker", "kind", "resource", "entity", "display", "key", "status", "desired", "actual"),
        "version",
        *("detected_at", "resolved_at", "resolution", "shadows_groups"),
    }
    detected = AuditEntry.objects.filter(action="drift_detected", cluster=w["prod"])
    assert detected.count() == 4 and {e.actor_name for e in detected} == {"system"}
    assert {(e.key, e.before, e.after) for e in detected} >= {(PBR, "1000.0", "5000.0"), (CBR, "2000.0", None)}
    assert all(e.comment.startswith("broker 1: ") for e in detected)

    # a second reconcile finds the same drift: no new rows, no new audit entries
    assert reconcile.reconcile_target(w["prod"], broker, mode="report").status == "drift"
    assert len(results(auditor.get("/api/drift/"))) == 4 and detected.count() == 4

    outcome = resolve.heal(w["prod"], broker, w["admin2"])
    assert outcome.mode == "force" and outcome.version == 2
    assert results(auditor.get("/api/drift/")) == []
    closed = results(auditor.get("/api/drift/", {"open": "false"}))
    assert by_entity(closed) == DRIFT
    assert {(r["resolution"], r["resolved_at"] is not None) for r in closed} == {("healed", True)}
    healed = AuditEntry.objects.filter(action="drift_healed", cluster=w["prod"])
    assert healed.count() == 4 and {e.actor_name for e in healed} == {"ops"}
    assert (PBR, "5000.0", "1000.0") in {(e.key, e.before, e.after) for e in healed}  # from what it was to desired
    # the broker holds desired state again, and reconcile agrees
    held, items = broker_state(w, w["prod"], 1).read()
    assert held == 2 and items[("quota", EntityRef(user="svc-a-1").field(), PBR)] == "1000.0"
    assert reconcile.reconcile_target(w["prod"], broker, mode="report").status == "in-sync"


def test_a_quota_set_on_the_broker_for_a_groups_member_says_which_group_it_shadows(w: dict[str, Any]) -> None:
    """A member's own quota wins over its group, so one set behind the portal's back takes the member out of the
    group: the drift says which group, in the API and on the page; other drift shadows nothing."""
    from django.test import Client

    from quotas.models import GroupKind, create_group, set_group_values

    tenant = make_tenant("team-m", users=["mallory"])
    group = create_group(None, w["prod"], tenant, "m-apps", GroupKind.PRINCIPALS, principals=["mallory"])
    set_group_values(None, group, {PBR: (1e6, None)})
    drifted(w)
    rows = results(api(w["auditor"]).get("/api/drift/"))
    assert {(r["entity"], r["key"]): r["shadows_groups"] for r in rows} == {
        ("/config/users/svc-a-1", PBR): [], ("/config/users/svc-a-2", CBR): [],
        ("/config/users/mallory", PBR): ["m-apps"], ("/config/brokers/<default>", "max.connections"): [],
    }
    page = Client()
    page.force_login(w["auditor"])
    text = page.get("/drift/").content.decode()
    assert text.count("overrides its group m-apps") == 1


def test_drift_that_goes_away_converges(w: dict[str, Any]) -> None:
    broker = drifted(w)
    state = broker_state(w, w["prod"], 1)
    w["redis"].hset(state.stores[0].hash_key, quota_field("svc-a-1", PBR), "1000.0")  # put back by hand
    reconcile.reconcile_target(w["prod"], broker, mode="report")
    rows = results(api(w["admin"]).get("/api/drift/", {"open": "false", "status": "different"}))
    assert [(r["entity"], r["resolution"]) for r in rows] == [("/config/users/svc-a-1", "converged")]
    assert len(results(api(w["admin"]).get("/api/drift/"))) == 3


def test_drift_filters_and_access(w: dict[str, Any]) -> None:
    drifted(w)
    admin = api(w["admin"])

    def keys(**params: Any) -> set[tuple[str, str]]:
        return {(r["entity"], r["key"]) for r in results(admin.get("/api/drift/", params))}

    assert keys(status="missing") == {("/config/users/svc-a-2", CBR)}
    extra = {("/config/users/mallory", PBR), ("/config/brokers/<default>", "max.connections")}
    assert keys(status="extra", broker=1) == extra
    assert keys(broker=0) == keys(broker="null") == keys(cluster="dev") == set()
    assert len(keys(cluster="prod", open="true")) == 4
    assert_error(admin.get("/api/drift/", {"open": "maybe"}), 400, "INVALID_REQUEST", "open must be true or false")
    assert_error(admin.get("/api/drift/", {"status": "gone"}), 400, "INVALID_REQUEST", "status must be one of")
    for who in ("alice", "bob"):
        assert_error(api(w[who]).get("/api/drift/"), 403, "PERMISSION_DENIED", "Only admins and auditors")
    assert_error(APIClient().get("/api/drift/"), 401, "NOT_AUTHENTICATED")


@pytest.mark.parametrize(
    ("kind", "resource", "entity"),
    [
        ("quota", '{"user":"alice"}', "/config/users/alice"),
        ("quota", '{"client-id":"app","user":"<default>"}', "/config/users/<default>/clients/app"),
        ("quota", '{"client-id":"app"}', "/config/clients/app"),
        ("quota", '{"ip":"10.0.0.1"}', "/config/ips/10.0.0.1"),
        ("quota", "not json", "quota not json"),
        ("broker", "", "/config/brokers/<default>"),
        ("broker", "1", "/config/brokers/1"),
        ("topic", "orders", "/config/topics/orders"),
        ("client-metrics", "all-producers", "/config/client-metrics/all-producers"),
    ],
)
def test_drift_entity_labels(kind: str, resource: str, entity: str) -> None:
    from quotas.connectors.base import Item
    from quotas.models.pushes import item_path

    assert item_path(Item(kind, resource, "k")) == entity


# ------------------------------------------------------------------ push summary


def test_push_summary_per_target(w: dict[str, Any], django_assert_max_num_queries: Any) -> None:
    Broker.objects.filter(cluster=w["prod"], broker_id=2).update(engine_url=DEAD_REDIS)
    set_quota(w["prod"], "svc-a-1", 1000, PBR)
    for broker in Broker.objects.filter(cluster=w["prod"]):
        try:
            target_push.push_target(w["prod"].pk, broker.pk)
        except PushError:
            pass
    set_quota(w["prod"], "svc-a-1", 2000, PBR)  # version 2: pushed nowhere yet
    auditor = api(w["auditor"])
    with django_assert_max_num_queries(12):  # auth, the cluster, and a fixed number of aggregates
        response = auditor.get("/api/clusters/prod/pushes/summary/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["cluster"], body["scope"], body["desired_version"]) == ("prod", "per_broker", 2)
    targets = {t["broker"]: t for t in body["targets"]}
    assert list(targets) == [0, 1, 2]
    for i in (0, 1):
        t = targets[i]
        assert (t["applied_version"], t["in_sync"], t["pending"], t["failed"], t["last_error_code"]) == (
            1, False, 1, 0, ""
        )
        assert t["oldest_pending_at"] and t["last_error_at"] is None and t["open_drift"] == 0
    down = targets[2]
    assert (down["applied_version"], down["in_sync"], down["pending"], down["failed"]) == (None, False, 2, 0)
    assert down["last_error_code"] == "BROKER_NOT_AVAILABLE" and "prod/broker-2" in down["last_error"]
    assert down["last_error_at"]

    for broker in Broker.objects.filter(cluster=w["prod"], broker_id__in=(0, 1)):
        target_push.push_target(w["prod"].pk, broker.pk)
    targets = {t["broker"]: t for t in auditor.get("/api/clusters/prod/pushes/summary/").json()["targets"]}
    assert (targets[0]["applied_version"], targets[0]["in_sync"], targets[0]["pending"]) == (2, True, 0)
    assert targets[0]["oldest_pending_at"] is None


def test_push_summary_counts_open_drift_and_covers_cluster_wide(w: dict[str, Any]) -> None:
    drifted(w)
    targets = api(w["admin"]).get("/api/clusters/prod/pushes/summary/").json()["targets"]
    assert [(t["broker"], t["in_sync"], t["open_drift"]) for t in targets] == [(0, True, 0), (1, True, 4), (2, True, 0)]
    shared = Cluster.objects.create(name="shared", scope=QuotaScope.CLUSTER_WIDE)
    body = api(w["admin"]).get("/api/clusters/shared/pushes/summary/").json()
    assert body["desired_version"] == 0 and [(t["broker"], t["in_sync"]) for t in body["targets"]] == [(None, True)]
    set_quota(shared, "svc-a-1", 10, PBR)
    body = api(w["admin"]).get("/api/clusters/shared/pushes/summary/").json()
    assert [(t["broker"], t["applied_version"], t["in_sync"], t["pending"]) for t in body["targets"]] == [
        (None, None, False, 1)
    ]


def test_push_summary_access(w: dict[str, Any]) -> None:
    for who in ("alice", "bob"):
        assert_error(api(w[who]).get("/api/clusters/prod/pushes/summary/"), 403, "PERMISSION_DENIED")
    assert_error(api(w["admin"]).get("/api/clusters/nope/pushes/summary/"), 404, "NOT_FOUND", "GET /api/clusters/")
    assert_error(APIClient().get("/api/clusters/prod/pushes/summary/"), 401, "NOT_AUTHENTICATED")


# ------------------------------------------------------------------ POST /api/clusters/{name}/reapply/


class CeleryQueue:
    """Celery's default queue in the test Redis (its broker): the Redis list "celery", one JSON message each."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.ids: set[str] = set()

    def heal_messages(self) -> list[dict[str, Any]]:
        """Every queued quotas.tasks.heal message, decoded: headers and the task's args (message protocol 2)."""
        out = []
        for raw in self.client.lrange("celery", 0, -1):
            message = json.loads(raw)
            if message["headers"]["task"] == "quotas.tasks.heal":
                args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
                out.append({"raw": raw, "headers": message["headers"], "args": args, "kwargs": kwargs})
        return out

    def message(self, task_id: str) -> dict[str, Any]:
        self.ids.add(task_id)
        found = [m for m in self.heal_messages() if m["headers"]["id"] == task_id]
        assert len(found) == 1, f"task {task_id} is not queued once: {found}"
        return found[0]

    def clean(self) -> None:
        """Take this test's messages off the queue (and only those: other tests may share the Redis)."""
        for m in self.heal_messages():
            if m["headers"]["id"] in self.ids:
                self.client.lrem("celery", 0, m["raw"])


@pytest.fixture
def queue(engine_redis: redis.Redis) -> Iterator[CeleryQueue]:
    q = CeleryQueue(engine_redis)
    yield q
    q.clean()


def reapply(who: Any, cluster: str, body: Any, queue: CeleryQueue) -> Any:
    response = api(who).post(f"/api/clusters/{cluster}/reapply/", body, format="json")
    if response.status_code == 202:
        queue.ids.add(response.json()["task_id"])
    return response


def test_reapply_queues_the_heal_task(w: dict[str, Any], queue: CeleryQueue) -> None:
    before = len(queue.heal_messages())
    response = reapply(w["admin2"], "prod", {"broker": 1}, queue)
    assert response.status_code == 202, response.content
    body = response.json()
    assert set(body) == {"cluster", "broker", "task_id", "status"}
    assert (body["cluster"], body["broker"], body["status"]) == ("prod", 1, "queued")
    message = queue.message(body["task_id"])
    broker = w["prod"].brokers.get(broker_id=1)
    assert message["headers"]["task"] == "quotas.tasks.heal"
    assert message["args"] == [w["prod"].pk, broker.pk, w["admin2"].pk] and message["kwargs"] == {}
    assert message["headers"]["argsrepr"] == repr((w["prod"].pk, broker.pk, w["admin2"].pk))
    assert len(queue.heal_messages()) == before + 1
    assert not AuditEntry.objects.filter(action="drift_healed").exists()  # nothing ran yet: only queued


def test_reapply_runs_as_the_admin_once_a_worker_takes_it(w: dict[str, Any], queue: CeleryQueue) -> None:
    from quotas.tasks import heal

    drifted(w)
    task_id = reapply(w["admin"], "prod", {"broker": 1}, queue).json()["task_id"]
    args = queue.message(task_id)["args"]
    outcome = heal(*args)  # what the worker runs with the queued arguments
    assert outcome["mode"] == "force" and outcome["version"] == 2
    assert results(api(w["auditor"]).get("/api/drift/")) == []
    assert {e.actor_name for e in AuditEntry.objects.filter(action="drift_healed")} == {"root"}


def test_reapply_a_cluster_wide_namespace(w: dict[str, Any], queue: CeleryQueue) -> None:
    shared = Cluster.objects.create(name="shared", scope=QuotaScope.CLUSTER_WIDE)
    shared.brokers.create(broker_id=0, host="s0:9092")
    for body in ({"broker": None}, {}):
        response = reapply(w["admin"], "shared", body, queue)
        assert response.status_code == 202, response.content
        assert response.json()["broker"] is None
        assert queue.message(response.json()["task_id"])["args"] == [shared.pk, None, w["admin"].pk]
    body = assert_error(
        reapply(w["admin"], "shared", {"broker": 0}, queue), 400, "INVALID_REQUEST", "send broker null"
    )
    assert "broker" in body["details"]


@pytest.mark.parametrize(
    ("body", "status", "code", "fragment"),
    [
        ({"broker": None}, 400, "INVALID_REQUEST", "is per_broker: each broker holds its own copy, so name the broker"),
        ({}, 400, "INVALID_REQUEST", "(its brokers are 0, 1, 2)"),
        ({"broker": 9}, 400, "INVALID_REQUEST", "Cluster 'prod' has no broker 9; its brokers are 0, 1, 2."),
        ({"broker": "one"}, 400, "INVALID_REQUEST", "broker: A valid integer is required."),
        ({"broker": -1}, 400, "INVALID_REQUEST",
         "broker: A broker id is a whole number from 0 to 2147483647 (Kafka's INT32)."),
    ],
)
def test_reapply_validation(
    w: dict[str, Any], queue: CeleryQueue, body: dict[str, Any], status: int, code: str, fragment: str
) -> None:
    before = len(queue.heal_messages())
    answer = assert_error(reapply(w["admin"], "prod", body, queue), status, code, fragment)
    assert "broker" in answer["details"]
    assert len(queue.heal_messages()) == before


def test_reapply_needs_an_existing_cluster_with_brokers(w: dict[str, Any], queue: CeleryQueue) -> None:
    assert_error(reapply(w["admin"], "nope", {"broker": 0}, queue), 404, "NOT_FOUND", "No cluster named 'nope'")
    Cluster.objects.create(name="empty")
    assert_error(reapply(w["admin"], "empty", {"broker": 0}, queue), 400, "INVALID_REQUEST", "no broker registered")


def test_reapply_is_for_admins_only(w: dict[str, Any], queue: CeleryQueue) -> None:
    before = len(queue.heal_messages())
    staff_auditor = make_user("staff-audit", staff=True, groups=("auditors",))
    for who in (w["auditor"], staff_auditor):  # an auditor changes nothing, even as staff
        assert_error(reapply(who, "prod", {"broker": 1}, queue), 403, "PERMISSION_DENIED", "never auditors")
    for who in (w["alice"], w["bob"]):
        assert_error(reapply(who, "prod", {"broker": 1}, queue), 403, "PERMISSION_DENIED", "Only admins")
    assert_error(reapply(w["auditor"], "nope", {"broker": 1}, queue), 403, "PERMISSION_DENIED")  # no probing
    assert_error(
        APIClient().post("/api/clusters/prod/reapply/", {"broker": 1}, format="json"), 401, "NOT_AUTHENTICATED"
    )
    assert_error(api(w["admin"]).get("/api/clusters/prod/reapply/"), 405, "METHOD_NOT_ALLOWED")
    assert len(queue.heal_messages()) == before


def test_reapply_over_the_session_needs_the_csrf_token(w: dict[str, Any], queue: CeleryQueue) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(w["admin"])
    response = client.post("/api/clusters/prod/reapply/", {"broker": 1}, format="json")
    assert_error(response, 403, "PERMISSION_DENIED", "CSRF")
