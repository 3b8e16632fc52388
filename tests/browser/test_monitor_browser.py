"""The monitor pages in a real browser against a real portal (uvicorn, the relay, a Celery worker, Redis).

- a tenant logs in through the form, opens its entity's live page, and samples the engine's samplers publish
  show up on the chart within 3 s; a dropped WebSocket reconnects without a gap or a double; the hour view draws
  the minute rollups;
- an admin approves a pending request on its page, the push lands on every broker (the page says applied),
  and the entity's throttle time, which the brokers' engines measure under real load, falls on its live chart;
- a tenant gets 403 for another tenant's entity page, and the WebSocket answers an error frame to a subscribe.

Every page visited is saved under test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from engine.monitor import Sampler
from quotas.models import QuotaRequest
from quotas.workflow import quota_requests
from tests.brokers import push_everywhere, set_quota
from tests.waiting import wait_for

from .conftest import CLUSTER, Portal, log_in, screenshot
from .load import Brokers, Traffic, now_ms

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

PBR = "producer_byte_rate"
ENTITY_URL = f"/monitor/{CLUSTER}/entity/?e=svc-a-1:"


def chart_points(page: Any) -> int:
    return int(page.get_attribute("#monitor-charts", "data-points") or 0)


def wait_live(page: Any) -> None:
    """Until the page's WebSocket is subscribed (its status says Live)."""
    page.wait_for_selector('#monitor-status[data-state="live"]', timeout=15_000)


def traces(page: Any, plot: str) -> list[dict[str, Any]]:
    """The traces a Plotly chart of the page holds (name, x, y)."""
    return page.evaluate(
        "id => { const el = document.getElementById(id); return el && el.data ? "
        "el.data.map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)})) : []; }",
        plot,
    )


def latest(page: Any, plot: str, skip: str = "\0") -> dict[str, float]:
    """The newest value of each trace of a chart (but those whose name ends with ``skip``)."""
    return {t["name"]: t["y"][-1] for t in traces(page, plot) if not t["name"].endswith(skip) and t["y"]}


def latest_throttle_max(page: Any) -> dict[str, float]:
    """The newest max throttle time (ms) of each broker on the page's throttle chart (not the averages)."""
    return latest(page, "plot-throttle", " avg")


def until(page: Any, what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"Timed out after {timeout}s waiting for {what}")
        page.wait_for_timeout(100)


# ------------------------------------------------------------------ a tenant watches its entity


