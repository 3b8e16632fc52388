"""Tenant read isolation of quota values (issue 20): describe and the effective quota show a member only what its
tenants own, and the defaults; admins and auditors read everything."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from quotas.choices import EntityType
from quotas.models import Alteration, Cluster, OwnedName, QuotaOp, Tenant, alter_client_quotas
from tests.people import api, make_user

pytestmark = pytest.mark.django_db

D = "<default>"
PBR = "producer_byte_rate"
DESCRIBE = "/api/clusters/prod/client-quotas/describe"
EFFECTIVE = "/api/clusters/prod/effective-quota"

PAYMENTS = [{"user": "svc-pay-api"}, {"user": "svc-pay-api", "client-id": "pay-web"}, {"user": "svc-pay-api",
                                                                                        "client-id": D}]
SEARCH = [{"user": "svc-search-idx"}, {"client-id": "search-bulk"}, {"user": D, "client-id": "search-bulk"}]
DEFAULTS = [{"user": D}, {"user": D, "client-id": D}, {"ip": D}]
NOBODY = [{"ip": "10.0.0.1"}, {"user": "svc-pay-api", "client-id": "search-bulk"}, {"user": "stranger"}]


def _tenant(name: str, principal: str, client_id: str, *members: Any) -> Tenant:
    tenant = Tenant.objects.create(name=name)
    OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern=principal)
    OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern=client_id)
    tenant.members.add(*members)
    return tenant


@pytest.fixture
def people() -> dict[str, APIClient]:
    """A cluster holding both tenants' quotas, the defaults and nobody's; a member of each tenant, of both, of none."""
    cluster = Cluster.objects.create(name="prod")
    every = PAYMENTS + SEARCH + DEFAULTS + NOBODY
    rows = [
        Alteration(list(e.items()), [QuotaOp("connection_creation_rate" if "ip" in e else PBR, 1000 + i)])
        for i, e in enumerate(every)
    ]
    alter_client_quotas(cluster, rows)
    pay, search, both = make_user("pay"), make_user("search"), make_user("both")
    _tenant("payments", "svc-pay-*", "pay-*", pay, both)
    _tenant("search", "svc-search-*", "search-*", search, both)
    return {
        "pay": api(pay),
        "search": api(search),
        "both": api(both),
        "none": api(make_user("loner")),
        "admin": api(make_user("root", staff=True)),
        "auditor": api(make_user("audit", groups=("auditors",))),
    }


def described(client: APIClient, components: list[dict[str, Any]] | None = None, page_size: int = 50) -> list:
    """Every entity the describe answers, following ``next``."""
    body = {"components": components or [], "strict": False}
    response = client.post(f"{DESCRIBE}?page_size={page_size}", body, format="json")
    seen = []
    while True:
        assert response.status_code == 200, response.json()
        seen += [e["entity"] for e in response.json()["results"]]
        if response.json()["next"] is None:
            return seen
        response = client.post(response.json()["next"], body, format="json")


def test_a_member_describes_its_tenants_entities_and_the_defaults_only(people: dict[str, APIClient]) -> None:
    everything = PAYMENTS + SEARCH + DEFAULTS + NOBODY
    order = {str(sorted(e.items())): i for i, e in enumerate(everything)}

    def expect(*groups: list[dict[str, str]]) -> list[dict[str, str]]:
        return sorted((e for g in groups for e in g), key=lambda e: order[str(sorted(e.items()))])

    assert described(people["search"]) == expect(SEARCH, DEFAULTS)
    assert described(people["pay"]) == expect(PAYMENTS, DEFAULTS)
    assert described(people["both"], page_size=2) == expect(PAYMENTS, SEARCH, DEFAULTS)  # full pages, in order
    assert described(people["none"]) == DEFAULTS
    assert described(people["admin"]) == described(people["auditor"]) == everything


def test_a_member_cannot_describe_another_tenants_entity_by_name(people: dict[str, APIClient]) -> None:
    exact = [{"entity_type": "user", "match_type": "exact", "match": "svc-pay-api"}]
    assert described(people["search"], exact) == []
    values = people["pay"].post(DESCRIBE, {"components": exact, "strict": True}, format="json").json()["results"]
    scopes = {PBR: "per_broker"}
    assert values == [{"entity": {"user": "svc-pay-api"}, "display": "svc-pay-api (all client-ids)",
                       "values": {PBR: 1000.0}, "budget_scopes": scopes}]


def test_a_member_reads_the_effective_quota_of_its_own_connections_only(people: dict[str, APIClient]) -> None:
    own = people["pay"].get(EFFECTIVE, {"user": "svc-pay-api", "client_id": "pay-web"})
    assert own.status_code == 200 and own.json()["quotas"][PBR]["value"] == 1001.0
    # the defaults show as defaults: another principal of the member's, with a client-id of its own
    fallback = people["pay"].get(EFFECTIVE, {"user": "svc-pay-batch", "client_id": "pay-batch"}).json()["quotas"][PBR]
    assert (fallback["value"], fallback["entity"]) == (1007.0, "/config/users/<default>/clients/<default>")
    for query in (
        {"user": "svc-pay-api", "client_id": "pay-web"},  # the other tenant's connection
        {"user": "svc-pay-api", "client_id": "search-bulk"},  # a mix of the two tenants
        {"user": "stranger", "client_id": ""},  # nobody's
        {"user": D, "client_id": D},
    ):
        refused = people["search"].get(EFFECTIVE, query)
        assert refused.status_code == 403, query
        assert refused.json()["code"] == "PERMISSION_DENIED" and "quotas" not in refused.json()
    ip = people["pay"].get(EFFECTIVE, {"ip": "10.0.0.1"})
    assert ip.status_code == 403 and ip.json()["code"] == "PERMISSION_DENIED"
    for role in ("admin", "auditor"):
        seen = people[role].get(EFFECTIVE, {"ip": "10.0.0.1"}).json()["quotas"]["connection_creation_rate"]
        assert seen["value"] == 1009.0
        assert people[role].get(EFFECTIVE, {"user": "svc-pay-api", "client_id": "pay-web"}).status_code == 200


@pytest.mark.parametrize("patterns", [("svc-pay-a*", "pay-w*"), ("*-api", "[ps]*"), ("svc-p?y-api", "search-bulk")])
def test_the_query_keeps_every_entity_a_member_may_read_and_the_decision_stays_on_names(
    people: dict[str, APIClient], patterns: tuple[str, str]
) -> None:
    """``visible_entity_pks`` narrows the rows in the query by where the owned patterns start, then decides: the
    same entities as deciding every row, whether a pattern starts with a wildcard (no narrowing) or not."""
    from quotas.models import QuotaEntity
    from quotas.models.tenants import member_tenants, owned_prefixes, quota_visible
    from quotas.queries import may_be_visible, visible_entity_pks

    member = make_user("patterned")
    _tenant("patterned", *patterns, member)
    tenants = member_tenants(member)
    rows = QuotaEntity.objects.filter(cluster__name="prod")
    every = [e.pk for e in rows.order_by("pk") if quota_visible(tenants, e.user, e.client_id, e.ip)]
    assert sorted(visible_entity_pks(member, rows)) == every
    assert len(every) > len(DEFAULTS) - 1  # an owned entity or more beside the defaults every member reads
    narrowed = rows.filter(may_be_visible(tenants)).count()
    assert len(every) <= narrowed <= rows.count()
    if "" not in owned_prefixes(tenants, EntityType.USER):  # a literal start: nobody's and other tenants' left out
        assert narrowed < rows.count()
