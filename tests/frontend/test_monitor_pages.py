"""The live-monitor pages without a browser: who sees which entity, the overview's content and speed, the request
page's before/after block, and plotly.js served by the portal itself.

Samples are written where the engine's ``Sampler`` writes them (``engine.monitor``), through its own
``publish``, into the test Redis, under a cluster name no other test uses.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.contrib.staticfiles import finders
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engine.monitor import Sampler, index_key, minutes_key
from frontend.finders import PLOTLY_STATIC_PATH, PlotlyFinder
from frontend.monitoring import Visibility, cluster_now, tags_for
from quotas.models import (
    Alteration,
    Drift,
    OwnedName,
    Push,
    QuotaEntity,
    QuotaOp,
    Tenant,
    audited_alter,
    owned_by_any,
)
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers
from tests.people import make_tenant, make_user, roles
from tests.redis_keys import keys_cleared

from .test_quota_pages import assert_accessible, browser, parse, text

pytestmark = pytest.mark.django_db

CLUSTER = "monpages"
PBR = "producer_byte_rate"


@pytest.fixture
def mon(redis_url: str) -> Iterator[redis.Redis]:
    """The test Redis, without monitor keys of this module's cluster before and after."""
    with keys_cleared(redis_url, f"mon:{{{CLUSTER}}}*") as client:
        yield client


@pytest.fixture
def w(mon: redis.Redis) -> dict[str, Any]:
    """team-a owns svc-a-* and app-a-*, team-b owns svc-b-*; cluster monpages with 3 brokers and a few quotas."""

    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], w["alice2"], users=["svc-a-*"], client_ids=["app-a-*"])
    b = make_tenant("team-b", w["bob"], users=["svc-b-*"])
    cluster = cluster_with_brokers(range(3), name=CLUSTER)
    rows = [
        ([("user", "svc-a-1")], PBR, 1000),
        ([("user", "svc-b-1")], PBR, 3000),
        ([("user", None)], PBR, 500),
        ([("ip", "10.0.0.1")], "connection_creation_rate", 5),
    ]
    audited_alter(cluster, [Alteration(e, [QuotaOp(k, v)]) for e, k, v in rows], w["admin"])
    w.update(a=a, b=b, cluster=cluster, redis=mon)
    return w


def sample(e: str, b: int, t: int, *, rate: float = 500.0, bound: float | None = 1000.0, frac: float = 0.0,
           thr: float = 0.0, q: str = "produce") -> dict[str, Any]:
    return {"t": t, "c": CLUSTER, "b": b, "q": q, "e": e, "rate": rate, "bound": bound,
            "util": rate / bound if bound else None, "thr_avg": thr, "thr_max": thr * 2, "thr_frac": frac,
            "tokens": None}


def publish(client: redis.Redis, samples: list[dict[str, Any]]) -> None:
    """Each broker's samples through its Sampler's publish (firehose, entity streams, rollups, latest hash)."""
    by_broker: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        by_broker.setdefault(s["b"], []).append(s)
    for b, rows in by_broker.items():
        Sampler(client, CLUSTER, b, {}).publish(rows, max(s["t"] for s in rows))


def now_ms() -> int:
    return int(time.time() * 1000)


def entity_url(tags: str) -> str:
    return f"/monitor/{CLUSTER}/entity/?e={tags}"


def bootstrap(response: Any, element_id: str) -> Any:
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', response.content.decode(),
                      re.S)
    assert found, f"no {element_id} in the page"
    return json.loads(found.group(1))


# ------------------------------------------------------------------ plotly.js, from the portal itself


def test_plotly_js_is_a_static_file_of_the_portal_from_the_plotly_package() -> None:
    found = finders.find(PLOTLY_STATIC_PATH)
    assert found and found.replace("\\", "/").endswith("plotly/package_data/plotly.min.js")
    listed = [(path, storage.prefix) for path, storage in PlotlyFinder().list([])]
    assert listed == [("plotly.min.js", "vendor")]  # collectstatic copies it as vendor/plotly.min.js, alone
    assert finders.find("vendor/widgetbundle.js") is None  # nothing else of the package is exposed


