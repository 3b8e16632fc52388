"""The quota API: clusters, DescribeClientQuotas, AlterClientQuotas and the effective quota.

Only the database is needed: the rules come from the engine (``engine``), which
these tests exercise through the API rather than restate.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from engine.entities import DEFAULT
from quotas.models import (
    Alteration,
    Cluster,
    DesiredStateVersion,
    QuotaEntity,
    QuotaOp,
    QuotaValue,
    alter_client_quotas,
)

pytestmark = pytest.mark.django_db

D = "<default>"
PBR = "producer_byte_rate"


def _client(username: str, staff: bool) -> APIClient:
    user = get_user_model().objects.create_user(username, is_staff=staff)  # a token, no password: no slow hashing
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def staff() -> APIClient:
    return _client("admin", staff=True)


@pytest.fixture
def member() -> APIClient:
    return _client("tenant", staff=False)


@pytest.fixture
def reader() -> APIClient:
    """An auditor: reads every tenant's quotas (members read their own: tests/quotas/api/test_quota_isolation.py)."""
    client = _client("auditor", staff=False)
    user = get_user_model().objects.get(username="auditor")
    user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    return client


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.objects.create(name="prod", capacity_in_bytes_per_s=10**9, capacity_out_bytes_per_s=2 * 10**9)


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def counts() -> tuple[int, int]:
    return QuotaEntity.objects.count(), QuotaValue.objects.count()


def entity(**parts: str | None) -> list[dict[str, str | None]]:
    """API entity components; keyword client_id is Kafka's client-id."""
    return [{"entity_type": "client-id" if t == "client_id" else t, "name": n} for t, n in parts.items()]


def alter(client: APIClient, entries: list[dict[str, Any]], cluster: str = "prod", **extra: Any) -> Any:
    return client.post(f"/api/clusters/{cluster}/client-quotas/alter", {"entries": entries, **extra}, format="json")


