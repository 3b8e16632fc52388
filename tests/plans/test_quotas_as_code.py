"""Quotas as code against the real portal: export, plan (precedence order, prune, impact, capacity, warnings),
stale plans, an admin's one-version apply, a member's grouped request, member isolation and bad files.

Brokers are engine namespaces in the test Redis (cluster "prod" broker 1 is namespace "prod.broker-1"); pushes are
what the Celery task does, called directly (``push_everywhere``), as in the other push tests.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import redis
import yaml

from engine.config import EntityRef, namespace_for_broker
from engine.desired import NamespaceState
from quotas.models import (
    Alteration,
    AuditEntry,
    Cluster,
    ConfigOp,
    ConfigResource,
    DesiredChange,
    DesiredStateVersion,
    Plan,
    PlanRequest,
    Push,
    QuotaOp,
    QuotaValue,
    alter_client_quotas,
    alter_configs,
    alter_subscription,
)
from tests.brokers import cluster_with_brokers, push_everywhere, set_quota
from tests.people import api, make_tenant, roles

pytestmark = pytest.mark.django_db
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
MiB = 1 << 20
HEAD = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: prod\n"


def alter(cluster: Cluster, entity: dict[str, str], **values: float) -> None:
    ops = [QuotaOp(k, v) for k, v in values.items()]
    alter_client_quotas(cluster, [Alteration(list(entity.items()), ops)])


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    """team-a (alice: users svc-a-*, client-ids app-*), team-b (bob: users svc-b-*); prod with brokers 1 and 2,
    4 MiB/s of ingress, quotas at several levels, a broker config and a subscription of team-a."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], w["alice2"], users=["svc-a-*"], client_ids=["app-*"])
    b = make_tenant("team-b", w["bob"], users=["svc-b-*"])
    prod = cluster_with_brokers((1, 2), name="prod", capacity_in_bytes_per_s=4 * MiB)
    alter(prod, {"user": "svc-a-1"}, **{PBR: MiB})
    alter(prod, {"user": "svc-a-1", "client-id": "app-1"}, **{PBR: 512 * 1024, CBR: 2 * MiB})
    alter(prod, {"user": "svc-b-1"}, **{PBR: 3 * MiB})
    alter(prod, {"client-id": "<default>"}, request_percentage=25.0)
    alter(prod, {"ip": "10.0.0.7"}, connection_creation_rate=5)
    alter_configs(prod, ConfigResource(broker_id=None), [ConfigOp("max.connection.creation.rate", 100)], w["admin"])
    alter_subscription(prod, "team-a-basic", {"metrics": "org.apache.kafka.producer.", "interval.ms": 60000,
                                              "match": "client_id=app-1"}, w["admin"])
    w.update(a=a, b=b, prod=prod, redis=engine_redis)
    return w


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def export(client: Any) -> str:
    response = client.get("/api/clusters/prod/state.yaml")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/yaml")
    return response.content.decode()


def plan(client: Any, document: str, prune: bool = False, status: int = 201) -> dict[str, Any]:
    response = client.post("/api/clusters/prod/plans/", {"document": document, "prune": prune}, format="json")
    assert response.status_code == status, response.content
    return response.json()


def moves(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["action"], c["path"], c["key"]) for c in body["changes"]]


# ------------------------------------------------------------------ export and round trip


