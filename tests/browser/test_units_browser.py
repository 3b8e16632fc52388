"""Units in a real browser: the request form says what it understood of the value as one types (units.js, the
same rules as engine/units.py), and the pages and charts show byte rates in binary units.

Every page visited is saved under test-artifacts/screenshots/.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.units import UnitError, format_byte_rate, format_exact, parse_quota_value
from history.models import UsageRollup
from quotas.models import OwnedName, QuotaEntity, QuotaRequest

from .conftest import CLUSTER, Portal, log_in, screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

PBR = "producer_byte_rate"
H = 3_600_000
#: What people type; the browser must understand each as the server does.
TYPED = ["1.5 MiB/s", "1536 KiB/s", "1572864", "1536kib", "2 GiB/s", ".5 KiB/s", "1.3 B/s", "0.1 KiB/s", "lots",
         "1.5 MB/s", "1,024", "10 b/s", "1 gib", "-1 MiB/s"]


def server_understands(text: str) -> int | None:
    try:
        value = parse_quota_value(PBR, text)
    except UnitError:
        return None
    return value if isinstance(value, int) and value > 0 else None


def test_the_form_says_what_it_understood_as_the_server_would(world: dict[str, Any], context: Any,
                                                                portal: Portal) -> None:
    page = context.new_page()
    log_in(page, "alice")
    page.goto(f"/requests/new/?cluster={CLUSTER}&user=svc-a-1&key={PBR}")
    assert page.inner_text("#only-tenant").startswith("Tenant: team-a")  # one tenant: not asked

    # refused by the server: said once, at the field, which is marked; the live reading stays quiet until one types
    page.fill("#id_value", "2 MB/s")
    with page.expect_navigation():
        page.click("form.stacked button[type=submit]")
    error = page.locator("#id_value_error")
    assert error.is_visible() and "'2 MB/s' is not a byte rate" in error.inner_text()
    assert page.get_attribute("#id_value", "aria-invalid") == "true"
    assert page.inner_text("#value-understood") == ""
    assert page.locator("main").inner_text().count("is not a byte rate") == 1
    screenshot(page, "units-request-form-refused")
    page.fill("#id_value", "2 MiB/s")  # the person edits: the live reading replaces the server's refusal
    assert page.inner_text("#value-understood") == "= 2,097,152 B/s (2 MiB/s)"
    assert not error.is_visible() and page.get_attribute("#id_value", "aria-invalid") is None
    page.fill("#id_value", "1.5 MiB/s")
    assert page.inner_text("#value-understood") == "= 1,572,864 B/s (1.5 MiB/s)"
    page.fill("#id_value", "1.3 B/s")
    assert "not a whole number of bytes" in page.inner_text("#value-understood")
    assert "understood-error" in (page.get_attribute("#value-understood", "class") or "")
    page.select_option("#id_key", "request_percentage")
    page.fill("#id_value", "50 %")
    assert page.inner_text("#value-understood") == "= 50 %"
    page.select_option("#id_key", PBR)

    for text in TYPED:  # the browser's reading equals the server's, figure for figure
        got = page.evaluate("t => QuotaUnits.understand('producer_byte_rate', t)", text)
        expected = server_understands(text)
        if expected is None:
            assert not got["ok"], (text, got)
        else:
            assert got["ok"] and got["text"] == f"= {format_exact(PBR, expected)} ({format_byte_rate(expected)})", text
    for value in (0, 1000, 1024, 1536, 10_000, 1_572_864, 6 * 1024**2, 5000 * 1024**3):
        assert page.evaluate("v => QuotaUnits.formatByteRate(v)", value) == format_byte_rate(value)

    page.fill("#id_value", "1.5 MiB/s")
    screenshot(page, "units-request-form")
    with page.expect_navigation():
        page.click("form.stacked button[type=submit]")
    request = QuotaRequest.objects.get()
    assert request.value == 1_572_864 and request.tenant == world["a"]
    shown = page.wait_for_selector('dd .qty[title="1,572,864 B/s"]')
    assert shown.inner_text() == "1.5 MiB/s"
    screenshot(page, "units-request-detail")


def test_the_hourly_chart_ticks_and_hovers_byte_rates_in_binary_units(world: dict[str, Any], context: Any,
                                                                       portal: Portal) -> None:
    OwnedName.objects.create(tenant=world["a"], entity_type="client-id", pattern="app-a-*")
    entity = QuotaEntity.objects.create(cluster=world["cluster"], user="svc-a-1", client_id="app-a-1")
    now_hour = int(time.time() * 1000) // H * H
    for i in range(4):
        rate = (1 + i) * 1024**2  # 1..4 MiB/s
        UsageRollup.objects.create(
            cluster=CLUSTER, quota_type="produce", tags="svc-a-1:app-a-1", granularity="hour",
            window_start=datetime.fromtimestamp((now_hour - (4 - i) * H) / 1000, UTC), bytes=rate * 3600,
            rate_p50=rate, rate_p95=rate, rate_p99=rate, rate_max=rate * 1.5, throttle_ms=0.0,
            throttled_fraction=0.0, tokens_min=None, seconds=3600,
        )
    page = context.new_page()
    log_in(page, "alice")
    page.goto(f"/entities/{entity.pk}/")
    page.wait_for_selector('#usage-history-chart[data-drawn="1"]')
    axis = page.evaluate("() => document.querySelector('#usage-produce .plot').layout.yaxis")
    assert axis["tickmode"] == "array" and "2 MiB/s" in axis["ticktext"], axis
    hover = page.evaluate("() => document.querySelector('#usage-produce .plot').data[0].customdata")
    assert hover[0] == "1 MiB/s (1,048,576 B/s)"
    screenshot(page, "units-entity-history")