def test_monitor_pages_load_plotly_from_the_portal_and_no_inline_script(w: dict[str, Any]) -> None:
    client = browser(w["admin"])
    for url in ("/monitor/", entity_url("svc-a-1:")):
        body = client.get(url).content.decode()
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", body, re.S)
        sources = [re.search(r'src="([^"]+)"', attrs).group(1) for attrs, _ in scripts if "src=" in attrs]
        assert "/static/vendor/plotly.min.js" in sources and "/static/frontend/monitor.js" in sources, sources
        assert all(s.startswith("/static/") for s in sources)  # no CDN
        inline = [attrs for attrs, code in scripts if "src=" not in attrs]
        assert inline and all('type="application/json"' in attrs for attrs in inline)  # data only (json_script)


# ------------------------------------------------------------------ who sees which entity


@pytest.mark.parametrize("url", ["/monitor/", f"/monitor/{CLUSTER}/entity/?e=svc-a-1:"])
def test_anonymous_is_sent_to_the_login_page(url: str) -> None:
    from django.test import Client

    response = Client().get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize(
    ("who", "tags", "status"),
    [
        ("alice", "svc-a-1:", 200),
        ("alice", "svc-a-1:app-a-7", 200),
        ("alice", ":app-a-7", 200),  # a client-id quota of a client-id team-a owns
        ("alice", "svc-b-1:", 403),  # team-b's
        ("alice", "svc-a-1:app-b-1", 403),  # a client-id team-a does not own
        ("alice", "svc-a-1%40corp:", 200),  # the user part is sanitized: svc-a-1@corp
        ("alice", ":", 403),
        ("bob", "svc-b-1:", 200),
        ("bob", "svc-a-1:", 403),
        ("admin", "svc-b-1:", 200),
        ("admin2", "anyone:any", 200),
        ("auditor", "svc-a-1:", 200),
        ("alice", "no-colon", 400),
    ],
)
def test_entity_page_follows_tenant_ownership(w: dict[str, Any], who: str, tags: str, status: int) -> None:
    from urllib.parse import quote

    response = browser(w[who]).get(f"/monitor/{CLUSTER}/entity/?e={quote(tags, safe=':')}")
    assert response.status_code == status, text(response)[:500]
    assert_accessible(response)
    if status == 403:
        assert "not one your tenants own" in text(response)
        assert "monitor-entity-data" not in response.content.decode()


def test_unknown_cluster_is_404(w: dict[str, Any]) -> None:
    assert browser(w["admin"]).get("/monitor/nope/entity/?e=svc-a-1:").status_code == 404


def test_entity_page_bootstraps_the_socket_and_history_and_links_the_config(w: dict[str, Any]) -> None:
    response = browser(w["alice"]).get(entity_url("svc-a-1:"))
    data = bootstrap(response, "monitor-entity-data")
    assert data["cluster"] == CLUSTER and data["entity"] == "svc-a-1:" and data["brokers"] == [0, 1, 2]
    assert data["ws_path"] == "/ws/monitor/"
    assert data["history_url"] == f"/api/monitor/{CLUSTER}/history/"
    page = text(response)
    assert 'Monitor: <span class="entity-name" title="svc-a-1:">svc-a-1 (all client-ids)</span>' in page
    assert page.split("<title>")[1].startswith("svc-a-1 (all client-ids) monitor")
    assert data["display"] == "svc-a-1 (all client-ids)"  # for the page's script, as the server words it
    pk = QuotaEntity.objects.get(cluster=w["cluster"], user="svc-a-1", client_id=None).pk
    assert f'href="/entities/{pk}/"' in page  # its configured quota
    assert "range-live" in page and "range-hour" in page


def test_entity_config_page_links_its_monitor_page_when_it_names_clients(w: dict[str, Any]) -> None:
    admin = browser(w["admin"])
    own = QuotaEntity.objects.get(cluster=w["cluster"], user="svc-a-1", client_id=None).pk
    assert f'href="/monitor/{CLUSTER}/entity/?e=svc-a-1:"' in admin.get(f"/entities/{own}/").content.decode()
    default = QuotaEntity.objects.get(cluster=w["cluster"], user="<default>", client_id=None).pk
    ip = QuotaEntity.objects.get(cluster=w["cluster"], ip="10.0.0.1").pk
    for pk in (default, ip):  # a default stands for many sensors; ip quotas have no client sensor
        assert "/monitor/" not in admin.get(f"/entities/{pk}/").content.decode().split("</nav>", 1)[1]


