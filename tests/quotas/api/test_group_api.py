"""The API of group quotas and exempt principals (issue 32): who sees and changes what, the refusals' codes and
fields, values all or none, a group's requests through POST /api/requests/, and how mails and webhooks name a group.

The database and the domain's rules are real (``quotas.models.groups``, ``group_changes``); what the brokers do with
the groups is tests/push/test_group_push.py and tests/kafka/test_group_quotas.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from access_tokens.models import AccessToken
from quotas import notify
from quotas.choices import ConnectorKind, EntityType
from quotas.models import (
    AuditAction,
    AuditEntry,
    Cluster,
    DesiredStateVersion,
    GroupKind,
    OwnedName,
    QuotaRequest,
    Tenant,
    create_group,
    set_group_values,
)
from quotas.workflow import quota_requests
from tests.people import api, make_user

pytestmark = pytest.mark.django_db
PBR, CBR, RP = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
GROUPS = "/api/clusters/kprod/groups/"
EXEMPT = "/api/clusters/kprod/exempt-principals/"


@pytest.fixture
def w() -> dict[str, Any]:
    """A Kafka cluster and an engine cluster; tenants pay (amy, and pat in both) and ord (ben); a group of each."""
    kafka = Cluster.objects.create(name="kprod", connector=ConnectorKind.KAFKA)
    engine = Cluster.objects.create(name="eng", connector=ConnectorKind.ENGINE, scope="cluster_wide")
    people = {"admin": make_user("root", staff=True), "auditor": make_user("audit", groups=("auditors",)),
              "amy": make_user("amy"), "ben": make_user("ben"), "pat": make_user("pat")}
    tenants = {}
    for name, tag, members in (("pay", "pay", ("amy", "pat")), ("ord", "ord", ("ben", "pat"))):
        tenant = Tenant.objects.create(name=name)
        OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern=f"svc-{tag}-*")
        OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern=f"app-{tag}-*")
        tenant.members.add(*(people[m] for m in members))
        tenants[name] = tenant
    pay = create_group(people["admin"], kafka, tenants["pay"], "pay-all", GroupKind.TENANT)
    set_group_values(people["admin"], pay, {PBR: (4 << 20, "cluster_wide")})
    create_group(people["admin"], kafka, tenants["ord"], "ord-batch", GroupKind.PRINCIPALS, principals=["svc-ord-1"])
    clients = {role: api(user) for role, user in people.items()}
    clients["anon"] = APIClient()
    # pat acting through a token scoped to tenant ord: a member of ord only, whatever else pat is
    text = AccessToken.issue(people["pat"], "ord-only", tenants["ord"], people["pat"])[1]
    clients["pat-ord"] = APIClient()
    clients["pat-ord"].credentials(HTTP_AUTHORIZATION=f"Bearer {text}")
    return {"kafka": kafka, "engine": engine, "people": people, "tenants": tenants, "c": clients}


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def names(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["name"] for row in response.json()["results"]]


def refused(response: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    """The API's error shape with that status and code (and ``details`` naming the field, when given)."""
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code, body
    if field is not None:
        assert list(body["details"]) == [field], body
        assert body["details"][field] == [body["message"]]
    return body


# ------------------------------------------------------------------ reading: scoped to the caller's tenants


def test_admins_and_auditors_list_every_group_members_their_tenants_only(w: dict[str, Any]) -> None:
    c = w["c"]
    assert names(c["admin"].get(GROUPS)) == names(c["auditor"].get(GROUPS)) == ["ord-batch", "pay-all"]
    assert names(c["amy"].get(GROUPS)) == ["pay-all"]
    assert names(c["ben"].get(GROUPS)) == ["ord-batch"]
    assert names(c["pat"].get(GROUPS)) == ["ord-batch", "pay-all"]
    assert names(c["pat-ord"].get(GROUPS)) == ["ord-batch"], "a tenant-scoped token sees its tenant's groups only"
    assert names(c["admin"].get(GROUPS, {"tenant": "pay"})) == ["pay-all"]
    assert names(c["admin"].get(GROUPS, {"kind": "principals"})) == ["ord-batch"]
    refused(c["anon"].get(GROUPS), 401, "NOT_AUTHENTICATED")
    refused(c["admin"].get("/api/clusters/nope/groups/"), 404, "NOT_FOUND")