def set_op(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": value}


def remove_op(key: str) -> dict[str, Any]:
    return {"key": key, "remove": True}


def seed(cluster: Cluster, rows: list[tuple[dict[str, str | None], str, float]]) -> None:
    """Store quotas through the domain operation (validated by the engine, versioned)."""
    entries = [Alteration(list(parts.items()), [QuotaOp(key, value)]) for parts, key, value in rows]
    alter_client_quotas(cluster, entries)


# ------------------------------------------------------------------ clusters


def test_staff_creates_and_changes_a_cluster_anyone_reads(staff: APIClient, member: APIClient) -> None:
    body = {"name": "eu-1", "connector": "engine", "scope": "cluster_wide", "capacity_in_bytes_per_s": 1000}
    response = staff.post("/api/clusters/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["desired_state_version"] == 0
    assert response.json()["brokers"] == [] and response.json()["listeners"] == []

    cluster = Cluster.objects.get(name="eu-1")
    cluster.brokers.create(broker_id=1, host="b1:9092")
    cluster.listeners.create(name="INTERNAL", is_inter_broker=True)
    got = member.get("/api/clusters/eu-1/").json()
    assert got["brokers"] == [{"broker_id": 1, "host": "b1:9092"}]
    assert got["listeners"] == [{"name": "INTERNAL", "is_inter_broker": True}]

    response = staff.patch("/api/clusters/eu-1/", {"description": "Frankfurt"}, format="json")
    assert response.status_code == 200 and response.json()["description"] == "Frankfurt"


def test_cluster_list_is_cursor_paginated(staff: APIClient) -> None:
    for i in range(3):
        Cluster.objects.create(name=f"c{i}")
    page = staff.get("/api/clusters/", {"page_size": 2}).json()
    assert [c["name"] for c in page["results"]] == ["c2", "c1"]
    rest = staff.get(page["next"]).json()
    assert [c["name"] for c in rest["results"]] == ["c0"] and rest["next"] is None


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({"name": "bad name"}, "name", "letters, digits"),
        ({"name": "prod"}, "name", "already exists"),
        ({"name": "k", "connector": "kafka", "scope": "cluster_wide"}, "scope", "per_broker"),
    ],
)
def test_invalid_cluster_is_refused(staff: APIClient, cluster: Cluster, body: dict, field: str, fragment: str) -> None:
    response = staff.post("/api/clusters/", body, format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "INVALID_REQUEST"
    assert error["message"].startswith(f"{field}: ") and fragment in error["message"]
    assert field in error["details"]


def test_cluster_cannot_be_renamed(staff: APIClient, cluster: Cluster) -> None:
    response = staff.patch("/api/clusters/prod/", {"name": "prod2"}, format="json")
    assert response.status_code == 400 and "cannot be renamed" in response.json()["message"]


def test_unknown_cluster_is_not_found(staff: APIClient) -> None:
    for response in (
        staff.get("/api/clusters/nope/"),
        staff.post("/api/clusters/nope/client-quotas/describe", {}, format="json"),
        alter(staff, [], cluster="nope"),
        staff.get("/api/clusters/nope/effective-quota", {"user": "a", "client_id": "b"}),
    ):
        assert response.status_code == 404
        assert response.json() == {
            "code": "NOT_FOUND",
            "message": "No cluster named 'nope'; GET /api/clusters/ lists them.",
            "details": None,
        }


# ------------------------------------------------------------------ access


def test_every_endpoint_needs_a_token(cluster: Cluster) -> None:
    anonymous = APIClient()
    for response in (
        anonymous.get("/api/clusters/"),
        anonymous.get("/api/clusters/prod/"),
        anonymous.post("/api/clusters/prod/client-quotas/describe", {}, format="json"),
        alter(anonymous, []),
        anonymous.get("/api/clusters/prod/effective-quota", {"user": "a", "client_id": "b"}),
    ):
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Token")
        assert response.json()["code"] == "NOT_AUTHENTICATED"


def test_writes_are_for_staff_only(member: APIClient, cluster: Cluster) -> None:
    before = counts()
    for response in (
        alter(member, [{"entity": entity(user="alice"), "ops": [set_op(PBR, 1024)]}]),
        member.post("/api/clusters/", {"name": "mine"}, format="json"),
        member.patch("/api/clusters/prod/", {"description": "x"}, format="json"),
    ):
        assert response.status_code == 403
        assert response.json()["code"] == "PERMISSION_DENIED"
        assert "staff" in response.json()["message"]
    assert counts() == before and version(cluster) == 0 and not Cluster.objects.filter(name="mine").exists()
    # a member still reads, scoped to what its tenants own (none here: an empty describe, no ip quotas)
    described = member.post("/api/clusters/prod/client-quotas/describe", {}, format="json")
    assert described.status_code == 200 and described.json()["results"] == []
    assert member.get("/api/clusters/prod/effective-quota", {"ip": "10.0.0.1"}).status_code == 403


# ------------------------------------------------------------------ AlterClientQuotas


def test_alter_sets_updates_and_removes(staff: APIClient, cluster: Cluster) -> None:
    response = alter(staff, [{"entity": entity(user="alice", client_id=None), "ops": [set_op(PBR, 1024)]}])
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "validate_only": False,
        "changed": True,
        "version": 1,
        "entries": [
            {
                "entity": [{"entity_type": "user", "name": "alice"}, {"entity_type": "client-id", "name": None}],
                "error_code": "NONE",
                "error_message": None,
            }
        ],
    }
    row = QuotaEntity.objects.get()
    assert (row.user, row.client_id, row.ip) == ("alice", D, None)  # null name = Kafka's default entity
    assert row.path == "/config/users/alice/clients/<default>"
    assert QuotaValue.objects.get().value == 1024.0

    # "<default>" names the same entity; a second key joins it, the first changes
    ops = [set_op(PBR, 2048), set_op("request_percentage", 12.5)]
    response = alter(staff, [{"entity": entity(user="alice", client_id=D), "ops": ops}])
    assert response.json()["version"] == 2
    assert dict(QuotaValue.objects.values_list("key", "value")) == {PBR: 2048.0, "request_percentage": 12.5}

    # setting the same value again and removing an absent key change nothing: the version stays
    ops = [set_op(PBR, 2048), remove_op("consumer_byte_rate")]
    response = alter(staff, [{"entity": entity(user="alice", client_id=D), "ops": ops}])
    assert response.json()["changed"] is False and response.json()["version"] == 2

    # removing the last keys deletes the entity (as Kafka forgets it)
    ops = [remove_op(PBR), {"key": "request_percentage", "value": 7, "remove": True}]
    response = alter(staff, [{"entity": entity(user="alice", client_id=D), "ops": ops}])
    assert response.json()["changed"] is True and response.json()["version"] == 3
    assert counts() == (0, 0)