def test_visibility_decides_once_per_tags(w: dict[str, Any]) -> None:
    vis = Visibility.of(w["alice"])
    with CaptureQueriesContext(connection) as queries:
        tags = ["svc-a-1:", "svc-b-1:", "ip:10.0.0.1", "listener:X", "group@g:"] * 1000
        decisions = [vis.may_see(t, CLUSTER) for t in tags]
    assert len(queries) == 0  # the tenants, their patterns and their groups were loaded once, up front
    assert decisions[:5] == [True, False, False, False, False]
    assert tags_for("svc a@x", None) == "svc%20a%40x:" and tags_for(None, "app") == ":app"


def test_a_member_sees_the_entities_its_tenants_may_ask_for(w: dict[str, Any]) -> None:
    """The overview decides ownership without writing refusals: the same entities as ``entity_refusal`` allows."""
    from engine.entities import DEFAULT
    from quotas.models.tenants import entity_refusal

    names = [None, DEFAULT, "svc-a-1", "svc-a-", "svc-b-1", "app-a-1", "svc-a-1*", "other"]
    tenants = list(Tenant.objects.prefetch_related("owned_names"))
    vis = Visibility.of(w["alice"])
    decided = 0
    for user in names:
        for client_id in names:
            before = any(entity_refusal(t, user, client_id) is None for t in tenants)
            assert owned_by_any(tenants, user, client_id) == before, (user, client_id)
            if user not in (None, DEFAULT) and client_id not in (None, DEFAULT):  # a sensor's tags name both
                alice = entity_refusal(Tenant.objects.get(name="team-a"), user, client_id) is None
                assert vis.may_see(tags_for(user, client_id), CLUSTER) == alice, (user, client_id)
                decided += alice
    assert decided == 3  # svc-a-1, svc-a- and svc-a-1* with app-a-1: the check tells owned from not


# ------------------------------------------------------------------ the overview


def overview_samples(now: int) -> list[dict[str, Any]]:
    return [
        sample("svc-a-1:", 0, now - 500, rate=1800, frac=0.6, thr=300),
        sample("svc-a-1:", 1, now - 400, rate=1500, frac=0.3, thr=120),
        sample("svc-a-1:", 2, now - 300, rate=400),
        sample("svc-b-1:", 0, now - 500, rate=6000, bound=3000, frac=0.9, thr=800),
        sample("svc-a-2:", 1, now - 500, rate=10, bound=1000),  # not throttled
        sample("svc-a-old:", 0, now - 60_000, rate=9000, frac=1.0, thr=999),  # stale: not "now"
        {"t": now - 500, "c": CLUSTER, "b": 0, "q": "connection", "e": "ip:10.0.0.1", "accept_rate": 3.0, "count": 7},
    ]


def throttled_rows(response: Any) -> list[list[str]]:
    rows = parse(response).rows
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Entity"), None)
    assert start is not None, rows[:5]
    return [r for r in rows[start + 1:] if len(r) == 8]


def test_overview_for_an_admin_shows_what_is_throttled_now_heatmap_pending_and_drift(w: dict[str, Any]) -> None:
    publish(w["redis"], overview_samples(now_ms()))
    quota_requests.submit(w["alice"], w["a"], w["cluster"], user="svc-a-1", client_id=None, key=PBR, value=5000)
    broker = w["cluster"].brokers.get(broker_id=2)
    for key in ("k1", "k2"):
        Drift.objects.create(cluster=w["cluster"], broker=broker, kind="quota", resource="r", key=key,
                             status="missing", version=1, detected_at=timezone.now())
    response = browser(w["admin"]).get("/monitor/")
    assert response.status_code == 200
    assert_accessible(response)
    rows = throttled_rows(response)
    # most time throttled first; not the stale one; in words, Kafka's tags on hover
    assert [r[0] for r in rows] == ["svc-b-1 (all client-ids)", "svc-a-1 (all client-ids)"]
    assert '<span class="entity-name" title="svc-b-1:">svc-b-1 (all client-ids)</span>' in text(response)
    assert rows[0][1:] == [CLUSTER, "produce", "90%", "1600", "800", "200%", "1 of 1"]
    assert rows[1][3] == "60%" and rows[1][7] == "2 of 3"
    page = text(response)
    assert f'href="/monitor/{CLUSTER}/entity/?e=svc-b-1:"' in page
    data = bootstrap(response, "monitor-overview-data")
    (hm,) = data["heatmaps"]
    assert hm["cluster"] == CLUSTER and hm["brokers"] == ["broker 0", "broker 1", "broker 2"]
    assert hm["entities"] == ["svc-b-1:", "svc-a-1:", "svc-a-2:"]  # by utilization; stale and connection left out
    assert hm["z"][1] == [1.8, 1.5, 0.4] and hm["z"][0] == [2.0, None, None]
    assert hm["links"][0] == f"/monitor/{CLUSTER}/entity/?e=svc-b-1:"
    assert hm["names"] == ["svc-b-1 (all client-ids)", "svc-a-1 (all client-ids)", "svc-a-2 (all client-ids)"]
    tiles = re.findall(r'href="([^"]+)"><span class="tile-num">(\d+)</span>\s*<span class="tile-label">([^<]+)', page)
    assert [(href, n, " ".join(label.split())) for href, n, label in tiles] == [
        ("/approvals/", "1", "pending request"),
        ("/requests/?state=applying", "0", "being pushed"),
        ("#throttled-h", "2", "entities throttled now"),
        ("/drift/", "1", "drifted broker (2 items)"),
    ]
    drift_rows = [r for r in parse(response).rows if r[:2] == [CLUSTER, "broker 2"]]
    assert drift_rows == [[CLUSTER, "broker 2", "2"]]
    assert f'href="/drift/#cluster-{CLUSTER}"' in page


