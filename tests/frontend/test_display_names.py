"""One name for an entity everywhere: the pages, the API's ``display`` and Kafka's own name beside it (on hover, in
``entity``), all from ``engine.entities.display_name``."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from quotas.models import Alteration, AuditEntry, QuotaOp, audited_alter

from .test_quota_pages import PBR, browser, submitted, text, w  # noqa: F401 (w: a fixture)

pytestmark = pytest.mark.django_db


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_numeric_client_id_and_the_default_principal_read_as_such_on_pages_and_in_the_api(
    w: dict[str, Any],  # noqa: F811 (the fixture imported above)
) -> None:
    audited_alter(w["cluster"], [Alteration([("client-id", "1")], [QuotaOp("request_percentage", 20)])], w["admin"])
    req = submitted(w, user=None, client_id="app-a-7")

    requests = api(w["alice"]).get("/api/requests/").json()["results"]
    mine = next(r for r in requests if r["id"] == req.pk)
    assert (mine["entity"], mine["display"]) == ("/config/clients/app-a-7", "client-id app-a-7 (any principal)")

    described = api(w["admin"]).post("/api/clusters/prod/client-quotas/describe", {"components": []},
                                     format="json").json()["results"]
    by_entity = {tuple(sorted(e["entity"].items())): e["display"] for e in described}
    assert by_entity[(("client-id", "1"),)] == "client-id 1 (any principal)"  # a client-id, not the number 1
    assert by_entity[(("user", "<default>"),)] == "<default> principal"
    assert by_entity[(("ip", "10.0.0.1"),)] == "ip 10.0.0.1"

    audit = api(w["admin"]).get("/api/audit/").json()["results"]
    entry = next(a for a in audit if a["entity"] == "/config/clients/1")
    assert entry["display"] == "client-id 1 (any principal)"
    assert AuditEntry.objects.filter(entity="/config/clients/1").exists()

    page = text(browser(w["admin"]).get("/entities/"))
    assert '<span class="entity-name" title="/config/clients/1">client-id 1 (any principal)</span>' in page
    assert '<span class="entity-name" title="/config/users/<default>"><default> principal</span>' in page
    detail = text(browser(w["alice"]).get(f"/requests/{req.pk}/"))
    assert 'title="/config/clients/app-a-7">client-id app-a-7 (any principal)</span>' in detail
    listed = text(browser(w["alice"]).get("/requests/"))
    assert 'title="/config/clients/app-a-7">client-id app-a-7 (any principal)</span>' in listed
    assert PBR in listed