def test_a_group_of_another_tenant_is_not_found_by_its_url_either(w: dict[str, Any]) -> None:
    c = w["c"]
    for role in ("ben", "pat-ord"):
        body = refused(c[role].get(GROUPS + "pay-all/"), 404, "NOT_FOUND")
        assert "pay-all" in body["message"]
        refused(c[role].get(GROUPS + "no-such/"), 404, "NOT_FOUND")
    detail = c["amy"].get(GROUPS + "pay-all/").json()
    assert detail["tenant"] == "pay" and detail["kind"] == "tenant" and detail["path"] == "/groups/pay-all"
    assert detail["members"] == "the principals tenant pay owns" and detail["patterns"] == ["svc-pay-*"]
    assert detail["values"] == [{"key": PBR, "value": 4 << 20, "budget_scope": "cluster_wide"}]
    assert detail["order"] == 1255, "a tenant group sits after prefixes under a principal, before prefixes alone"


def test_the_detail_says_the_matching_order(w: dict[str, Any]) -> None:
    c = w["c"]
    made = {}
    for name, extra in (("under", {"client_id_prefix": "app-pay-", "prefix_principal": "svc-pay-1"}),
                        ("short", {"client_id_prefix": "app-"}), ("long", {"client_id_prefix": "app-pay-x"})):
        response = c["admin"].post(GROUPS, {"name": name, "tenant": "pay", "kind": "client_prefix", **extra},
                                   format="json")
        assert response.status_code == 201, response.content
        made[name] = response.json()["order"]
    ordered = sorted([*made, "pay-all"], key=lambda n: made.get(n, 1255))
    assert ordered == ["under", "pay-all", "long", "short"], made


# ------------------------------------------------------------------ writing: admins only


@pytest.mark.parametrize("role", ["auditor", "amy", "pat-ord"])
def test_only_admins_change_groups(w: dict[str, Any], role: str) -> None:
    c, start = w["c"][role], version(w["kafka"])
    refused(c.post(GROUPS, {"name": "g", "tenant": "pay", "kind": "tenant"}, format="json"), 403,
            "PERMISSION_DENIED")
    refused(c.patch(GROUPS + "ord-batch/", {"principals": ["svc-ord-2"]}, format="json"), 403, "PERMISSION_DENIED")
    refused(c.delete(GROUPS + "pay-all/"), 403, "PERMISSION_DENIED")
    refused(c.post(GROUPS + "pay-all/values", {"ops": [{"key": PBR, "value": 1}]}, format="json"), 403,
            "PERMISSION_DENIED")
    assert version(w["kafka"]) == start