def test_export_then_plan_of_the_unchanged_file_changes_nothing(w: dict[str, Any]) -> None:
    for who in ("admin", "alice", "bob"):
        text = export(api(w[who]))
        body = plan(api(w[who]), text)
        assert body["changes"] == [] and body["summary"] == {"add": 0, "change": 0, "remove": 0}, (who, body)
        assert body["stale"] is False and body["base_version"] == version(w["prod"])
        assert plan(api(w[who]), text, prune=True)["changes"] == []  # the export is everything the planner changes

    text = export(api(w["admin"]))
    before = version(w["prod"])
    unchanged = plan(api(w["admin"]), text)
    applied = api(w["admin"]).post(f"/api/plans/{unchanged['id']}/apply/", {}, format="json").json()
    assert applied == {"state": "applied", "plan": unchanged["id"], "version": before, "changed": False}
    assert version(w["prod"]) == before  # applying an unchanged file is a no-op: no version, no push
    doc = yaml.safe_load(text)
    jsonschema.validate(doc, api(w["admin"]).get("/api/schema/quotas-file.json").json())
    first = doc["quotas"][0]
    assert first == {"entity": {"user": "svc-a-1", "client-id": "app-1"}, PBR: "512 KiB/s", CBR: "2 MiB/s"}
    # precedence order: level 1, then user levels, then client-id default, then ips
    paths = [tuple(q["entity"].items()) for q in doc["quotas"]]
    assert paths == [(("user", "svc-a-1"), ("client-id", "app-1")), (("user", "svc-a-1"),), (("user", "svc-b-1"),),
                     (("client-id", "<default>"),), (("ip", "10.0.0.7"),)]
    assert doc["brokerConfigs"] == {"<default>": {"max.connection.creation.rate": 100}}
    assert doc["clientMetrics"] == [{"name": "team-a-basic", "metrics": ["org.apache.kafka.producer."],
                                     "intervalMs": 60000, "match": ["client_id=app-1"]}]


def test_a_member_exports_only_what_its_tenant_owns(w: dict[str, Any]) -> None:
    alice = yaml.safe_load(export(api(w["alice"])))
    entities = [q["entity"] for q in alice["quotas"]]
    assert entities == [{"user": "svc-a-1", "client-id": "app-1"}, {"user": "svc-a-1"}, {"client-id": "<default>"}]
    assert "brokerConfigs" not in alice and "topicConfigs" not in alice  # the cluster's, not a tenant's
    assert [s["name"] for s in alice["clientMetrics"]] == ["team-a-basic"]

    bob = yaml.safe_load(export(api(w["bob"])))
    assert [q["entity"] for q in bob["quotas"]] == [{"user": "svc-b-1"}, {"client-id": "<default>"}]
    assert bob["clientMetrics"] == []  # team-a's subscription selects team-a's clients

    outsider = api(roles_user("carol"))
    response = outsider.get("/api/clusters/prod/state.yaml")
    assert response.status_code == 403 and response.json()["code"] == "PERMISSION_DENIED"
    assert api(w["admin"]).get("/api/clusters/nope/state.yaml").status_code == 404


def roles_user(name: str) -> Any:
    from tests.people import make_user

    return make_user(name)


# ------------------------------------------------------------------ plans


def test_plan_lists_add_change_remove_in_kafkas_precedence_order(w: dict[str, Any]) -> None:
    document = HEAD + """\
quotas:
  - entity: {client-id: "<default>"}
    request_percentage: 50
  - entity: {user: svc-a-1}
    producer_byte_rate: 1.5 MiB/s
    consumer_byte_rate: 1 MiB/s
  - entity: {user: "<default>", client-id: "<default>"}
    producer_byte_rate: 256 KiB/s
  - entity: {user: svc-a-1, client-id: app-1}
    producer_byte_rate: 512 KiB/s
"""
    body = plan(api(w["admin"]), document)
    assert moves(body) == [
        ("remove", "/config/users/svc-a-1/clients/app-1", CBR),  # the entity's entry is its whole state
        ("change", "/config/users/svc-a-1", PBR),
        ("add", "/config/users/svc-a-1", CBR),
        ("add", "/config/users/<default>/clients/<default>", PBR),
        ("change", "/config/clients/<default>", "request_percentage"),
    ]
    assert body["summary"] == {"add": 2, "change": 2, "remove": 1}
    change = body["changes"][1]
    assert (change["old"], change["new"], change["old_display"], change["new_display"]) == (
        MiB, 1.5 * MiB, "1 MiB/s", "1.5 MiB/s")
    # svc-b-1 and the ip are not in the file: without prune they are left alone
    assert not [c for c in body["changes"] if "svc-b-1" in c["path"] or "ips" in c["path"]]
    # the plan is stored and read back the same
    again = api(w["admin"]).get(f"/api/plans/{body['id']}/").json()
    assert moves(again) == moves(body) and again["prune"] is False and again["created_by"] == "root"