def test_a_tenant_watches_its_entity_live_and_the_chart_gains_points_within_3s(
    world: dict[str, Any], context: Any, portal: Portal
) -> None:
    portal.require_live()
    cluster = world["cluster"]
    set_quota(cluster, "svc-a-1", 2000)
    set_quota(cluster, "svc-a-1", 5, "controller_mutation_rate")
    push_everywhere(cluster)  # each broker's namespace holds the quotas (no worker needed here)
    brokers = Brokers(world["redis"], CLUSTER, [0, 1, 2])
    page = context.new_page()
    log_in(page, "alice")
    screenshot(page, "01-home-tenant")

    page.goto(ENTITY_URL)
    wait_live(page)
    assert page.title().startswith("svc-a-1 (all client-ids) monitor")
    assert page.evaluate("typeof window.Plotly") == "object"  # plotly.js came from the portal (whitenoise)

    # the relay discovers the new cluster within a second or so: tick until the first points are drawn
    def tick_until_drawn() -> bool:
        for _ in range(10):
            brokers.produce("svc-a-1", "app-a-1", 1000)
        brokers.tick()
        page.wait_for_timeout(500)
        return chart_points(page) > 0

    until(page, "the first live points", tick_until_drawn, 20)
    for _ in range(3):  # then every tick is on the chart within 3 s
        before = chart_points(page)
        for _ in range(5):
            brokers.produce("svc-a-1", "app-a-1", 1000)
        published = brokers.tick()
        assert published == 3  # one produce sample per broker (no mutation yet)
        started = time.monotonic()
        page.wait_for_function(  # a function, not an expression: Playwright evals expressions, which the CSP refuses
            f"() => Number(document.getElementById('monitor-charts').dataset.points) >= {before + 3}", timeout=3000
        )
        assert time.monotonic() - started < 3.0
        page.wait_for_timeout(1000)
    brokers.mutate("svc-a-1", "app-a-1", 100)  # 100 topic creations at once against 5/s (55 tokens): below zero
    assert brokers.tick() == 6
    page.wait_for_function("() => document.getElementById('plot-tokens') && "
                           "document.getElementById('plot-tokens').data.length === 3", timeout=3000)
    assert all(t["y"][-1] < 0 for t in traces(page, "plot-tokens"))
    rate = traces(page, "plot-rate-produce")
    names = sorted(t["name"] for t in rate)
    assert names == [f"broker {b}{what}" for b in range(3) for what in ("", " bound")]
    assert all(y == 2000 for t in rate if t["name"].endswith("bound") for y in t["y"])
    # byte rates in binary units: the axis ticks, and the hover with the exact figure ("1.95 KiB/s (2,000 B/s)")
    axis = page.evaluate("() => document.getElementById('plot-rate-produce').layout.yaxis")
    assert axis["tickmode"] == "array" and any(t.endswith(("B/s", "KiB/s")) for t in axis["ticktext"]), axis
    hover = page.evaluate("() => document.getElementById('plot-rate-produce').data.map(t => Array.from(t.customdata))")
    assert "1.95 KiB/s (2,000 B/s)" in hover[[t["name"] for t in rate].index("broker 0 bound")]
    assert {"plot-throttle", "plot-frac"} <= set(page.eval_on_selector_all(".plot", "els => els.map(e => e.id)"))

    # the socket drops: the page reconnects from just before its newest point, with no gap and no double
    drawn = chart_points(page)
    page.evaluate("window.quotaMonitor.ws.close()")
    brokers.produce("svc-a-1", "app-a-1", 1000)
    brokers.tick()  # published while the page is away (it comes back in the backfill)
    wait_live(page)
    page.wait_for_function(f"() => Number(document.getElementById('monitor-charts').dataset.points) >= {drawn + 3}",
                           timeout=8000)
    for t in traces(page, "plot-rate-produce"):
        assert t["x"] == sorted(set(t["x"])), f"{t['name']} has a point twice or out of order"
    page.wait_for_timeout(1500)
    screenshot(page, "02-entity-live-tenant")

    # the last hour: minute rollups from the history endpoint
    minute = now_ms() - now_ms() % 60_000
    for b in brokers.samplers:  # two whole minutes in the past, closed as a broker's sampler closes them
        sampler = Sampler(world["redis"], CLUSTER, b, {})
        for m in (3, 2):
            sampler.publish([{"t": minute - m * 60_000, "c": CLUSTER, "b": b, "q": "produce", "e": "svc-a-1:",
                              "rate": 900.0 + m, "bound": 2000.0, "util": 0.45, "thr_avg": 0.0, "thr_max": 0.0,
                              "thr_frac": 0.0, "tokens": None}], minute - m * 60_000)
        sampler.publish([], minute - 60_000)
    page.check("#range-hour")
    page.wait_for_selector('#monitor-status[data-state="history"]', timeout=10_000)
    status = page.inner_text("#monitor-status")
    assert "broker-minutes" in status and not status.startswith("Last 60 minutes: 0 ")
    hour = traces(page, "plot-rate-produce")
    assert any(t["name"] == "broker 0" and len(t["x"]) >= 2 for t in hour), hour
    screenshot(page, "03-entity-hour-tenant")
    page.check("#range-live")
    wait_live(page)

    for _ in range(20):
        brokers.produce("svc-a-1", "app-a-1", 1000)
    brokers.tick()  # fresh samples (the hour's rows above went through the latest hash too)
    page.goto("/monitor/")
    assert "svc-a-1 (all client-ids)" in page.inner_text("section[aria-labelledby=throttled-h]")
    page.wait_for_selector("#heatmap-0 .main-svg")
    assert page.locator("h1").inner_text() == "Live monitor"
    screenshot(page, "04-overview-tenant")


