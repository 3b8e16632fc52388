"""No stale approval, in a real browser (issue 29): an admin finds, on the approval queue, a request whose value
moved on since it was submitted (another request for the same key was approved); approving it without the
confirmation is refused and changes nothing, ticking the confirmation approves it, and another stale request is
rejected as superseded in one click. The queue at a phone's width fits and axe finds nothing serious.

Screenshots: ``test-artifacts/screenshots/stale-*.png`` and ``phone-stale-*.png``.
"""

from __future__ import annotations

from typing import Any

import pytest

from quotas.models import Alteration, QuotaOp, QuotaRequest, QuotaValue, audited_alter
from quotas.workflow import quota_requests

from .conftest import Portal, log_in, screenshot
from .test_phone_browser import PHONE, check

pytestmark = [pytest.mark.django_db(transaction=True)]
PBR = "producer_byte_rate"
KiB, MiB = 1024, 1 << 20


def value(cluster: Any) -> float:
    return QuotaValue.objects.get(entity__cluster=cluster, entity__user="svc-a-1", key=PBR).value


def test_an_admin_is_told_a_request_is_stale_confirms_one_and_rejects_another_as_superseded(
    world: dict[str, Any], context: Any, chromium: Any, portal: Portal, celery_queue_clean: None
) -> None:
    from axe_playwright_python.sync_playwright import Axe

    cluster, alice = world["cluster"], world["alice"]
    audited_alter(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 512 * KiB)])], world["admin"])
    ask = {"user": "svc-a-1", "client_id": None, "key": PBR}
    pending = quota_requests.submit(alice, None, cluster, value="1.5 MiB/s", reason="checkout peaks", **ask)
    older = quota_requests.submit(alice, None, cluster, value="1 MiB/s", reason="an older idea", **ask)
    newcomer = quota_requests.submit(alice, None, cluster, value="2 MiB/s", **ask)
    quota_requests.approve(world["admin"], newcomer.pk, "the newcomer's")
    assert value(cluster) == 2 * MiB

    page = context.new_page()
    log_in(page, "root")
    page.goto("/approvals/")
    card = page.locator(f"article[aria-labelledby=req-{pending.pk}]")
    assert card.locator(".stale").inner_text() == (
        f"The value changed since #{pending.pk} was submitted: submitted against 512 KiB/s; now 2 MiB/s since "
        f"#{newcomer.pk}. Approving it sets 1.5 MiB/s in place of 2 MiB/s: confirm that to approve it, or reject "
        "it as superseded."
    )
    # beside the preview, the capacity check's values keep about half its width (not a column squeezed by its labels)
    widths = card.locator("dl.capacity").evaluate(
        "dl => [dl, ...dl.querySelectorAll('dd')].map(e => e.getBoundingClientRect().width)")
    assert all(w >= 0.45 * widths[0] for w in widths[1:]), widths
    screenshot(page, "stale-01-queue-admin")

    with page.expect_navigation():
        card.locator("button.approve").click()  # the confirmation left unticked
    assert "Not done: Request #" in page.inner_text(".error-box")
    assert "submitted against 512 KiB/s; now 2 MiB/s" in page.inner_text(".error-box")
    assert QuotaRequest.objects.get(pk=pending.pk).state == "submitted" and value(cluster) == 2 * MiB
    screenshot(page, "stale-02-refused-admin")

    page.check(f"#confirm-stale-{pending.pk}")  # on the request's page the refusal left the form as it was
    with page.expect_navigation():
        page.click("form.decision button.approve")
    assert f"Request #{pending.pk} approved." in page.inner_text(".messages")
    assert value(cluster) == 1.5 * MiB
    screenshot(page, "stale-03-approved-admin")

    page.goto("/approvals/")
    card = page.locator(f"article[aria-labelledby=req-{older.pk}]")
    assert f"submitted against 512 KiB/s; now 1.5 MiB/s since #{pending.pk}" in card.locator(".stale").inner_text()
    with page.expect_navigation():
        card.get_by_role("button", name=f"Reject #{older.pk} as superseded").click()
    assert f"Request #{older.pk} rejected." in page.inner_text(".messages")
    page.goto(f"/requests/{older.pk}/")
    decision = page.locator("dl.facts dd").filter(has_text="Rejected as superseded").inner_text()
    assert f"“Superseded: submitted against 512 KiB/s; now 1.5 MiB/s since #{pending.pk}.”" in decision
    screenshot(page, "stale-04-superseded-admin")
    assert value(cluster) == 1.5 * MiB

    # at a phone's width: one more stale request on the queue
    quota_requests.submit(alice, None, cluster, value="3 MiB/s", **ask)
    audited_alter(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 4 * MiB)])], world["admin"])
    phone = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True, base_url=portal.url)
    phone.set_default_timeout(60_000)
    try:
        small = phone.new_page()
        log_in(small, "root")
        small.goto("/approvals/")
        assert "submitted against 1.5 MiB/s; now 4 MiB/s since audit entry #" in small.inner_text(".stale")
        problems = check(small, Axe(), "stale-queue")  # screenshot phone-stale-queue.png
    finally:
        phone.close()
    assert not problems, "\n".join(problems)
