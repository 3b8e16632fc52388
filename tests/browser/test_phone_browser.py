"""Every page at a phone's size (390 x 844, a phone's browser), as an admin and as a tenant member: nothing makes
the page scroll sideways except a chart or a wide table that says it scrolls (``data-scroll-x``), and axe-core
(``axe-playwright-python``, run in the page) finds no serious or critical accessibility violation.

One browser, one portal, one pass over the pages per person; every page is saved as
``test-artifacts/screenshots/phone-<who>-<page>.png``, to look at.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from history import services
from history.models import ImpactPreview, PreviewState
from quotas.models import OwnedName, QuotaEntity, QuotaValue
from quotas.workflow import quota_requests

from .conftest import CLUSTER, Portal, log_in, screenshot

# about a second a page; minutes on a loaded machine
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

PHONE = {"width": 390, "height": 844}
PBR = "producer_byte_rate"
#: Where a page may scroll sideways: inside an element that says so (a wide table's wrapper, a chart).
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    (typeof el.className === "string" && el.className ? "." + el.className.trim().split(/\\s+/).join(".") : "");
  const wide = [];
  for (const el of document.body.querySelectorAll("*")) {
    if (el.parentElement && el.parentElement.closest("[data-scroll-x]")) continue;  // inside a scroller
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    if (r.right > width + 1 || r.left < -1) {
      const parent = el.parentElement;
      const pr = parent ? parent.getBoundingClientRect() : null;
      if (pr && (pr.right > width + 1 || pr.left < -1) && !parent.matches("body")) continue;  // its parent is named
      wide.push(name(el) + " [" + Math.round(r.left) + ".." + Math.round(r.right) + "]");
    }
  }
  return {scroll: document.documentElement.scrollWidth, width, inner: window.innerWidth, wide: wide.slice(0, 8)};
}"""


def pages(entity_pk: int, request_pk: int, admin: bool) -> dict[str, str]:
    """The pages a person reaches from the menu, and one of each kind of detail page."""
    found = {
        "home": "/", "entities": "/entities/", "entity": f"/entities/{entity_pk}/", "requests": "/requests/",
        "request": f"/requests/{request_pk}/", "new-request": f"/requests/new/?cluster={CLUSTER}&user=svc-a-1",
        "audit": "/audit/", "clusters": "/clusters/", "cluster": f"/clusters/{CLUSTER}/", "tenants": "/tenants/",
        "credentials": "/credentials/", "monitor": "/monitor/",
        "monitor-entity": f"/monitor/{CLUSTER}/entity/?e=svc-a-1:app-a-1", "telemetry": "/telemetry/",
        "telemetry-cluster": f"/telemetry/{CLUSTER}/",
    }
    if admin:
        found |= {"approvals": "/approvals/", "drift": "/drift/",
                  "client-metrics": f"/clusters/{CLUSTER}/client-metrics/"}
    return found


def test_every_page_fits_a_phone_and_axe_finds_nothing_serious(
    world: dict[str, Any], chromium: Any, portal: Portal, celery_queue_clean: None
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    OwnedName.objects.create(tenant=world["a"], entity_type="client-id", pattern="app-a-*")
    cluster = world["cluster"]
    entity = QuotaEntity.objects.create(cluster=cluster, user="svc-a-1", client_id="app-a-1")
    QuotaValue.objects.create(entity=entity, key=PBR, value=1_572_864)
    default = QuotaEntity.objects.create(cluster=cluster, user="<default>", client_id=None)
    QuotaValue.objects.create(entity=default, key=PBR, value=524_288)
    done = quota_requests.submit(world["alice"], None, cluster, user="svc-a-1", client_id="app-a-1", key=PBR,
                                 value="2 MiB/s", reason="Black Friday load test")
    quota_requests.approve(world["admin"], done.pk, "fine for the week")
    waiting = quota_requests.submit(world["alice"], None, cluster, user="svc-a-2", client_id="app-a-2",
                                    key="consumer_byte_rate", value="768 KiB/s", reason="a new consumer group",
                                    expires_at=timezone.now() + timedelta(days=2))
    finished_preview(waiting)
    axe = Axe()
    problems: list[str] = []
    for who, admin in (("admin", True), ("member", False)):
        ctx = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True, base_url=portal.url)
        ctx.set_default_timeout(60_000)  # plotly.js and axe on a loaded machine: seconds, not a hang
        errors: list[str] = []
        ctx.on("page", lambda p, errors=errors: p.on("pageerror", lambda e: errors.append(f"{p.url}: {e}")))
        ctx.on("page", lambda p, errors=errors: watch_files(p, errors))
        page = ctx.new_page()
        if admin:  # the login page, once, signed out
            page.goto("/login/")
            problems += check(page, axe, "login")
        log_in(page, "root" if admin else "alice")
        for name, path in pages(entity.pk, waiting.pk, admin).items():
            answer = page.goto(path)
            assert answer is not None and answer.status < 400, (path, answer and answer.status)
            page.wait_for_load_state("load")
            problems += check(page, axe, f"{who}-{name}")
        ctx.close()
        assert not errors, errors
    assert not problems, "\n".join(problems)