# ------------------------------------------------------------------ approve, push, throttling falls


def crowd(client: redis.Redis, n: int) -> None:
    """Samples of ``n`` other entities on each broker (published as a broker's sampler publishes them)."""
    t = now_ms()
    for b in range(3):
        rows = []
        for i in range(n):
            util = ((i * 37 + b * 11) % 140) / 100
            rows.append({"t": t, "c": CLUSTER, "b": b, "q": "fetch" if i % 3 else "produce",
                         "e": f"svc-{'ab'[i % 2]}-{i:03d}:app-{i % 7}", "rate": util * 5000, "bound": 5000.0,
                         "util": util, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0, "tokens": None})
        Sampler(client, CLUSTER, b, {}).publish(rows, t)


def test_an_admin_approves_the_push_lands_everywhere_and_throttling_falls(
    world: dict[str, Any], context: Any, portal: Portal, celery_queue_clean: None, tmp_path: Any
) -> None:
    portal.require_live()
    from tests.celery_worker import Worker

    cluster = world["cluster"]
    set_quota(cluster, "svc-a-1", 2000)
    push_everywhere(cluster)
    brokers = Brokers(world["redis"], CLUSTER, [0, 1, 2])
    traffic = Traffic(brokers, "svc-a-1", "app-a-1", 8000)  # 8,000 bytes/s against 2,000 per broker
    traffic.start()
    worker = Worker(portal.env["QUOTAS_REDIS_URL"], portal.env["DATABASE_URL"],
                    tmp_path / "worker.log").start()
    try:
        req = quota_requests.submit(world["alice"], world["a"], cluster, user="svc-a-1", client_id=None, key=PBR,
                                    value=1_000_000, reason="launch week")
        def sampled_throttled() -> bool:
            assert traffic.error is None, traffic.error
            samples = [json.loads(v) for v in world["redis"].hvals(f"mon:{{{CLUSTER}}}:latest")]
            return len(samples) == 3 and all(s["thr_frac"] > 0 and now_ms() - s["t"] < 5000 for s in samples)

        wait_for("the brokers to sample svc-a-1 throttled", sampled_throttled, 20)
        page = context.new_page()
        log_in(page, "root")
        page.goto("/monitor/")

        def overview_throttled() -> bool:
            # and 80 more entities, as a real cluster has (the heatmap shows the top 50), fresh at each look: on a
            # loaded machine logging in can outlast the overview's 10 s of "now"
            crowd(world["redis"], 80)
            page.reload()
            return "svc-a-1 (all client-ids)" in page.inner_text("section[aria-labelledby=throttled-h]")

        until(page, "svc-a-1 throttled on the overview", overview_throttled, 20)
        page.wait_for_selector("#heatmap-0 .main-svg", timeout=15_000)
        screenshot(page, "05-overview-admin")
        cells = page.locator("#heatmap-0 .nsewdrag").first
        box = cells.bounding_box()
        rows = page.evaluate("document.getElementById('heatmap-0').data[0].y.length")
        assert rows == 50  # the 50 most utilized of 81
        # a cell's hover names the entity in words, its sensor and its share of the bound
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / rows / 2)
        until(page, "the top row's hover", lambda: "svc-a-1 (all client-ids)"
              in (page.locator("#heatmap-0 .hoverlayer").text_content() or ""), 5)
        assert "sensor svc-a-1:" in page.locator("#heatmap-0 .hoverlayer").text_content()
        assert "of its bound" in page.locator("#heatmap-0 .hoverlayer").text_content()
        screenshot(page, "05-overview-admin-hover")
        with page.expect_navigation():  # a cell of the top row (the most utilized: svc-a-1) opens its page
            cells.click(position={"x": box["width"] / 2, "y": box["height"] / rows / 2})
        assert page.url.endswith(ENTITY_URL), page.url

        watch = context.new_page()
        watch.goto(ENTITY_URL)
        wait_live(watch)
        until(watch, "throttling on every broker", lambda: len(latest_throttle_max(watch)) == 3
              and all(v > 0 for v in latest_throttle_max(watch).values()), 20)
        throttled = latest_throttle_max(watch)
        screenshot(watch, "06-entity-throttled-admin")

        page.goto(f"/requests/{req.pk}/")
        screenshot(page, "07-request-pending-admin")
        with page.expect_navigation():
            page.click("button.approve")
        assert "approved" in page.inner_text(".messages")

        def applied() -> bool:
            page.reload()
            states = page.locator("table.pushes tbody tr td:nth-child(2)").all_inner_texts()
            return len(states) == 3 and all(s == "Applied" for s in states) and "Applied" in page.inner_text("h1")

        until(page, "the push on every broker and the request applied", applied, 60)
        req.refresh_from_db()
        assert req.state == "applied"

        fracs: dict[str, Any] = {}

        def unthrottled() -> bool:
            fracs.update(latest(watch, "plot-frac"))
            return len(fracs) == 3 and not any(fracs.values())

        # A client muted before the approval stays muted until its throttle ends (Kafka does not unmute early), and
        # time throttled counts while it waits: allow the longest throttle seen before, and the 11 s window after.
        wait_s = 20 + max(throttled.values(), default=0) / 1000
        try:
            until(watch, "no broker throttling any more (time throttled 0% on every broker)", unthrottled, wait_s)
        except pytest.fail.Exception:
            pytest.fail(f"time throttled never fell to 0% on every broker in {wait_s:.0f} s; last seen {fracs}")
        until(watch, "the throttle time to fall to 0 on every broker",
              lambda: len(latest_throttle_max(watch)) == 3 and not any(latest_throttle_max(watch).values()), 30)
        rate = traces(watch, "plot-rate-produce")
        assert {t["y"][-1] for t in rate if t["name"].endswith("bound")} == {1_000_000}  # the new bound, per broker
        print(f"throttle max (ms) before the approval {throttled}, after {latest_throttle_max(watch)}")
        screenshot(watch, "08-entity-unthrottled-admin")

        page.reload()
        effect = page.inner_text("section[aria-labelledby=effect-h]")
        assert "the comparison needs whole minutes" in effect or "Before" in effect, effect
        screenshot(page, "09-request-applied-admin")
    finally:
        worker.stop()
        traffic.stop()
    assert QuotaRequest.objects.get(pk=req.pk).state == "applied"


