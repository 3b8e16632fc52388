"""The pages of group quotas and exempt principals (issue 32): the cluster page's groups and exempt sections, the
group page, and group requests in the request pages, for each role: admins change, auditors read, a member sees its
tenants' groups and asks for their values, another tenant's member gets 404. Every refusal of the domain is shown
beside its field with its sentence, and what was typed stays in the form.
"""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client

from history.models import ImpactPreview
from quotas.choices import BudgetScope, ConnectorKind
from quotas.models import (
    AuditAction,
    AuditEntry,
    Cluster,
    ExemptPrincipal,
    GroupKind,
    OwnedName,
    QuotaGroup,
    QuotaRequest,
    create_group,
    set_exempt,
    set_group_values,
)
from quotas.workflow import quota_requests
from tests.people import make_tenant, roles

pytestmark = pytest.mark.django_db
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
MIB = 2**20


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


@pytest.fixture
def w() -> dict[str, Any]:
    """team-a (alice; svc-a-*, batch-a) and team-b (bob; svc-b-*) on Kafka cluster kprod: a tenant group of team-a
    with a cluster-wide value, a principals group of team-b, one exempt principal."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], w["alice2"], users=["svc-a-*", "batch-a"])
    b = make_tenant("team-b", w["bob"], users=["svc-b-*"])
    cluster = Cluster.objects.create(name="kprod", connector=ConnectorKind.KAFKA)
    ga = create_group(w["admin"], cluster, a, "team-a-all", GroupKind.TENANT)
    set_group_values(w["admin"], ga, {PBR: (3 * MIB, BudgetScope.CLUSTER_WIDE), CBR: (MIB, None)})
    gb = create_group(w["admin"], cluster, b, "team-b-svc", GroupKind.PRINCIPALS, principals=["svc-b-1", "svc-b-2"])
    set_exempt(w["admin"], cluster, "replicator", True, "MirrorMaker 2")
    w.update(a=a, b=b, cluster=cluster, ga=ga, gb=gb)
    return w


CLUSTER_URL = "/clusters/kprod/"
GA_URL, GB_URL = "/clusters/kprod/groups/team-a-all/", "/clusters/kprod/groups/team-b-svc/"


# ------------------------------------------------------------------ the cluster page


def test_the_cluster_page_lists_every_group_for_admins_and_auditors(w: dict[str, Any]) -> None:
    for who in ("admin", "auditor"):
        page = text(browser(w[who]).get(CLUSTER_URL))
        assert "<title>Cluster kprod · " in page and page.count('id="groups-h"') == 1, "one groups section, in the body"
        assert f'href="{GA_URL}"' in page and f'href="{GB_URL}"' in page
        assert "the principals tenant team-a owns: batch-a, svc-a-*" in page
        assert "principals svc-b-1, svc-b-2" in page
        assert "3 MiB/s" in page and "cluster-wide" in page
        assert "replicator" in page and "MirrorMaker 2" in page and "root" in page
    admin = text(browser(w["admin"]).get(CLUSTER_URL))
    assert 'id="group-form"' in admin and 'id="exempt-form"' in admin and "Stop exempting replicator" in admin
    auditor = text(browser(w["auditor"]).get(CLUSTER_URL))
    assert 'id="group-form"' not in auditor and 'id="exempt-form"' not in auditor
    assert "Stop exempting replicator" not in auditor
    reader = browser(w["auditor"])
    assert reader.post("/clusters/kprod/exempt/", {"action": "remove", "principal": "replicator",
                                                   "confirm": "on"}).status_code == 403
    made = reader.post("/clusters/kprod/groups/", {"tenant": "team-a", "name": "x", "kind": "tenant"})
    assert made.status_code == 403
    assert reader.post(GB_URL, {"action": "delete", "confirm": "on"}).status_code == 403
    assert ExemptPrincipal.objects.filter(principal="replicator").exists() and QuotaGroup.objects.count() == 2


def test_a_member_sees_its_tenants_groups_only_and_the_exempt_list_read_only(w: dict[str, Any]) -> None:
    page = text(browser(w["bob"]).get(CLUSTER_URL))
    assert "team-b-svc" in page and "team-a-all" not in page
    assert "replicator" in page and "MirrorMaker 2" in page
    assert 'id="group-form"' not in page and 'id="exempt-form"' not in page and "Stop exempting replicator" not in page
    assert browser(w["bob"]).post("/clusters/kprod/exempt/", {"action": "add", "principal": "x"}).status_code == 403
    assert browser(w["bob"]).post("/clusters/kprod/groups/", {"name": "x"}).status_code == 403
    assert not ExemptPrincipal.objects.filter(principal="x").exists()


def test_an_engine_cluster_has_no_group_sections(w: dict[str, Any]) -> None:
    Cluster.objects.create(name="eng")
    page = text(browser(w["admin"]).get("/clusters/eng/"))
    assert 'id="groups"' not in page and 'id="group-form"' not in page


def test_an_admin_makes_a_group_and_lands_on_its_page(w: dict[str, Any]) -> None:
    admin = browser(w["admin"])
    answer = admin.post("/clusters/kprod/groups/", {"tenant": "team-a", "name": "a-batch", "kind": "principals",
                                                    "principals": "batch-a\nsvc-a-9", "description": "nightly"})
    assert answer.status_code == 302 and answer["Location"] == "/clusters/kprod/groups/a-batch/"
    group = QuotaGroup.objects.get(cluster=w["cluster"], name="a-batch")
    assert group.principals == ["batch-a", "svc-a-9"] and group.description == "nightly"
    assert AuditEntry.objects.filter(action=AuditAction.GROUP_CHANGED, entity="/groups/a-batch").exists()


@pytest.mark.parametrize(("posted", "field", "sentence"), [
    ({"name": "bad name!", "kind": "tenant"}, "name", None),
    ({"name": "a2", "kind": "principals", "principals": "svc-b-1"}, "principals",
     "Tenant team-a does not own principal 'svc-b-1'."),
    ({"name": "a2", "kind": "tenant"}, "kind", "Tenant team-a has its group on kprod already: change its values."),
    ({"name": "team-b-svc", "kind": "principals", "principals": "batch-a"}, "name",
     "Cluster kprod has a group 'team-b-svc' already; pick another name."),
    ({"name": "a2", "kind": "client_prefix"}, "client_id_prefix",
     "A client_prefix group needs the client-id prefix its clients start with."),
])
def test_a_refused_group_shows_the_domains_sentence_beside_its_field_and_keeps_the_form(
    w: dict[str, Any], posted: dict[str, str], field: str, sentence: str | None
) -> None:
    body = {"tenant": "team-a", "description": "kept text", **posted}
    answer = browser(w["admin"]).post("/clusters/kprod/groups/", body)
    assert answer.status_code == 400
    form = answer.context["group_form"]
    assert list(form.errors) == [field], form.errors
    if sentence:
        assert form.errors[field] == [sentence]
        assert sentence in text(answer)
    page = text(answer)
    assert 'value="kept text"' in page and f'value="{posted["name"]}"' in page
    assert QuotaGroup.objects.filter(cluster=w["cluster"]).count() == 2


def test_an_overlapping_principal_is_refused_with_the_domains_sentence(w: dict[str, Any]) -> None:
    OwnedName.objects.create(tenant=w["a"], entity_type="user", pattern="svc-b-1")  # now both tenants own it
    answer = browser(w["admin"]).post("/clusters/kprod/groups/", {"tenant": "team-a", "name": "a3",
                                                                  "kind": "principals", "principals": "svc-b-1"})
    assert answer.status_code == 400
    sentence = ("Principal svc-b-1 is in group team-b-svc already; a principal is listed in one group of a cluster "
                "at most.")
    assert answer.context["group_form"].errors["principals"] == [sentence]
    assert "svc-b-1</textarea>" in text(answer)


def test_an_admin_exempts_a_principal_and_removes_it_once_confirmed(w: dict[str, Any]) -> None:
    admin = browser(w["admin"])
    answer = admin.post("/clusters/kprod/exempt/", {"action": "add", "principal": "portal-admin", "reason": "ours"})
    assert answer.status_code == 302
    row = ExemptPrincipal.objects.get(cluster=w["cluster"], principal="portal-admin")
    assert row.reason == "ours" and row.created_by == w["admin"]
    again = admin.post("/clusters/kprod/exempt/", {"action": "add", "principal": "portal-admin", "reason": "x"})
    assert again.status_code == 400
    assert again.context["exempt_form"].errors["principal"] == ["portal-admin is exempt on kprod already."]
    unconfirmed = admin.post("/clusters/kprod/exempt/", {"action": "remove", "principal": "portal-admin"})
    assert unconfirmed.status_code == 400 and "Tick the box to confirm." in text(unconfirmed)
    assert ExemptPrincipal.objects.filter(principal="portal-admin").exists()
    done = admin.post("/clusters/kprod/exempt/", {"action": "remove", "principal": "portal-admin", "confirm": "on"})
    assert done.status_code == 302
    assert not ExemptPrincipal.objects.filter(principal="portal-admin").exists()
    assert AuditEntry.objects.filter(action=AuditAction.EXEMPT_CHANGED, entity="/users/portal-admin").count() == 2


def test_an_empty_principal_is_refused_beside_its_field(w: dict[str, Any]) -> None:
    answer = browser(w["admin"]).post("/clusters/kprod/exempt/", {"action": "add", "principal": "  ",
                                                                  "reason": "kept"})
    assert answer.status_code == 400
    assert "principal" in answer.context["exempt_form"].errors and 'value="kept"' in text(answer)


# ------------------------------------------------------------------ the group page


def test_the_group_page_shows_kind_tenant_members_values_and_the_precedence(w: dict[str, Any], settings) -> None:
    settings.QUOTAS_DOCS_URL = "https://docs.example.com/quotas/"
    page = text(browser(w["alice"]).get(GA_URL))
    assert "the principals tenant team-a owns: batch-a, svc-a-*" in page
    assert "team-a" in page and "tenant" in page
    assert "3 MiB/s" in page and "cluster-wide" in page and "1 MiB/s" in page and "per broker" in page
    assert "the group wins over Kafka's defaults" in page
    assert 'href="https://docs.example.com/quotas/capabilities/group-quotas/#precedence"' in page
    assert 'id="group-request-form"' in page and 'id="delete-form"' not in page


def test_who_sees_a_group_page(w: dict[str, Any]) -> None:
    assert browser(w["bob"]).get(GA_URL).status_code == 404, "another tenant's group does not leak"
    assert browser(w["bob"]).get("/clusters/kprod/groups/nope/").status_code == 404
    assert browser(w["bob"]).get("/clusters/nope/groups/team-b-svc/").status_code == 404
    assert browser(w["bob"]).get(GB_URL).status_code == 200
    auditor = browser(w["auditor"]).get(GA_URL)
    assert auditor.status_code == 200
    page = text(auditor)
    assert 'id="group-request-form"' not in page and 'id="members-form"' not in page and 'id="delete-form"' not in page
    admin = text(browser(w["admin"]).get(GB_URL))
    assert 'id="members-form"' in admin and 'id="delete-form"' in admin and 'id="group-request-form"' not in admin
    assert Client().get(GA_URL).status_code == 302, "signed out: the login page"


def test_a_member_asks_for_a_group_value_in_units_and_an_admin_approves_it(w: dict[str, Any]) -> None:
    answer = browser(w["alice"]).post(GA_URL, {"action": "request", "key": PBR, "value": "4 MiB/s",
                                               "budget_scope": "", "reason": "peak"})
    assert answer.status_code == 302
    made = QuotaRequest.objects.get(group=w["ga"])
    assert answer["Location"] == f"/requests/{made.pk}/"
    assert (made.key, made.value, made.budget_scope, made.user, made.client_id) == (PBR, 4 * MIB, "cluster_wide",
                                                                                  None, None)
    quota_requests.approve(w["admin"], made.pk, "ok")
    assert w["ga"].values.get(key=PBR).value == 4 * MIB
    assert f'href="/requests/{made.pk}/"' in text(browser(w["alice"]).get(GA_URL))


@pytest.mark.parametrize(("posted", "field"), [
    ({"key": PBR, "value": "lots"}, "value"),
    ({"key": "request_percentage", "value": "-5"}, "value"),
    ({"key": "connection_creation_rate", "value": "5"}, "key"),
    ({"key": "controller_mutation_rate", "value": "5", "budget_scope": "cluster_wide"}, "budget_scope"),
])
def test_a_refused_group_request_keeps_the_form_and_says_why_beside_the_field(
    w: dict[str, Any], posted: dict[str, str], field: str
) -> None:
    answer = browser(w["alice"]).post(GA_URL, {"action": "request", "reason": "kept reason", **posted})
    assert answer.status_code == 400
    form = answer.context["request_form"]
    assert field in form.errors, form.errors
    page = text(answer)
    assert "kept reason</textarea>" in page and f'value="{posted["value"]}"' in page
    assert not QuotaRequest.objects.filter(group=w["ga"]).exists()


def test_the_workflows_refusal_goes_beside_its_field(w: dict[str, Any]) -> None:
    answer = browser(w["alice"]).post(GA_URL, {"action": "request", "key": CBR, "value": "0"})
    assert answer.status_code == 400
    errors = answer.context["request_form"].errors
    assert list(errors) == ["value"] and errors["value"][0] in text(answer)


def test_only_its_tenants_members_ask_for_a_groups_value(w: dict[str, Any]) -> None:
    assert browser(w["bob"]).post(GA_URL, {"action": "request", "key": PBR, "value": "1"}).status_code == 404
    assert browser(w["auditor"]).post(GA_URL, {"action": "request", "key": PBR, "value": "1"}).status_code == 403
    assert browser(w["alice"]).post(GA_URL, {"action": "delete", "confirm": "on"}).status_code == 403
    assert browser(w["alice"]).post(GB_URL, {"action": "request", "key": PBR, "value": "1"}).status_code == 404
    assert not QuotaRequest.objects.exists() and QuotaGroup.objects.count() == 2


def test_an_admin_changes_a_groups_members_and_a_refusal_stays_in_the_form(w: dict[str, Any]) -> None:
    admin = browser(w["admin"])
    refused = admin.post(GB_URL, {"action": "members", "principals": "svc-b-1\nbatch-a"})
    assert refused.status_code == 400
    assert refused.context["members_form"].errors["principals"] == ["Tenant team-b does not own principal 'batch-a'."]
    assert "svc-b-1\nbatch-a</textarea>" in text(refused)
    w["gb"].refresh_from_db()
    assert w["gb"].principals == ["svc-b-1", "svc-b-2"]
    done = admin.post(GB_URL, {"action": "members", "principals": "svc-b-3, svc-b-1"})
    assert done.status_code == 302
    w["gb"].refresh_from_db()
    assert w["gb"].principals == ["svc-b-3", "svc-b-1"]


def test_deleting_a_group_is_confirmed_and_refused_while_requests_are_open(w: dict[str, Any]) -> None:
    admin = browser(w["admin"])
    unconfirmed = admin.post(GA_URL, {"action": "delete"})
    assert unconfirmed.status_code == 400 and "Tick the box to confirm." in text(unconfirmed)
    waiting = quota_requests.submit(w["alice"], None, w["cluster"], user=None, client_id=None, key=PBR, value=MIB,
                                    group=w["ga"])
    refused = admin.post(GA_URL, {"action": "delete", "confirm": "on"})
    assert refused.status_code == 409
    sentence = "Group team-a-all has requests still open; decide or withdraw them first."
    assert refused.context["delete_form"].errors["confirm"] == [sentence] and sentence in text(refused)
    quota_requests.withdraw(w["alice"], waiting.pk)
    done = admin.post(GA_URL, {"action": "delete", "confirm": "on"})
    assert done.status_code == 302 and done["Location"] == CLUSTER_URL
    assert not QuotaGroup.objects.filter(name="team-a-all").exists()
    page = text(browser(w["alice"]).get(f"/requests/{waiting.pk}/"))
    assert "<code>/groups/team-a-all</code> (deleted)" in page


# ------------------------------------------------------------------ group requests in the request pages


def test_group_requests_show_as_their_group_in_the_request_pages(w: dict[str, Any]) -> None:
    made = quota_requests.submit(w["alice"], None, w["cluster"], user=None, client_id=None, key=PBR, value="2 MiB/s",
                                 reason="peak", group=w["ga"])
    link = '<a href="/clusters/kprod/groups/team-a-all/"><code>/groups/team-a-all</code></a>'
    for who in ("alice", "admin", "auditor"):
        listed = browser(w[who]).get("/requests/")
        assert listed.status_code == 200 and link in text(listed)
        detail = browser(w[who]).get(f"/requests/{made.pk}/")
        assert detail.status_code == 200 and link in text(detail)
        assert "group team-a-all" in text(detail), "the group's sensor, not an empty entity's"
        assert 'data-figure="groups"' in text(detail), "the capacity check counts the group's one sensor"
    assert link in text(browser(w["auditor"]).get("/approvals/"))
    previews = list(ImpactPreview.objects.values_list("group_name", "user", "client_id"))
    assert previews and all(p == ("team-a-all", None, None) for p in previews), f"the group's preview: {previews}"
    assert browser(w["bob"]).get(f"/requests/{made.pk}/").status_code == 404
    quota_requests.approve(w["admin"], made.pk, "ok")
    decided = browser(w["alice"]).get(f"/requests/{made.pk}/")
    assert decided.status_code == 200 and "Approved" in text(decided) and link in text(decided)


def test_a_value_in_a_form_the_key_does_not_take_says_what_is_wrong_once(w: dict[str, Any]) -> None:
    answer = browser(w["alice"]).post(GA_URL, {"action": "request", "key": PBR, "value": "2 MB/s"})
    assert answer.status_code == 400
    [message] = answer.context["request_form"].errors["value"]
    assert message.startswith("'2 MB/s' is not a byte rate") and message.endswith("the forms listed above.")
    assert text(answer).count("is not a byte rate") == 1