def test_a_batch_of_thousands_of_entities_is_one_version(cluster: Cluster) -> None:
    """A big batch (a quotas file of a large cluster) is written whole, as one version, on every database: the
    entities are matched in chunks (SQLite refuses one OR of thousands of terms)."""
    seed(cluster, [({"user": f"u{i}"}, PBR, 1000.0) for i in range(0, 3000, 2)])  # every other one exists
    before = version(cluster)
    entries = [Alteration([("user", f"u{i}")], [QuotaOp(PBR, 2000.0)]) for i in range(3000)]
    alter_client_quotas(cluster, entries)
    assert version(cluster) == before + 1
    assert counts() == (3000, 3000)
    assert set(QuotaValue.objects.values_list("value", flat=True)) == {2000.0}


def test_a_batch_of_every_entity_shape_changes_exactly_the_entities_it_names(cluster: Cluster) -> None:
    """Entities are matched by shape (user, user and client id, client id, ip, defaults among them): an entity that
    shares a user or client id with one named in the batch keeps its own values."""
    kept = [
        ({"user": "alice", "client-id": "other"}, PBR, 11.0),
        ({"user": "bob"}, PBR, 12.0),
        ({"user": "bob", "client-id": "app"}, PBR, 13.0),  # the client id of a named client-id-only entity
        ({"user": None, "client-id": "web"}, PBR, 14.0),  # the default user of a named client id
    ]
    changed = [
        ({"user": "alice"}, PBR, 1.0),
        ({"user": "alice", "client-id": "app"}, PBR, 2.0),
        ({"client-id": "app"}, PBR, 3.0),
        ({"user": None}, PBR, 4.0),
        ({"user": "bob", "client-id": None}, PBR, 5.0),
        ({"ip": "10.0.0.1"}, "connection_creation_rate", 6.0),
        ({"ip": None}, "connection_creation_rate", 7.0),
    ]
    seed(cluster, kept + [(parts, key, value * 100) for parts, key, value in changed[:3]])  # some exist already
    seed(cluster, changed)  # one batch, one version
    held = {
        (e.user, e.client_id, e.ip): {v.key: v.value for v in e.quota_values.all()}
        for e in QuotaEntity.objects.filter(cluster=cluster)
    }
    assert held == {
        ("alice", "other", None): {PBR: 11.0}, ("bob", None, None): {PBR: 12.0}, ("bob", "app", None): {PBR: 13.0},
        (DEFAULT, "web", None): {PBR: 14.0}, ("alice", None, None): {PBR: 1.0}, ("alice", "app", None): {PBR: 2.0},
        (None, "app", None): {PBR: 3.0}, (DEFAULT, None, None): {PBR: 4.0}, ("bob", DEFAULT, None): {PBR: 5.0},
        (None, None, "10.0.0.1"): {"connection_creation_rate": 6.0},
        (None, None, DEFAULT): {"connection_creation_rate": 7.0},
    }


def test_alter_ip_entities_are_stored_canonical(staff: APIClient, cluster: Cluster) -> None:
    entries = [
        {"entity": entity(ip="0:0::1"), "ops": [set_op("connection_creation_rate", 10)]},
        {"entity": entity(ip=None), "ops": [set_op("connection_creation_rate", 5)]},
    ]
    assert alter(staff, entries).status_code == 200
    assert sorted(QuotaEntity.objects.values_list("ip", flat=True)) == ["::1", D]