# ------------------------------------------------------------------ another tenant's entity


def test_another_tenants_entity_is_403_and_the_socket_refuses_to_stream_it(
    world: dict[str, Any], context: Any, portal: Portal
) -> None:
    page = context.new_page()
    log_in(page, "alice")
    response = page.goto(f"/monitor/{CLUSTER}/entity/?e=svc-b-1:")
    assert response is not None and response.status == 403
    assert "not one your tenants own" in page.inner_text("main")
    screenshot(page, "10-entity-403-tenant")

    portal.require_live()
    page.goto(ENTITY_URL)
    wait_live(page)
    frame = page.evaluate(
        """([cluster]) => new Promise((resolve, reject) => {
             const ws = new WebSocket(`ws://${location.host}/ws/monitor/`);
             const timer = setTimeout(() => reject(new Error("no answer")), 5000);
             ws.onopen = () => ws.send(JSON.stringify({action: "subscribe", cluster, entity: "svc-b-1:"}));
             ws.onmessage = (ev) => { clearTimeout(timer); ws.close(); resolve(JSON.parse(ev.data)); };
           })""",
        [CLUSTER],
    )
    assert frame["type"] == "error" and frame["code"] == "PERMISSION_DENIED", frame
    # the page's own socket is still streaming its own entity
    assert page.get_attribute("#monitor-status", "data-state") == "live"


# ------------------------------------------------------------------ a cluster-wide budget


