"""Lengths are checked before the database (issue 20): a name longer than its column, a config value longer than Kafka
can carry, a reason nobody can read, are 400 INVALID_REQUEST naming the field and the limit, and nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from quotas.choices import EntityType
from quotas.models import Cluster, OwnedName, QuotaEntity, QuotaRequest, Tenant
from tests.people import api, make_user

pytestmark = pytest.mark.django_db

PBR = "producer_byte_rate"
LONG_CLIENT_ID = "c" * 5009  # the client-id


@pytest.fixture
def clients() -> dict[str, APIClient]:
    Cluster.objects.create(name="prod")
    member = make_user("alice")
    tenant = Tenant.objects.create(name="team-a")
    tenant.members.add(member)
    OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern="svc-a-*")
    OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern="*")
    return {"admin": api(make_user("root", staff=True)), "member": api(member)}


def refused(response: Any, where: str, limit: str) -> None:
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["code"] == "INVALID_REQUEST"
    assert body["message"].startswith(f"{where}: ") and limit in body["message"], body["message"]


def test_a_5009_character_client_id_is_refused_naming_the_field_and_the_limit(clients: dict[str, APIClient]) -> None:
    for who in ("admin", "member"):
        body = {"cluster": "prod", "user": "svc-a-1", "client_id": LONG_CLIENT_ID, "key": PBR, "value": 1024}
        response = clients[who].post("/api/requests/", body, format="json")
        refused(response, "client_id", "255")
        assert "client_id" in response.json()["details"]
    reason = {"cluster": "prod", "user": "svc-a-1", "key": PBR, "value": 1024, "reason": "r" * 4001}
    refused(clients["member"].post("/api/requests/", reason, format="json"), "reason", "4000")
    assert not QuotaRequest.objects.exists()


def test_alter_client_quotas_refuses_names_longer_than_the_column(clients: dict[str, APIClient]) -> None:
    def alter(name: str, entity_type: str = "client-id") -> Any:
        entry = {"entity": [{"entity_type": entity_type, "name": name}], "ops": [{"key": PBR, "value": 1024}]}
        return clients["admin"].post("/api/clusters/prod/client-quotas/alter", {"entries": [entry]}, format="json")

    for response in (alter(LONG_CLIENT_ID), alter("u" * 256, "user")):  # Kafka's per-entry answer, as for any rule
        assert response.status_code == 400 and response.json()["code"] == "INVALID_REQUEST"
        assert "at most 255 fit" in response.json()["details"]["entries"][0]["error_message"]
    assert not QuotaEntity.objects.exists()
    assert alter("u" * 255, "user").status_code == 200  # the column's size itself is fine
    assert QuotaEntity.objects.get().user == "u" * 255


def test_reads_refuse_names_no_entity_can_have(clients: dict[str, APIClient]) -> None:
    exact = {"components": [{"entity_type": "client-id", "match_type": "exact", "match": LONG_CLIENT_ID}]}
    refused(clients["member"].post("/api/clusters/prod/client-quotas/describe", exact, format="json"),
            "components.0.match", "255")
    effective = {"user": "svc-a-1", "client_id": LONG_CLIENT_ID}
    refused(clients["member"].get("/api/clusters/prod/effective-quota", effective), "client_id", "255")
    refused(clients["admin"].get("/api/clusters/prod/effective-quota", {"ip": "1" * 65}), "ip", "64")


def test_config_values_are_kept_to_what_kafka_can_carry(clients: dict[str, APIClient]) -> None:
    url = "/api/clusters/prod/broker-configs"
    topic = {"resource": {"topic": "t" * 250}, "ops": [{"key": "leader.replication.throttled.replicas", "value": "*"}]}
    long_topic = clients["admin"].post(url, topic, format="json")  # the engine's rule, in Kafka's words
    assert long_topic.status_code == 400 and "longer than 249 characters" in long_topic.json()["message"]
    listed = {"resource": {"topic": "t"}, "ops": [{"key": "leader.replication.throttled.replicas",
                                                   "value": [f"{p}:1" for p in range(10000)]}]}
    refused(clients["admin"].post(url, listed, format="json"), "ops.0.value", "32767")
    value = {"resource": {"broker": None}, "ops": [{"key": "max.connections", "value": "9" * 40000}]}
    refused(clients["admin"].post(url, value, format="json"), "ops.0.value", "32767")
    subscription = {"name": "sub", "metrics": "*", "match": "client_id=" + "a" * 40000}
    refused(clients["admin"].post("/api/clusters/prod/client-metrics/", subscription, format="json"), "match", "32767")


def test_tenants_refuse_names_longer_than_their_columns(clients: dict[str, APIClient]) -> None:
    refused(clients["admin"].post("/api/tenants/", {"name": "t" * 65}, format="json"), "name", "64")
    patterns = {"name": "team-z", "client_ids": ["p" * 256]}
    refused(clients["admin"].post("/api/tenants/", patterns, format="json"), "client_ids.0", "255")
    assert not Tenant.objects.filter(name="team-z").exists()