def test_validate_only_changes_nothing(staff: APIClient, cluster: Cluster) -> None:
    seed(cluster, [({"user": "bob"}, PBR, 1000)])
    before = counts()
    entries = [
        {"entity": entity(user="alice"), "ops": [set_op(PBR, 1024)]},
        {"entity": entity(user="bob"), "ops": [remove_op(PBR)]},
    ]
    response = alter(staff, entries, validate_only=True)
    assert response.status_code == 200
    body = response.json()
    assert body["validate_only"] is True and body["changed"] is False and body["version"] == 1
    assert [e["error_code"] for e in body["entries"]] == ["NONE", "NONE"]
    assert counts() == before and version(cluster) == 1


def test_validate_only_still_refuses_invalid_entries(staff: APIClient, cluster: Cluster) -> None:
    response = alter(staff, [{"entity": entity(user="alice"), "ops": [set_op(PBR, -1)]}], validate_only=True)
    assert response.status_code == 400 and response.json()["code"] == "INVALID_REQUEST"


VALID = {"entity": entity(user="carol"), "ops": [set_op(PBR, 4096)]}

INVALID_ENTRIES = {
    "ip-with-user": ({"entity": entity(ip="10.0.0.1", user="bob"), "ops": []}, "cannot be combined with user"),
    "ip-with-client": ({"entity": entity(client_id="a", ip="10.0.0.1"), "ops": []}, "cannot be combined"),
    "unknown-key": ({"entity": entity(user="bob"), "ops": [set_op("producer_rate", 1)]}, "Invalid configuration key"),
    "key-of-other-kind": (
        {"entity": entity(user="bob"), "ops": [set_op("connection_creation_rate", 1)]},
        "applies to ip entities",
    ),
    "string-value": ({"entity": entity(user="bob"), "ops": [set_op(PBR, "100")]}, "must be a number, got str"),
    "bool-value": ({"entity": entity(user="bob"), "ops": [set_op(PBR, True)]}, "must be a number"),
    "negative": ({"entity": entity(user="bob"), "ops": [set_op(PBR, -5)]}, "must be greater than 0"),
    "zero": ({"entity": entity(user="bob"), "ops": [set_op("request_percentage", 0)]}, "must be greater than 0"),
    "fractional-long": ({"entity": entity(user="bob"), "ops": [set_op(PBR, 10.5)]}, "cannot be a fractional value"),
    "too-large-int": (
        {"entity": entity(ip="10.0.0.1"), "ops": [set_op("connection_creation_rate", 2**31)]},
        "too large for a INT",
    ),
    "unknown-entity-type": ({"entity": entity(group="g1"), "ops": []}, "Unknown entity type"),
    "empty-entity": ({"entity": [], "ops": [set_op(PBR, 1)]}, "at least one of user, client-id or ip"),
    "empty-name": ({"entity": entity(user=""), "ops": [set_op(PBR, 1)]}, "must not be empty"),
    "duplicate-entity-type": (
        {"entity": [{"entity_type": "user", "name": "a"}, {"entity_type": "user", "name": "b"}], "ops": []},
        "Duplicate entity type 'user'",
    ),
    "duplicate-key": ({"entity": entity(user="bob"), "ops": [set_op(PBR, 1), remove_op(PBR)]}, "altered twice"),
    "missing-value": ({"entity": entity(user="bob"), "ops": [{"key": PBR}]}, "send remove: true"),
    "bad-ip": ({"entity": entity(ip="db.example.com"), "ops": []}, "not a valid IPv4 or IPv6 address"),
    "long-name": ({"entity": entity(client_id="x" * 256), "ops": []}, "at most 255 fit"),
}


