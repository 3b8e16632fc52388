"""GET /api/monitor/<cluster>/history/ and /recent/: an entity's minute rollups and recent samples, scoped as the
socket is."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from engine.monitor import Sampler
from quotas.choices import EntityType
from quotas.models import Cluster, OwnedName, Tenant
from tests.people import api, make_user
from tests.services import sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def monitored(redis_url: str) -> dict[str, Any]:
    """A cluster whose brokers published alice's and bob's samples, and alice's finished minutes."""
    cluster = Cluster.objects.create(name=f"mon-{uuid.uuid4().hex[:10]}").name
    client = redis.Redis.from_url(redis_url)
    now = int(time.time() * 1000)
    m0 = now - now % 60_000 - 120_000  # a minute that is over
    out: dict[str, Any] = {"cluster": cluster, "m0": m0, "recent": []}
    for b in (1, 2):
        s = Sampler(client, cluster, b, managers={})
        first = [sample(cluster, b, "alice:", m0 + 1000, rate=10.0), sample(cluster, b, "bob:", m0 + 1000)]
        s.publish(first, m0 + 1000)
        s.publish([sample(cluster, b, "alice:", m0 + 2000, rate=30.0)], m0 + 2000)
        s.publish([], m0 + 61_000)  # the next minute: m0's rows are written
        tick = [sample(cluster, b, "alice:", now - 2000, q="fetch"),
                sample(cluster, b, "ip:10.0.0.9", now - 2000, q="connection")]
        s.publish(tick, now - 2000)
        out["recent"] += tick
    client.close()
    return out


def member_of_alice_team() -> Any:
    tenant = Tenant.objects.create(name="team-alice")
    OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern="alice")
    user = make_user("alice")
    tenant.members.add(user)
    return user


def test_history_gives_every_minute_rollup_of_the_entity(monitored: dict[str, Any]) -> None:
    c = api(make_user("audit", groups=("auditors",)))
    r = c.get(f"/api/monitor/{monitored['cluster']}/history/", {"entity": "alice:", "minutes": 60})
    assert r.status_code == 200, r.json()
    body = r.json()
    assert body["cluster"] == monitored["cluster"] and body["entity"] == "alice:" and body["minutes"] == 60
    assert body["display"] == "alice (all client-ids)"  # the entity in words, as the pages name it
    rows = body["rollups"]
    assert [(row["t"], row["b"], row["q"], row["n"]) for row in rows] == [
        (monitored["m0"], 1, "produce", 2), (monitored["m0"], 2, "produce", 2)
    ]
    assert rows[0]["rate_avg"] == 20.0 and rows[0]["rate_max"] == 30.0 and rows[0]["bound"] == 1000.0
    # One minute back does not reach m0 (two minutes ago).
    r = c.get(f"/api/monitor/{monitored['cluster']}/history/", {"entity": "alice:", "minutes": 1})
    assert r.json()["rollups"] == []


def test_recent_gives_the_last_samples_of_every_quota_type(monitored: dict[str, Any]) -> None:
    admin = api(make_user("root", staff=True))
    r = admin.get(f"/api/monitor/{monitored['cluster']}/recent/", {"entity": "alice:"})
    assert r.status_code == 200, r.json()
    m0 = monitored["m0"]
    assert [(p["t"], p["b"], p["q"]) for p in r.json()["points"]] == [  # the last 5 minutes, oldest first
        (m0 + 1000, 1, "produce"), (m0 + 1000, 2, "produce"), (m0 + 2000, 1, "produce"), (m0 + 2000, 2, "produce"),
        *[(p["t"], p["b"], p["q"]) for p in monitored["recent"] if p["e"] == "alice:"],
    ]
    r = admin.get(f"/api/monitor/{monitored['cluster']}/recent/", {"entity": "ip:10.0.0.9"})
    assert [p["q"] for p in r.json()["points"]] == ["connection", "connection"]
    assert r.json()["display"] == "ip 10.0.0.9"
    r = admin.get(f"/api/monitor/{monitored['cluster']}/recent/", {"entity": "alice:", "since_ms": m0 + 1500})
    assert [(p["t"], p["b"], p["q"]) for p in r.json()["points"]] == [
        (m0 + 2000, 1, "produce"), (m0 + 2000, 2, "produce"),
        *[(p["t"], p["b"], p["q"]) for p in monitored["recent"] if p["e"] == "alice:"],
    ]