def test_throttled_now_and_utilization_agree_for_every_quota_type(w: dict[str, Any]) -> None:
    """One set of numbers: an entity is throttled now when its samples measured time throttled (a bucket below zero
    counts), and the row's throttle times and utilization are those of the quotas it is throttled on."""
    now = now_ms()

    def s(e: str, q: str, **kw: Any) -> dict[str, Any]:
        base = {"t": now - 300, "c": CLUSTER, "b": 0, "q": q, "e": e, "rate": None, "bound": None, "util": None,
                "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0, "tokens": None}
        return {**base, **kw}

    publish(w["redis"], [
        # a client-id throttled on its request-time quota (35 % of a thread against 20 %), idle on produce
        s(":search-query", "request", rate=35.0, bound=20.0, util=1.75, thr_avg=300.0, thr_max=450.0, thr_frac=0.4),
        s(":search-query", "produce", rate=0.0, bound=1000.0, util=0.0),
        # a bucket below zero: 28 of a 22-token burst spent (2/s over 11 s)
        s("svc-a-ops:", "controller_mutation", bound=2.0, tokens=-6.0, util=28 / 22, thr_max=3000.0, thr_frac=1.0),
        # Kafka's throttle window still holds a throttle, but nobody waited in the sample's window: not now
        s("svc-a-calm:", "produce", rate=900.0, bound=1000.0, util=0.9, thr_avg=300.0, thr_max=500.0),
        # throttled for a sliver of its window: listed, and not as 0 %
        s("svc-a-sliver:", "fetch", rate=2010.0, bound=2000.0, util=1.005, thr_avg=3.0, thr_max=3.0, thr_frac=0.003),
    ])
    response = browser(w["admin"]).get("/monitor/")
    rows = {r[0]: r for r in throttled_rows(response)}
    query, ops = "client-id search-query (any principal)", "svc-a-ops (all client-ids)"
    sliver = "svc-a-sliver (all client-ids)"
    assert set(rows) == {query, ops, sliver}
    assert rows[query][2:] == ["request", "40%", "450", "300", "175%", "1 of 1"]
    assert rows[ops][2:] == ["controller_mutation", "100%", "3000", "0", "127%", "1 of 1"]
    assert rows[sliver][2:] == ["fetch", "<1%", "3", "3", "100%", "1 of 1"]
    tile = re.search(r'<span class="tile-num">(\d+)</span>\s*<span class="tile-label">entit', text(response))
    assert tile and tile.group(1) == "3"
    (hm,) = bootstrap(response, "monitor-overview-data")["heatmaps"]
    util = dict(zip(hm["entities"], (row[0] for row in hm["z"]), strict=True))
    assert util == {":search-query": 1.75, "svc-a-ops:": round(28 / 22, 4), "svc-a-sliver:": 1.005,
                    "svc-a-calm:": 0.9}  # every quota type with a bound has a utilization


def test_overview_for_a_tenant_shows_only_its_entities_and_no_drift(w: dict[str, Any]) -> None:
    publish(w["redis"], overview_samples(now_ms()))
    Drift.objects.create(cluster=w["cluster"], broker=None, kind="quota", resource="r", key="k", status="missing",
                         version=1, detected_at=timezone.now())
    response = browser(w["alice"]).get("/monitor/")
    assert response.status_code == 200
    assert [r[0] for r in throttled_rows(response)] == ["svc-a-1 (all client-ids)"]
    (hm,) = bootstrap(response, "monitor-overview-data")["heatmaps"]
    assert hm["entities"] == ["svc-a-1:", "svc-a-2:"]
    page = text(response)
    assert "svc-b-1" not in page and "ip:10.0.0.1" not in page and "Drifted brokers" not in page
    assert 'href="/requests/?state=submitted"' in page
    empty = browser(w["bob"]).get("/monitor/")  # bob's svc-b-1 is throttled; team-b sees it, not svc-a-*
    assert [r[0] for r in throttled_rows(empty)] == ["svc-b-1 (all client-ids)"]
    nobody = browser(make_user("nobody")).get("/monitor/")
    assert "Nothing of yours is throttled now." in text(nobody)


def test_overview_with_10000_entities_caps_its_tables_and_queries_do_not_grow(w: dict[str, Any]) -> None:
    """Its speed is measured by benchmarks/overview_bench.py (no timing here: shared machines vary)."""
    now = now_ms()
    client = w["redis"]
    for b in range(3):  # 10,000 entities on each of 3 brokers: 30,000 samples in the latest hash
        rows = [sample(f"svc-{'a' if i % 2 else 'b'}-{i}:", b, now - 200, rate=float(i % 1500),
                       frac=0.5 if i % 97 == 0 else 0.0, thr=50.0 if i % 97 == 0 else 0.0) for i in range(10_000)]
        Sampler(client, CLUSTER, b, {}).publish(rows, now)
    assert client.hlen(f"mon:{{{CLUSTER}}}:latest") == 30_000
    sessions = {who: browser(w[who]) for who in ("admin", "alice")}
    queries_with: dict[str, int] = {}
    for who, session in sessions.items():
        session.get("/monitor/")  # warm up (templates, connections)
        with CaptureQueriesContext(connection) as queries:
            response = session.get("/monitor/")
        assert response.status_code == 200
        queries_with[who] = len(queries)
        rows = throttled_rows(response)
        assert len(rows) == 25  # capped
        (hm,) = bootstrap(response, "monitor-overview-data")["heatmaps"]
        assert len(hm["entities"]) == 50 and hm["total"] == (10_000 if who == "admin" else 5_000)
        if who == "alice":
            assert all(r[0].startswith("svc-a-") for r in rows)
    client.delete(f"mon:{{{CLUSTER}}}:latest")
    for who, session in sessions.items():  # the same queries without a single sample: none per entity
        with CaptureQueriesContext(connection) as queries:
            assert session.get("/monitor/").status_code == 200
        assert len(queries) == queries_with[who]


# ------------------------------------------------------------------ a request's before and after


def applied_request(w: dict[str, Any], applied_at: Any) -> Any:
    req = quota_requests.submit(w["alice"], w["a"], w["cluster"], user="svc-a-1", client_id=None, key=PBR, value=5000)
    quota_requests.approve(w["admin2"], req.pk)
    req.refresh_from_db()
    assert req.applied_version is not None
    pushes = Push.objects.filter(cluster=w["cluster"], version=req.applied_version)
    assert pushes.count() == 3
    for i, p in enumerate(pushes.order_by("broker__broker_id")):
        p.state, p.applied_at = "applied", applied_at + timedelta(milliseconds=200 * i)
        p.save()
    return req


def rollup(client: redis.Redis, tags: str, b: int, t: int, *, rate: float, bound: float, thr: float, frac: float,
           ) -> None:
    row = {"t": t, "rate_avg": rate, "rate_max": rate * 1.2, "thr_avg": thr, "thr_max": thr * 2, "thr_frac": frac,
           "tokens_min": None, "bound": bound, "n": 60, "b": b}
    client.xadd(minutes_key(CLUSTER, "produce", tags), {"d": json.dumps(row)})


def effect_rows(response: Any) -> dict[str, list[str]]:
    return {r[0].split()[0]: r for r in parse(response).rows if r and r[0].startswith(("Before", "After"))}


def test_request_page_shows_observed_rate_and_throttling_before_and_after_the_change(w: dict[str, Any]) -> None:
    now = timezone.now()
    # 10 s into a minute: the brokers apply it 200 ms apart, all within the minute it landed in (at 59.7 s two of
    # them would land in the next one, and this minute would be "before" for them)
    applied_at = (now - timedelta(minutes=6)).replace(second=10, microsecond=0)
    req = applied_request(w, applied_at)
    at_ms = int(applied_at.timestamp() * 1000)
    minute = at_ms - at_ms % 60_000
    for b in range(3):
        for m in range(1, 4):  # three whole minutes before, throttled against 1,000
            rollup(w["redis"], "svc-a-1:", b, minute - m * 60_000, rate=1000, bound=1000, thr=400, frac=0.5)
        rollup(w["redis"], "svc-a-1:", b, minute, rate=2000, bound=5000, thr=100, frac=0.1)  # it landed in this one
        for m in range(1, 3):  # two whole minutes after, at 5,000: not throttled
            rollup(w["redis"], "svc-a-1:", b, minute + m * 60_000, rate=3000, bound=5000, thr=0, frac=0)
    response = browser(w["alice"]).get(f"/requests/{req.pk}/")
    assert response.status_code == 200
    rows = effect_rows(response)
    assert rows["Before"][1:] == ["9", "1,000 B/s", "1.17 KiB/s", "1,000 B/s", "400", "800", "50%"]
    assert rows["After"][1:] == ["6", "2.93 KiB/s", "3.52 KiB/s", "4.88 KiB/s", "0", "0", "0%"]
    assert 'title="3,600 B/s">3.52 KiB/s<' in response.content.decode()  # the exact rate on hover
    assert f'href="/monitor/{CLUSTER}/entity/?e=svc-a-1:"' in text(response)


def test_request_page_says_when_monitor_data_is_missing_or_the_change_has_not_landed(w: dict[str, Any]) -> None:
    req = applied_request(w, timezone.now() - timedelta(minutes=3))
    page = text(browser(w["admin"]).get(f"/requests/{req.pk}/"))
    assert "No monitor data for the sensor svc-a-1: (produce)" in page
    Push.objects.filter(version=req.applied_version).update(applied_at=timezone.now() - timedelta(seconds=30))
    page = text(browser(w["admin"]).get(f"/requests/{req.pk}/"))
    assert "the comparison needs whole minutes of the brokers' samples" in page  # landed just now
    pending = quota_requests.submit(w["alice"], w["a"], w["cluster"], user="svc-a-2", client_id=None, key=PBR, value=10)
    assert "Once the change is applied, this compares" in text(browser(w["admin"]).get(f"/requests/{pending.pk}/"))
    quota_requests.approve(w["admin2"], pending.pk)
    page = text(browser(w["admin"]).get(f"/requests/{pending.pk}/"))
    assert "Not applied on every broker yet" in page


def test_pages_say_so_when_the_monitors_redis_is_down(w: dict[str, Any], settings: Any) -> None:
    req = applied_request(w, timezone.now() - timedelta(minutes=5))
    settings.QUOTAS_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    admin = browser(w["admin"])
    overview = admin.get("/monitor/")
    assert overview.status_code == 200
    assert "The monitor's Redis could not be read (ConnectionError)" in text(overview)
    assert "Monitor data could not be read (ConnectionError)" in text(admin.get(f"/requests/{req.pk}/"))
    assert admin.get(entity_url("svc-a-1:")).status_code == 200  # the page itself needs no Redis


# ------------------------------------------------------------------ a quota group's shared sensor


def test_a_groups_sensor_is_shown_as_the_group_with_its_page_and_members(w: dict[str, Any]) -> None:
    """The members of a group share one Kafka sensor (user ``group@<name>``): the monitor names it as the group,
    links the group's page, offers no request for a principal named ``group@...``, and its tenant's members see it."""
    from quotas.models import QuotaGroup

    QuotaGroup.objects.create(cluster=w["cluster"], tenant=w["a"], name="g1", kind="tenant")
    now = now_ms()
    group = {**sample("group@g1:", 0, now - 500, rate=2400, bound=2000, frac=0.5, thr=200),
             "members": [{"u": "svc-a-1", "c": "app-a-1", "rps": 30.0, "share": 0.75, "part": 1800.0}]}
    publish(w["redis"], [group])
    response = browser(w["admin"]).get("/monitor/")
    assert [r[0] for r in throttled_rows(response)] == ["group g1"]
    assert f'href="/monitor/{CLUSTER}/entity/?e=group%40g1:"' in text(response)
    assert bootstrap(response, "monitor-overview-data")["heatmaps"][0]["names"] == ["group g1"]

    response = browser(w["alice"]).get(entity_url("group@g1:"))
    assert response.status_code == 200
    assert_accessible(response)
    page = text(response)
    assert 'Monitor: <span class="entity-name" title="group@g1:">group g1</span>' in page
    assert f'<a href="/clusters/{CLUSTER}/groups/g1/">group g1</a>' in page
    assert 'id="monitor-members"' in page and "estimated from" in " ".join(page.split())
    assert "Ask for a change" not in page and "user=group" not in page  # a group's changes start on its page
    assert bootstrap(response, "monitor-entity-data")["display"] == "group g1"
    assert browser(w["bob"]).get(entity_url("group@g1:")).status_code == 403  # team-b owns no group g1
    assert browser(w["alice"]).get(entity_url("group@g2:")).status_code == 403  # no such group
    # any other sensor's page has no members' section
    assert 'id="monitor-members"' not in text(browser(w["admin"]).get(entity_url("svc-a-1:")))


def hgetalls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))