def test_an_admin_creates_changes_sets_values_and_deletes_a_group(w: dict[str, Any]) -> None:
    c, kafka = w["c"]["admin"], w["kafka"]
    start = version(kafka)
    made = c.post(GROUPS, {"name": "pay-jobs", "tenant": "pay", "kind": "principals",
                           "principals": ["svc-pay-1", "svc-pay-2"], "description": "batch"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["members"] == "principals svc-pay-1, svc-pay-2" and made.json()["values"] == []
    blanks = c.post(GROUPS, {"name": "pay-blank", "tenant": "pay", "kind": "client_prefix", "client_id_prefix": "x-",
                             "principals": [], "prefix_principal": ""}, format="json")
    assert blanks.status_code == 201, "a blank field of another kind (a form's) gives nothing and passes"
    c.delete(GROUPS + "pay-blank/")
    changed = c.patch(GROUPS + "pay-jobs/", {"principals": ["svc-pay-3"]}, format="json")
    assert changed.status_code == 200 and changed.json()["principals"] == ["svc-pay-3"]
    answer = c.post(GROUPS + "pay-jobs/values", {"ops": [
        {"key": PBR, "value": 1048576, "budget_scope": "cluster_wide"}, {"key": CBR, "value": 2097152}]},
        format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["changed"] and body["version"] == start + 5 and not body["validate_only"]
    assert {v["key"]: (v["value"], v["budget_scope"]) for v in body["group"]["values"]} == {
        PBR: (1048576, "cluster_wide"), CBR: (2097152, "per_broker")}
    removed = c.post(GROUPS + "pay-jobs/values", {"ops": [{"key": CBR, "value": None}]}, format="json").json()
    assert [v["key"] for v in removed["group"]["values"]] == [PBR]
    again = c.post(GROUPS + "pay-jobs/values", {"ops": [{"key": CBR, "value": None}]}, format="json").json()
    assert not again["changed"] and again["version"] is None
    audited = AuditEntry.objects.filter(entity="/groups/pay-jobs").values_list("action", "key")
    assert (AuditAction.QUOTA_ALTERED, PBR) in audited and (AuditAction.GROUP_CHANGED, "") in {
        (a, k or "") for a, k in audited}
    assert c.delete(GROUPS + "pay-jobs/").status_code == 204
    refused(c.get(GROUPS + "pay-jobs/"), 404, "NOT_FOUND")


def test_a_controller_mutation_rate_is_a_per_broker_group_value(w: dict[str, Any]) -> None:
    answer = w["c"]["admin"].post(GROUPS + "pay-all/values", {"ops": [{"key": "controller_mutation_rate", "value": 5}]},
                                  format="json")
    assert answer.status_code == 200, answer.content
    values = {v["key"]: (v["value"], v["budget_scope"]) for v in answer.json()["group"]["values"]}
    assert values["controller_mutation_rate"] == (5, "per_broker")
    body = refused(w["c"]["admin"].post(GROUPS + "pay-all/values", {"ops": [
        {"key": "controller_mutation_rate", "value": 5, "budget_scope": "cluster_wide"}]}, format="json"),
        400, "INVALID_GROUP", "ops.0.budget_scope")
    assert "Kafka's controller enforces it once" in body["message"], body


def test_values_are_all_or_none_and_validate_only_changes_nothing(w: dict[str, Any]) -> None:
    c, kafka = w["c"]["admin"], w["kafka"]
    start = version(kafka)
    body = refused(c.post(GROUPS + "pay-all/values", {"ops": [{"key": CBR, "value": 1000},
                                                              {"key": PBR, "value": -5}]}, format="json"),
                   400, "INVALID_GROUP", "ops.1.value")
    assert body["message"].startswith("ops.1: ")
    checked = c.post(GROUPS + "pay-all/values", {"ops": [{"key": CBR, "value": 1000}], "validate_only": True},
                     format="json").json()
    assert checked["validate_only"] and not checked["changed"] and checked["version"] is None
    assert [v["key"] for v in checked["group"]["values"]] == [PBR]
    assert version(kafka) == start, "a refused op and validate_only write nothing"


@pytest.mark.parametrize(("op", "field"), [
    ({"key": "connection_creation_rate", "value": 5}, "ops.0.key"),
    ({"key": "connection_creation_rate", "value": None}, "ops.0.key"),
    ({"key": "controller_mutation_rate", "value": 5, "budget_scope": "cluster_wide"}, "ops.0.budget_scope"),
    ({"key": PBR, "value": 0}, "ops.0.value"),
    ({"key": PBR, "value": 1.5}, "ops.0.value"),
    ({"key": PBR, "value": "1 MiB/s"}, "ops.0.value"),
    ({"key": PBR, "value": 2**70}, "ops.0.value"),
    ({"key": RP, "value": True}, "ops.0.value"),
])
def test_a_value_kafka_would_refuse_is_invalid_group_naming_the_op(w: dict[str, Any], op: dict[str, Any],
                                                                   field: str) -> None:
    refused(w["c"]["admin"].post(GROUPS + "pay-all/values", {"ops": [op]}, format="json"), 400, "INVALID_GROUP", field)


@pytest.mark.parametrize("body", [
    {"ops": []},
    {"ops": [{"key": PBR, "value": 1}, {"key": PBR, "value": 2}]},
    {"ops": [{"key": PBR, "value": 1, "budget_scope": "galaxy_wide"}]},
    {"ops": [{"value": 1}]},
    {"ops": "everything"},
    {},
])
def test_a_values_body_of_the_wrong_shape_is_invalid_request(w: dict[str, Any], body: dict[str, Any]) -> None:
    refused(w["c"]["admin"].post(GROUPS + "pay-all/values", body, format="json"), 400, "INVALID_REQUEST")


# ------------------------------------------------------------------ refusals: a code and a field, never a 500


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"name": "bad name", "tenant": "pay", "kind": "tenant"}, "INVALID_GROUP", "name"),
    ({"name": "x" * 65, "tenant": "pay", "kind": "tenant"}, "INVALID_GROUP", "name"),
    ({"name": "pay-all", "tenant": "pay", "kind": "client_prefix", "client_id_prefix": "a"}, "INVALID_GROUP", "name"),
    ({"name": "g", "tenant": "pay", "kind": "principals"}, "INVALID_GROUP", "principals"),
    ({"name": "g", "tenant": "pay", "kind": "principals", "principals": ["svc-ord-1"]}, "INVALID_GROUP", "principals"),
    ({"name": "g", "tenant": "pay", "kind": "client_prefix"}, "INVALID_GROUP", "client_id_prefix"),
    ({"name": "g", "tenant": "pay", "kind": "client_prefix", "client_id_prefix": "a", "prefix_principal": "svc-ord-1"},
     "INVALID_GROUP", "prefix_principal"),
    ({"name": "g", "tenant": "pay", "kind": "tenant", "principals": ["svc-pay-1"]}, "INVALID_GROUP", "principals"),
    ({"name": "g", "tenant": "pay", "kind": "principals", "principals": ["svc-pay-1"], "client_id_prefix": "a"},
     "INVALID_GROUP", "client_id_prefix"),
    ({"name": "g", "tenant": "ord", "kind": "principals", "principals": ["svc-ord-1"]}, "GROUP_OVERLAP",
     "principals"),
    ({"name": "g", "tenant": "pay", "kind": "tenant"}, "GROUP_OVERLAP", "kind"),
    ({"name": "g", "tenant": "pay", "kind": "everyone"}, "INVALID_REQUEST", "kind"),
    ({"name": "g", "tenant": "nobody", "kind": "tenant"}, "INVALID_REQUEST", "tenant"),
    ({"tenant": "pay", "kind": "tenant"}, "INVALID_REQUEST", "name"),
    ({"name": "g", "kind": "tenant"}, "INVALID_REQUEST", "tenant"),
    ({"name": "g", "tenant": "pay", "kind": "principals", "principals": "svc-pay-1"}, "INVALID_REQUEST", "principals"),
    ({"name": "g", "tenant": "pay", "kind": "principals", "principals": [""]}, "INVALID_REQUEST", "principals"),
    ({"name": "g\x00", "tenant": "pay", "kind": "tenant"}, "INVALID_REQUEST", "name"),
])
def test_a_group_that_cannot_be_made_is_refused_naming_the_field(w: dict[str, Any], body: dict[str, Any], code: str,
                                                                 field: str) -> None:
    start = version(w["kafka"])
    response = w["c"]["admin"].post(GROUPS, body, format="json")
    if code == "INVALID_REQUEST":  # the serializer's refusal: DRF's details, which name the field among others
        assert field in refused(response, 400, code)["details"], response.json()
    else:
        refused(response, 409 if code == "GROUP_OVERLAP" else 400, code, field)
    assert version(w["kafka"]) == start