def finished_preview(request: Any) -> None:
    """The request's impact preview as a worker leaves it, with every part the page can show (where the traffic was
    recorded, each broker's rate and bound, what the clients asked for), so the request page shows it whole."""
    kib, t0 = 1024.0, int(timezone.now().timestamp() * 1000) - 600_000
    per_broker = [{"broker": b, "requests": 400, "bytes": 1.0, "recorded_rate": 300.0 * kib * b, "throttle_events": 12}
                  for b in (1, 2)]
    ImpactPreview.objects.create(
        cluster=request.cluster, user=request.user, client_id=request.client_id, key=request.key, value=request.value,
        proposal=services.proposal_of(request.cluster, request.user, request.client_id, request.key, request.value,
                                      request.budget_scope),
        data_version="phone", state=PreviewState.DONE, result={
            "quota_type": "fetch", "requests": 800, "clients": 1, "brokers": 2, "closed_loop": True,
            "history_from_ms": t0, "history_to_ms": t0 + 600_000, "resolution": {"source": "usage"},
            "throttle_events": 24, "throttled_fraction": 0.02, "total_delay_ms": 4800, "p99_delay_ms": 350,
            "max_delay_ms": 900, "recorded_rate": 900.0 * kib, "achieved_rate": 880.0 * kib, "per_broker": per_broker,
            "recorded_throttled_fraction": 0.4, "recorded_quota": 512.0 * kib, "recorded_throttling": {},
            "demand": {"lower": 900.0 * kib, "estimate": 1500.0 * kib, "evidence": "throttle time",
                       "text": "They asked for about 1.46 MiB/s if they go on at their own pace after each throttle."}})


def watch_files(page: Any, errors: list[str]) -> None:
    """No icon or static file a page names is missing (every page asked for /favicon.ico and got a 404)."""

    def seen(message: Any) -> None:
        url = message.location.get("url", "")
        if message.type == "error" and "Failed to load" in message.text and re.search(r"/static/|favicon", url):
            errors.append(f"{page.url}: {message.text} ({url})")

    page.on("console", seen)


def check(page: Any, axe: Any, name: str) -> list[str]:
    """What is wrong with the page as shown now: sideways scrolling, serious or critical axe violations."""
    found = []
    fit = page.evaluate(OVERFLOW)
    if fit["scroll"] > fit["width"] or fit["inner"] > 390 or fit["wide"]:
        found.append(f"{name} ({page.url}): {fit['scroll']} px wide on a {fit['width']} px screen: {fit['wide']}")
    results = axe.run(page, options={"resultTypes": ["violations"]})
    assert results.response["testEngine"]["name"] == "axe-core", results.response.keys()  # it ran in the page
    for v in results.response["violations"]:
        if v["impact"] in ("serious", "critical"):
            targets = [", ".join(n["target"]) for n in v["nodes"][:4]]
            found.append(f"{name} ({page.url}): axe {v['impact']} {v['id']}: {v['help']} at {targets}")
    screenshot(page, "phone-" + re.sub(r"[^a-z0-9-]", "-", name))
    return found
