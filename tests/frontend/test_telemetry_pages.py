"""The client-telemetry pages without a browser: the instances of a cluster (who sees which), one instance's chart
page and its bootstrap, the links to them. The sink's storage contract (telemetry_ui/README.md) is written straight
into the test Redis under a cluster name no other test uses."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import Client

from quotas.choices import EntityType
from quotas.models import Cluster, OwnedName, Tenant
from telemetry_ui.live.monitoring import tel_instance_key, tel_instances_key
from tests.people import roles
from tests.redis_keys import keys_cleared

from .test_quota_pages import assert_accessible, text

pytestmark = pytest.mark.django_db

CLUSTER = "telpages"


@pytest.fixture
def tel(redis_url: str) -> Iterator[redis.Redis]:
    """The test Redis without this module's telemetry keys, before and after."""
    with keys_cleared(redis_url, f"tel:{{{CLUSTER}}}*") as client:
        yield client


def instance(r: redis.Redis, iid: str, client_id: str, **extra: Any) -> dict[str, Any]:
    now = int(time.time() * 1000)
    info = {"instance": iid, "client_id": client_id, "software_name": "apache-kafka-java", "software_version": "3.9.0",
            "source_address": "10.0.0.5", "subscription_id": 42, "push_interval_ms": 5000,
            "metrics": ["org.apache.kafka."], "last_get_ms": now, "last_push_ms": now, "pushes": 12, "errors": 1,
            "last_error": "UNSUPPORTED_COMPRESSION_TYPE", "terminated": False, **extra}
    r.hset(tel_instances_key(CLUSTER), iid, json.dumps(info))
    return info


@pytest.fixture
def w(tel: redis.Redis) -> dict[str, Any]:
    w = roles()
    w["cluster"] = Cluster.objects.create(name=CLUSTER)
    team_a = Tenant.objects.create(name="team-a")
    OwnedName.objects.create(tenant=team_a, entity_type=EntityType.CLIENT_ID, pattern="app-a-*")
    OwnedName.objects.create(tenant=team_a, entity_type=EntityType.USER, pattern="svc-a-*")
    team_a.members.add(w["alice"])
    team_b = Tenant.objects.create(name="team-b")
    OwnedName.objects.create(tenant=team_b, entity_type=EntityType.CLIENT_ID, pattern="app-b-*")
    team_b.members.add(w["bob"])
    instance(tel, "inst-a1", "app-a-1")
    instance(tel, "inst-a2", "app-a-2", terminated=True)
    instance(tel, "inst-b1", "app-b-1")
    instance(tel, "inst-x", "")
    return w


def get(user: Any, url: str) -> Any:
    c = Client()
    c.force_login(user)
    return c.get(url)


def test_cluster_page_lists_instances_with_their_facts(w: dict[str, Any]) -> None:
    r = get(w["admin"], f"/telemetry/{CLUSTER}/")
    assert r.status_code == 200
    body = text(r)
    for iid in ("inst-a1", "inst-a2", "inst-b1", "inst-x"):
        assert f'href="/telemetry/{CLUSTER}/instance/{iid}/"' in body
    for fact in ("apache-kafka-java 3.9.0", "42", "5 s", "UNSUPPORTED_COMPRESSION_TYPE", "terminated"):
        assert fact in body
    assert body.index("inst-a1") < body.index("inst-a2")  # live ones before terminated ones
    assert_accessible(r)
    assert get(w["auditor"], f"/telemetry/{CLUSTER}/").status_code == 200


def test_tenants_see_only_instances_of_their_client_ids(w: dict[str, Any]) -> None:
    body = text(get(w["alice"], f"/telemetry/{CLUSTER}/"))
    assert "inst-a1" in body and "inst-a2" in body
    assert "inst-b1" not in body and "inst-x" not in body
    body = text(get(w["alice2"], f"/telemetry/{CLUSTER}/"))  # in no tenant
    assert "inst-a1" not in body and "No client instance" in body
    assert get(w["alice"], f"/telemetry/{CLUSTER}/instance/inst-a1/").status_code == 200
    assert get(w["alice"], f"/telemetry/{CLUSTER}/instance/inst-b1/").status_code == 403
    assert get(w["alice"], f"/telemetry/{CLUSTER}/instance/inst-x/").status_code == 403
    assert get(w["bob"], f"/telemetry/{CLUSTER}/instance/inst-b1/").status_code == 200


def test_per_client_id_view(w: dict[str, Any]) -> None:
    body = text(get(w["admin"], f"/telemetry/{CLUSTER}/?client_id=app-a-1"))
    assert "inst-a1" in body and "inst-a2" not in body and "inst-b1" not in body
    body = text(get(w["alice"], f"/telemetry/{CLUSTER}/?client_id=app-b-1"))
    assert "inst-b1" not in body


def test_instance_page_bootstraps_the_live_charts(w: dict[str, Any]) -> None:
    r = get(w["admin"], f"/telemetry/{CLUSTER}/instance/inst-a1/")
    assert r.status_code == 200
    body = r.content.decode()
    assert "frontend/telemetry.js" in body and "vendor/plotly.min.js" in body
    start = body.index('id="telemetry-instance-data"')
    data = json.loads(body[body.index(">", start) + 1: body.index("</script>", start)])
    assert data == {"cluster": CLUSTER, "instance": "inst-a1", "ws_path": "/ws/monitor/", "window_ms": 600_000}
    assert "app-a-1" in body and "UNSUPPORTED_COMPRESSION_TYPE" in body
    assert_accessible(r)


