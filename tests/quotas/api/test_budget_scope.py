"""Budget scope per quota value (issue 28): per_broker, Kafka's meaning, or cluster_wide, a budget for the sum over a
Kafka cluster's brokers. Through the quota API: set at any of the 8 user/client-id levels, shown by describe and the
effective quota, kept when only the number changes, logged as a ``budget-scope`` item of the change log, audited on
its own; refused with INVALID_BUDGET_SCOPE and a sentence naming what is allowed, never half-applied. Only the
database is needed (the push of the scope is tests/push/test_budget_scope_push.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from rest_framework.test import APIClient

from quotas.choices import ConnectorKind, QuotaScope
from quotas.connectors.base import BUDGET_SCOPE, QUOTA, Item
from quotas.models import (
    Alteration,
    AuditEntry,
    Cluster,
    DesiredChange,
    DesiredStateVersion,
    QuotaEntity,
    QuotaOp,
    QuotaValue,
    alter_client_quotas,
    audited_alter,
    effective_client_quotas,
)
from tests.people import api, make_user

pytestmark = pytest.mark.django_db

D = "<default>"
PBR, CBR, RP = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
#: The 8 user/client-id levels of Kafka's precedence, as API entities.
LEVELS = [
    {"user": "alice", "client-id": "app"},
    {"user": "alice", "client-id": D},
    {"user": "alice"},
    {"user": D, "client-id": "app"},
    {"user": D, "client-id": D},
    {"user": D},
    {"client-id": "app"},
    {"client-id": D},
]


@pytest.fixture
def admin() -> APIClient:
    return api(make_user("root", staff=True))


@pytest.fixture
def kafka() -> Cluster:
    return Cluster.objects.create(name="kprod", connector=ConnectorKind.KAFKA)


def components(parts: dict[str, str]) -> list[dict[str, str | None]]:
    return [{"entity_type": t, "name": None if n == D else n} for t, n in parts.items()]


def alter(client: APIClient, cluster: str, entries: list[dict[str, Any]], **extra: Any) -> Any:
    return client.post(f"/api/clusters/{cluster}/client-quotas/alter", {"entries": entries, **extra}, format="json")


def op(key: str, value: float, scope: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"key": key, "value": value}
    if scope is not None:
        body["budget_scope"] = scope
    return body


def logged(cluster: Cluster, version: int) -> dict[Item, str | None]:
    return {c.item: c.value for c in DesiredChange.objects.filter(cluster=cluster, version=version)}


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def test_a_value_of_any_of_the_8_levels_is_made_cluster_wide_and_describe_shows_it(
    admin: APIClient, kafka: Cluster
) -> None:
    entries = [{"entity": components(parts), "ops": [op(PBR, 1048576, "cluster_wide")]} for parts in LEVELS]
    response = alter(admin, kafka.name, entries)
    assert response.status_code == 200, response.json()
    assert QuotaValue.objects.filter(entity__cluster=kafka, budget_scope="cluster_wide").count() == 8

    # the change log: each value's quota item and its budget-scope item, in one version
    changes = logged(kafka, 1)
    assert len(changes) == 16
    assert changes[Item(BUDGET_SCOPE, '{"user":"alice"}', PBR)] == "cluster_wide"
    assert changes[Item(QUOTA, '{"user":"alice"}', PBR)] == "1048576.0"

    described = admin.post(f"/api/clusters/{kafka.name}/client-quotas/describe", {"components": []}, format="json")
    for entry in described.json()["results"]:
        assert entry["values"] == {PBR: 1048576.0}
        assert entry["budget_scopes"] == {PBR: "cluster_wide"}


def test_the_number_alone_keeps_the_scope_and_a_scope_alone_is_a_change(admin: APIClient, kafka: Cluster) -> None:
    alice = components({"user": "alice"})
    first = [{"entity": alice, "ops": [op(PBR, 3000, "cluster_wide"), op(CBR, 10)]}]
    assert alter(admin, kafka.name, first).status_code == 200
    assert version(kafka) == 1

    # a new number without budget_scope: still a cluster-wide budget (never silently x brokers)
    assert alter(admin, kafka.name, [{"entity": alice, "ops": [op(PBR, 6000)]}]).json()["changed"] is True
    assert logged(kafka, 2) == {Item(QUOTA, '{"user":"alice"}', PBR): "6000.0"}
    assert QuotaValue.objects.get(key=PBR).budget_scope == "cluster_wide"

    # the same number with another scope: a change (of the scope item only), a version of its own
    response = alter(admin, kafka.name, [{"entity": alice, "ops": [op(PBR, 6000, "per_broker")]}])
    assert response.json() | {"entries": None} == {
        "validate_only": False, "changed": True, "version": 3, "entries": None
    }
    assert logged(kafka, 3) == {Item(BUDGET_SCOPE, '{"user":"alice"}', PBR): None}

    # the same number and scope again: nothing changes
    response = alter(admin, kafka.name, [{"entity": alice, "ops": [op(PBR, 6000, "per_broker"), op(CBR, 10)]}])
    assert response.json()["changed"] is False and version(kafka) == 3

    # removing a cluster-wide value removes its scope item too
    assert alter(admin, kafka.name, [{"entity": alice, "ops": [op(CBR, 10, "cluster_wide")]}]).status_code == 200
    remove = {"key": CBR, "remove": True}
    assert alter(admin, kafka.name, [{"entity": alice, "ops": [remove]}]).status_code == 200
    assert logged(kafka, 5) == {
        Item(QUOTA, '{"user":"alice"}', CBR): None, Item(BUDGET_SCOPE, '{"user":"alice"}', CBR): None
    }


REFUSED = {
    "controller-mutation": (
        {"user": "alice"}, op("controller_mutation_rate", 10, "cluster_wide"),
        "only producer_byte_rate, consumer_byte_rate and request_percentage values can be cluster_wide",
    ),
    "ip": (
        {"ip": "10.0.0.1"}, op("connection_creation_rate", 10, "cluster_wide"),
        "An ip quota (connection_creation_rate) cannot be cluster-wide",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_scope_a_value_cannot_have_is_refused_whole_and_typed(admin: APIClient, kafka: Cluster, case: str) -> None:
    parts, bad, fragment = REFUSED[case]
    valid = {"entity": components({"user": "bob"}), "ops": [op(PBR, 1000, "cluster_wide")]}

    response = alter(admin, kafka.name, [valid, {"entity": components(parts), "ops": [bad]}])

    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["code"] == "INVALID_BUDGET_SCOPE" and fragment in body["message"]
    assert "nothing was changed" in body["message"]
    first, second = body["details"]["entries"]
    assert first["error_code"] == "NONE" and second["error_code"] == "INVALID_BUDGET_SCOPE"
    assert not QuotaValue.objects.exists() and version(kafka) == 0  # bob's valid entry was not written either


def test_every_refusal_names_what_to_send(admin: APIClient, kafka: Cluster) -> None:
    """Among refusals of several kinds the code is the general one; each entry keeps its own."""
    entries = [
        {"entity": components({"user": "a"}), "ops": [op("controller_mutation_rate", 1, "cluster_wide")]},
        {"entity": components({"user": "b"}), "ops": [op(PBR, -1)]},
    ]
    body = alter(admin, kafka.name, entries).json()
    assert body["code"] == "INVALID_REQUEST"
    assert [e["error_code"] for e in body["details"]["entries"]] == ["INVALID_BUDGET_SCOPE", "INVALID_REQUEST"]
    assert "send budget_scope per_broker or leave it out" in body["details"]["entries"][0]["error_message"]


def test_an_engine_cluster_of_one_namespace_takes_no_cluster_wide_value(admin: APIClient) -> None:
    Cluster.objects.create(name="staging", connector=ConnectorKind.ENGINE, scope=QuotaScope.CLUSTER_WIDE)
    response = alter(admin, "staging", [{"entity": components({"user": "a"}), "ops": [op(PBR, 1, "cluster_wide")]}])
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_BUDGET_SCOPE"
    assert "one budget for the whole cluster already" in response.json()["message"]
    # per_broker is always fine
    response = alter(admin, "staging", [{"entity": components({"user": "a"}), "ops": [op(PBR, 1, "per_broker")]}])
    assert response.status_code == 200


def test_a_per_broker_engine_cluster_takes_budgets_as_kafka_does(admin: APIClient) -> None:
    """Its brokers run the same rounds as the Kafka plugin (traffic.engine_budgets)."""
    staging = Cluster.objects.create(name="staging", connector=ConnectorKind.ENGINE)
    response = alter(admin, "staging", [{"entity": components({"user": "a"}), "ops": [op(PBR, 1, "cluster_wide")]}])
    assert response.status_code == 200, response.json()
    assert logged(staging, 1)[Item(BUDGET_SCOPE, '{"user":"a"}', PBR)] == "cluster_wide"


def test_an_unknown_scope_is_an_invalid_request_naming_the_field(admin: APIClient, kafka: Cluster) -> None:
    response = alter(admin, kafka.name, [{"entity": components({"user": "a"}), "ops": [op(PBR, 1, "global")]}])
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "INVALID_REQUEST" and body["message"].startswith("entries.0.ops.0.budget_scope:")
    assert not QuotaValue.objects.exists()


def test_validate_only_judges_the_scope_and_writes_nothing(admin: APIClient, kafka: Cluster) -> None:
    ok = [{"entity": components({"user": "a"}), "ops": [op(RP, 50, "cluster_wide")]}]
    assert alter(admin, kafka.name, ok, validate_only=True).json()["changed"] is False
    bad = [{"entity": components({"user": "a"}), "ops": [op("controller_mutation_rate", 5, "cluster_wide")]}]
    assert alter(admin, kafka.name, bad, validate_only=True).json()["code"] == "INVALID_BUDGET_SCOPE"
    assert not QuotaValue.objects.exists()


def test_the_database_refuses_a_cluster_wide_key_the_api_would(kafka: Cluster) -> None:
    alter_client_quotas(kafka, [Alteration([("user", "a")], [QuotaOp("controller_mutation_rate", 5)])])
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaValue.objects.filter(key="controller_mutation_rate").update(budget_scope="cluster_wide")


def test_the_audit_says_when_a_value_becomes_or_stops_being_cluster_wide(kafka: Cluster) -> None:
    root = make_user("root", staff=True)
    alice = [("user", "alice")]
    audited_alter(kafka, [Alteration(alice, [QuotaOp(PBR, 1000)])], root)  # per broker, as Kafka: one entry
    audited_alter(kafka, [Alteration(alice, [QuotaOp(PBR, 1000, scope="cluster_wide")])], root)
    audited_alter(kafka, [Alteration(alice, [QuotaOp(PBR, 2000)])], root)
    audited_alter(kafka, [Alteration(alice, [QuotaOp(PBR, remove=True)])], root)

    entries = [(a.action, a.before, a.after) for a in AuditEntry.objects.filter(cluster=kafka).order_by("pk")]
    assert entries == [
        ("quota_altered", None, 1000.0),
        ("budget_scope_altered", "per_broker", "cluster_wide"),
        ("quota_altered", 1000.0, 2000.0),
        ("quota_altered", 2000.0, None),
        ("budget_scope_altered", "cluster_wide", None),
    ]
    assert AuditEntry.objects.filter(action="budget_scope_altered").first().entity == "/config/users/alice"


def test_the_effective_quota_says_the_scope_of_the_value_that_applies(admin: APIClient, kafka: Cluster) -> None:
    entries = [
        Alteration([("user", "alice")], [QuotaOp(PBR, 3000, scope="cluster_wide"), QuotaOp(CBR, 100)]),
        Alteration([("user", None)], [QuotaOp(PBR, 500)]),
        Alteration([("user", "b c")], [QuotaOp(RP, 25, scope="cluster_wide")]),  # a user name Kafka sanitizes
    ]
    alter_client_quotas(kafka, entries)
    scopes = {q.key: (q.value, q.level, q.budget_scope) for q in effective_client_quotas(kafka, "alice", "app")}
    assert scopes[PBR] == (3000.0, 3, "cluster_wide")
    assert scopes[CBR] == (100.0, 3, "per_broker")
    assert scopes[RP] == (None, None, None)
    other = {q.key: (q.level, q.budget_scope) for q in effective_client_quotas(kafka, "bob", "app")}
    assert other[PBR] == (6, "per_broker")  # the <default> user's value, per broker
    assert {q.key: q.budget_scope for q in effective_client_quotas(kafka, "b c", "x")}[RP] == "cluster_wide"

    body = admin.get(f"/api/clusters/{kafka.name}/effective-quota", {"user": "alice", "client_id": "app"}).json()
    assert body["quotas"][PBR]["budget_scope"] == "cluster_wide"
    assert body["quotas"]["controller_mutation_rate"]["budget_scope"] is None


def test_a_cluster_holding_budgets_does_not_become_one_namespace(admin: APIClient) -> None:
    staging = Cluster.objects.create(name="staging", connector=ConnectorKind.ENGINE)
    alter_client_quotas(staging, [Alteration([("user", "a")], [QuotaOp(PBR, 10, scope="cluster_wide")])])
    response = admin.patch("/api/clusters/staging/", {"scope": "cluster_wide"}, format="json")
    assert response.status_code == 400
    assert "1 cluster-wide quota value(s)" in response.json()["message"]
    assert Cluster.objects.get(pk=staging.pk).scope == "per_broker"
    assert QuotaEntity.objects.count() == 1