def test_a_budgeted_entity_shows_its_cluster_total_against_the_budget_and_each_brokers_share(
    world: dict[str, Any], context: Any, portal: Portal
) -> None:
    portal.require_live()
    page = context.new_page()
    log_in(page, "alice")
    page.goto(f"/monitor/{CLUSTER}/entity/?e=svc-a-2:")
    wait_live(page)
    budget, shares = 3000.0, {0: 2400.0, 1: 300.0, 2: 300.0}  # the demand sits on broker 0
    samplers = {b: Sampler(world["redis"], CLUSTER, b, {}) for b in shares}

    def tick() -> bool:
        t = now_ms()
        for b, share in shares.items():  # what the Prometheus source publishes from the plugin's metrics
            rate = share * (0.97 if b == 0 else 0.1)
            samplers[b].publish([{"t": t, "c": CLUSTER, "b": b, "q": "produce", "e": "svc-a-2:", "rate": rate,
                                  "bound": share, "share": share, "budget": budget, "util": rate / share,
                                  "thr_avg": 5.0 if b == 0 else 0.0, "thr_max": 9.0 if b == 0 else 0.0,
                                  "thr_frac": 0.005 if b == 0 else 0.0, "tokens": None, "src": "prometheus"}], t)
        page.wait_for_timeout(1000)
        return len(traces(page, "plot-budget-produce")) == 2 and chart_points(page) >= 9

    until(page, "the cluster total chart", tick, 20)
    for _ in range(3):
        tick()
    total = {t["name"]: t["y"] for t in traces(page, "plot-budget-produce")}
    assert set(total) == {"cluster total", "budget bound"}
    assert total["budget bound"][-1] == budget
    assert total["cluster total"][-1] == pytest.approx(2400 * 0.97 + 2 * 300 * 0.1)  # every broker's newest rate
    bounds = {t["name"]: t["y"][-1] for t in traces(page, "plot-rate-produce") if t["name"].endswith("bound")}
    assert bounds == {f"broker {b} bound": share for b, share in shares.items()}  # each broker's share bounds it
    heading = page.inner_text("#chart-rate-produce-h")
    assert "share" in heading, heading
    screenshot(page, "11-entity-budget-tenant")
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(800)
    screenshot(page, "phone-11-entity-budget-tenant")


# ------------------------------------------------------------------ it fits: a desktop and a phone