def test_byte_rate_changes_carry_impact_capacity_and_the_level_that_still_wins(w: dict[str, Any]) -> None:
    document = HEAD + """\
quotas:
  - entity: {user: svc-a-1, client-id: app-1}
    producer_byte_rate: 512 KiB/s
    consumer_byte_rate: 2 MiB/s
  - entity: {user: svc-a-1}
    producer_byte_rate: 3 MiB/s
"""
    body = plan(api(w["admin"]), document)
    [change] = body["changes"]
    assert (change["action"], change["path"]) == ("change", "/config/users/svc-a-1")
    # app-1 of svc-a-1 keeps its own level-1 quota: the resolver says so
    assert change["warnings"] == [
        "/config/users/svc-a-1 producer_byte_rate does not apply to user 'svc-a-1' with client-id 'app-1': "
        "/config/users/svc-a-1/clients/app-1 (a more specific level in Kafka's precedence) still wins."
    ]
    # capacity as the approval page counts it: sensors svc-a-1:app-1 (512 KiB), svc-a-1's others (1 -> 3 MiB),
    # svc-b-1 (3 MiB), x 2 brokers, against 4 MiB/s
    cap = change["capacity"]
    assert cap["granted_without"] == (512 * 1024 + MiB + 3 * MiB) * 2
    assert cap["granted_with"] == (512 * 1024 + 3 * MiB + 3 * MiB) * 2
    assert cap["exceeds"] is True and "above its capacity" in cap["warning"]
    impact = change["impact"]
    assert impact["state"] in ("queued", "running", "done", "failed") and isinstance(impact["preview"], int)
    preview = api(w["admin"]).get(f"/api/previews/{impact['preview']}/").json()
    assert (preview["user"], preview["client_id"], preview["key"], preview["value"]) == ("svc-a-1", None, PBR, 3 * MiB)


def test_prune_removes_what_the_file_leaves_out_and_only_with_prune(w: dict[str, Any]) -> None:
    document = HEAD + "quotas:\n  - entity: {user: svc-a-1}\n    producer_byte_rate: 1 MiB/s\nclientMetrics: []\n"
    assert plan(api(w["admin"]), document)["changes"] == []
    pruned = plan(api(w["admin"]), document, prune=True)
    assert moves(pruned) == [
        ("remove", "/config/users/svc-a-1/clients/app-1", PBR),
        ("remove", "/config/users/svc-a-1/clients/app-1", CBR),
        ("remove", "/config/users/svc-b-1", PBR),
        ("remove", "/config/clients/<default>", "request_percentage"),
        ("remove", "/config/ips/10.0.0.7", "connection_creation_rate"),
        ("remove", "/config/client-metrics/team-a-basic", "interval.ms"),
        ("remove", "/config/client-metrics/team-a-basic", "match"),
        ("remove", "/config/client-metrics/team-a-basic", "metrics"),
    ]  # brokerConfigs is not in the file: not managed by it, even with prune
    default_note = pruned["changes"][3]["warnings"]
    assert default_note == ["After the removal no request_percentage quota applies to these clients (unlimited)."]

    # a member's prune reaches only what its tenant owns (not the <default> entity it may read, not team-b's)
    mine = HEAD + "quotas:\n  - entity: {user: svc-a-1}\n    producer_byte_rate: 1 MiB/s\n"
    assert moves(plan(api(w["alice"]), mine, prune=True)) == [
        ("remove", "/config/users/svc-a-1/clients/app-1", PBR),
        ("remove", "/config/users/svc-a-1/clients/app-1", CBR),
    ]


