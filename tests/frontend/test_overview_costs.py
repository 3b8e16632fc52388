"""What the overview's cost rests on: a member's page makes as many queries at 200 entities as at 10, each tags
is decided by the tenants' patterns read once (``TenantPatterns``, the same answers as ``Tenant.owns``), and the
roles come from one query (``roles``, the same answers as before for every kind of account). No timings: the
speed is measured by ``benchmarks/scale_bench.py``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engine.monitor import Sampler
from quotas.models import OwnedName, Tenant, is_admin, is_auditor, roles, sees_everything
from quotas.models.tenants import TOKEN_TENANT_ATTR, TenantPatterns
from tests.people import make_user
from tests.people import roles as make_people
from tests.redis_keys import keys_cleared

from .test_monitor_pages import bootstrap
from .test_quota_pages import browser

pytestmark = pytest.mark.django_db

CLUSTER = "ovcosts"


@pytest.fixture
def mon(redis_url: str) -> Iterator[redis.Redis]:
    with keys_cleared(redis_url, f"mon:{{{CLUSTER}}}*") as client:
        yield client


def publish(client: redis.Redis, entities: int) -> None:
    """``entities`` of team-a's (``svc-a-<i>:``) and as many of team-b's on each of 3 brokers, the hash emptied
    first; each utilized, every 7th throttled."""
    client.delete(*client.keys(f"mon:{{{CLUSTER}}}*") or ["-"])
    now = int(time.time() * 1000)
    for b in range(3):
        rows = [{"t": now - 100, "c": CLUSTER, "b": b, "q": "produce", "e": f"svc-{team}-{i}:", "rate": 1.0 + i,
                 "bound": 1000.0, "util": (1.0 + i) / 1000, "thr_avg": 5.0 if i % 7 == 0 else 0.0,
                 "thr_max": 10.0 if i % 7 == 0 else 0.0, "thr_frac": 0.5 if i % 7 == 0 else 0.0, "tokens": None}
                for i in range(entities) for team in ("a", "b")]  # fmt: skip
        Sampler(client, CLUSTER, b, {}).publish(rows, now)


def test_a_members_overview_makes_as_many_queries_at_200_entities_as_at_10(mon: redis.Redis) -> None:
    from quotas.models import Cluster

    alice = make_user("alice")
    a = Tenant.objects.create(name="team-a")
    a.members.add(alice)
    OwnedName.objects.create(tenant=a, entity_type="user", pattern="svc-a-*")
    OwnedName.objects.create(tenant=a, entity_type="client-id", pattern="app-a-*")
    cluster = Cluster.objects.create(name=CLUSTER)
    for i in range(3):
        cluster.brokers.create(broker_id=i, host=f"b{i}:9092")
    session = browser(alice)
    counted: dict[int, int] = {}
    for entities in (10, 200):
        publish(mon, entities)
        session.get("/monitor/")  # warm up (templates, connections)
        with CaptureQueriesContext(connection) as queries:
            response = session.get("/monitor/")
        assert response.status_code == 200
        (hm,) = bootstrap(response, "monitor-overview-data")["heatmaps"]
        assert hm["total"] == entities and len(hm["entities"]) == min(entities, 50)  # team-a's only
        assert all(tags.startswith("svc-a-") for tags in hm["entities"])
        counted[entities] = len(queries)
    assert counted[200] == counted[10]


@pytest.mark.parametrize("patterns", [["svc-a-*"], ["svc-?", "team[0-9]-*"], ["x[!a-c]y", "*-prod", "exact.name"],
                                      ["a*b*c", "[[]lit"]])  # fmt: skip
def test_tenant_patterns_own_what_the_tenant_owns(patterns: list[str]) -> None:
    tenant = Tenant.objects.create(name="t")
    for p in patterns:
        OwnedName.objects.create(tenant=tenant, entity_type="user", pattern=p)
    OwnedName.objects.create(tenant=tenant, entity_type="client-id", pattern="app-*")
    names = ["svc-a-1", "svc-a-", "svc-b-1", "svc-1", "svc-12", "team3-x", "teamx-x", "xdy", "xay", "a-prod",
             "a-prod\n", "exact.name", "exactxname", "abc", "aXbYc", "acb", "[lit", "lit", "app-1", "SVC-A-1", ""]
    fast = TenantPatterns(Tenant.objects.prefetch_related("owned_names").get(pk=tenant.pk))
    for kind in ("user", "client-id"):
        assert [fast.owns(kind, n) for n in names] == [tenant.owns(kind, n) for n in names]
    assert any(fast.owns("user", n) for n in names) and not fast.owns("user", "app-1")
    none = TenantPatterns(Tenant.objects.create(name="empty"))
    assert not any(none.owns(kind, n) for n in names for kind in ("user", "client-id"))


def test_roles_in_one_query_answer_as_each_role_check() -> None:
    people = make_people()
    people["inactive"] = make_user("gone", staff=True)
    people["inactive"].is_active = False
    people["both"] = make_user("both", staff=True, groups=("quota-admins", "auditors"))
    scoped = make_user("scoped", staff=True)
    setattr(scoped, TOKEN_TENANT_ATTR, 1)  # a tenant-scoped token: a member, whatever the account may do
    people["scoped"] = scoped
    expected = {"admin": (True, False), "admin2": (True, False), "auditor": (False, True), "alice": (False, False),
                "inactive": (False, False), "both": (False, True), "scoped": (False, False)}  # fmt: skip
    for who, (admin, auditor) in expected.items():
        user = people[who]
        with CaptureQueriesContext(connection) as queries:
            held = roles(user)
        assert len(queries) <= 1, who
        assert (held.is_admin, held.is_auditor, held.sees_everything) == (admin, auditor, admin or auditor), who
        assert (is_admin(user), is_auditor(user), sees_everything(user)) == (admin, auditor, admin or auditor), who
    anonymous = roles(AnonymousUser())
    assert not (anonymous.is_admin or anonymous.is_auditor or anonymous.sees_everything)
