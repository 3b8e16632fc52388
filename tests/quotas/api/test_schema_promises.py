"""The schema keeps its promise on real data (issue 30): what schemathesis found against the running demo.

- SCRAM on an engine cluster is a typed 400 before any lock or connection; a Kafka cluster that does not answer is a
  503 that names no internal address.
- No integer reaches the database past its column's range: every request-side integer of the schema has both
  bounds, and the API checks them (typed 400/404, never a 500 or a silent empty answer).
- Nullability comes from the models: every serializer field read from a nullable column or relation is nullable in
  the schema, and the nulls the data has (an audit entry without a request, a credential without a tenant) are there.
- The SCRAM credential list is documented as the page it is.
- ``manage.py spectacular --validate --fail-on-warn`` passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.plumbing import ResolvedComponent
from rest_framework import serializers

from quotas.api.params import INT64_MAX, INT64_MIN
from quotas.choices import ConnectorKind
from quotas.models import AuditEntry, Cluster, Drift, ScramCredential, Tenant
from tests.people import api, make_user

pytestmark = pytest.mark.django_db

PAST_64_BITS = 35539479674913505280  # what schemathesis sent


def published() -> dict[str, Any]:
    response = Client(HTTP_HOST="127.0.0.1").get("/api/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


# ------------------------------------------------------------------ SCRAM where it means nothing


def test_scram_on_an_engine_cluster_is_refused_before_any_lock_or_connection(settings: Any) -> None:
    staging = Cluster.objects.create(name="staging")
    staging.brokers.create(broker_id=1, host="staging-b1.internal:9092")  # no such host: nothing may try it
    settings.QUOTAS_REDIS_URL = "redis://127.0.0.1:1/0"  # nor the lock in Redis: nothing listens here
    admin = api(make_user("root", staff=True))
    base = "/api/clusters/staging/scram-credentials"
    for method, url, body in (
        ("delete", f"{base}/svc-x/", None),
        ("post", f"{base}/", {"user": "svc-x"}),
        ("post", f"{base}/svc-x/rotate/", {}),
    ):
        answer = getattr(admin, method)(url, body, format="json")
        assert answer.status_code == 400, (url, answer.content)
        body = answer.json()
        assert body["code"] == "INVALID_REQUEST" and "engine cluster" in body["message"], body
        assert "staging-b1" not in answer.content.decode()


def test_a_kafka_cluster_that_does_not_answer_is_a_503_naming_no_address() -> None:
    Cluster.objects.create(name="kdown", connector=ConnectorKind.KAFKA, bootstrap_servers="127.0.0.1:1")
    admin = api(make_user("root", staff=True))
    answer = admin.delete("/api/clusters/kdown/scram-credentials/svc-x/")
    assert (answer.status_code, answer.json()["code"]) == (503, "NETWORK_EXCEPTION"), answer.json()
    assert "127.0.0.1" not in answer.content.decode() and "kdown" in answer.json()["message"]


# ------------------------------------------------------------------ integers in their columns' range


def request_side_integers(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every integer a client sends: parameters, and the properties of request bodies (refs followed)."""
    components = schema["components"]["schemas"]
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(node: Any, where: str, seen: frozenset[str]) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref:
                name = ref.rsplit("/", 1)[-1]
                if name not in seen:
                    walk(components[name], name, seen | {name})
                return
            if node.get("type") == "integer" and not node.get("readOnly"):
                found.append((where, node))
            for key, value in node.items():
                walk(value, f"{where}.{key}", seen)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]", seen)

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                walk(parameter["schema"], f"{method.upper()} {path} {parameter['in']} {parameter['name']}", frozenset())
            if "requestBody" in operation:
                walk(operation["requestBody"], f"{method.upper()} {path} body", frozenset())
    return found


def test_every_integer_a_client_sends_has_its_range_in_the_schema() -> None:
    integers = request_side_integers(published())
    assert len(integers) > 20, integers  # the walk still finds them
    unbounded = sorted({where for where, node in integers if "minimum" not in node or "maximum" not in node})
    assert not unbounded, f"integers without a range (quotas/api/params.py bounds them): {unbounded}"
    assert all(INT64_MIN <= node["minimum"] <= node["maximum"] <= INT64_MAX for _, node in integers)


def test_an_id_past_64_bits_is_a_typed_400_not_a_500() -> None:
    prod = Cluster.objects.create(name="prod")
    drift = Drift.objects.create(cluster=prod, kind="quota", resource="/config/users/x", key="producer_byte_rate",
                                 status="extra", actual="1024", version=1, detected_at=timezone.now())
    admin = api(make_user("root", staff=True))
    adopted = admin.post("/api/clusters/prod/adopt/", {"drift": [drift.pk, PAST_64_BITS]}, format="json")
    assert adopted.status_code == 400, adopted.content
    assert adopted.json()["code"] == "INVALID_REQUEST" and "drift" in adopted.json()["details"], adopted.json()
    drift.refresh_from_db()
    assert drift.resolved_at is None  # nothing half-applied
    for url in (f"/api/audit/?request={PAST_64_BITS}", f"/api/webhook-deliveries/?request={PAST_64_BITS}",
                f"/api/pushes/?version={PAST_64_BITS}", f"/api/audit/?request={INT64_MAX + 1}",
                "/api/audit/?request=0", "/api/audit/?request=abc"):
        answer = admin.get(url)
        assert (answer.status_code, answer.json()["code"]) == (400, "INVALID_REQUEST"), (url, answer.content)
    assert admin.get(f"/api/audit/?request={INT64_MAX}").status_code == 200