def test_a_plan_goes_stale_when_desired_state_moves_on_and_cannot_be_applied(w: dict[str, Any]) -> None:
    body = plan(api(w["admin"]), HEAD + "quotas:\n  - entity: {user: svc-a-9}\n    producer_byte_rate: 1 MiB/s\n")
    set_quota(w["prod"], "svc-b-2", 1000)
    seen = api(w["admin"]).get(f"/api/plans/{body['id']}/").json()
    assert seen["stale"] is True
    response = api(w["admin"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json")
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "PLAN_STALE" and "plan the file again" in response.json()["message"]
    assert not QuotaValue.objects.filter(entity__user="svc-a-9").exists()


# ------------------------------------------------------------------ apply


def test_an_admin_applies_a_plan_as_one_audited_version_pushed_to_every_broker(w: dict[str, Any]) -> None:
    text = export(api(w["admin"])).replace("2 MiB/s", "3 MiB/s")
    assert "topicConfigs: {}\n" in text
    topic = "topicConfigs:\n  orders: {leader.replication.throttled.replicas: '0:1, 1:2'}\n"
    text = text.replace("topicConfigs: {}\n", topic)
    text = text.replace("intervalMs: 60000", "intervalMs: 30000")
    body = plan(api(w["admin"]), text)
    assert moves(body) == [
        ("change", "/config/users/svc-a-1/clients/app-1", CBR),
        ("add", "/config/topics/orders", "leader.replication.throttled.replicas"),
        ("change", "/config/client-metrics/team-a-basic", "interval.ms"),
    ]
    before = version(w["prod"])
    response = api(w["admin"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"state": "applied", "plan": body["id"], "version": before + 1, "changed": True}
    assert version(w["prod"]) == before + 1  # one version for the whole plan
    items = set(DesiredChange.objects.filter(cluster=w["prod"], version=before + 1).values_list("kind", "key"))
    assert items == {("quota", CBR), ("topic", "leader.replication.throttled.replicas"),
                     ("client-metrics", "interval.ms")}
    audit = AuditEntry.objects.filter(comment__contains=f"plan #{body['id']}")
    assert sorted((a.action, a.key, a.actor_name) for a in audit) == [
        ("config_altered", "leader.replication.throttled.replicas", "root"),
        ("quota_altered", CBR, "root"),
        ("subscription_altered", "interval.ms", "root"),
    ]
    pending = Push.objects.filter(cluster=w["prod"], version=before + 1).values_list("broker__broker_id", "state")
    assert sorted(pending) == [(1, "pending"), (2, "pending")]  # pushed like any change, once committed
    push_everywhere(w["prod"])
    for broker in (1, 2):
        held_version, items_held = NamespaceState(w["redis"], namespace_for_broker("prod", broker), broker).read()
        assert held_version == before + 1
        field = EntityRef("svc-a-1", "app-1").field()
        assert float(items_held[("quota", field, CBR)]) == 3 * MiB
    # the same file planned again: nothing left to do; applying it twice is a conflict
    assert plan(api(w["admin"]), text)["changes"] == []
    again = api(w["admin"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "CONFLICT"
    # auditors plan but never apply
    audited = plan(api(w["auditor"]), text.replace("3 MiB/s", "4 MiB/s"))
    refused = api(w["auditor"]).post(f"/api/plans/{audited['id']}/apply/", {}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "PERMISSION_DENIED"


MEMBER_FILE = HEAD + """\
quotas:
  - entity: {user: svc-a-1, client-id: app-1}
    producer_byte_rate: 768 KiB/s
    consumer_byte_rate: 2 MiB/s
  - entity: {user: svc-a-2}
    producer_byte_rate: 1 MiB/s
"""


def test_a_members_apply_is_one_grouped_request_that_an_admin_approves_as_a_whole(w: dict[str, Any]) -> None:
    body = plan(api(w["alice"]), MEMBER_FILE)
    assert body["tenant"] == "team-a" and body["summary"] == {"add": 1, "change": 1, "remove": 0}
    before = version(w["prod"])
    response = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {"reason": "launch"}, format="json")
    assert response.status_code == 202, response.content
    request_id = response.json()["request"]
    assert response.json() == {"state": "submitted", "plan": body["id"], "request": request_id}
    assert version(w["prod"]) == before  # nothing applied until an admin decides

    # the admin sees the whole plan with its impact and capacity; bob (team-b) does not see it at all
    detail = api(w["admin"]).get(f"/api/plan-requests/{request_id}/").json()
    assert detail["state"] == "submitted" and detail["tenant"] == "team-a" and detail["reason"] == "launch"
    assert [c["impact"]["preview"] > 0 for c in detail["plan_detail"]["changes"]] == [True, True]
    assert all(c["capacity"]["key"] == PBR for c in detail["plan_detail"]["changes"])
    assert api(w["bob"]).get(f"/api/plan-requests/{request_id}/").status_code == 404
    assert api(w["bob"]).get(f"/api/plans/{body['id']}/").status_code == 404
    assert api(w["alice2"]).get(f"/api/plans/{body['id']}/").status_code == 200  # same tenant

    # nobody approves their own; alice is no admin anyway
    denied = api(w["alice"]).post(f"/api/plan-requests/{request_id}/approve/", {}, format="json")
    assert denied.status_code == 403
    approved = api(w["admin2"]).post(f"/api/plan-requests/{request_id}/approve/", {"comment": "ok"}, format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["state"] == "applying" and approved.json()["applied_version"] == before + 1
    assert version(w["prod"]) == before + 1
    values = set(QuotaValue.objects.filter(entity__cluster=w["prod"], entity__user__in=["svc-a-1", "svc-a-2"],
                                           key=PBR).values_list("entity__user", "entity__client_id", "value"))
    assert values == {("svc-a-1", "app-1", 768 * 1024), ("svc-a-1", None, MiB), ("svc-a-2", None, MiB)}
    audit = AuditEntry.objects.filter(comment__contains=f"plan request #{request_id}")
    assert {a.action for a in audit} >= {"submitted", "approved", "quota_altered"}
    assert {a.tenant_id for a in audit.filter(action="quota_altered")} == {w["a"].pk}

    push_everywhere(w["prod"])
    assert PlanRequest.objects.get(pk=request_id).state == "applied"
    moves = AuditEntry.objects.filter(entity=f"plan #{body['id']}", key="").order_by("pk")
    assert list(moves.values_list("action", "before", "after")) == [
        ("submitted", None, "submitted"),
        ("approved", "submitted", "approved"),
        ("applying", "approved", "applying"),  # each row starts where the one before it ended
        ("applied", "applying", "applied"),
    ]
    again = api(w["admin"]).post(f"/api/plan-requests/{request_id}/reject/", {"comment": "late"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "CONFLICT"


def test_an_admin_rejects_a_grouped_request_as_a_whole(w: dict[str, Any]) -> None:
    body = plan(api(w["alice"]), MEMBER_FILE)
    request_id = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json").json()["request"]
    before = version(w["prod"])
    no_reason = api(w["admin"]).post(f"/api/plan-requests/{request_id}/reject/", {}, format="json")
    assert no_reason.status_code == 400
    rejected = api(w["admin"]).post(f"/api/plan-requests/{request_id}/reject/", {"comment": "too much"},
                                    format="json")
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    assert version(w["prod"]) == before
    assert not QuotaValue.objects.filter(entity__user="svc-a-2").exists()
    listed = api(w["alice"]).get("/api/plan-requests/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [(r["id"], r["state"], r["decision_comment"]) for r in rows] == [(request_id, "rejected", "too much")]


def test_approving_a_grouped_request_whose_values_moved_on_is_refused(w: dict[str, Any]) -> None:
    body = plan(api(w["alice"]), MEMBER_FILE)
    request_id = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json").json()["request"]
    set_quota(w["prod"], "svc-b-7", 1000)  # another entity: the request can still be approved ...
    alter(w["prod"], {"user": "svc-a-2"}, **{PBR: 5000})  # ... but not once a value it changes moved on
    response = api(w["admin"]).post(f"/api/plan-requests/{request_id}/approve/", {}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "PLAN_STALE", response.content
    assert "/config/users/svc-a-2 producer_byte_rate" in response.json()["message"]
    assert PlanRequest.objects.get(pk=request_id).state == "submitted"


def test_a_member_may_not_plan_what_its_tenant_does_not_own(w: dict[str, Any]) -> None:
    document = HEAD + "quotas:\n  - entity: {user: svc-b-1}\n    producer_byte_rate: 1 MiB/s\n"
    response = api(w["alice"]).post("/api/clusters/prod/plans/", {"document": document}, format="json")
    assert response.status_code == 403 and "svc-b-1" in response.json()["message"], response.content
    configs = HEAD + "brokerConfigs:\n  '<default>': {max.connection.creation.rate: 5}\n"
    response = api(w["alice"]).post("/api/clusters/prod/plans/", {"document": configs}, format="json")
    assert response.status_code == 403 and "brokerConfigs" in response.json()["message"]
    assert Plan.objects.count() == 0


# ------------------------------------------------------------------ bad files


BAD = [
    (HEAD + "quotas:\n  - entity: {user: a}\n    producer_byte_rate: 1.5 MB/s\n", 6, "producer_byte_rate",
     "decimal units such as MB/s are not taken"),
    (HEAD + "quotas:\n  - entity: {user: a}\n    producer_byte_rat: 1\n", 6, "producer_byte_rat",
     "Invalid configuration key 'producer_byte_rat'"),
    (HEAD + "quotas:\n  - entity: {usr: a}\n    producer_byte_rate: 1\n", 5, "usr", "Unknown entity type 'usr'"),
    (HEAD + "quotas:\n  - entity: {ip: 10.0.0.1}\n    producer_byte_rate: 1\n", 6, "producer_byte_rate",
     "applies to client entities, not to ip"),
    (HEAD + "quotas:\n  - entity: {user: a}\n    consumer_byte_rate: 0\n", 6, "consumer_byte_rate",
     "must be greater than 0"),
    (HEAD + "quotas:\n  - entity: {user: a}\n    request_percentage: 5\n  - entity: {user: a}\n"
     "    request_percentage: 6\n", 7, "entity", "listed twice"),
    (HEAD.replace("prod", "staging") + "quotas: []\n", 3, "cluster", "not 'prod'"),
    (HEAD.replace("quotas/v1", "quotas/v2"), 1, "apiVersion", "apiVersion must be quotas/v1"),
    (HEAD + "clientMetrics:\n  - name: x\n    intervalMs: 50\n", 6, "intervalMs", "interval must be between 100"),
    (HEAD + "brokerConfigs:\n  '<default>':\n    max.connections.per.ip: lots\n", 6, "max.connections.per.ip", ""),
    (HEAD + "brokerConfigs:\n  7: {max.connections: 5}\n", 5, "7", "has no broker 7"),
    (HEAD + "quotas:\n  - entity: {user: a\n", 6, None, "Not valid YAML"),
    (HEAD + "extra: 1\n", 4, "extra", "Unknown key 'extra'"),
]


@pytest.mark.parametrize(("document", "line", "key", "message"), BAD)
def test_bad_files_are_refused_naming_the_line_and_the_key(
    w: dict[str, Any], document: str, line: int, key: str | None, message: str
) -> None:
    response = api(w["admin"]).post("/api/clusters/prod/plans/", {"document": document}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "INVALID_QUOTAS_FILE"
    first = body["errors"][0]
    assert (first["line"], first["key"]) == (line, key), body
    assert message in first["message"], body
    assert f"line {line}" in body["message"]
    assert Plan.objects.count() == 0


# ------------------------------------------------------------------ pages


def test_the_approval_queue_shows_a_grouped_request_with_its_impact_and_decides_it_whole(w: dict[str, Any]) -> None:
    from django.test import Client

    body = plan(api(w["alice"]), MEMBER_FILE)
    request_id = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json").json()["request"]
    admin = Client()
    admin.force_login(w["admin"])
    html = admin.get("/approvals/").content.decode()
    assert f"Plan request #{request_id}" in html and "team-a on <code>prod</code>: 1 add, 1 change, 0 remove" in html
    assert 'title="/config/users/svc-a-1/clients/app-1">svc-a-1, client-id app-1</span>' in html
    assert "768 KiB/s" in html
    assert "Capacity check: <code>producer_byte_rate</code> (the whole plan)" in html
    for change in body["changes"]:  # each byte-rate change's preview, polled by preview.js while it runs
        assert f'id="impact-{change["impact"]["preview"]}"' in html
    assert f'action="/plan-requests/{request_id}/approve/"' in html
    # the plan's own page shows the same to the member, without the decision
    member = Client()
    member.force_login(w["alice"])
    mine = member.get(f"/plans/{body['id']}/").content.decode()
    assert f"Grouped request #{request_id}" in mine and "Approve the whole plan" not in mine
    assert Client().get(f"/plans/{body['id']}/").status_code == 302  # to the login page
    bob = Client()
    bob.force_login(w["bob"])
    assert bob.get(f"/plans/{body['id']}/").status_code == 404

    before = version(w["prod"])
    answer = admin.post(f"/plan-requests/{request_id}/approve/", {"comment": "ok", "next": "/approvals/"})
    assert answer.status_code == 302 and answer["Location"] == "/approvals/"
    assert version(w["prod"]) == before + 1 and PlanRequest.objects.get(pk=request_id).state == "applying"
    assert f'id="plan-req-{request_id}"' not in admin.get("/approvals/").content.decode()


def test_a_member_changes_its_own_subscription_through_a_plan_and_no_one_elses(w: dict[str, Any]) -> None:
    text = export(api(w["alice"])).replace("intervalMs: 60000", "intervalMs: 120000")
    body = plan(api(w["alice"]), text)
    assert moves(body) == [("change", "/config/client-metrics/team-a-basic", "interval.ms")]
    request_id = api(w["alice"]).post(f"/api/plans/{body['id']}/apply/", {}, format="json").json()["request"]
    api(w["admin"]).post(f"/api/plan-requests/{request_id}/approve/", {}, format="json")
    assert export(api(w["admin"])).count("intervalMs: 120000") == 1

    theirs = text.replace("match:\n  - client_id=app-1", "match:\n  - client_id=other-.*")
    response = api(w["alice"]).post("/api/clusters/prod/plans/", {"document": theirs}, format="json")
    assert response.status_code == 403 and "client_id=other-.*" in response.json()["message"], response.content


def test_a_large_plan_previews_only_its_first_byte_rate_changes(w: dict[str, Any]) -> None:
    from plans.services import MAX_PREVIEWS

    items = "".join(f"  - entity: {{user: svc-a-{i:03}}}\n    producer_byte_rate: {i + 1} KiB/s\n"
                    for i in range(MAX_PREVIEWS + 3))
    body = plan(api(w["admin"]), HEAD + "quotas:\n" + items)
    previewed = [c for c in body["changes"] if c["impact"] is not None]
    assert [c["path"] for c in previewed] == [f"/config/users/svc-a-{i:03}" for i in range(MAX_PREVIEWS)]
    rest = body["changes"][MAX_PREVIEWS:]
    assert len(rest) == 3 and all("No impact preview" in c["warnings"][-1] for c in rest)
