"""KIP-714 client-metrics subscriptions: validated by Kafka's rules, versioned, pushed to every broker, audited.

Brokers are engine namespaces in the test Redis (cluster "prod" broker 1 is namespace "prod.broker-1"), except in
the Kafka test, where they are the suite's Kafka responders (tests/connectors/kafka_responder.py).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from engine.config import namespace_for_broker
from engine.desired import NamespaceState
from kafka_wire import CLIENT_METRICS_RESOURCE, SOURCE_CLIENT_METRICS, AdminClient
from quotas.choices import ConnectorKind
from quotas.connectors.base import CLIENT_METRICS, Item
from quotas.models import (
    AuditEntry,
    ClientMetricsSubscription,
    Cluster,
    DesiredChange,
    DesiredStateVersion,
    Drift,
    Push,
    SubscriptionRequest,
    alter_subscription,
)
from quotas.models.desired import desired_state
from quotas.push import reconcile, resolve, target_push
from quotas.workflow import subscription_requests
from quotas.workflow.errors import InvalidRequest, PermissionDenied
from tests.brokers import cluster_with_brokers, push_everywhere
from tests.people import api, make_tenant, roles
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db
URL = "/api/clusters/prod/client-metrics/"
SUB = {"name": "app-metrics", "metrics": "org.apache.kafka.producer.", "interval_ms": 60000, "match": "client_id=app-1"}


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    """The people, team-a (alice owns client-ids app-1 and svc-a-*), cluster prod with brokers 1 and 2."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], client_ids=["app-1", "svc-a-*"])
    prod = cluster_with_brokers((1, 2), name="prod")
    w.update(a=a, prod=prod, redis=engine_redis)
    return w


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def held(w: dict[str, Any], broker_id: int) -> dict[tuple[str, str, str], str]:
    """The client-metrics items a broker's namespace holds."""
    _, items = NamespaceState(w["redis"], namespace_for_broker("prod", broker_id), broker_id).read()
    return {k: v for k, v in items.items() if k[0] == CLIENT_METRICS}


def assert_error(response: Any, status: int, code: str, message: str) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message", "details"}
    assert body["code"] == code and message in body["message"], body


# ------------------------------------------------------------------ validation


BAD = [
    (
        {**SUB, "interval_ms": 50},
        "INVALID_REQUEST",
        "Invalid value 50 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
    ),
    (
        {**SUB, "interval_ms": 3600001},
        "INVALID_REQUEST",
        "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
    ),
    (
        {**SUB, "interval_ms": "soon"},
        "INVALID_CONFIG",
        "Invalid value soon for configuration interval.ms: Not a number of type INT",
    ),
    (
        {"name": "x", "configs": {"metrics": "*", "push.interval": "1000"}},
        "INVALID_REQUEST",
        "Unknown client metrics configuration: push.interval",
    ),
    ({**SUB, "match": "client_id=[app"}, "INVALID_CONFIG", "Illegal client matching pattern: client_id=[app"),
    ({**SUB, "match": "client_id"}, "INVALID_CONFIG", "Illegal client matching pattern: client_id"),
    ({**SUB, "match": "client_name=app"}, "INVALID_CONFIG", "Illegal client matching pattern: client_name=app"),
    ({**SUB, "match": "client_id=a=b"}, "INVALID_CONFIG", "Illegal client matching pattern: client_id=a=b"),
    ({**SUB, "name": ""}, "INVALID_REQUEST", "name"),
]


@pytest.mark.parametrize(("body", "code", "message"), BAD)
def test_refused_configs_answer_kafkas_error_and_change_nothing(
    w: dict[str, Any], body: dict[str, Any], code: str, message: str
) -> None:
    before = (version(w["prod"]), AuditEntry.objects.count())
    assert_error(api(w["admin"]).post(URL, body, format="json"), 400, code, message)
    assert ClientMetricsSubscription.objects.count() == 0
    assert (version(w["prod"]), AuditEntry.objects.count()) == before
    assert not DesiredChange.objects.exists() and not Push.objects.exists()


