"""The group pages in a real browser, at a desktop's width (1366) and a phone's (390), as an admin and as a tenant
member: the cluster page's groups and exempt-principals sections and the group page fit the screen (a wide table
scrolls inside its own box, ``data-scroll-x``), axe-core finds nothing serious, the value field says what it
understood as one types (units.js), and a refused request keeps what was typed beside the domain's sentence.

Every page is saved as ``test-artifacts/screenshots/groups-<width>-<who>-<page>.png``, to look at.
"""

from __future__ import annotations

from typing import Any

import pytest

from quotas.choices import BudgetScope, ConnectorKind
from quotas.models import Cluster, GroupKind, create_group, set_exempt, set_group_values
from quotas.workflow import quota_requests

from .conftest import Portal, log_in, screenshot
from .test_phone_browser import OVERFLOW, PHONE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

DESKTOP = {"width": 1366, "height": 768}
KAFKA = "bkafka"
MIB = 2**20


@pytest.fixture
def groups(world: dict[str, Any]) -> dict[str, Any]:
    """Kafka cluster bkafka: team-a's tenant group (two values, one cluster-wide) with a waiting request, a
    client-id prefix group under a principal of team-a, team-b's principals group, two exempt principals."""
    cluster = Cluster.objects.create(name=KAFKA, connector=ConnectorKind.KAFKA)
    for i in range(3):
        cluster.brokers.create(broker_id=i, host=f"kafka-{i}.example.internal:9092")
    admin = world["admin"]
    tenant_group = create_group(admin, cluster, world["a"], "team-a-all", GroupKind.TENANT,
                                description="Everything team A runs")
    set_group_values(admin, tenant_group, {"producer_byte_rate": (40 * MIB, BudgetScope.CLUSTER_WIDE),
                                           "consumer_byte_rate": (80 * MIB, None), "request_percentage": (200, None)})
    prefix = create_group(admin, cluster, world["a"], "a-ingest-jobs", GroupKind.CLIENT_PREFIX,
                          client_id_prefix="ingest-nightly-batch-", prefix_principal="svc-a-ingest")
    set_group_values(admin, prefix, {"producer_byte_rate": (5 * MIB, None)})
    create_group(admin, cluster, world["b"], "team-b-services", GroupKind.PRINCIPALS,
                 principals=["svc-b-orders", "svc-b-payments", "svc-b-ledger", "svc-b-notifications"])
    set_exempt(admin, cluster, "User:mirror-maker-replicator-eu-west-1", True, "MirrorMaker 2 from eu-west-1")
    set_exempt(admin, cluster, "portal-admin", True, "The portal's own admin user")
    quota_requests.submit(world["alice"], None, cluster, user=None, client_id=None, key="producer_byte_rate",
                          value="48 MiB/s", reason="Black Friday", group=tenant_group)
    return {**world, "kafka": cluster}


def fits(page: Any, axe: Any, name: str) -> list[str]:
    """Sideways scrolling and serious axe violations of the page as shown; its screenshot."""
    found = []
    fit = page.evaluate(OVERFLOW)
    if fit["scroll"] > fit["width"] or fit["wide"]:
        found.append(f"{name} ({page.url}): {fit['scroll']} px wide on a {fit['width']} px screen: {fit['wide']}")
    for v in axe.run(page, options={"resultTypes": ["violations"]}).response["violations"]:
        if v["impact"] in ("serious", "critical"):
            found.append(f"{name}: axe {v['impact']} {v['id']}: {v['help']} at {[n['target'] for n in v['nodes'][:4]]}")
    screenshot(page, name)
    return found


def test_the_group_pages_fit_a_desktop_and_a_phone(groups: dict[str, Any], chromium: Any, portal: Portal) -> None:
    from axe_playwright_python.sync_playwright import Axe

    axe, problems = Axe(), []
    paths = {"cluster": f"/clusters/{KAFKA}/", "group": f"/clusters/{KAFKA}/groups/team-a-all/",
             "prefix-group": f"/clusters/{KAFKA}/groups/a-ingest-jobs/"}
    for width, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        for who in ("root", "alice"):
            ctx = chromium.new_context(viewport=viewport, is_mobile=width == "phone", base_url=portal.url)
            ctx.set_default_timeout(60_000)
            errors: list[str] = []
            ctx.on("page", lambda p, errors=errors: p.on("pageerror", lambda e: errors.append(f"{p.url}: {e}")))
            page = ctx.new_page()
            log_in(page, who)
            for name, path in paths.items():
                answer = page.goto(path)
                assert answer is not None and answer.status == 200, (who, path, answer and answer.status)
                problems += fits(page, axe, f"groups-{width}-{who}-{name}")
            ctx.close()
            assert not errors, errors
    assert not problems, "\n".join(problems)


def test_a_member_asks_for_a_group_value_in_units_and_a_refusal_keeps_the_form(
    groups: dict[str, Any], context: Any, portal: Portal
) -> None:
    page = context.new_page()
    log_in(page, "alice")
    page.goto(f"/clusters/{KAFKA}/groups/team-a-all/")
    assert "team-b-services" not in page.content()
    page.select_option("#id_key", "consumer_byte_rate")
    page.fill("#id_value", "1.5 MiB/s")
    assert page.inner_text("#value-understood") == "= 1,572,864 B/s (1.5 MiB/s)"
    page.fill("#id_value", "2 MB/s")
    page.fill("#id_reason", "a new consumer group")
    with page.expect_navigation():
        page.click("#group-request-form button[type=submit]")
    assert "is not a byte rate" in page.inner_text("#id_value_error")
    assert page.input_value("#id_value") == "2 MB/s" and page.input_value("#id_reason") == "a new consumer group"
    assert page.input_value("#id_key") == "consumer_byte_rate"
    screenshot(page, "groups-request-refused")
    page.fill("#id_value", "96 MiB/s")
    with page.expect_navigation():
        page.click("#group-request-form button[type=submit]")
    assert "/requests/" in page.url and "/groups/team-a-all" in page.inner_text("main")
    screenshot(page, "groups-request-submitted")
