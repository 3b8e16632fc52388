"""Personal access tokens (access_tokens/): shown once, stored hashed, scoped to a tenant, revocable, typed 401s.

Every call after the create authenticates with ``Authorization: Bearer <token>`` on a fresh client, as quotactl does.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from access_tokens.models import AccessToken
from quotas.models import Cluster, OwnedName, Tenant
from tests.people import api, make_user

pytestmark = pytest.mark.django_db


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def tenant(name: str, *members: Any, users: str = "", clients: str = "") -> Tenant:
    t = Tenant.objects.create(name=f"{name}-{uuid.uuid4().hex[:6]}")
    t.members.add(*members)
    if users:
        OwnedName.objects.create(tenant=t, entity_type="user", pattern=users)
    if clients:
        OwnedName.objects.create(tenant=t, entity_type="client-id", pattern=clients)
    return t


def create(client: APIClient, **body: Any) -> Any:
    return client.post("/api/tokens/", body, format="json")


def test_a_token_is_shown_once_and_stored_only_as_its_digest() -> None:
    alice = make_user("tok-alice")
    team = tenant("team", alice)

    answer = create(api(alice), name="ci")

    assert answer.status_code == 201, answer.json()
    body = answer.json()
    text = body["token"]
    assert text.startswith("qpt_") and len(text) > 40
    assert body["tenant"] == team.name and body["scope"] == "tenant"  # a member's only tenant, inferred
    row = AccessToken.objects.get(pk=body["id"])
    assert row.digest == hashlib.sha256(text.encode()).hexdigest()
    stored = " ".join(str(v) for v in AccessToken.objects.filter(pk=row.pk).values().get().values())
    assert text not in stored and text[4:] not in stored
    listed = api(alice).get("/api/tokens/").json()["results"]
    assert [t["id"] for t in listed] == [row.pk]
    assert "token" not in listed[0] and text not in str(listed)
    assert "token" not in api(alice).get(f"/api/tokens/{row.pk}/").json()

    me = bearer(text).get("/api/me/")
    assert me.status_code == 200 and me.json()["username"] == "tok-alice"
    row.refresh_from_db()
    assert row.last_used is not None


def test_a_tenant_token_acts_only_within_its_tenant() -> None:
    alice = make_user("tok-multi")
    mine = tenant("mine", alice, users="svc-mine-*")
    other = tenant("other", alice, users="svc-other-*")
    cluster = Cluster.objects.create(name=f"tok-{uuid.uuid4().hex[:6]}")
    text = create(api(alice), name="mine only", tenant=mine.name).json()["token"]
    client = bearer(text)

    seen = {t["name"] for t in client.get("/api/tenants/").json()["results"]}
    assert seen == {mine.name}  # the session sees both
    assert {t["name"] for t in api(alice).get("/api/tenants/").json()["results"]} == {mine.name, other.name}

    ask = {"cluster": cluster.name, "user": "svc-other-1", "key": "producer_byte_rate", "value": 1024}
    refused = client.post("/api/requests/", {**ask, "tenant": other.name}, format="json")
    assert refused.status_code in (400, 403), refused.json()
    assert refused.json()["code"] in ("PERMISSION_DENIED", "INVALID_REQUEST")
    ok = client.post("/api/requests/", {**ask, "user": "svc-mine-1"}, format="json")
    assert ok.status_code == 201, ok.json()
    assert ok.json()["tenant"] == mine.name

    # a token of another tenant cannot be made through this one
    assert create(client, name="escape", tenant=other.name).status_code == 403


def test_an_admins_tenant_token_has_no_admin_rights_and_only_admins_hold_all_rights_tokens() -> None:
    root = make_user("tok-root", staff=True)
    team = tenant("ops", root)
    cluster = Cluster.objects.create(name=f"tok-{uuid.uuid4().hex[:6]}")
    alter = {"entries": [{"entity": [{"entity_type": "user", "name": "x"}],
                          "ops": [{"key": "producer_byte_rate", "value": 1024}]}]}
    path = f"/api/clusters/{cluster.name}/client-quotas/alter"

    everything = create(api(root), name="admin").json()
    assert everything["scope"] == "all" and everything["tenant"] is None
    assert bearer(everything["token"]).post(path, alter, format="json").status_code == 200

    scoped = create(api(root), name="tenant", tenant=team.name).json()
    refused = bearer(scoped["token"]).post(path, alter, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "PERMISSION_DENIED"

    bob = make_user("tok-bob")
    tenant("b1", bob)
    tenant("b2", bob)
    no_tenant = create(api(bob), name="all of it")  # a member of two tenants must name one
    assert no_tenant.status_code == 400 and no_tenant.json()["code"] == "INVALID_REQUEST"
    assert "tenant" in no_tenant.json()["details"]
    loner = make_user("tok-loner")
    assert create(api(loner), name="x").json()["code"] == "INVALID_REQUEST"  # no tenant: nothing to act in


def test_a_revoked_token_is_refused_with_a_typed_401_and_only_admins_revoke_others_tokens() -> None:
    alice, bob, root = make_user("tok-rv-alice"), make_user("tok-rv-bob"), make_user("tok-rv-root", staff=True)
    tenant("rv", alice, bob)
    issued = create(api(alice), name="to revoke").json()
    client = bearer(issued["token"])
    assert client.get("/api/me/").status_code == 200

    assert bearer(create(api(bob), name="b").json()["token"]).post(
        f"/api/tokens/{issued['id']}/revoke/").status_code == 404  # not even visible to another member
    revoked = api(root).post(f"/api/tokens/{issued['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert revoked.json()["revoked_by"] == "tok-rv-root"

    refused = client.get("/api/me/")
    assert refused.status_code == 401
    body = refused.json()
    assert body["code"] == "AUTHENTICATION_FAILED" and "revoked" in body["message"]
    assert refused.headers.get("WWW-Authenticate")

    unknown = bearer("qpt_" + "x" * 43).get("/api/me/")
    assert unknown.status_code == 401 and unknown.json()["code"] == "AUTHENTICATION_FAILED"


def test_a_token_stops_working_when_its_owner_leaves_the_tenant() -> None:
    alice = make_user("tok-leaver")
    team = tenant("leave", alice)
    text = create(api(alice), name="ci").json()["token"]
    team.members.remove(alice)

    refused = bearer(text).get("/api/me/")

    assert refused.status_code == 401
    assert team.name in refused.json()["message"]