def test_a_one_namespace_engine_cluster_has_no_groups_and_no_exempt_principals(w: dict[str, Any]) -> None:
    """Its brokers share every sensor and read no scope hash (a per-broker engine cluster takes groups)."""
    c = w["c"]["admin"]
    body = refused(c.post("/api/clusters/eng/groups/", {"name": "g", "tenant": "pay", "kind": "tenant"},
                          format="json"), 400, "INVALID_GROUP", "cluster")
    assert "one cluster-wide namespace" in body["message"]
    refused(c.post("/api/clusters/eng/exempt-principals/", {"principal": "mm2"}, format="json"), 400,
            "INVALID_GROUP", "cluster")


def test_members_change_by_kind_and_overlaps_are_refused(w: dict[str, Any]) -> None:
    c = w["c"]["admin"]
    refused(c.patch(GROUPS + "pay-all/", {"principals": ["svc-pay-1"]}, format="json"), 400, "INVALID_GROUP",
            "principals")
    refused(c.patch(GROUPS + "ord-batch/", {"client_id_prefix": "a"}, format="json"), 400, "INVALID_GROUP",
            "client_id_prefix")
    refused(c.patch(GROUPS + "ord-batch/", {}, format="json"), 400, "INVALID_REQUEST")
    c.post(GROUPS, {"name": "ord-2", "tenant": "ord", "kind": "principals", "principals": ["svc-ord-2"]},
           format="json")
    refused(c.patch(GROUPS + "ord-batch/", {"principals": ["svc-ord-2"]}, format="json"), 409, "GROUP_OVERLAP",
            "principals")
    refused(c.patch(GROUPS + "nope/", {"principals": ["svc-ord-3"]}, format="json"), 404, "NOT_FOUND")


