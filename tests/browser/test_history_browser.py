"""History in a real browser: the impact preview on the request form and beside the capacity check, and the
hourly history chart on the entity page (uvicorn, a Celery worker running the Spark job, chromium).

Every page visited is saved under test-artifacts/screenshots/.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from history.models import ImpactPreview, UsageRollup
from quotas.models import OwnedName, QuotaEntity, QuotaRequest
from tests.celery_worker import Worker
from tests.landing_files import write_landing

from .conftest import CLUSTER, Portal, log_in, screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

H = 3_600_000


def usage(user: str, client_id: str, start_ms: int, seconds: int) -> list[dict]:
    """1000 B/s (100 B every 100 ms) on broker 0."""
    return [{"cluster": CLUSTER, "broker": 0, "quota_type": "produce", "user": user, "client_id": client_id,
             "t_ms": start_ms + 100 * i, "value": 100.0} for i in range(seconds * 10)]


def test_a_tenant_previews_a_proposal_and_the_admin_sees_it_beside_the_capacity_check(
    world: dict[str, Any], context: Any, portal: Portal, celery_queue_clean: None, tmp_path: Path
) -> None:
    OwnedName.objects.create(tenant=world["a"], entity_type="client-id", pattern="app-a-*")
    root = Path(portal.env["QUOTAS_LANDING_ROOT"])
    start = int(time.time() * 1000) // H * H - H
    write_landing(None, root, "usage", usage("svc-a-1", "app-a-1", start, 120), "t_ms")
    # the engine's samples of its sensor while that traffic was recorded: throttled a quarter of the time under 800 B/s
    samples = [{"t": start + 1000 * s, "c": CLUSTER, "b": 0, "q": "produce", "e": "svc-a-1:app-a-1", "rate": 1000.0,
                "bound": 800.0, "util": 1.25, "thr_avg": 250.0, "thr_max": 250.0, "thr_frac": 0.25, "tokens": None}
               for s in range(1, 121)]
    write_landing(None, root, "samples", samples, "t")
    worker = Worker(portal.env["QUOTAS_REDIS_URL"], portal.env["DATABASE_URL"],
                    tmp_path / "worker.log", "previews", QUOTAS_LANDING_ROOT=str(root)).start()
    try:
        page = context.new_page()
        log_in(page, "alice")
        page.goto(f"/requests/new/?cluster={CLUSTER}&user=svc-a-1&client_id=app-a-1&key=producer_byte_rate")
        page.fill("#id_value", "lots")
        page.click("#preview-button")
        refusal = page.wait_for_selector("#preview-panel [role=alert]")
        assert "is not a byte rate" in refusal.inner_text()  # the accepted forms are named; nothing was queued
        assert "1.5 MiB/s" in refusal.inner_text()
        assert not ImpactPreview.objects.exists()

        page.fill("#id_value", "600")
        page.click("#preview-button")
        page.wait_for_selector("#preview-panel .impact progress, #preview-panel .impact[data-state=done]")
        done = page.wait_for_selector('#preview-panel .impact[data-state="done"]', timeout=180_000)
        throttled = done.query_selector('[data-figure="throttle_events"]').inner_text()
        # 1000 B/s against 600; counts are grouped as figures are read ("of 1,200", not "of 1200")
        assert throttled.endswith("of 1,200") and not throttled.startswith("0 ")
        advice = done.query_selector('[data-figure="advice"]').inner_text()
        assert "smallest value that keeps throttled time under 1%" in advice
        assert "The proposed value is below it." in advice
        # ... and, next to it, that it is a lower bound: the traffic it rests on was throttled while it was recorded
        caveat = done.query_selector('[data-figure="advice-caveat"]').inner_text()
        assert caveat.startswith("Kafka throttled this traffic 25% of the time while it was recorded under 800 B/s")
        assert "is a lower bound" in caveat and advice.startswith("Right-sizing, a lower bound:")
        recorded = done.query_selector('[data-figure="recorded_throttled_fraction"]').inner_text()
        assert recorded == "25.00% under 800 B/s per broker"  # Kafka's bound is each broker's
        # where its traffic was seen and why, and what it asked for beside what got through
        assert done.query_selector('[data-figure="where"]').inner_text().startswith("Recorded on broker ")
        assert done.query_selector('[data-figure="demand"]').inner_text().startswith("more than ")
        screenshot(page, "history-request-form-preview")

        page.fill("#id_reason", "More throughput for the spring sale")
        with page.expect_navigation():
            page.click("form.stacked button[type=submit]")
        request = QuotaRequest.objects.get()
        preview = ImpactPreview.objects.get()  # the form's preview is the request's: cached per proposal

        admin = context.browser.new_context(viewport=page.viewport_size, base_url=portal.url)
        queue = admin.new_page()
        log_in(queue, "root")
        queue.goto("/approvals/")
        card = queue.wait_for_selector(f'article:has(a[href="/requests/{request.pk}/"])')
        assert card.query_selector(".beside .capacity") is not None  # the capacity check ...
        shown = card.query_selector(f'.beside #impact-{preview.pk}[data-state="done"]')  # ... and the preview
        assert shown is not None and "of 1,200" in shown.inner_text()
        screenshot(queue, "history-approval-queue")
        queue.goto(f"/requests/{request.pk}/")
        queue.wait_for_selector(f'#impact-{preview.pk}[data-state="done"]')
        screenshot(queue, "history-request-detail")
        admin.close()
        assert ImpactPreview.objects.count() == 1
    finally:
        worker.stop()


def test_the_entity_page_draws_the_hourly_history(world: dict[str, Any], context: Any, portal: Portal) -> None:
    OwnedName.objects.create(tenant=world["a"], entity_type="client-id", pattern="app-a-*")
    entity = QuotaEntity.objects.create(cluster=world["cluster"], user="svc-a-1", client_id="app-a-1")
    now_hour = int(time.time() * 1000) // H * H
    for i in range(6):
        rate = 1000.0 + 100 * i
        UsageRollup.objects.create(
            cluster=CLUSTER, quota_type="produce", tags="svc-a-1:app-a-1", granularity="hour",
            window_start=datetime.fromtimestamp((now_hour - (6 - i) * H) / 1000, UTC), bytes=rate * 3600,
            rate_p50=rate, rate_p95=rate * 1.2, rate_p99=rate * 1.3, rate_max=rate * 1.5, throttle_ms=1000.0 * i,
            throttled_fraction=0.01 * i, tokens_min=None, seconds=3600,
        )
    page = context.new_page()
    log_in(page, "alice")
    page.goto(f"/entities/{entity.pk}/")
    page.wait_for_selector('#usage-history-chart[data-drawn="1"]')
    traces = page.evaluate("() => document.querySelector('#usage-produce .plot').data.map(t => [t.name, t.y])")
    by_name = dict(traces)
    assert by_name["p99"] == pytest.approx([1300.0 + 130 * i for i in range(6)])
    assert by_name["time throttled (%)"] == pytest.approx([float(i) for i in range(6)])
    screenshot(page, "history-entity-page")