def test_only_admins_write_and_everyone_reads(w: dict[str, Any]) -> None:
    assert api(w["admin"]).post(URL, SUB, format="json").status_code == 201
    for who in ("alice", "bob", "auditor"):
        assert_error(api(w[who]).post(URL, {**SUB, "name": "x"}, format="json"), 403, "PERMISSION_DENIED", "")
        assert_error(api(w[who]).delete(URL + "app-metrics/"), 403, "PERMISSION_DENIED", "")
    for who in ("alice", "auditor"):  # its match names alice's tenant's client-id: bob's tenant does not read it
        listed = api(w[who]).get(URL).json()["results"]
        assert [s["name"] for s in listed] == ["app-metrics"]
        assert api(w[who]).get(URL + "app-metrics/").json()["interval_ms"] == 60000
    assert api(w["bob"]).get(URL).json()["results"] == []
    assert_error(api(w["bob"]).get(URL + "app-metrics/"), 404, "NOT_FOUND", "you may read")
    assert_error(api(w["admin"]).post(URL, SUB, format="json"), 409, "CONFLICT", "already has")
    assert_error(api(w["admin"]).get(URL + "nope/"), 404, "NOT_FOUND", "no client-metrics subscription 'nope'")
    assert_error(api(w["admin"]).put(URL + "nope/", {"metrics": "*"}, format="json"), 404, "NOT_FOUND", "nope")
    assert_error(api(w["admin"]).delete(URL + "nope/"), 404, "NOT_FOUND", "nope")
    assert_error(api(w["admin"]).get("/api/clusters/none/client-metrics/"), 404, "NOT_FOUND", "No cluster")


def test_list_is_cursor_paginated_by_name(w: dict[str, Any]) -> None:
    for name in ("c", "a", "b"):
        alter_subscription(w["prod"], name, {"metrics": "*"}, None)
    first = api(w["bob"]).get(URL, {"page_size": 2}).json()
    assert [s["name"] for s in first["results"]] == ["a", "b"] and first["next"]
    second = api(w["bob"]).get(first["next"]).json()
    assert [s["name"] for s in second["results"]] == ["c"] and second["next"] is None


# ------------------------------------------------------------------ versioned, pushed, audited