@pytest.mark.parametrize("case", list(INVALID_ENTRIES))
def test_invalid_entry_rejects_the_whole_batch(staff: APIClient, cluster: Cluster, case: str) -> None:
    seed(cluster, [({"user": "bob"}, "consumer_byte_rate", 1000)])
    before, version_before = counts(), version(cluster)
    bad, fragment = INVALID_ENTRIES[case]

    response = alter(staff, [VALID, bad])

    assert response.status_code == 400, response.json()
    error = response.json()
    assert error["code"] == "INVALID_REQUEST"
    assert "1 of 2 entries invalid" in error["message"] and "nothing was changed" in error["message"]
    assert fragment in error["message"]  # the first invalid entry's reason is in the message itself
    first, second = error["details"]["entries"]
    assert first == {"entity": VALID["entity"], "error_code": "NONE", "error_message": None}
    assert second["entity"] == bad["entity"]
    assert second["error_code"] == "INVALID_REQUEST" and fragment in second["error_message"]
    # nothing half-applied: carol's valid entry was not written, the version did not move
    assert counts() == before and version(cluster) == version_before
    assert not QuotaEntity.objects.filter(user="carol").exists()


@pytest.mark.parametrize(("literal", "fragment"), [("NaN", "finite"), ("Infinity", "finite"), ("-Infinity", "finite")])
def test_non_finite_values_are_refused_by_the_engine(staff: APIClient, cluster: Cluster, literal: str, fragment: str):
    body = json.dumps({"entries": [VALID, {"entity": entity(user="bob"), "ops": [set_op(PBR, 1)]}]})
    body = body.replace('"value": 1}', f'"value": {literal}}}')  # what json.dumps(float("nan")) writes
    response = staff.post("/api/clusters/prod/client-quotas/alter", body, content_type="application/json")
    assert response.status_code == 400
    assert f"{PBR} must be a finite number" in response.json()["details"]["entries"][1]["error_message"]
    assert counts() == (0, 0) and version(cluster) == 0