def test_a_tenant_reads_only_its_own_entities(monitored: dict[str, Any]) -> None:
    c = api(member_of_alice_team())
    cluster = monitored["cluster"]
    assert c.get(f"/api/monitor/{cluster}/history/", {"entity": "alice:"}).status_code == 200
    assert len(c.get(f"/api/monitor/{cluster}/recent/", {"entity": "alice:"}).json()["points"]) == 6
    for path in ("history", "recent"):
        for entity in ("bob:", "ip:10.0.0.9", "alice:app"):
            r = c.get(f"/api/monitor/{cluster}/{path}/", {"entity": entity})
            assert r.status_code == 403 and r.json()["code"] == "PERMISSION_DENIED", (path, entity, r.json())


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ({}, 400, "INVALID_REQUEST"),
        ({"entity": "alice"}, 400, "INVALID_REQUEST"),
        ({"entity": "alice:", "minutes": "0"}, 400, "INVALID_REQUEST"),
        ({"entity": "alice:", "minutes": "121"}, 400, "INVALID_REQUEST"),
        ({"entity": "alice:", "minutes": "an hour"}, 400, "INVALID_REQUEST"),
    ],
)
def test_bad_queries_are_typed_errors(monitored: dict[str, Any], query: dict[str, str], status: int, code: str) -> None:
    r = api(make_user("root", staff=True)).get(f"/api/monitor/{monitored['cluster']}/history/", query)
    assert (r.status_code, r.json()["code"]) == (status, code)
    assert r.json()["message"]


def test_unknown_clusters_and_anonymous_callers(monitored: dict[str, Any]) -> None:
    admin = api(make_user("root", staff=True))
    for path in ("history", "recent"):
        r = admin.get(f"/api/monitor/nowhere/{path}/", {"entity": "alice:"})
        assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
        r = APIClient().get(f"/api/monitor/{monitored['cluster']}/{path}/", {"entity": "alice:"})
        assert (r.status_code, r.json()["code"]) == (401, "NOT_AUTHENTICATED")
    r = admin.get(f"/api/monitor/{monitored['cluster']}/recent/", {"entity": "alice:", "since_ms": "-1"})
    assert (r.status_code, r.json()["code"]) == (400, "INVALID_REQUEST")


def test_a_groups_samples_carry_its_members_parts_to_its_tenants_members(redis_url: str) -> None:
    """A quota group's shared sensor (``group@<name>:``) is read like any entity, with its members' parts on each
    sample, by the members of the tenant that owns the group (and by nobody else's)."""
    from quotas.models import QuotaGroup

    cluster = Cluster.objects.create(name=f"mon-{uuid.uuid4().hex[:10]}")
    alice = member_of_alice_team()
    QuotaGroup.objects.create(cluster=cluster, tenant=Tenant.objects.get(name="team-alice"), name="g1", kind="tenant")
    members = [{"u": "alice", "c": "app", "rps": 3.0, "share": 0.75, "part": 75.0},
               {"others": 2, "rps": 1.0, "share": 0.25, "part": 25.0}]
    now = int(time.time() * 1000)
    client = redis.Redis.from_url(redis_url)
    Sampler(client, cluster.name, 1, managers={}).publish(
        [{**sample(cluster.name, 1, "group@g1:", now - 1000), "members": members}], now - 1000)
    client.close()
    r = api(alice).get(f"/api/monitor/{cluster.name}/recent/", {"entity": "group@g1:"})
    assert r.status_code == 200, r.json()
    assert r.json()["display"] == "group g1"
    assert [p["members"] for p in r.json()["points"]] == [members]
    bob = make_user("bob")
    Tenant.objects.create(name="team-bob").members.add(bob)
    r = api(bob).get(f"/api/monitor/{cluster.name}/recent/", {"entity": "group@g1:"})
    assert (r.status_code, r.json()["code"]) == (403, "PERMISSION_DENIED")


def test_a_group_of_the_same_name_on_another_cluster_is_not_the_tenants(redis_url: str) -> None:
    """Group names are unique per cluster only: owning group ``g1`` on one cluster lets a member watch that one, not
    another tenant's ``g1`` on another cluster (the API, the page and the live stream decide alike)."""
    from frontend.monitoring import Visibility
    from quotas.models import QuotaGroup
    from telemetry_ui.live.monitoring import load_viewer

    mine, theirs = (Cluster.objects.create(name=f"mon-{uuid.uuid4().hex[:10]}") for _ in range(2))
    alice = member_of_alice_team()
    QuotaGroup.objects.create(cluster=mine, tenant=Tenant.objects.get(name="team-alice"), name="g1", kind="tenant")
    QuotaGroup.objects.create(cluster=theirs, tenant=Tenant.objects.create(name="team-carol"), name="g1", kind="tenant")
    now = int(time.time() * 1000)
    client = redis.Redis.from_url(redis_url)
    for cluster in (mine, theirs):
        Sampler(client, cluster.name, 1, managers={}).publish([sample(cluster.name, 1, "group@g1:", now - 1000)],
                                                               now - 1000)
    client.close()
    assert api(alice).get(f"/api/monitor/{mine.name}/recent/", {"entity": "group@g1:"}).status_code == 200
    r = api(alice).get(f"/api/monitor/{theirs.name}/recent/", {"entity": "group@g1:"})
    assert (r.status_code, r.json()["code"]) == (403, "PERMISSION_DENIED")
    viewer, vis = load_viewer(alice), Visibility.of(alice)
    assert [viewer.may_watch("group@g1:", c.name) for c in (mine, theirs)] == [True, False]
    assert [vis.may_see("group@g1:", c.name) for c in (mine, theirs)] == [True, False]
    assert viewer.may_see({"e": "group@g1:", "q": "produce"}, theirs.name) is False