def test_every_integer_parameter_past_its_range_is_a_typed_answer() -> None:
    """Each integer parameter of the schema, one past its maximum and one below its minimum: a 4xx in the API's
    shape (400, or 404 for a path), or for page_size the most there is; never a 5xx."""
    schema = published()
    Cluster.objects.create(name="prod")
    Tenant.objects.create(name="team-a")
    admin = api(make_user("root", staff=True))
    admin.raise_request_exception = False
    tried = 0
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            parameters = operation.get("parameters", [])
            for parameter in (p for p in parameters if p["schema"].get("type") == "integer"):
                for value in (parameter["schema"]["maximum"] + 1, parameter["schema"]["minimum"] - 1):
                    url = path.replace("{cluster}", "prod").replace("{name}", "team-a")
                    url = url.replace("{" + parameter["name"] + "}", str(value)).replace("{id}", "1")
                    if parameter["in"] == "query":
                        url += f"?{parameter['name']}={value}"
                    answer = getattr(admin, method)(url, {}, format="json")
                    tried += 1
                    assert answer.status_code < 500, (method, url, answer.content[:300])
                    if parameter["name"] == "page_size" and answer.status_code == 200:
                        continue  # cut to the most (or the least), as DRF does
                    assert answer.status_code in (400, 403, 404), (method, url, answer.status_code)
                    assert answer.json()["code"], (method, url)
    assert tried > 30


# ------------------------------------------------------------------ nullability from the models


def serializer_components() -> list[tuple[str, serializers.Serializer]]:
    """The schema's components made from serializers, with the serializer (the generator's registry keeps it)."""
    generator = SchemaGenerator()
    generator.get_schema(request=None, public=True)
    return [(component.name, component.object) for component in generator.registry._components.values()
            if component.type == ResolvedComponent.SCHEMA and isinstance(component.object, serializers.Serializer)]


def column_says_null(serializer: serializers.Serializer, field: serializers.Field) -> bool | None:
    """What the model says of a field read straight from columns: null possible (True) or not (False); None when
    it is not read from forward columns only."""
    model = getattr(getattr(serializer, "Meta", None), "model", None)
    if model is None or field.source == "*" or not getattr(field, "source_attrs", None):
        return None
    null = False
    for i, attr in enumerate(field.source_attrs):
        names = {f.name: f for f in model._meta.get_fields() if f.concrete}
        column = names.get(attr) or next((f for f in names.values() if getattr(f, "attname", None) == attr), None)
        if column is None or column.many_to_many:
            return None
        null = null or column.null
        if column.is_relation:
            model = column.related_model
        elif i < len(field.source_attrs) - 1:
            return None
    return null


def test_every_serializer_field_from_a_nullable_column_is_nullable_in_the_schema() -> None:
    schema = published()["components"]["schemas"]
    checked, wrong = 0, []
    for name, serializer in serializer_components():
        properties = schema.get(name, {}).get("properties", {})
        for field_name, field in serializer.fields.items():
            expected = column_says_null(serializer, field)
            if expected is None or field_name not in properties:
                continue
            checked += 1
            said = bool(properties[field_name].get("nullable")) or field.allow_null
            if said != (expected or field.allow_null):
                wrong.append(f"{name}.{field_name}: column null={expected}, schema nullable={said}")
    assert checked > 100, checked  # the walk still reaches the serializers
    assert not wrong, wrong


def test_the_nulls_the_data_has_are_in_the_schema_and_the_scram_list_is_a_page() -> None:
    schema = published()
    components = schema["components"]["schemas"]
    assert components["AuditEntry"]["properties"]["request"]["nullable"] is True
    assert components["ScramCredential"]["properties"]["tenant"]["nullable"] is True
    listing = schema["paths"]["/api/clusters/{cluster}/scram-credentials/"]["get"]["responses"]["200"]
    page = components[listing["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert set(page["properties"]) == {"next", "previous", "results"}
    assert page["properties"]["results"]["items"]["$ref"].endswith("/ScramCredential")

    root = make_user("root", staff=True)
    kafka = Cluster.objects.create(name="kprod", connector=ConnectorKind.KAFKA, bootstrap_servers="127.0.0.1:1")
    ScramCredential.objects.create(cluster=kafka, user="svc-shared", mechanism="SCRAM-SHA-256", iterations=8192,
                                   tenant=None, created_by=root, created_by_name="root")
    AuditEntry.objects.create(action="cluster_changed", actor=root, actor_name="root", cluster=kafka)
    admin = api(root)
    credentials = admin.get("/api/clusters/kprod/scram-credentials/").json()
    assert set(credentials) == {"next", "previous", "results"}
    assert credentials["results"][0]["tenant"] is None
    entry = admin.get("/api/audit/").json()["results"][0]
    assert entry["request"] is None and entry["tenant"] is None


def test_the_schema_validates_without_a_warning(tmp_path: Path) -> None:
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    assert (tmp_path / "schema.yaml").stat().st_size > 10_000