def test_a_group_with_open_requests_is_not_deleted(w: dict[str, Any]) -> None:
    c = w["c"]
    asked = c["amy"].post("/api/requests/", {"cluster": "kprod", "group": "pay-all", "key": CBR, "value": 1000},
                          format="json")
    assert asked.status_code == 201, asked.content
    refused(c["admin"].delete(GROUPS + "pay-all/"), 400, "INVALID_GROUP", "name")
    c["amy"].post(f"/api/requests/{asked.json()['id']}/withdraw/", {}, format="json")
    assert c["admin"].delete(GROUPS + "pay-all/").status_code == 204
    kept = c["amy"].get(f"/api/requests/{asked.json()['id']}/")
    assert kept.status_code == 200, kept.content
    kept = kept.json()
    assert kept["group"] == "pay-all" and kept["entity"] == "/groups/pay-all", "a decided request keeps the name"


# ------------------------------------------------------------------ a group's requests


def test_a_member_asks_for_a_groups_value_and_the_requests_say_which_group(w: dict[str, Any]) -> None:
    c = w["c"]
    asked = c["amy"].post("/api/requests/", {"cluster": "kprod", "group": "pay-all", "key": PBR, "value": "8 MiB/s",
                                             "budget_scope": "cluster_wide"}, format="json")
    assert asked.status_code == 201, asked.content
    body = asked.json()
    assert (body["group"], body["entity"], body["display"], body["user"], body["client_id"]) == (
        "pay-all", "/groups/pay-all", "group pay-all", None, None)
    assert body["value"] == 8 << 20 and body["budget_scope"] == "cluster_wide"
    entity = c["amy"].post("/api/requests/", {"cluster": "kprod", "user": "svc-pay-1", "key": PBR, "value": 1000},
                           format="json").json()
    assert entity["group"] is None and entity["display"] == "svc-pay-1 (all client-ids)"
    listed = c["amy"].get("/api/requests/", {"group": "pay-all"}).json()["results"]
    assert [r["id"] for r in listed] == [body["id"]]
    assert {r["id"] for r in c["amy"].get("/api/requests/", {"cluster": "kprod"}).json()["results"]} == {
        body["id"], entity["id"]}
    detail = c["admin"].get(f"/api/requests/{body['id']}/")
    assert detail.status_code == 200 and detail.json()["group"] == "pay-all", detail.content
    assert c["admin"].post(f"/api/requests/{body['id']}/approve/", {}, format="json").status_code == 200
    values = c["amy"].get(GROUPS + "pay-all/").json()["values"]
    assert values == [{"key": PBR, "value": 8 << 20, "budget_scope": "cluster_wide"}]


