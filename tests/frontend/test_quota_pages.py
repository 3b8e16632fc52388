"""The server-rendered pages: entities, requests, the approval queue, the audit log, clusters and tenants.

Two tenants (team-a owns svc-a-* and app-a-*, team-b owns svc-b-* and app-b-?), two admins (staff, and the
quota-admins group), an auditor. Each page is checked for who may see it and what it refuses; the request
form is checked against the API (same body, same refusal, same message) rather than against restated rules.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from quotas.models import (
    Alteration,
    Approval,
    AuditEntry,
    Cluster,
    OwnedName,
    QuotaEntity,
    QuotaOp,
    QuotaRequest,
    Tenant,
    audited_alter,
)
from quotas.models.capacity import capacity_check
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers
from tests.people import make_tenant, make_user, roles

pytestmark = pytest.mark.django_db

PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
User = get_user_model()


def browser(user: Any, *, csrf: bool = False) -> Client:
    """A logged-in session, as a person's browser holds it."""
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def w() -> dict[str, Any]:
    """The people, tenants and one cluster (3 brokers, per broker) with a few stored quotas and their audit."""
    w: dict[str, Any] = roles()
    a = Tenant.objects.create(name="team-a", description="Team A")
    a.members.add(w["alice"], w["alice2"])
    OwnedName.objects.create(tenant=a, entity_type="user", pattern="svc-a-*")
    OwnedName.objects.create(tenant=a, entity_type="client-id", pattern="app-a-*")
    b = make_tenant("team-b", w["bob"], users=["svc-b-*"], client_ids=["app-b-?"])
    cluster = cluster_with_brokers(
        range(3), name="prod", capacity_in_bytes_per_s=10_000, capacity_out_bytes_per_s=50_000
    )
    cluster.listeners.create(name="INTERNAL", is_inter_broker=True)
    rows = [
        ([("user", "svc-a-1")], PBR, 1000),
        ([("user", "svc-a-1"), ("client-id", "app-a-1")], CBR, 2000),
        ([("user", "svc-b-1")], PBR, 3000),
        ([("user", None)], PBR, 500),  # the <default> user: admins only
        ([("ip", "10.0.0.1")], "connection_creation_rate", 5),
    ]
    audited_alter(cluster, [Alteration(e, [QuotaOp(k, v)]) for e, k, v in rows], w["admin"])
    w.update(a=a, b=b, cluster=cluster)
    return w


def entity_pk(cluster: Cluster, user: str | None = None, client_id: str | None = None, ip: str | None = None) -> int:
    return QuotaEntity.objects.get(cluster=cluster, user=user, client_id=client_id, ip=ip).pk


def submitted(w: dict[str, Any], who: str = "alice", **fields: Any) -> QuotaRequest:
    args = {"user": "svc-a-1", "client_id": None, "key": PBR, "value": 1000, **fields}
    return quota_requests.submit(w[who], w["a"], w["cluster"], **args)


def text(response: Any) -> str:
    """The page's HTML with entities decoded, so messages compare as the API writes them."""
    return html.unescape(response.content.decode())