#: Where the chart toolbar is and where the plot area starts, of every chart of the page that shows its toolbar.
TOOLBARS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => {
  const bar = el.querySelector('.modebar-container');
  const plot = el.querySelector('.nsewdrag');
  if (!bar || !plot || getComputedStyle(bar).display === 'none') return null;
  const b = bar.getBoundingClientRect(), p = plot.getBoundingClientRect();
  return {id: el.id, barBottom: b.bottom, barHeight: b.height, plotTop: p.top};
}).filter(Boolean)"""
FITS = """() => ({scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
  boxes: Array.from(document.querySelectorAll('section[aria-labelledby=throttled-h] [data-scroll-x]'))
    .map(b => b.scrollWidth - b.clientWidth)})"""


def throttled_crowd(client: redis.Redis) -> None:
    """Entities throttled now on every broker, with the names people found hard to read, and a long one."""
    t = now_ms()
    kinds = [("svc-payments-api:", "produce"), (":search-admin", "controller_mutation"), (":1", "request"),
             (":2", "request"), ("ANONYMOUS:", "fetch"),
             ("svc-analytics-etl-nightly-backfill:analytics-spark-executor-0042", "fetch")]
    for b in range(3):
        rows = []
        for i, (e, q) in enumerate(kinds):
            bucket = q == "controller_mutation"
            rows.append({"t": t, "c": CLUSTER, "b": b, "q": q, "e": e, "rate": None if bucket else 1500.0 + i,
                         "bound": 3.0 if bucket else 1000.0, "util": 1.3 if bucket else 1.5 + i / 100,
                         "thr_avg": 1234.0 + i, "thr_max": 12_345.0, "thr_frac": 0.5 + i / 20,
                         "tokens": -9.0 if bucket else None})
        Sampler(client, CLUSTER, b, {}).publish(rows, t)


def test_the_monitor_fits_a_desktop_and_a_phone_and_no_toolbar_covers_a_chart(
    world: dict[str, Any], chromium: Any, portal: Portal
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    entity = f"/monitor/{CLUSTER}/entity/?e=svc-payments-api:"
    for name, viewport, mobile in (("desktop", {"width": 1366, "height": 768}, False),
                                   ("phone", {"width": 390, "height": 844}, True)):
        ctx = chromium.new_context(viewport=viewport, is_mobile=mobile, has_touch=mobile, base_url=portal.url)
        ctx.set_default_timeout(30_000)
        page = ctx.new_page()
        log_in(page, "root")
        throttled_crowd(world["redis"])
        page.goto("/monitor/")
        page.wait_for_selector("#heatmap-0 .main-svg")
        screenshot(page, f"12-overview-{name}")
        section = page.inner_text("section[aria-labelledby=throttled-h]")
        assert "client-id 1 (any principal)" in section and "anonymous (PLAINTEXT listener)" in section
        fit = page.evaluate(FITS)
        assert fit["scroll"] <= fit["inner"] and fit["boxes"] == [0], (name, fit)  # no sideways scrolling at all
        bar = page.evaluate("""() => { const r = document.querySelector('.topbar').getBoundingClientRect();
          const width = (sel) => document.querySelector(sel).getBoundingClientRect().width;
          const spare = width('.menu-panel') - width('.topbar nav ul') - width('.topbar .account') - 16;
          const tops = new Set(Array.from(document.querySelectorAll('.topbar nav li'))
            .filter(li => li.checkVisibility()).map(li => Math.round(li.getBoundingClientRect().top)));
          return {height: r.height, lines: tops.size, spare,
                  menu: getComputedStyle(document.querySelector('details.menu > summary')).display}; }""")
        if name == "desktop":
            assert bar["lines"] == 1 and bar["height"] < 60 and bar["menu"] == "none", bar  # the menu on one line
            assert bar["spare"] > 60, bar  # room for a longer name than "root (admin)" (a longer one is cut)
            rows = page.evaluate("() => Array.from(document.querySelectorAll('table.monitor-top tr'))"
                                 ".map(r => getComputedStyle(r).display)")
            assert set(rows) == {"table-row"}
        else:
            assert bar["lines"] == 0 and bar["height"] < 70 and bar["menu"] != "none", bar  # folded: one button
            cards = page.evaluate("() => Array.from(document.querySelectorAll('table.monitor-top tbody tr'))"
                                  ".map(r => [getComputedStyle(r).display, r.getBoundingClientRect().width])")
            assert len(cards) == 6 and all(d == "block" and w <= 390 for d, w in cards), cards  # stacked cards
            page.click("details.menu > summary")
            assert page.is_visible("nav[aria-label=Main] >> text=Approvals")
            assert page.get_attribute("details.menu", "open") is not None
            screenshot(page, f"12-overview-menu-{name}")
            page.keyboard.press("Escape")
            assert not page.is_visible("nav[aria-label=Main] >> text=Approvals")
        problems = [f"{v['id']}: {v['help']} at {[n['target'] for n in v['nodes'][:4]]}"
                    for v in axe.run(page).response["violations"] if v["impact"] in ("serious", "critical")]
        assert not problems, (name, problems)

        page.goto(entity)
        page.wait_for_function("() => document.querySelectorAll('#monitor-charts .main-svg').length >= 2")
        assert page.inner_text("h1").startswith("Monitor: svc-payments-api (all client-ids)")
        fit = page.evaluate(FITS)
        assert fit["scroll"] <= fit["inner"], (name, fit)
        plot = page.locator("#plot-rate-produce .nsewdrag").first
        box = plot.bounding_box()
        if mobile:
            page.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        else:
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.wait_for_timeout(500)
        bars = page.evaluate(TOOLBARS)
        assert bars and all(b["barBottom"] <= b["plotTop"] + 1 for b in bars), (name, bars)  # above, never over
        problems = [f"{v['id']}: {v['help']} at {[n['target'] for n in v['nodes'][:4]]}"
                    for v in axe.run(page).response["violations"] if v["impact"] in ("serious", "critical")]
        assert not problems, (name, problems)
        screenshot(page, f"13-entity-{name}")
        ctx.close()