@pytest.mark.parametrize(("role", "body", "status", "field"), [
    ("ben", {"group": "pay-all", "key": PBR, "value": 1}, 400, "group"),  # another tenant's: as unknown
    ("pat-ord", {"group": "pay-all", "key": PBR, "value": 1}, 400, "group"),
    ("amy", {"group": "nope", "key": PBR, "value": 1}, 400, "group"),
    ("amy", {"group": "pay-all", "user": "svc-pay-1", "key": PBR, "value": 1}, 400, "group"),
    ("amy", {"group": "pay-all", "key": "connection_creation_rate", "value": 1}, 400, "key"),
    ("amy", {"group": "pay-all", "key": "controller_mutation_rate", "value": 1, "budget_scope": "cluster_wide"}, 400,
     "budget_scope"),
    ("amy", {"group": "pay-all", "key": PBR, "value": -1}, 400, "value"),
    ("amy", {"group": "pay-all", "key": PBR, "value": 1, "expires_at": "2001-01-01T00:00:00Z"}, 400, "expires_at"),
    ("auditor", {"group": "pay-all", "key": PBR, "value": 1}, 403, None),
])
def test_a_group_request_that_cannot_be_made_is_refused(w: dict[str, Any], role: str, body: dict[str, Any],
                                                        status: int, field: str | None) -> None:
    response = w["c"][role].post("/api/requests/", {"cluster": "kprod", **body}, format="json")
    assert response.status_code == status, response.content
    if field is not None:
        assert field in response.json()["details"], response.json()
    assert not QuotaRequest.objects.filter(group_name="pay-all").exists()


def test_mails_and_webhooks_name_the_group(w: dict[str, Any]) -> None:
    request = quota_requests.submit(w["people"]["amy"], None, w["kafka"], user=None, client_id=None, key=PBR,
                                    value=2 << 20, group=w["kafka"].quota_groups.get(name="pay-all"))
    subject = notify.mail_subject(request, "submitted")
    assert subject.endswith("producer_byte_rate = 2 MiB/s (cluster-wide) for group pay-all on kprod"), subject
    body = notify.mail_body(request, "submitted", w["people"]["amy"], "")
    assert "entity:   group pay-all (/groups/pay-all)" in body, body
    payload = notify.request_payload(request, "submitted", w["people"]["amy"], "", datetime.now(UTC))
    assert (payload["entity"], payload["display"], payload["group"], payload["user"]) == (
        "/groups/pay-all", "group pay-all", "pay-all", None)


# ------------------------------------------------------------------ exempt principals


def test_everyone_reads_the_exempt_principals_admins_change_them(w: dict[str, Any]) -> None:
    c, kafka = w["c"], w["kafka"]
    made = c["admin"].post(EXEMPT, {"principal": "mm2-replicator", "reason": "MirrorMaker 2"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json() == {**made.json(), "principal": "mm2-replicator", "reason": "MirrorMaker 2",
                           "created_by": "root", "cluster": "kprod"}
    for role in ("admin", "auditor", "amy", "ben", "pat-ord"):
        listed = c[role].get(EXEMPT)
        assert [r["principal"] for r in listed.json()["results"]] == ["mm2-replicator"], role
    refused(c["anon"].get(EXEMPT), 401, "NOT_AUTHENTICATED")
    start = version(kafka)
    refused(c["admin"].post(EXEMPT, {"principal": "mm2-replicator"}, format="json"), 409, "CONFLICT")
    for role in ("auditor", "amy", "pat-ord"):
        refused(c[role].post(EXEMPT, {"principal": "svc-pay-1"}, format="json"), 403, "PERMISSION_DENIED")
        refused(c[role].delete(EXEMPT + "mm2-replicator/"), 403, "PERMISSION_DENIED")
    refused(c["admin"].post(EXEMPT, {"principal": ""}, format="json"), 400, "INVALID_REQUEST")
    refused(c["admin"].post(EXEMPT, {"reason": "x"}, format="json"), 400, "INVALID_REQUEST")
    refused(c["admin"].post(EXEMPT, {"principal": "p", "reason": "r" * 201}, format="json"), 400, "INVALID_REQUEST")
    assert version(kafka) == start
    assert c["admin"].delete(EXEMPT + "mm2-replicator/").status_code == 204
    assert version(kafka) == start + 1
    refused(c["admin"].delete(EXEMPT + "mm2-replicator/"), 404, "NOT_FOUND")
    assert AuditEntry.objects.filter(action=AuditAction.EXEMPT_CHANGED).count() == 2
