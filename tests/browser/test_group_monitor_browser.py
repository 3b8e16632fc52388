"""A quota group's shared sensor in the live monitor, in a real browser against a real portal (uvicorn, the relay):
named as the group, linked to its page, its members' estimated parts as a stacked chart and a table, at a desktop and
a phone width (axe-core, no sideways scrolling). Screenshots: test-artifacts/screenshots/14-group-*.png.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.monitor import Sampler
from quotas.models import QuotaGroup

from .conftest import CLUSTER, Portal, log_in, screenshot
from .load import now_ms
from .test_monitor_browser import FITS, chart_points, traces, until, wait_live

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

#: per broker: the group's produce rate and bound, and its members as the Prometheus source puts them on the sample
BROKERS: dict[int, tuple[float, float, list[dict[str, Any]]]] = {
    0: (1800.0, 2000.0, [
        {"u": "svc-a-payments-api", "c": "checkout-service-7", "rps": 30.0, "share": 0.6, "part": 1080.0},
        {"u": "svc-a-ledger", "c": "", "rps": 15.0, "share": 0.3, "part": 540.0},
        {"others": 3, "rps": 5.0, "share": 0.1, "part": 180.0},
    ]),
    1: (600.0, 2000.0, [
        {"u": "svc-a-payments-api", "c": "checkout-service-7", "rps": 10.0, "share": 1.0, "part": 600.0},
    ]),
}


def test_a_group_shows_its_total_and_each_members_estimated_part(
    world: dict[str, Any], chromium: Any, portal: Portal
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    portal.require_live()
    QuotaGroup.objects.create(cluster=world["cluster"], tenant=world["a"], name="payments", kind="tenant")
    samplers = {b: Sampler(world["redis"], CLUSTER, b, {}) for b in BROKERS}

    def tick() -> None:
        t = now_ms()
        for b, (rate, bound, members) in BROKERS.items():  # what the Prometheus source publishes for the group
            samplers[b].publish([{"t": t, "c": CLUSTER, "b": b, "q": "produce", "e": "group@payments:", "rate": rate,
                                  "bound": bound, "util": rate / bound, "thr_avg": 0.0, "thr_max": 0.0,
                                  "thr_frac": 0.0, "tokens": None, "src": "prometheus", "members": members}], t)

    axe = Axe()
    for name, viewport, mobile in (("desktop", {"width": 1366, "height": 768}, False),
                                   ("phone", {"width": 390, "height": 844}, True)):
        ctx = chromium.new_context(viewport=viewport, is_mobile=mobile, has_touch=mobile, base_url=portal.url)
        ctx.set_default_timeout(30_000)
        page = ctx.new_page()
        log_in(page, "alice")  # team-a owns the group
        page.goto(f"/monitor/{CLUSTER}/entity/?e=group@payments:")
        wait_live(page)  # the socket decides who may watch a group without a query (it runs async)

        def drawn(page: Any = page) -> bool:
            tick()
            page.wait_for_timeout(1000)
            return chart_points(page) >= 6 and page.is_visible("#members-produce")

        until(page, "the members' chart and table", drawn, 20)
        assert page.inner_text("h1") == f"Monitor: group payments on {CLUSTER}"
        assert page.get_attribute("p.lead a", "href") == f"/clusters/{CLUSTER}/groups/payments/"
        bands = traces(page, "plot-members-produce")
        # one stack per time, whose top is the group's total (every broker's newest rate) at every time drawn
        assert len({tuple(t["x"]) for t in bands}) == 1, bands
        assert {round(sum(col)) for col in zip(*(t["y"] for t in bands), strict=True)} == {2400}
        stacked = {t["name"]: t["y"][-1] for t in bands}
        # summed over the brokers: 1080 + 600 for the busiest member; the group's total is the stack's top
        assert stacked == {"svc-a-payments-api, client-id checkout-service-7": 1680.0, "svc-a-ledger": 540.0,
                           "other members": 180.0}
        rows = page.evaluate("() => Array.from(document.querySelectorAll('#members-produce tbody tr'))"
                             ".map(r => Array.from(r.cells).map(c => c.innerText))")
        assert [r[0] for r in rows] == ["svc-a-payments-api, client-id checkout-service-7", "svc-a-ledger",
                                        "3 other members"]
        assert [r[1] for r in rows] == ["66.7 %", "25 %", "8.3 %"]  # 40, 15 and 5 of the group's 60 requests/s
        assert "group total" in page.inner_text("#members-produce caption")
        assert "estimated" in page.inner_text("#monitor-members")
        fit = page.evaluate(FITS)
        assert fit["scroll"] <= fit["inner"], (name, fit)  # no sideways scrolling
        wide = page.evaluate("() => Array.from(document.querySelectorAll('#monitor-members [data-scroll-x]'))"
                             ".map(b => b.scrollWidth - b.clientWidth)")
        assert wide == [0], (name, wide)  # the table fits, even on a phone (its requests/s in the caption)
        problems = [f"{v['id']}: {v['help']} at {[n['target'] for n in v['nodes'][:4]]}"
                    for v in axe.run(page).response["violations"] if v["impact"] in ("serious", "critical")]
        assert not problems, (name, problems)
        screenshot(page, f"14-group-entity-{name}")
        if name == "desktop":
            hour_view(world, page)
        ctx.close()


def hour_view(world: dict[str, Any], page: Any) -> None:
    """The last hour stacks each minute's average parts, summed over the brokers' rollups of the minute."""
    minute = now_ms() - now_ms() % 60_000
    for b, (rate, bound, members) in BROKERS.items():  # two whole minutes in the past, closed as a sampler does
        sampler = Sampler(world["redis"], CLUSTER, b, {})
        for m in (3, 2):
            t = minute - m * 60_000
            sampler.publish([{"t": t, "c": CLUSTER, "b": b, "q": "produce", "e": "group@payments:", "rate": rate,
                              "bound": bound, "util": rate / bound, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0,
                              "tokens": None, "src": "prometheus", "members": members}], t)
        sampler.publish([], minute - 60_000)
    page.check("#range-hour")
    page.wait_for_selector('#monitor-status[data-state="history"]', timeout=10_000)
    bands = {t["name"]: t for t in traces(page, "plot-members-produce")}
    assert {n: b["y"] for n, b in bands.items()} == {
        "svc-a-payments-api, client-id checkout-service-7": [1680.0, 1680.0], "svc-a-ledger": [540.0, 540.0],
        "other members": [180.0, 180.0]}, bands
    assert {len(set(b["x"])) for b in bands.values()} == {2}  # one stack per minute
    screenshot(page, "14-group-entity-hour-desktop")
    page.check("#range-live")