def test_a_key_altered_in_two_entries_of_one_batch_is_refused(staff: APIClient, cluster: Cluster) -> None:
    entries = [
        {"entity": entity(user="bob"), "ops": [set_op(PBR, 1)]},
        {"entity": entity(user="bob"), "ops": [set_op(PBR, 2)]},
    ]
    response = alter(staff, entries)
    assert response.status_code == 400
    assert [e["error_code"] for e in response.json()["details"]["entries"]] == ["NONE", "INVALID_REQUEST"]
    assert counts() == (0, 0)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"entries": [{"entity": entity(user="bob")}]}, "entries.0.ops: This field is required."),
        ({"entries": [{"entity": [{"entity_type": "user"}], "ops": []}]}, "entries.0.entity.0.name: This field is"),
        ({"entries": [{"entity": entity(user="b"), "ops": [{"key": PBR, "value": 1, "remove": "maybe"}]}]}, "remove"),
        ({}, "entries: This field is required."),
    ],
)
def test_malformed_alter_request(staff: APIClient, cluster: Cluster, body: dict, fragment: str) -> None:
    response = staff.post("/api/clusters/prod/client-quotas/alter", body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST" and fragment in response.json()["message"]
    assert response.json()["details"]  # the full per-field errors


def test_body_that_is_not_json_is_an_invalid_request(staff: APIClient, cluster: Cluster) -> None:
    response = staff.post("/api/clusters/prod/client-quotas/alter", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST" and "could not be read as JSON" in response.json()["message"]


def test_database_refuses_what_the_api_would(cluster: Cluster) -> None:
    QuotaEntity.objects.create(cluster=cluster, user="alice")
    for bad in (
        {"user": "alice"},  # the same entity twice (NULL client-id): partial unique index
        {"user": "bob", "ip": "10.0.0.1"},
        {},
        {"client_id": ""},
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            QuotaEntity.objects.create(cluster=cluster, **bad)
    # the same name in another shape is another entity
    QuotaEntity.objects.create(cluster=cluster, user="alice", client_id=D)
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaValue.objects.create(entity=QuotaEntity.objects.first(), key=PBR, value=0)


# ------------------------------------------------------------------ DescribeClientQuotas

FIXTURE = [
    ({"user": "alice"}, PBR, 1000),
    ({"user": "alice", "client-id": "app1"}, PBR, 2000),
    ({"user": "alice", "client-id": D}, PBR, 3000),
    ({"user": D}, "consumer_byte_rate", 500),
    ({"user": D, "client-id": D}, "consumer_byte_rate", 600),
    ({"client-id": "app1"}, "request_percentage", 50),
    ({"client-id": D}, "request_percentage", 25),
    ({"ip": "10.0.0.1"}, "connection_creation_rate", 10),
    ({"ip": "2001:db8::1"}, "connection_creation_rate", 20),
    ({"ip": D}, "connection_creation_rate", 5),
]


@pytest.fixture
def described(cluster: Cluster) -> Cluster:
    seed(cluster, FIXTURE)
    other = Cluster.objects.create(name="other")
    seed(other, [({"user": "alice"}, PBR, 1)])  # never seen through prod
    return cluster


def describe(client: APIClient, components: list[dict], strict: bool = False, **params: Any) -> Any:
    url = "/api/clusters/prod/client-quotas/describe"
    if params:
        url += "?" + "&".join(f"{k}={v}" for k, v in params.items())
    return client.post(url, {"components": components, "strict": strict}, format="json")


def entities_of(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200, response.json()
    return [e["entity"] for e in response.json()["results"]]


def c(entity_type: str, match_type: str, match: str | None = None) -> dict[str, Any]:
    return {"entity_type": entity_type, "match_type": match_type, "match": match}


@pytest.mark.parametrize(
    ("components", "strict", "expected"),
    [
        ([], False, [dict(parts) for parts, _, _ in FIXTURE]),
        ([], True, []),
        ([c("user", "exact", "alice")], False, [{"user": "alice"}, {"user": "alice", "client-id": "app1"},
                                                {"user": "alice", "client-id": D}]),
        ([c("user", "exact", "alice")], True, [{"user": "alice"}]),
        ([c("user", "default")], False, [{"user": D}, {"user": D, "client-id": D}]),
        ([c("user", "default")], True, [{"user": D}]),
        ([c("user", "specified")], True, [{"user": "alice"}]),
        ([c("user", "specified"), c("client-id", "default")], True, [{"user": "alice", "client-id": D}]),
        ([c("user", "specified"), c("client-id", "specified")], False, [{"user": "alice", "client-id": "app1"}]),
        ([c("client-id", "exact", "app1")], False, [{"user": "alice", "client-id": "app1"}, {"client-id": "app1"}]),
        ([c("client-id", "exact", "app1")], True, [{"client-id": "app1"}]),
        ([c("client-id", "default")], True, [{"client-id": D}]),
        ([c("client-id", "specified")], True, [{"client-id": "app1"}]),
        ([c("ip", "specified")], False, [{"ip": "10.0.0.1"}, {"ip": "2001:db8::1"}]),
        ([c("ip", "default")], True, [{"ip": D}]),
        ([c("ip", "exact", "10.0.0.9")], False, []),
        ([c("ip", "exact", "2001:0db8:0:0::1")], True, [{"ip": "2001:db8::1"}]),  # any spelling of the address
        ([c("user", "exact", "nobody")], False, []),
    ],
)
def test_describe_filters(reader: APIClient, described: Cluster, components: list, strict: bool, expected: list):
    assert entities_of(describe(reader, components, strict)) == expected


def test_describe_answers_values(reader: APIClient, described: Cluster) -> None:
    seed(described, [({"user": "alice"}, "request_percentage", 12.5)])
    response = describe(reader, [c("user", "exact", "alice")], strict=True)
    values = {PBR: 1000.0, "request_percentage": 12.5}
    scopes = {PBR: "per_broker", "request_percentage": "per_broker"}
    assert response.json()["results"] == [
        {"entity": {"user": "alice"}, "display": "alice (all client-ids)", "values": values, "budget_scopes": scopes}
    ]


def test_describe_pages_with_the_same_body(reader: APIClient, described: Cluster) -> None:
    seen: list[dict[str, str]] = []
    response = describe(reader, [], page_size=2)
    while True:
        seen += entities_of(response)
        assert len(response.json()["results"]) <= 2
        if response.json()["next"] is None:
            break
        response = reader.post(response.json()["next"], {"components": [], "strict": False}, format="json")
    assert seen == [dict(parts) for parts, _, _ in FIXTURE]


@pytest.mark.parametrize(
    ("components", "fragment"),
    [
        ([c("ip", "specified"), c("user", "default")], "ip filter component cannot be combined"),
        ([c("user", "default"), c("user", "specified")], "Duplicate user filter component"),
        ([c("user", "exact")], "needs a non-empty match name"),
        ([c("user", "default", "alice")], "takes no match name"),
        ([c("group", "default")], "not a valid choice"),
        ([c("user", "prefix", "a")], "not a valid choice"),
    ],
)
def test_describe_refuses_invalid_filters(reader: APIClient, described: Cluster, components: list, fragment: str):
    response = describe(reader, components)
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST" and fragment in response.json()["message"]


# ------------------------------------------------------------------ effective quota

USER, CLIENT = "alice", "app1"
LEVELS = {  # Kafka's precedence for (alice, app1), most specific first
    1: ({"user": USER, "client-id": CLIENT}, "/config/users/alice/clients/app1", "alice:app1"),
    2: ({"user": USER, "client-id": D}, "/config/users/alice/clients/<default>", "alice:app1"),
    3: ({"user": USER}, "/config/users/alice", "alice:"),
    4: ({"user": D, "client-id": CLIENT}, "/config/users/<default>/clients/app1", "alice:app1"),
    5: ({"user": D, "client-id": D}, "/config/users/<default>/clients/<default>", "alice:app1"),
    6: ({"user": D}, "/config/users/<default>", "alice:"),
    7: ({"client-id": CLIENT}, "/config/clients/app1", ":app1"),
    8: ({"client-id": D}, "/config/clients/<default>", ":app1"),
}


def effective(client: APIClient, **query: str) -> dict[str, Any]:
    response = client.get("/api/clusters/prod/effective-quota", query)
    assert response.status_code == 200, response.json()
    return response.json()


def test_effective_quota_walks_the_eight_levels(staff: APIClient, reader: APIClient, cluster: Cluster) -> None:
    seed(cluster, [(parts, PBR, level * 1000) for level, (parts, _, _) in LEVELS.items()])
    for level, (parts, path, tags) in LEVELS.items():
        body = effective(reader, user=USER, client_id=CLIENT)
        assert (body["user"], body["client_id"], body["ip"]) == (USER, CLIENT, None)
        assert set(body["quotas"]) == {PBR, "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
        produce = body["quotas"][PBR]
        assert produce["value"] == level * 1000.0
        assert (produce["level"], produce["entity"], produce["tags"]) == (level, path, tags)
        assert produce["skipped"] == [{"level": lv, "entity": LEVELS[lv][1]} for lv in range(1, level)]
        assert body["quotas"]["consumer_byte_rate"]["value"] is None  # other keys resolve on their own
        # remove the level that answered; the next one takes over
        entity_parts = [{"entity_type": t, "name": n} for t, n in parts.items()]
        assert alter(staff, [{"entity": entity_parts, "ops": [remove_op(PBR)]}]).status_code == 200

    produce = effective(reader, user=USER, client_id=CLIENT)["quotas"][PBR]
    assert (produce["value"], produce["level"], produce["entity"]) == (None, None, None)
    assert [s["level"] for s in produce["skipped"]] == list(range(1, 9))


def test_effective_quota_per_key_and_for_other_clients(reader: APIClient, cluster: Cluster) -> None:
    seed(
        cluster,
        [
            ({"user": USER, "client-id": CLIENT}, PBR, 1000),
            ({"user": D}, "consumer_byte_rate", 2000),
            ({"client-id": D}, "request_percentage", 30),
        ],
    )
    mine = effective(reader, user=USER, client_id=CLIENT)["quotas"]
    assert (mine[PBR]["level"], mine["consumer_byte_rate"]["level"], mine["request_percentage"]["level"]) == (1, 6, 8)
    other = effective(reader, user="bob", client_id="web")["quotas"]
    assert other[PBR]["value"] is None
    assert other["consumer_byte_rate"]["entity"] == "/config/users/<default>"
    assert other["request_percentage"]["entity"] == "/config/clients/<default>"
    # Kafka's quirk, kept by the engine: an empty client-id gives an empty sensor tag, and a client
    # quota with only client-id entities then applies to nobody, <default> included
    anonymous_client = effective(reader, user="bob", client_id="")["quotas"]["request_percentage"]
    assert (anonymous_client["value"], anonymous_client["tags"]) == (None, ":")


def test_effective_quota_matches_sanitized_user_names(reader: APIClient, cluster: Cluster) -> None:
    principal = "CN=alice smith,O=ACME"  # Kafka sanitizes user names (URL encoding) before matching
    seed(cluster, [({"user": principal}, PBR, 1000)])
    produce = effective(reader, user=principal, client_id="app")["quotas"][PBR]
    assert (produce["value"], produce["level"]) == (1000.0, 3)
    assert produce["entity"] == f"/config/users/{principal}"


def test_effective_quota_for_an_ip(reader: APIClient, cluster: Cluster) -> None:
    none = effective(reader, ip="10.0.0.2")
    assert none["ip"] == "10.0.0.2" and list(none["quotas"]) == ["connection_creation_rate"]
    rate = none["quotas"]["connection_creation_rate"]
    assert (rate["value"], rate["level"]) == (None, None)
    assert rate["skipped"] == [
        {"level": 1, "entity": "/config/ips/10.0.0.2"},
        {"level": 2, "entity": "/config/ips/<default>"},
    ]

    seed(cluster, [({"ip": D}, "connection_creation_rate", 5), ({"ip": "::1"}, "connection_creation_rate", 10)])
    rate = effective(reader, ip="10.0.0.2")["quotas"]["connection_creation_rate"]
    assert (rate["value"], rate["level"], rate["entity"]) == (5.0, 2, "/config/ips/<default>")
    assert rate["skipped"] == [{"level": 1, "entity": "/config/ips/10.0.0.2"}]
    body = effective(reader, ip="0:0::1")  # any spelling of the address finds its entity
    rate = body["quotas"]["connection_creation_rate"]
    assert body["ip"] == "::1" and (rate["value"], rate["level"], rate["skipped"]) == (10.0, 1, [])


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ({}, "Give both user and client_id"),
        ({"user": "alice"}, "Give both user and client_id"),
        ({"ip": "10.0.0.1", "user": "alice"}, "not both"),
        ({"ip": "not-an-ip"}, "not a valid IPv4 or IPv6 address"),
    ],
)
def test_effective_quota_refuses_unclear_questions(reader: APIClient, cluster: Cluster, query: dict, fragment: str):
    response = reader.get("/api/clusters/prod/effective-quota", query)
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST" and fragment in response.json()["message"]


# ------------------------------------------------------------------ schema


def test_schema_documents_the_quota_api(client: Any) -> None:
    paths = client.get("/api/schema/", {"format": "json"}).json()["paths"]
    assert paths["/api/clusters/{cluster}/client-quotas/describe"]["post"]["operationId"] == "describe_client_quotas"
    assert paths["/api/clusters/{cluster}/client-quotas/alter"]["post"]["operationId"] == "alter_client_quotas"
    assert paths["/api/clusters/{cluster}/effective-quota"]["get"]["operationId"] == "effective_quota"
    assert {"get", "post"} <= set(paths["/api/clusters/"]) and "delete" not in paths["/api/clusters/{cluster}/"]