def test_create_update_delete_are_versioned_pushed_and_audited(w: dict[str, Any]) -> None:
    admin = api(w["admin"])
    created = admin.post(
        URL, {**SUB, "metrics": ["org.apache.kafka.producer.", " org.apache.kafka.consumer."]}, format="json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["version"] == 1 and body["changed"] is True
    metrics = "org.apache.kafka.producer.,org.apache.kafka.consumer."
    assert body["subscription"]["configs"] == {"metrics": metrics, "interval.ms": "60000", "match": "client_id=app-1"}
    changes = {(c.kind, c.resource, c.key, c.value) for c in DesiredChange.objects.filter(version=1)}
    assert changes == {
        (CLIENT_METRICS, "app-metrics", "metrics", metrics),
        (CLIENT_METRICS, "app-metrics", "interval.ms", "60000"),
        (CLIENT_METRICS, "app-metrics", "match", "client_id=app-1"),
    }
    assert sorted(Push.objects.filter(version=1).values_list("broker__broker_id", "state")) == [
        (1, "pending"),
        (2, "pending"),
    ]
    audit = AuditEntry.objects.filter(action="subscription_altered")
    assert {(e.entity, e.key, e.before, e.after) for e in audit} == {
        ("/config/client-metrics/app-metrics", "metrics", None, metrics),
        ("/config/client-metrics/app-metrics", "interval.ms", None, "60000"),
        ("/config/client-metrics/app-metrics", "match", None, "client_id=app-1"),
    }
    assert {e.actor_name for e in audit} == {"root"}

    push_everywhere(w["prod"])
    expected = {
        (CLIENT_METRICS, "app-metrics", "metrics"): metrics,
        (CLIENT_METRICS, "app-metrics", "interval.ms"): "60000",
        (CLIENT_METRICS, "app-metrics", "match"): "client_id=app-1",
    }
    assert held(w, 1) == held(w, 2) == expected
    assert set(Push.objects.filter(version=1).values_list("state", flat=True)) == {"applied"}

    # PATCH: only the interval changes; the match removed by PUT goes as a removal
    patched = admin.patch(URL + "app-metrics/", {"interval_ms": 1000}, format="json").json()
    assert patched["version"] == 2 and patched["changes"] == [
        {"key": "interval.ms", "before": "60000", "after": "1000"}
    ]
    assert admin.patch(URL + "app-metrics/", {"interval_ms": "1000"}, format="json").json()["changed"] is False
    assert version(w["prod"]) == 2
    put = admin.put(URL + "app-metrics/", {"metrics": "*", "interval_ms": 1000}, format="json").json()
    assert put["version"] == 3
    assert {(c["key"], c["after"]) for c in put["changes"]} == {("metrics", "*"), ("match", None)}
    push_everywhere(w["prod"])
    assert (
        held(w, 1)
        == held(w, 2)
        == {
            (CLIENT_METRICS, "app-metrics", "metrics"): "*",
            (CLIENT_METRICS, "app-metrics", "interval.ms"): "1000",
        }
    )

    deleted = admin.delete(URL + "app-metrics/").json()
    assert deleted["version"] == 4 and deleted["subscription"] is None
    assert not ClientMetricsSubscription.objects.exists()
    push_everywhere(w["prod"])
    assert held(w, 1) == held(w, 2) == {}


def test_desired_state_holds_every_subscription_so_a_full_push_restores_them(w: dict[str, Any]) -> None:
    alter_subscription(w["prod"], "all", {"metrics": "*"}, None)
    alter_subscription(w["prod"], "apps", {"metrics": "a.", "match": "client_id=app-.*", "interval.ms": "500"}, None)
    state = desired_state(w["prod"], w["prod"].brokers.get(broker_id=1))
    assert {i: v for i, v in state.items() if i.kind == CLIENT_METRICS} == {
        Item(CLIENT_METRICS, "all", "metrics"): "*",
        Item(CLIENT_METRICS, "all", "interval.ms"): "300000",
        Item(CLIENT_METRICS, "apps", "metrics"): "a.",
        Item(CLIENT_METRICS, "apps", "interval.ms"): "500",
        Item(CLIENT_METRICS, "apps", "match"): "client_id=app-.*",
    }
    push_everywhere(w["prod"])
    w["redis"].flushdb()  # broker 1 loses its data: the next push is the whole state
    alter_subscription(w["prod"], "all", {"metrics": "b."}, None)
    push_everywhere(w["prod"])
    assert held(w, 1)[(CLIENT_METRICS, "apps", "match")] == "client_id=app-.*"
    assert held(w, 1)[(CLIENT_METRICS, "all", "metrics")] == "b."


def test_drift_on_a_subscription_is_found_and_healed(w: dict[str, Any]) -> None:
    alter_subscription(w["prod"], "app-metrics", {"metrics": "*", "match": "client_id=app-1"}, None)
    push_everywhere(w["prod"])
    broker = w["prod"].brokers.get(broker_id=1)
    state = NamespaceState(w["redis"], namespace_for_broker("prod", 1), 1)
    store = state.stores[3].hash_key
    w["redis"].hset(store, "app-metrics|interval.ms", "100")  # changed behind the portal's back
    w["redis"].hset(store, "rogue|metrics", "*")  # a subscription the portal never made
    assert reconcile.reconcile_target(w["prod"], broker, mode="report").status == "drift"
    found = {(d.resource, d.key, d.status, d.desired, d.actual) for d in Drift.objects.filter(kind=CLIENT_METRICS)}
    assert found == {
        ("app-metrics", "interval.ms", "different", "300000", "100"),
        ("rogue", "metrics", "extra", None, "*"),
    }
    assert AuditEntry.objects.filter(action="drift_detected", entity="/config/client-metrics/rogue").exists()
    resolve.heal(w["prod"], broker, w["admin"])
    assert held(w, 1) == held(w, 2)
    assert reconcile.reconcile_target(w["prod"], broker, mode="report").status == "in-sync"


# ------------------------------------------------------------------ Kafka: client-metrics resources (type 16)


def test_a_real_kafka_cluster_gets_subscriptions_as_client_metrics_resources(
    kafka_cluster,
    engine_redis: redis.Redis,  # type: ignore[no-untyped-def]
) -> None:
    """One write to the cluster's metadata; every broker then answers the subscription (DescribeConfigs, type 16)."""
    cluster = Cluster.objects.create(
        name="kprod", connector=ConnectorKind.KAFKA, bootstrap_servers=kafka_cluster.bootstrap()
    )
    name = f"apps-{uuid.uuid4().hex[:8]}"

    def on_each_broker() -> list[dict[str, str]]:
        out = []
        for node in kafka_cluster.nodes:
            with AdminClient(node.address("PLAINTEXT")) as client:
                (result,) = client.describe_configs([(CLIENT_METRICS_RESOURCE, name, None)]).results
            out.append({c.name: c.value for c in result.configs if c.config_source == SOURCE_CLIENT_METRICS})
        return out

    alter_subscription(cluster, name, {"metrics": "*", "interval.ms": "1000", "match": "client_id=app-1"}, None)
    target_push.push_target(cluster.pk, None)
    assert on_each_broker() == [{"metrics": "*", "interval.ms": "1000", "match": "client_id=app-1"}] * 3
    alter_subscription(cluster, name, {"metrics": "*", "interval.ms": "1000"}, None)
    target_push.push_target(cluster.pk, None)
    assert [held.get("match") for held in on_each_broker()] == [None] * 3
    # drift: changed with kafka-configs behind the portal's back
    with AdminClient(kafka_cluster.nodes[1].address("PLAINTEXT")) as client:
        client.incremental_alter_configs({(CLIENT_METRICS_RESOURCE, name): [("interval.ms", 0, "100")]})
    wait_for("the change on every broker", lambda: all(h.get("interval.ms") == "100" for h in on_each_broker()))
    assert reconcile.reconcile_target(cluster, None, mode="report").status == "drift"
    drift = Drift.objects.get(cluster=cluster, kind=CLIENT_METRICS, resource=name)
    assert (drift.key, drift.desired, drift.actual) == ("interval.ms", "1000", "100")
    alter_subscription(cluster, name, None, None)
    target_push.push_target(cluster.pk, None)


# ------------------------------------------------------------------ tenants' requests


REQ = "/api/subscription-requests/"


def ask(w: dict[str, Any], who: str = "alice", **body: Any) -> Any:
    data = {"tenant": "team-a", "cluster": "prod", "name": "team-a-apps", "metrics": "*", "match": "client_id=app-1"}
    return api(w[who]).post(REQ, {**data, **body}, format="json")


def test_a_tenant_request_is_approved_applied_and_settled_when_every_broker_holds_it(w: dict[str, Any]) -> None:
    created = ask(w, reason="debugging latency")
    assert created.status_code == 201, created.content
    r = created.json()
    assert r["state"] == "submitted" and r["configs"] == {
        "metrics": "*",
        "interval.ms": "300000",
        "match": "client_id=app-1",
    }
    assert not ClientMetricsSubscription.objects.exists() and version(w["prod"]) == 0
    # the requester's tenant sees it, another member does not, admins and auditors do
    assert [x["id"] for x in api(w["alice"]).get(REQ).json()["results"]] == [r["id"]]
    assert api(w["bob"]).get(REQ).json()["results"] == []
    assert_error(api(w["bob"]).get(f"{REQ}{r['id']}/"), 404, "NOT_FOUND", "")
    assert len(api(w["auditor"]).get(REQ).json()["results"]) == 1
    # only an admin approves
    assert_error(api(w["alice"]).post(f"{REQ}{r['id']}/approve/"), 403, "PERMISSION_DENIED", "Only admins")
    assert_error(api(w["auditor"]).post(f"{REQ}{r['id']}/approve/"), 403, "PERMISSION_DENIED", "Auditors")

    approved = api(w["admin2"]).post(f"{REQ}{r['id']}/approve/", {"comment": "ok"}, format="json").json()
    assert approved["state"] == "applying" and approved["applied_version"] == 1 and approved["decided_by"] == "ops"
    assert [p["state"] for p in approved["pushes"]] == ["pending", "pending"]
    sub = ClientMetricsSubscription.objects.get(name="team-a-apps")
    assert (sub.metrics, sub.interval_ms, sub.match) == ("*", 300000, "client_id=app-1")
    entries = AuditEntry.objects.filter(action="subscription_altered")
    assert {e.tenant for e in entries} == {w["a"]} and all("subscription request #" in e.comment for e in entries)
    assert_error(api(w["admin"]).post(f"{REQ}{r['id']}/reject/", {"comment": "no"}, format="json"), 409, "CONFLICT", "")

    push_everywhere(w["prod"])
    assert SubscriptionRequest.objects.get(pk=r["id"]).state == "applied"
    assert held(w, 1)[(CLIENT_METRICS, "team-a-apps", "match")] == "client_id=app-1"
    trail = list(
        AuditEntry.objects.filter(entity="/config/client-metrics/team-a-apps", key="")
        .values_list("action", "before", "after")
        .order_by("pk")
    )
    assert trail == [
        ("submitted", None, "submitted"),
        ("approved", "submitted", "approved"),
        ("applying", "approved", "applying"),  # the move into applying too: no row starts where none ended
        ("applied", "applying", "applied"),
    ]

    # and the tenant asks for its removal
    gone = ask(w, operation="delete").json()
    assert gone["operation"] == "delete" and gone["configs"] is None
    subscription_requests.approve_subscription(w["admin"], gone["id"])
    push_everywhere(w["prod"])
    assert SubscriptionRequest.objects.get(pk=gone["id"]).state == "applied"
    assert not ClientMetricsSubscription.objects.exists() and held(w, 1) == {}


@pytest.mark.parametrize(
    ("match", "fragment"),
    [
        ("", "must select its own clients"),
        ("client_software_name=java", "must select its own clients"),
        ("client_id=other-app", "does not own the client-id 'other-app'"),
        ("client_id=app-.*", "may match client-ids tenant 'team-a' does not own"),
        ("client_id=svc-.*", "may match client-ids"),
        ("client_id=app-1|other", "may match client-ids"),
    ],
)
def test_a_tenant_may_only_select_its_own_clients(w: dict[str, Any], match: str, fragment: str) -> None:
    assert_error(ask(w, match=match), 403, "PERMISSION_DENIED", fragment)
    assert not SubscriptionRequest.objects.exists()


@pytest.mark.parametrize(
    "match",
    [
        "client_id=app-1",
        r"client_id=svc-a-.*",
        r"client_id=svc-a-batch.*,client_software_name=java",
        r"client_id=app\-1",
    ],
)
def test_owned_literals_and_prefixes_inside_owned_patterns_are_accepted(w: dict[str, Any], match: str) -> None:
    assert ask(w, match=match).status_code == 201


def test_requests_are_judged_by_kafkas_rules_and_decided_once(w: dict[str, Any]) -> None:
    assert_error(ask(w, interval_ms=10), 400, "INVALID_REQUEST", "interval must be between 100 and 3600000")
    assert_error(ask(w, match="client_id=(app"), 400, "INVALID_REQUEST", "Illegal client matching pattern")
    assert_error(ask(w, who="bob"), 403, "PERMISSION_DENIED", "not a member")
    assert_error(ask(w, operation="delete", name="nope"), 400, "INVALID_REQUEST", "no client-metrics subscription")
    # an admin's subscription selecting everyone's clients is not the tenant's to replace
    alter_subscription(w["prod"], "everyone", {"metrics": "*"}, None)
    assert_error(ask(w, name="everyone"), 403, "PERMISSION_DENIED", "selects clients tenant 'team-a' does not own")

    r = ask(w).json()
    assert_error(api(w["admin"]).post(f"{REQ}{r['id']}/reject/"), 400, "INVALID_REQUEST", "Say why")
    rejected = api(w["admin"]).post(f"{REQ}{r['id']}/reject/", {"comment": "use a name"}, format="json").json()
    assert rejected["state"] == "rejected" and rejected["decision_comment"] == "use a name"
    assert_error(api(w["alice"]).post(f"{REQ}{r['id']}/withdraw/"), 409, "CONFLICT", "")

    r2 = ask(w).json()
    assert api(w["alice"]).post(f"{REQ}{r2['id']}/withdraw/").json()["state"] == "withdrawn"
    assert version(w["prod"]) == 1  # only the admin's own subscription


def test_an_admin_does_not_approve_its_own_request_and_stale_requests_fail(w: dict[str, Any]) -> None:
    w["a"].members.add(w["admin"])
    mine = subscription_requests.submit_subscription(
        w["admin"], w["a"], w["prod"], name="s", configs={"metrics": "*", "match": "client_id=app-1"}
    )
    with pytest.raises(PermissionDenied, match="Nobody approves"):
        subscription_requests.approve_subscription(w["admin"], mine.pk)
    # a delete approved after the subscription went away fails with the reason
    alter_subscription(w["prod"], "t", {"metrics": "*", "match": "client_id=app-1"}, None)
    gone = subscription_requests.submit_subscription(w["alice"], w["a"], w["prod"], name="t", configs=None)
    alter_subscription(w["prod"], "t", None, None)
    assert subscription_requests.approve_subscription(w["admin2"], gone.pk).state == "failed"
    assert "no client-metrics subscription" in SubscriptionRequest.objects.get(pk=gone.pk).failure
    with pytest.raises(InvalidRequest):
        subscription_requests.withdraw_subscription(w["alice"], 99999)