def test_missing_things_answer_404(w: dict[str, Any], tel: redis.Redis) -> None:
    assert get(w["admin"], "/telemetry/nowhere/").status_code == 404
    assert get(w["admin"], f"/telemetry/{CLUSTER}/instance/nope/").status_code == 404
    # Gone from the hash but still in its stream: shown.
    entry = {"t": int(time.time() * 1000), "c": CLUSTER, "instance": "gone", "client_id": "app-a-9", "points": []}
    tel.xadd(tel_instance_key(CLUSTER, "gone"), {"d": json.dumps(entry)})
    assert get(w["alice"], f"/telemetry/{CLUSTER}/instance/gone/").status_code == 200


def test_links_from_the_nav_and_the_cluster_page(w: dict[str, Any]) -> None:
    body = text(get(w["alice"], f"/clusters/{CLUSTER}/"))
    assert 'href="/telemetry/"' in body and f'href="/telemetry/{CLUSTER}/"' in body
    body = text(get(w["alice"], "/telemetry/"))
    assert f'href="/telemetry/{CLUSTER}/"' in body


def test_anonymous_is_sent_to_login(w: dict[str, Any]) -> None:
    r = Client().get(f"/telemetry/{CLUSTER}/")
    assert r.status_code == 302 and "/login/" in r["Location"]


def bootstrap(body: str, node: str) -> Any:
    start = body.index(f'id="{node}"')
    return json.loads(body[body.index(">", start) + 1: body.index("</script>", start)])


def push(r: redis.Redis, iid: str, client_id: str, value: float, ago_ms: int = 0) -> dict[str, Any]:
    t = int(time.time() * 1000) - ago_ms
    entry = {"t": t, "c": CLUSTER, "instance": iid, "client_id": client_id,
             "points": [{"name": "org.apache.kafka.producer.record.send.rate", "attrs": {"topic": "t"}, "t": t,
                         "value": value}]}
    r.xadd(f"tel:{{{CLUSTER}}}:all", {"d": json.dumps(entry)})
    return entry


def test_client_id_page_bootstraps_its_instances_and_backfill(w: dict[str, Any], tel: redis.Redis) -> None:
    instance(tel, "inst-a1b", "app-a-1")
    instance(tel, "inst-a1c", "app-a-1", terminated=True)
    old = push(tel, "inst-a1", "app-a-1", 1.0, ago_ms=11 * 60 * 1000)  # older than the window
    first = push(tel, "inst-a1", "app-a-1", 2.0, ago_ms=2000)
    push(tel, "inst-b1", "app-b-1", 3.0, ago_ms=1500)
    second = push(tel, "inst-a1b", "app-a-1", 4.0, ago_ms=1000)
    r = get(w["alice"], f"/telemetry/{CLUSTER}/client/app-a-1/")
    assert r.status_code == 200
    body = r.content.decode()
    assert "frontend/telemetry.js" in body and "vendor/plotly.min.js" in body
    data = bootstrap(body, "telemetry-client-data")
    assert data["cluster"] == CLUSTER and data["client_id"] == "app-a-1"
    assert sorted(data["instances"]) == ["inst-a1", "inst-a1b"]  # live ones only: the terminated one pushes no more
    assert data["backfill"] == [first, second] and old not in data["backfill"]
    assert data["ws_path"] == "/ws/monitor/" and data["window_ms"] == 600_000
    for iid in ("inst-a1", "inst-a1b", "inst-a1c"):
        assert f'href="/telemetry/{CLUSTER}/instance/{iid}/"' in body
    assert "inst-b1" not in body
    assert f'href="/telemetry/{CLUSTER}/?client_id=app-a-1"' in body
    assert_accessible(r)


def test_client_id_page_permissions(w: dict[str, Any]) -> None:
    assert get(w["alice"], f"/telemetry/{CLUSTER}/client/app-b-1/").status_code == 403
    assert get(w["alice2"], f"/telemetry/{CLUSTER}/client/app-a-1/").status_code == 403
    assert get(w["bob"], f"/telemetry/{CLUSTER}/client/app-b-1/").status_code == 200
    assert get(w["auditor"], f"/telemetry/{CLUSTER}/client/app-b-1/").status_code == 200
    assert get(w["admin"], "/telemetry/nowhere/client/app-a-1/").status_code == 404
    assert get(w["alice"], "/telemetry/nowhere/client/app-a-1/").status_code == 404
    r = get(w["admin"], f"/telemetry/{CLUSTER}/client/app-z/")  # no instance: an empty page
    assert r.status_code == 200 and bootstrap(r.content.decode(), "telemetry-client-data")["instances"] == []
    assert Client().get(f"/telemetry/{CLUSTER}/client/app-a-1/").status_code == 302


def test_client_id_links_from_the_cluster_and_instance_pages(w: dict[str, Any]) -> None:
    url = f"/telemetry/{CLUSTER}/client/app-a-1/"
    assert f'href="{url}"' in text(get(w["alice"], f"/telemetry/{CLUSTER}/"))
    assert f'href="{url}"' in text(get(w["alice"], f"/telemetry/{CLUSTER}/?client_id=app-a-1"))
    body = text(get(w["alice"], f"/telemetry/{CLUSTER}/instance/inst-a1/"))
    assert f'href="{url}"' in body and f'href="/telemetry/{CLUSTER}/?client_id=app-a-1"' in body
