"""Broker and topic configs: IncrementalAlterConfigs on the desired state, validated whole by the engine.

The rules are the engine's (``ConnectionConfig.from_props``, ``ReplicationThrottleStore.validate``); these
tests check that the API reaches them on the combined configs, refuses a bad batch whole (nothing stored,
version kept, nothing audited), applies and audits a good one, and that only admins write.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from quotas.models import AuditAction, AuditEntry, BrokerConfig, Cluster, DesiredStateVersion, TopicConfig
from tests.people import api, make_user

pytestmark = pytest.mark.django_db

URL = "/api/clusters/prod/broker-configs"
DEFAULT: dict[str, Any] = {"broker": None}


def _client(username: str, *, staff: bool = False, groups: tuple[str, ...] = ()) -> APIClient:
    return api(make_user(username, staff=staff, groups=groups))


@pytest.fixture
def admin() -> APIClient:
    return _client("admin", staff=True)


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster.objects.create(name="prod")
    for broker_id in (1, 2):
        cluster.brokers.create(broker_id=broker_id, host=f"b{broker_id}:9092")
    cluster.listeners.create(name="PLAINTEXT")
    cluster.listeners.create(name="INTERNAL", is_inter_broker=True)
    return cluster


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def post(client: APIClient, resource: dict[str, Any], ops: list[dict[str, Any]], **extra: Any) -> Any:
    return client.post(URL, {"resource": resource, "ops": ops, **extra}, format="json")


def op(key: str, value: Any = None, kind: str = "SET") -> dict[str, Any]:
    return {"key": key, "value": value, "op": kind}


def state() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
    """Everything a refused batch must leave as it was."""
    brokers = sorted(BrokerConfig.objects.values_list("broker__broker_id", "key", "value"), key=str)
    topics = sorted(TopicConfig.objects.values_list("topic", "key", "value"))
    return brokers, topics, AuditEntry.objects.count()


@pytest.fixture
def seeded(admin: APIClient, cluster: Cluster) -> Cluster:
    """Some stored configs, so 'nothing changed' means something."""
    assert post(admin, DEFAULT, [op("max.connections", 100)]).status_code == 200
    assert post(admin, {"topic": "orders"}, [op("leader.replication.throttled.replicas", "0:1")]).status_code == 200
    return cluster


# ------------------------------------------------------------------ refused whole


BAD = [
    # (resource, ops, code, fragment of the message)
    (DEFAULT, [op("max.connections.bogus", "1")], "INVALID_CONFIG", "Unknown connection quota config"),
    (DEFAULT, [op("listener.name.PLAINTEXT.max.bogus", "1")], "INVALID_CONFIG", "Unknown listener config"),
    (DEFAULT, [op("no.such.thing", "1")], "INVALID_CONFIG", "no.such.thing"),
    (DEFAULT, [op("max.connections", -1)], "INVALID_CONFIG", "at least 0"),
    (DEFAULT, [op("max.connection.creation.rate", "-5")], "INVALID_CONFIG", "at least 0"),
    (DEFAULT, [op("leader.replication.throttled.rate", -1)], "INVALID_CONFIG", "Value must be at least 0"),
    (DEFAULT, [op("max.connections", "ten")], "INVALID_CONFIG", "must be an integer"),
    (DEFAULT, [op("max.connections", 1.5)], "INVALID_CONFIG", "must be an integer"),
    (DEFAULT, [op("max.connections.per.ip", True)], "INVALID_CONFIG", "must be an integer"),
    ({"broker": 1}, [op("follower.replication.throttled.rate", "1.5")], "INVALID_CONFIG", "LONG"),
    (DEFAULT, [op("replica.alter.log.dirs.io.max.bytes.per.second", "fast")], "INVALID_CONFIG", "LONG"),
    (DEFAULT, [op("listener.name.EXTERNAL.max.connections", 10)], "INVALID_CONFIG", "Unknown listener 'EXTERNAL'"),
    ({"broker": 2}, [op("listener.name.nope.max.connection.creation.rate", 10)], "INVALID_CONFIG", "'NOPE'"),
    (DEFAULT, [op("listener.name.INTERNAL.max.connections", 0)], "INVALID_CONFIG", "must be positive"),
    (DEFAULT, [op("max.connections.per.ip.overrides", "1.2.3.4")], "INVALID_CONFIG", "not of the form ip:count"),
    (DEFAULT, [op("max.connections.per.ip.overrides", "host-a:5")], "INVALID_CONFIG", "not a valid IPv4"),
    (DEFAULT, [op("max.connections.per.ip.overrides", "1.2.3.4:x")], "INVALID_CONFIG", "must be an integer"),
    (DEFAULT, [op("max.connections.per.ip.overrides", "1.2.3.4:-1")], "INVALID_CONFIG", "at least 0"),
    (DEFAULT, [op("max.connections.per.ip", 0)], "INVALID_CONFIG", "only if max.connections.per.ip.overrides"),
    ({"topic": "t"}, [op("leader.replication.throttled.replicas", "0:")], "INVALID_CONFIG", "has no broker id"),
    ({"topic": "t"}, [op("follower.replication.throttled.replicas", "a:1")], "INVALID_CONFIG", "'a'"),
    ({"topic": "t"}, [op("leader.replication.throttled.replicas", "*,0:1")], "INVALID_CONFIG", "'*'"),
    ({"topic": "t"}, [op("leader.replication.throttled.replicas", "0:1,,1:2")], "INVALID_CONFIG", "empty"),
    ({"topic": "t"}, [op("max.connections", 5)], "INVALID_CONFIG", "Unknown replication throttle config"),
    ({"topic": "t"}, [op("leader.replication.throttled.rate", 5)], "INVALID_CONFIG", "is a broker config"),
    (DEFAULT, [op("leader.replication.throttled.replicas", "*")], "INVALID_CONFIG", "is a topic config"),
    (DEFAULT, [op("listeners", "PLAINTEXT,EXTERNAL")], "INVALID_CONFIG", "listeners come from the cluster"),
    # a good op does not carry a bad one: the batch is refused whole
    (DEFAULT, [op("max.connections", 500), op("max.connection.creation.rate", -1)], "INVALID_CONFIG", "at least 0"),
    # the request's own shape
    (DEFAULT, [op("max.connections", 1), op("max.connections", 2)], "INVALID_REQUEST", "duplicate config keys"),
    ({"broker": 9}, [op("max.connections", 1)], "INVALID_REQUEST", "has no broker 9"),
    ({"broker": -1}, [op("max.connections", 1)], "INVALID_REQUEST", "broker id"),
    ({"broker": 1, "topic": "t"}, [op("max.connections", 1)], "INVALID_REQUEST", "exactly one"),
    ({}, [op("max.connections", 1)], "INVALID_REQUEST", "exactly one"),
    ({"topic": "a/b"}, [op("leader.replication.throttled.replicas", "*")], "INVALID_REQUEST", "illegal"),
    (DEFAULT, [op("max.connections", 1, "APPEND")], "INVALID_REQUEST", "not a valid choice"),
    (DEFAULT, [op("max.connections", None)], "INVALID_REQUEST", "needs a value"),
    (DEFAULT, [], "INVALID_REQUEST", "ops"),
]


@pytest.mark.parametrize(("resource", "ops", "code", "fragment"), BAD)
def test_a_bad_batch_is_refused_whole(
    admin: APIClient, seeded: Cluster, resource: dict[str, Any], ops: list[dict[str, Any]], code: str, fragment: str
) -> None:
    before, v = state(), version(seeded)
    for validate_only in (False, True):
        response = post(admin, resource, ops, validate_only=validate_only)
        assert response.status_code == 400, response.json()
        body = response.json()
        assert body["code"] == code and fragment in body["message"], body
        assert state() == before and version(seeded) == v


def test_invalid_config_names_the_resource_and_key(admin: APIClient, seeded: Cluster) -> None:
    body = post(admin, {"broker": 1}, [op("max.connection.creation.rate", "x")]).json()
    assert body["details"] == {"resource": "/config/brokers/1", "key": "max.connection.creation.rate"}


def test_connection_configs_are_judged_combined_across_default_and_brokers(admin: APIClient, cluster: Cluster) -> None:
    # per.ip=0 needs overrides: fine in one batch, and a broker inherits the default's overrides
    assert post(admin, DEFAULT, [op("max.connections.per.ip.overrides", "10.0.0.1:50")]).status_code == 200
    assert post(admin, {"broker": 1}, [op("max.connections.per.ip", 0)]).status_code == 200
    v = version(cluster)
    # deleting the default's overrides would leave broker 1 invalid, so it is refused, naming broker 1
    response = post(admin, DEFAULT, [op("max.connections.per.ip.overrides", kind="DELETE")])
    assert response.status_code == 400 and response.json()["code"] == "INVALID_CONFIG"
    assert "/config/brokers/1" in response.json()["message"]
    assert version(cluster) == v and BrokerConfig.objects.filter(key="max.connections.per.ip.overrides").exists()
    # a broker's own overrides make the default's removable
    assert post(admin, {"broker": 1}, [op("max.connections.per.ip.overrides", "10.0.0.2:5")]).status_code == 200
    assert post(admin, DEFAULT, [op("max.connections.per.ip.overrides", kind="DELETE")]).status_code == 200


# ------------------------------------------------------------------ applied and audited


def test_good_changes_are_applied_versioned_and_audited(admin: APIClient, cluster: Cluster) -> None:
    v0 = version(cluster)
    ops = [
        op("max.connections", 1000),
        op("max.connections.per.ip", " 20 "),
        op("max.connections.per.ip.overrides", "1.2.3.4:5,[::1]:3"),
        op("max.connection.creation.rate", "30"),
        op("listener.name.internal.max.connections", 400),  # listener names are matched as Kafka upper-cases them
        op("listener.name.PLAINTEXT.max.connection.creation.rate", 10),
        op("leader.replication.throttled.rate", "1048576"),
        op("follower.replication.throttled.rate", 2048.0),
        op("replica.alter.log.dirs.io.max.bytes.per.second", 0),
    ]
    response = post(admin, DEFAULT, ops)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["changed"] is True and body["version"] == v0 + 1 == version(cluster)
    assert body["resource"] == {"broker": None} and body["validate_only"] is False
    assert body["configs"] == {
        "follower.replication.throttled.rate": "2048",
        "leader.replication.throttled.rate": "1048576",
        "listener.name.PLAINTEXT.max.connection.creation.rate": "10",
        "listener.name.internal.max.connections": "400",
        "max.connection.creation.rate": "30",
        "max.connections": "1000",
        "max.connections.per.ip": "20",
        "max.connections.per.ip.overrides": "1.2.3.4:5,[::1]:3",
        "replica.alter.log.dirs.io.max.bytes.per.second": "0",
    }
    assert BrokerConfig.objects.filter(cluster=cluster, broker__isnull=True).count() == len(ops)
    audit = AuditEntry.objects.filter(action=AuditAction.CONFIG_ALTERED)
    assert audit.count() == len(ops)
    entry = audit.get(key="max.connections")
    assert (entry.entity, entry.before, entry.after) == ("/config/brokers/<default>", None, "1000")
    assert entry.actor_name == "admin" and entry.tenant is None
    assert entry.cluster == cluster and entry.comment == f"desired-state version {v0 + 1}"

    # a change and a delete: one more version, audited with before and after
    response = post(admin, DEFAULT, [op("max.connections", 900), op("max.connection.creation.rate", kind="DELETE")])
    assert response.json()["version"] == v0 + 2
    assert response.json()["changes"] == [
        {"key": "max.connection.creation.rate", "before": "30", "after": None},
        {"key": "max.connections", "before": "1000", "after": "900"},
    ]
    assert [(e.key, e.before, e.after) for e in audit.order_by("pk")][-2:] == [
        ("max.connection.creation.rate", "30", None),
        ("max.connections", "1000", "900"),
    ]
    # the same values again, or deleting what is not there: nothing changes, the version stays
    response = post(admin, DEFAULT, [op("max.connections", "900"), op("max.connection.creation.rate", kind="DELETE")])
    assert response.json()["changed"] is False and version(cluster) == v0 + 2
    assert audit.count() == len(ops) + 2


def test_broker_and_topic_configs(admin: APIClient, cluster: Cluster) -> None:
    response = post(admin, {"broker": 2}, [op("leader.replication.throttled.rate", 500)])
    assert response.status_code == 200 and response.json()["resource"] == {"broker": 2}
    assert BrokerConfig.objects.get(broker__broker_id=2).value == "500"

    topic = {"topic": "orders"}
    ops = [op("leader.replication.throttled.replicas", "0:1, 1:2,"), op("follower.replication.throttled.replicas", "*")]
    response = post(admin, topic, ops)
    assert response.status_code == 200, response.json()
    assert response.json()["configs"] == {
        "follower.replication.throttled.replicas": "*",
        "leader.replication.throttled.replicas": "0:1,1:2",  # the engine's canonical text
    }
    entry = AuditEntry.objects.get(key="follower.replication.throttled.replicas")
    assert entry.entity == "/config/topics/orders" and entry.after == "*"
    # a list is accepted as Kafka's List type; an empty list is Kafka's default, so it deletes the key
    response = post(admin, topic, [op("leader.replication.throttled.replicas", ["3:1"])])
    assert response.json()["configs"]["leader.replication.throttled.replicas"] == "3:1"
    response = post(admin, topic, [op("leader.replication.throttled.replicas", "")])
    assert "leader.replication.throttled.replicas" not in response.json()["configs"]
    assert TopicConfig.objects.filter(topic="orders").count() == 1


def test_validate_only_changes_nothing(admin: APIClient, seeded: Cluster) -> None:
    before, v = state(), version(seeded)
    ops = [op("max.connections", 7), op("max.connection.creation.rate", 3)]
    response = post(admin, DEFAULT, ops, validate_only=True)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["validate_only"] is True and body["changed"] is False and body["version"] == v
    assert body["configs"] == {"max.connections": "7", "max.connection.creation.rate": "3"}
    assert body["changes"] == [
        {"key": "max.connection.creation.rate", "before": None, "after": "3"},
        {"key": "max.connections", "before": "100", "after": "7"},
    ]
    assert state() == before and version(seeded) == v


# ------------------------------------------------------------------ listing


def test_list_is_cursor_paginated_and_filtered(admin: APIClient, seeded: Cluster) -> None:
    ops = [op("max.connections", 50), op("leader.replication.throttled.rate", 9)]
    assert post(admin, {"broker": 1}, ops).status_code == 200
    page = admin.get(URL, {"page_size": 2}).json()
    assert [(r["resource"], r["key"], r["value"]) for r in page["results"]] == [
        ({"broker": None}, "max.connections", "100"),
        ({"broker": 1}, "leader.replication.throttled.rate", "9"),  # a batch is written in key order
    ]
    rest = admin.get(page["next"]).json()
    assert [r["key"] for r in rest["results"]] == ["max.connections"] and rest["next"] is None

    assert [r["key"] for r in admin.get(URL, {"broker": "default"}).json()["results"]] == ["max.connections"]
    assert len(admin.get(URL, {"broker": "1"}).json()["results"]) == 2
    topics = admin.get(URL, {"resource_type": "topic"}).json()["results"]
    assert [(r["resource"], r["key"], r["value"]) for r in topics] == [
        ({"topic": "orders"}, "leader.replication.throttled.replicas", "0:1")
    ]
    assert admin.get(URL, {"resource_type": "topic", "topic": "other"}).json()["results"] == []
    assert admin.get(URL, {"resource_type": "group"}).json()["code"] == "INVALID_REQUEST"
    assert admin.get(URL, {"broker": "x"}).json()["code"] == "INVALID_REQUEST"
    assert admin.get("/api/clusters/nope/broker-configs").json()["code"] == "NOT_FOUND"


# ------------------------------------------------------------------ who may


@pytest.mark.parametrize(
    ("who", "writes"),
    [
        ({"staff": True}, True),
        ({"groups": ("quota-admins",)}, True),
        ({}, False),  # a tenant member
        ({"groups": ("auditors",)}, False),
        ({"staff": True, "groups": ("auditors",)}, False),  # an auditor never writes, even as staff
    ],
)
def test_admins_write_everyone_signed_in_reads(seeded: Cluster, who: dict[str, Any], writes: bool) -> None:
    client = _client("someone", **who)
    assert client.get(URL).status_code == 200
    before, v = state(), version(seeded)
    response = post(client, DEFAULT, [op("max.connections", 42)])
    if writes:
        assert response.status_code == 200 and version(seeded) == v + 1
    else:
        assert response.status_code == 403 and response.json()["code"] == "PERMISSION_DENIED"
        assert state() == before and version(seeded) == v


def test_anonymous_gets_401(seeded: Cluster) -> None:
    anonymous = APIClient()
    for response in (anonymous.get(URL), post(anonymous, DEFAULT, [op("max.connections", 1)])):
        assert response.status_code == 401 and response.json()["code"] == "NOT_AUTHENTICATED"


def test_config_audit_is_for_admins_and_auditors(admin: APIClient, seeded: Cluster) -> None:
    """Config changes belong to no tenant, so a member's audit view does not show them."""
    assert any(e["action"] == "config_altered" for e in admin.get("/api/audit/").json()["results"])
    auditor = _client("audit", groups=("auditors",))
    assert any(e["action"] == "config_altered" for e in auditor.get("/api/audit/").json()["results"])
    assert _client("member").get("/api/audit/").json()["results"] == []


def test_schema_documents_the_config_api(client: Any) -> None:
    paths = client.get("/api/schema/", {"format": "json"}).json()["paths"]
    assert set(paths["/api/clusters/{cluster}/broker-configs"]) == {"get", "post"}
    assert "text/plain" in paths["/api/metrics/memory"]["get"]["responses"]["200"]["content"]