class _Page(HTMLParser):
    """Collects table rows (cell texts), labels, form fields and landmarks of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.labels: set[str] = set()
        self.fields: list[dict[str, str | None]] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "label" and a.get("for"):
            self.labels.add(a["for"] or "")
        elif tag in ("input", "select", "textarea"):
            self.fields.append({"tag": tag, **a})

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse(response: Any) -> _Page:
    p = _Page()
    p.feed(response.content.decode())
    return p


def assert_accessible(response: Any) -> None:
    """Skip link, landmarks, and a label for every visible form field."""
    p = parse(response)
    body = response.content.decode()
    assert 'class="skip-link" href="#main"' in body and 'id="main"' in body
    assert {"header", "nav", "main"} <= set(p.tags)
    for f in p.fields:
        if f.get("type") in ("hidden", "submit"):
            continue
        assert f.get("id") in p.labels, f"no label for {f}"


# ------------------------------------------------------------------ login and access


PAGES = ["/entities/", "/requests/", "/requests/new/", "/approvals/", "/audit/", "/clusters/", "/tenants/"]


@pytest.mark.parametrize("url", [*PAGES, "/requests/1/", "/entities/1/", "/clusters/prod/"])
def test_anonymous_is_sent_to_the_login_page(url: str) -> None:
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={url}"


def test_login_and_logout_with_csrf() -> None:
    User.objects.create_user("carol", password="s3cret-pass-9")
    client = Client(enforce_csrf_checks=True)
    page = client.get("/login/")
    assert page.status_code == 200 and 'name="csrfmiddlewaretoken"' in page.content.decode()
    assert_accessible(page)
    token = client.cookies["csrftoken"].value
    assert client.post("/login/", {"username": "carol", "password": "wrong"}).status_code == 403  # no token
    bad = client.post("/login/", {"username": "carol", "password": "wrong", "csrfmiddlewaretoken": token})
    assert bad.status_code == 200 and "enter a correct username and password" in text(bad)
    good = client.post(
        "/login/?next=/requests/",
        {"username": "carol", "password": "s3cret-pass-9", "next": "/requests/", "csrfmiddlewaretoken": token},
    )
    assert good.status_code == 302 and good["Location"] == "/requests/"
    assert client.get("/requests/").status_code == 200
    token = client.cookies["csrftoken"].value  # rotated at login
    out = client.post("/logout/", {"csrfmiddlewaretoken": token})
    assert out.status_code == 302 and out["Location"] == "/login/"
    assert client.get("/requests/").status_code == 302


@pytest.mark.parametrize("who", ["admin", "admin2", "auditor", "alice", "bob"])
def test_every_page_renders_accessibly_for_each_role(w: dict[str, Any], who: str) -> None:
    submitted(w)
    client = browser(w[who])
    for url in ["/", *PAGES, "/clusters/prod/"]:
        response = client.get(url)
        expected = 200
        if url == "/approvals/" and who in ("alice", "bob"):
            expected = 403
        if url == "/requests/new/" and who == "auditor":
            expected = 403
        assert response.status_code == expected, (url, response.status_code)
        assert_accessible(response)


def test_navigation_follows_the_roles(w: dict[str, Any]) -> None:
    member = browser(w["alice"]).get("/").content.decode()
    assert 'href="/approvals/"' not in member and 'href="/requests/new/"' in member
    assert 'href="/admin/"' not in member  # the admin site is for staff only
    auditor = browser(w["auditor"]).get("/").content.decode()
    assert 'href="/approvals/"' in auditor and 'href="/requests/new/"' not in auditor
    admin = browser(w["admin"]).get("/").content.decode()
    assert 'href="/approvals/"' in admin and 'href="/admin/"' in admin
    assert 'action="/logout/"' in admin


# ------------------------------------------------------------------ entities


def _paths(response: Any) -> set[str]:
    """The listed entities' config paths: each row names its entity in words, Kafka's path on hover."""
    names = re.findall(r'<td><a href="/entities/\d+/"><span class="entity-name" title="([^"]+)">',
                       response.content.decode())
    return {html.unescape(name) for name in names}


def test_entity_list_is_scoped_to_the_members_tenants(w: dict[str, Any]) -> None:
    everything = {
        "/config/users/svc-a-1",
        "/config/users/svc-a-1/clients/app-a-1",
        "/config/users/svc-b-1",
        "/config/users/<default>",
        "/config/ips/10.0.0.1",
    }
    listed = parse(browser(w["alice"]).get("/entities/")).rows
    assert {row[1] for row in listed[1:]} == {"svc-a-1 (all client-ids)", "svc-a-1, client-id app-a-1",
                                              "<default> principal"}  # in words
    assert _paths(browser(w["alice"]).get("/entities/")) == {  # its tenant's, and the defaults (as describe)
        "/config/users/svc-a-1",
        "/config/users/svc-a-1/clients/app-a-1",
        "/config/users/<default>",
    }
    assert _paths(browser(w["bob"]).get("/entities/")) == {"/config/users/svc-b-1", "/config/users/<default>"}
    assert _paths(browser(w["auditor"]).get("/entities/")) == everything
    assert _paths(browser(w["admin2"]).get("/entities/")) == everything
    assert _paths(browser(make_user("nobody")).get("/entities/")) == set()


def test_entity_list_search(w: dict[str, Any]) -> None:
    admin = browser(w["admin"])
    assert _paths(admin.get("/entities/", {"q": "app-a"})) == {"/config/users/svc-a-1/clients/app-a-1"}
    assert _paths(admin.get("/entities/", {"q": "SVC-B"})) == {"/config/users/svc-b-1"}  # case-insensitive
    assert _paths(admin.get("/entities/", {"q": "10.0.0"})) == {"/config/ips/10.0.0.1"}
    assert len(_paths(admin.get("/entities/", {"q": "prod"}))) == 5  # the cluster's name
    assert _paths(admin.get("/entities/", {"q": "zzz"})) == set()
    Cluster.objects.create(name="dev")
    assert len(_paths(admin.get("/entities/", {"cluster": "dev"}))) == 0
    assert len(_paths(admin.get("/entities/", {"cluster": "prod"}))) == 5
    # a member's search stays inside the member's scope
    assert _paths(browser(w["alice"]).get("/entities/", {"q": "svc"})) == {
        "/config/users/svc-a-1",
        "/config/users/svc-a-1/clients/app-a-1",
    }


def test_entity_page_shows_effective_quota_with_levels_and_history(w: dict[str, Any]) -> None:
    pk = entity_pk(w["cluster"], user="svc-a-1")
    response = browser(w["alice"]).get(f"/entities/{pk}/")
    assert response.status_code == 200
    rows = parse(response).rows
    assert ["producer_byte_rate", "1,000 B/s"] in rows  # stored on the entity
    # effective, for svc-a-1 with any unconfigured client-id: level 3 (/config/users/svc-a-1)
    pbr = next(r for r in rows if r[0] == PBR and len(r) == 5)
    assert pbr[1:4] == ["1,000 B/s", "3", "svc-a-1 (all client-ids)"]
    assert "1: svc-a-1, empty client-id" in pbr[4] and "2: svc-a-1, <default> client-id" in pbr[4]
    cbr = next(r for r in rows if r[0] == CBR and len(r) == 5)
    assert cbr[1:4] == ["unlimited", "—", "no entity (no quota)"]
    # the client-id can be chosen, because this entity applies to every client-id of svc-a-1
    rows = parse(browser(w["alice"]).get(f"/entities/{pk}/", {"as_client_id": "app-a-1"})).rows
    cbr = next(r for r in rows if r[0] == CBR and len(r) == 5)
    assert cbr[1:4] == ["1.95 KiB/s", "1", "svc-a-1, client-id app-a-1"]
    page = browser(w["alice"]).get(f"/entities/{pk}/", {"as_client_id": "app-a-1"}).content.decode()
    assert 'title="2,000 B/s">1.95 KiB/s<' in page  # the exact figure on hover
    # history: the audited change by the admin (tenant team-a owns the principal, so alice reads it)
    history = [r for r in rows if len(r) == 9 and r[2] == "Quota value changed"]
    assert history and history[0][1] == "root" and history[0][4].startswith("svc-a-1 (all client-ids)")


def test_entity_page_refuses_other_tenants_and_admin_only_entities(w: dict[str, Any]) -> None:
    a_entity = entity_pk(w["cluster"], user="svc-a-1")
    default = entity_pk(w["cluster"], user="<default>")
    ip = entity_pk(w["cluster"], ip="10.0.0.1")
    bob = browser(w["bob"])
    for pk in (a_entity, ip, 999999):
        response = bob.get(f"/entities/{pk}/")
        assert response.status_code == 404 and "not one you may see" in text(response)
    assert bob.get(f"/entities/{default}/").status_code == 200  # a default applies to bob's clients too
    auditor = browser(w["auditor"])
    for pk in (a_entity, default, ip):
        assert auditor.get(f"/entities/{pk}/").status_code == 200
    rows = parse(auditor.get(f"/entities/{ip}/")).rows
    assert ["connection_creation_rate", "5 connections/s", "1", "ip 10.0.0.1", "—"] in rows


# ------------------------------------------------------------------ the request form, as the API


FORM = {"tenant": "team-a", "cluster": "prod", "user": "svc-a-1", "client_id": "", "key": PBR, "value": "4000"}
API = {"tenant": "team-a", "cluster": "prod", "user": "svc-a-1", "key": PBR, "value": 4000}


def test_request_form_submits_like_the_api(w: dict[str, Any]) -> None:
    client = browser(w["alice"])
    form = client.get("/requests/new/")
    assert form.status_code == 200 and 'name="csrfmiddlewaretoken"' in form.content.decode()
    response = client.post("/requests/new/", {**FORM, "reason": "launch", "expires_at": "2999-01-01T10:00"})
    created = QuotaRequest.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/requests/{created.pk}/"
    assert (created.user, created.client_id, created.key, created.value) == ("svc-a-1", None, PBR, 4000.0)
    assert created.reason == "launch" and created.expires_at.isoformat() == "2999-01-01T10:00:00+00:00"
    page = client.get(response["Location"])
    assert f"Request #{created.pk} submitted" in text(page) and "Submitted, waiting for an admin" in text(page)


# (form fields, API body changes, the field both mark: the API's details and the form's field with the error)
REFUSALS = [
    ({"value": "abc"}, {"value": "abc"}, "value"),  # text in no accepted form: the unit parser names the forms
    ({"value": "1.5"}, {"value": "1.5"}, "value"),  # 1.5 bytes/s is not a whole number of bytes
    ({"value": "2 MB/s"}, {"value": "2 MB/s"}, "value"),  # decimal units: said once, not beside the forms again
    ({"value": "-5"}, {"value": -5}, "value"),
    ({"value": "NaN"}, {"value": "NaN"}, "value"),
    ({"key": "bogus"}, {"key": "bogus"}, "key"),
    ({"key": "connection_creation_rate"}, {"key": "connection_creation_rate"}, "key"),
    ({"user": "svc-b-1"}, {"user": "svc-b-1"}, "user"),
    ({"user": "", "client_id": "app-b-1"}, {"user": None, "client_id": "app-b-1"}, "client_id"),
    ({"tenant": "team-b"}, {"tenant": "team-b"}, "tenant"),  # alice's only tenant: shown beside its name
    ({"user": "<default>"}, {"user": "<default>"}, "user"),
    ({"user": ""}, {"user": None}, "user"),
    ({"expires_at": "2000-01-01T00:00"}, {"expires_at": "2000-01-01T00:00:00Z"}, "expires_at"),
    ({"expires_at": "next week"}, {"expires_at": "next week"}, "expires_at"),
    ({"tenant": "nope"}, {"tenant": "nope"}, "tenant"),
    ({"cluster": "nope"}, {"cluster": "nope"}, "cluster"),
    ({"value": ""}, {"value": None}, "value"),
]
#: What the form says instead of the accepted forms, which its help text lists right above the field.
FORMS_LISTED = "; write it in one of the forms listed above."


def field_errors(response: Any) -> dict[str, list[str]]:
    """The error messages the page shows at each field (Django's ``id_<field>_error`` lists), by field name."""
    found: dict[str, list[str]] = {}
    for name, items in re.findall(r'<ul class="errorlist" id="id_(\w+)_error">(.*?)</ul>', text(response), re.S):
        found[name] = re.findall(r"<li>(.*?)</li>", items, re.S)
    return found


@pytest.mark.parametrize(("form", "body", "field"), REFUSALS)
def test_request_form_refuses_as_the_api_does(
    w: dict[str, Any], form: dict[str, str], body: dict[str, Any], field: str | None
) -> None:
    """The page refuses what the API refuses, with its words, once, at the field to change (marked aria-invalid)."""
    api = APIClient()
    api.force_authenticate(w["alice"])
    payload = {k: v for k, v in {**API, **body}.items() if v is not None or k not in ("value",)}
    answer = api.post("/api/requests/", payload, format="json")
    assert answer.status_code in (400, 403), answer.json()
    details = answer.json()["details"]
    if field is not None:
        assert list(details) == [field], details  # the API names the field too
    expected = details[field][0] if field else answer.json()["message"]

    response = browser(w["alice"]).post("/requests/new/", {**FORM, **form})
    assert response.status_code == answer.status_code
    assert "The request was not submitted" in text(response)
    assert not QuotaRequest.objects.exists()
    assert_accessible(response)
    shown = field_errors(response)
    if field is None:
        assert not shown and expected in text(response), expected
        return
    assert list(shown) == [field] and len(shown[field]) == 1, shown  # one message, at its field only
    message = shown[field][0]
    if message.endswith(FORMS_LISTED):  # the API's message less the forms the help text lists
        assert message.removesuffix(FORMS_LISTED) in expected and "1536 KiB/s" not in message, message
    else:
        assert message == expected
    assert text(response).count(message) == 1
    marked = [f.get("name") for f in parse(response).fields if f.get("aria-invalid") == "true"]
    assert marked == ([] if field == "tenant" else [field])  # alice's one tenant is named on the page, not asked


def test_refusals_of_names_say_what_the_tenant_owns(w: dict[str, Any]) -> None:
    """A principal or client-id the tenant does not own is refused with what it owns, a few of them at most."""
    for i in range(7):
        OwnedName.objects.create(tenant=w["a"], entity_type="user", pattern=f"ops-{i}")
    response = browser(w["alice"]).post("/requests/new/", {**FORM, "user": "svc-b-1"})
    assert response.status_code == 403
    (message,) = field_errors(response)["user"]
    assert "does not own the principal 'svc-b-1'; it owns the principals ops-0, ops-1, ops-2, ops-3, ops-4 and " \
        "3 more." in message, message
    response = browser(w["alice"]).post("/requests/new/", {**FORM, "user": "", "client_id": "app-b-1"})
    (message,) = field_errors(response)["client_id"]
    assert "it owns the client-ids app-a-*." in message, message


def test_a_member_of_one_tenant_is_not_asked_which(w: dict[str, Any]) -> None:
    client = browser(w["alice"])
    page = client.get("/requests/new/")
    assert 'name="tenant"' not in page.content.decode() and "Tenant: <strong>team-a</strong>" in text(page)
    assert_accessible(page)
    response = client.post("/requests/new/", {k: v for k, v in FORM.items() if k != "tenant"})
    assert response.status_code == 302
    assert QuotaRequest.objects.get().tenant == w["a"]


def test_a_member_of_several_tenants_chooses_one(w: dict[str, Any]) -> None:
    w["b"].members.add(w["alice"])
    client = browser(w["alice"])
    page = client.get("/requests/new/")
    choices = [f.get("name") for f in parse(page).fields if f["tag"] == "select"]
    assert "tenant" in choices and '<option value="team-b">team-b</option>' in page.content.decode()
    response = client.post("/requests/new/", {**FORM, "tenant": ""})
    assert response.status_code == 400 and not QuotaRequest.objects.exists()
    assert "You are a member of 2 tenants, team-a, team-b: name the one this request is for" in text(response)
    assert client.post("/requests/new/", FORM).status_code == 302
    assert QuotaRequest.objects.get().tenant == w["a"]


def test_the_request_form_takes_units_and_shows_what_it_understood(w: dict[str, Any]) -> None:
    client = browser(w["alice"])
    page = client.get("/requests/new/").content.decode()
    # units.js renders "= 1,572,864 B/s (1.5 MiB/s)" into the output under the value as one types
    assert "/static/frontend/units.js" in page and "<script>" not in page  # no inline script
    value = next(f for f in parse(client.get("/requests/new/")).fields if f.get("name") == "value")
    assert value["data-quota-value"] == "id_key" and value["aria-describedby"] == "value-understood"
    assert '<output id="value-understood"' in page
    assert "1536 KiB/s, 1.5 MiB/s, 2 GiB/s" in html.unescape(page)  # the accepted forms, in the help text
    response = client.post("/requests/new/", {**FORM, "value": "1.5 MiB/s"})
    assert response.status_code == 302
    created = QuotaRequest.objects.get()
    assert created.value == 1_572_864
    detail = client.get(response["Location"]).content.decode()
    assert '<span class="qty" title="1,572,864 B/s">1.5 MiB/s</span>' in detail
    refused = client.post("/requests/new/", {**FORM, "value": "1.5 MB/s"})
    assert refused.status_code == 400 and "decimal units such as MB/s are not taken" in text(refused)


def test_auditor_cannot_submit(w: dict[str, Any]) -> None:
    w["a"].members.add(w["auditor"])
    api = APIClient()
    api.force_authenticate(w["auditor"])
    expected = api.post("/api/requests/", API, format="json").json()["message"]
    client = browser(w["auditor"])
    assert client.get("/requests/new/").status_code == 403
    response = client.post("/requests/new/", FORM)
    assert response.status_code == 403 and expected in text(response)
    assert not QuotaRequest.objects.exists()


# ------------------------------------------------------------------ approval queue and decisions


def test_approval_queue_shows_capacity_and_is_for_admins_and_auditors(w: dict[str, Any]) -> None:
    big = submitted(w, value=4000)  # 4000 replaces 1000: (1000 + 3000 - 1000 + 4000) x 3 brokers > 10,000
    small = submitted(w, key="request_percentage", value=50)
    warning = capacity_check(big).warning
    assert warning is not None

    admin = browser(w["admin"]).get("/approvals/")
    assert admin.status_code == 200
    page = text(admin)
    assert warning in page and "Above capacity." in page
    assert "12,000 B/s" in page and "21,000 B/s" in page and "10,000 B/s" in page and "per broker × 3" in page
    assert "request_percentage is not a byte rate" in page
    for r in (big, small):
        assert f'action="/requests/{r.pk}/approve/"' in page and f'formaction="/requests/{r.pk}/reject/"' in page

    auditor = browser(w["auditor"]).get("/approvals/")
    assert auditor.status_code == 200 and warning in text(auditor)
    assert "/approve/" not in auditor.content.decode()  # auditors read, never decide

    for who in ("alice", "bob"):
        assert browser(w[who]).get("/approvals/").status_code == 403


def test_the_capacity_check_on_the_queue_counts_defaults_and_says_how(w: dict[str, Any]) -> None:
    """svc-a-2 has no producer quota of its own: the <default> principal's 500 B/s is granted to it today."""
    submitted(w, user="svc-a-2", value=2000)
    page = text(browser(w["admin"]).get("/approvals/"))
    # without: svc-a-1 1000 + svc-b-1 3000 + svc-a-2's default 500, x 3 brokers; with: 2000 instead of 500
    assert 'title="13,500 B/s">13.18 KiB/s<' in page and 'title="18,000 B/s">17.58 KiB/s<' in page
    assert "over 4 known entities" in page
    assert '<span class="entity-name" title="/config/users/<default>"><default> principal</span> = ' in page
    assert "applies to 0 of the 4 known entities with this request, 1 without it: counted once for each." in page


def _csrf_client(user: Any, pk: int) -> tuple[Client, str]:
    client = browser(user, csrf=True)
    assert client.get(f"/requests/{pk}/").status_code == 200  # sets the CSRF cookie, as a browser would
    return client, client.cookies["csrftoken"].value


def test_approve_needs_the_csrf_token_and_applies(w: dict[str, Any]) -> None:
    r = submitted(w, value=4000)
    client, token = _csrf_client(w["admin"], r.pk)
    refused = client.post(f"/requests/{r.pk}/approve/", {"comment": "ok"})
    assert refused.status_code == 403
    r.refresh_from_db()
    assert r.state == "submitted" and not Approval.objects.exists()

    response = client.post(f"/requests/{r.pk}/approve/", {"comment": "ok", "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and response["Location"] == f"/requests/{r.pk}/"
    r.refresh_from_db()
    assert r.state == "applying" and r.approval.approver == w["admin"] and r.approval.comment == "ok"

    page = client.get(f"/requests/{r.pk}/")
    assert f"Request #{r.pk} approved." in text(page)
    rows = parse(page).rows
    transitions = [row for row in rows if len(row) == 5 and row[0] != "When (UTC)"]
    assert [(t[1], t[2], t[3], t[4]) for t in transitions] == [
        ("alice", "—", "submitted", ""),
        ("root", "submitted", "approved", "ok"),
        ("root", "approved", "applying", f"desired-state version {r.applied_version}"),
    ]  # "applied" comes when every broker holds the version (tests/push)
    altered = [row for row in rows if len(row) == 9 and row[2] == "Quota value changed"]
    assert altered and altered[0][6:8] == ["1,000 B/s", "3.91 KiB/s"]  # the audit entry: before and after
    assert "Approved by root" in text(page)


def test_approving_from_the_queue_goes_back_to_the_queue(w: dict[str, Any]) -> None:
    r = submitted(w, value=2000)
    client, token = _csrf_client(w["admin2"], r.pk)
    form = {"comment": "", "next": "/approvals/", "csrfmiddlewaretoken": token}
    response = client.post(f"/requests/{r.pk}/approve/", form)
    assert response.status_code == 302 and response["Location"] == "/approvals/"
    form["next"] = "https://evil.example/"
    other = submitted(w, value=3000, user="svc-a-2")
    assert client.post(f"/requests/{other.pk}/approve/", form)["Location"] == f"/requests/{other.pk}/"


def test_reject_needs_a_comment_and_csrf(w: dict[str, Any]) -> None:
    r = submitted(w)
    client, token = _csrf_client(w["admin"], r.pk)
    assert client.post(f"/requests/{r.pk}/reject/", {"comment": "too much"}).status_code == 403  # no token
    response = client.post(f"/requests/{r.pk}/reject/", {"comment": "  ", "csrfmiddlewaretoken": token})
    assert response.status_code == 400
    assert "Say why in the comment: the tenant needs to know what to change." in text(response)
    assert "Nothing was changed." in text(response)
    r.refresh_from_db()
    assert r.state == "submitted" and not Approval.objects.exists()

    response = client.post(f"/requests/{r.pk}/reject/", {"comment": "too much", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    r.refresh_from_db()
    assert r.state == "rejected" and r.approval.comment == "too much"
    page = text(client.get(f"/requests/{r.pk}/"))
    assert "Rejected by root" in page and "too much" in page
    # decided: a second decision is the workflow's conflict, shown with its message
    again = client.post(f"/requests/{r.pk}/approve/", {"csrfmiddlewaretoken": token})
    assert again.status_code == 409 and "it cannot become approved" in text(again)


def test_nobody_approves_their_own_request_on_the_page(w: dict[str, Any]) -> None:
    w["a"].members.add(w["admin2"])
    r = submitted(w, who="admin2")
    client, token = _csrf_client(w["admin2"], r.pk)
    page = text(client.get(f"/requests/{r.pk}/"))
    assert f'action="/requests/{r.pk}/approve/"' not in page and "another admin decides" in page
    queue = text(client.get("/approvals/"))
    assert f'action="/requests/{r.pk}/approve/"' not in queue and "another admin decides" in queue
    for action in ("approve", "reject"):
        response = client.post(f"/requests/{r.pk}/{action}/", {"comment": "mine", "csrfmiddlewaretoken": token})
        assert response.status_code == 403
        assert "Nobody approves or rejects their own request; ask another admin." in text(response)
    r.refresh_from_db()
    assert r.state == "submitted" and not Approval.objects.exists()
    assert not AuditEntry.objects.filter(request=r).exclude(action="submitted").exists()
    # another admin may
    other, token = _csrf_client(w["admin"], r.pk)
    assert other.post(f"/requests/{r.pk}/approve/", {"csrfmiddlewaretoken": token}).status_code == 302


def test_request_page_access_and_refusals(w: dict[str, Any]) -> None:
    r = submitted(w)
    assert browser(w["bob"]).get(f"/requests/{r.pk}/").status_code == 404
    assert browser(w["bob"]).post(f"/requests/{r.pk}/approve/").status_code == 404  # invisible: as the API
    assert browser(w["alice"]).get("/requests/999999/").status_code == 404

    mate = browser(w["alice2"]).get(f"/requests/{r.pk}/")
    assert mate.status_code == 200
    assert f'action="/requests/{r.pk}/withdraw/"' in mate.content.decode()
    assert f'action="/requests/{r.pk}/approve/"' not in mate.content.decode()

    auditor = browser(w["auditor"])
    page = auditor.get(f"/requests/{r.pk}/").content.decode()
    assert "/approve/" not in page and "/withdraw/" not in page
    response = auditor.post(f"/requests/{r.pk}/approve/", {"comment": "x"})
    assert response.status_code == 403 and "Auditors read everything and change nothing" in text(response)

    member = browser(w["alice"]).post(f"/requests/{r.pk}/approve/")
    assert member.status_code == 403 and "Only admins (staff or the quota-admins group)" in text(member)
    assert browser(w["admin"]).get(f"/requests/{r.pk}/approve/").status_code == 405  # POST only
    r.refresh_from_db()
    assert r.state == "submitted"


def test_member_withdraws(w: dict[str, Any]) -> None:
    r = submitted(w)
    client, token = _csrf_client(w["alice2"], r.pk)
    response = client.post(f"/requests/{r.pk}/withdraw/", {"comment": "not needed", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    r.refresh_from_db()
    assert r.state == "withdrawn"
    assert "not needed" in text(client.get(f"/requests/{r.pk}/"))


def test_request_list_is_scoped_and_filtered(w: dict[str, Any]) -> None:
    a = submitted(w)
    b = quota_requests.submit(w["bob"], w["b"], w["cluster"], user="svc-b-1", client_id=None, key=PBR, value=10)
    quota_requests.reject(w["admin"], b.pk, "no")

    def ids(who: str, **params: str) -> set[str]:
        return {row[0] for row in parse(browser(w[who]).get("/requests/", params)).rows[1:]}

    assert ids("alice") == {f"#{a.pk}"}
    assert ids("bob") == {f"#{b.pk}"}
    assert ids("auditor") == {f"#{a.pk}", f"#{b.pk}"}
    assert ids("admin", state="rejected") == {f"#{b.pk}"}


# ------------------------------------------------------------------ audit, clusters, tenants


def test_audit_log_is_scoped_and_filtered(w: dict[str, Any]) -> None:
    a = submitted(w)
    b = quota_requests.submit(w["bob"], w["b"], w["cluster"], user="svc-b-1", client_id=None, key=PBR, value=10)

    def entries(who: str, **params: str) -> list[list[str]]:
        return [row for row in parse(browser(w[who]).get("/audit/", params)).rows if len(row) == 9][1:]

    alice = entries("alice")
    assert {row[3] for row in alice if row[3] != "—"} == {f"#{a.pk}"}
    assert all("svc-b" not in row[4] and "<default>" not in row[4] for row in alice)
    everything = entries("auditor")
    assert {row[3] for row in everything if row[3] != "—"} == {f"#{a.pk}", f"#{b.pk}"}
    assert any("<default>" in row[4] for row in everything)
    assert {row[3] for row in entries("admin", request=str(b.pk))} == {f"#{b.pk}"}
    assert entries("admin", tenant="team-a") and all(row[3] != f"#{b.pk}" for row in entries("admin", tenant="team-a"))


def test_cluster_pages(w: dict[str, Any]) -> None:
    member = browser(w["alice"])
    rows = parse(member.get("/clusters/")).rows
    assert rows[1][:5] == ["prod", "", "Quota engine (Redis)", "Per broker (as Kafka)", "3"]
    assert rows[1][5:8] == ["9.77 KiB/s", "48.83 KiB/s", "1"]
    assert 'title="10,000 B/s">9.77 KiB/s<' in member.get("/clusters/").content.decode()  # exact on hover
    detail = member.get("/clusters/prod/")
    assert detail.status_code == 200
    assert ["0", "b0:9092"] in parse(detail).rows and ["INTERNAL", "yes"] in parse(detail).rows
    assert "/admin/" not in detail.content.decode().split("<main", 1)[1]  # no admin links for members
    missing = member.get("/clusters/nope/")
    assert missing.status_code == 404
    admin = browser(w["admin"]).get("/clusters/prod/").content.decode()
    assert f'href="/admin/quotas/cluster/{w["cluster"].pk}/change/"' in admin


def test_tenant_list_is_scoped(w: dict[str, Any]) -> None:
    def names(who: str) -> list[str]:
        return [row[0] for row in parse(browser(w[who]).get("/tenants/")).rows[1:]]

    assert names("alice") == ["team-a"]
    assert names("bob") == ["team-b"]
    assert names("auditor") == names("admin") == ["team-a", "team-b"]
    rows = parse(browser(w["alice"]).get("/tenants/")).rows
    assert rows[1][1:] == ["Team A", "alice, alice2", "svc-a-*", "app-a-*"]
    admin = browser(w["admin"]).get("/tenants/").content.decode()
    assert 'href="/admin/quotas/tenant/add/"' in admin