def test_a_members_overview_reads_only_the_samples_it_may_see_and_shows_exactly_those(w: dict[str, Any]) -> None:
    """A member's samples are found by the start of their tags in the samplers' index and read by field (no
    HGETALL of the whole hash); what it shows is what deciding every sample of the hash would show."""
    from quotas.models import QuotaGroup

    QuotaGroup.objects.create(cluster=w["cluster"], tenant=w["a"], name="g1", kind="tenant")
    c = Tenant.objects.create(name="team-c")
    c.members.add(w["alice"])
    OwnedName.objects.create(tenant=c, entity_type="client-id", pattern="*-c")  # no literal start: every name
    now = now_ms()
    tags = ["svc-a-1:", "svc-a-2:app-a-1", "svc-a-2:other", ":app-a-9", ":app-b-1", "svc-b-1:", "svc-b-1:x-c",
            "group@g1:", "group@g2:", ":x-c", "svc-a-old:", "svc%20a:"]
    samples = [sample(e, b, now - (60_000 if e == "svc-a-old:" else 300), rate=100.0 * (i + 1), frac=0.1 * (i % 2))
               for i, e in enumerate(tags) for b in (0, 1)]
    samples.append({"t": now, "c": CLUSTER, "b": 0, "q": "connection", "e": "ip:10.0.0.1", "count": 1})
    publish(w["redis"], samples)
    vis = Visibility.of(w["alice"])
    expected = {"svc-a-1:", "svc-a-2:app-a-1", ":app-a-9", "group@g1:", ":x-c"}  # svc-a-old is stale
    assert {e for e in tags if vis.may_see(e, CLUSTER)} == expected | {"svc-a-old:"}
    before = hgetalls(w["redis"])
    by_index = cluster_now(w["redis"], CLUSTER, [0, 1, 2], vis, now)
    assert hgetalls(w["redis"]) == before  # the index held the hash's fields: read by field
    assert set(by_index.entities) == expected and (by_index.samples, by_index.stale) == (10, 2)
    w["redis"].delete(index_key(CLUSTER))  # a hash the samplers did not index: read whole, decided per sample
    by_hash = cluster_now(w["redis"], CLUSTER, [0, 1, 2], Visibility.of(w["alice"]), now)
    assert hgetalls(w["redis"]) == before + 1

    def summed(c: Any) -> tuple[Any, ...]:  # each entity's figures and samples (in broker order), the counts
        entities = {e: (a[:4], sorted(a[4], key=lambda s: (s["b"], s["q"]))) for e, a in c.entities.items()}
        return entities, c.samples, c.stale, c.newest, c.brokers

    assert summed(by_hash) == summed(by_index)
    publish(w["redis"], samples)  # indexed again
    (hm,) = bootstrap(browser(w["alice"]).get("/monitor/"), "monitor-overview-data")["heatmaps"]
    assert set(hm["entities"]) == expected and hm["total"] == len(expected)
