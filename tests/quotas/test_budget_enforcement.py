"""Budget enforcement per cluster (issue 28): ``coordinated``, ``fallback`` or ``off``, from the brokers' rounds in
Redis (``BudgetStore``), on the cluster page, in the API's cluster detail, in ``/healthz`` (a cluster whose budgets
are not shared out by demand is ``degraded``, still 200) and in ``/metrics``. The rounds are the ones a broker's
plugin makes (``BudgetStore.round``), on the test Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from devtools.redis_server import free_port
from engine.budget_store import BudgetStore
from quotas.choices import ConnectorKind
from quotas.models import Alteration, Cluster, QuotaOp, alter_client_quotas
from tests.people import api, make_tenant, make_user
from tests.redis_keys import keys_cleared

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"


@pytest.fixture
def clusters(redis_url: str, engine_redis: redis.Redis) -> Iterator[dict[str, Any]]:
    """kprod (Kafka, brokers 1-3), staging (engine, per broker, brokers 1-2) and one (one engine namespace)."""
    with keys_cleared(redis_url, "qb:*") as client:
        kprod = Cluster.objects.create(name="kprod", connector=ConnectorKind.KAFKA)
        for i in (1, 2, 3):
            kprod.brokers.create(broker_id=i, host=f"k{i}:9092")
        staging = Cluster.objects.create(name="staging")
        for i in (1, 2):
            staging.brokers.create(broker_id=i, host=f"e{i}:9092")
        one = Cluster.objects.create(name="one", scope="cluster_wide")
        yield {"kprod": kprod, "staging": staging, "one": one, "redis": client}


def rounds(client: redis.Redis, cluster: str, *brokers: int) -> None:
    """A round of each broker's plugin, now (Redis's clock), reporting no budget."""
    store = BudgetStore(client, cluster)
    for b in brokers:
        store.round(b, [])


def late(client: redis.Redis, cluster: str, broker: int, seconds: int) -> None:
    store = BudgetStore(client, cluster)
    client.hset(store.brokers_key, str(broker), store.redis_now_ms() - seconds * 1000)


def budget(cluster: Cluster) -> None:
    alter_client_quotas(cluster, [Alteration([("user", "alice")], [QuotaOp(PBR, 3000, scope="cluster_wide")])])


def health() -> dict[str, Any]:
    response = Client().get("/healthz")
    assert response.status_code == 200, response.content
    return response.json()


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = Client().get("/metrics").content.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_off_without_budgets_is_healthy_and_with_budgets_is_degraded(clusters: dict[str, Any]) -> None:
    body = health()
    assert body["status"] == "ok" and "degraded" not in body
    assert body["budgets"] == {
        "kprod": {"enforcement": "off", "cluster_wide_values": 0},
        "staging": {"enforcement": "off", "cluster_wide_values": 0},
    }  # a one-namespace engine cluster has no budget scopes: not listed

    budget(clusters["kprod"])
    body = health()
    assert body["status"] == "degraded" and body["budgets"]["kprod"] == {"enforcement": "off", "cluster_wide_values": 1}
    assert "Kafka enforces each of the 1 cluster-wide value on every broker" in body["degraded"]["budgets.kprod"]
    assert "install the plugin" in body["degraded"]["budgets.kprod"]


def test_coordinated_then_fallback_when_a_broker_is_late_degraded_not_down(clusters: dict[str, Any]) -> None:
    budget(clusters["kprod"])
    rounds(clusters["redis"], "kprod", 1, 2, 3)
    body = health()
    assert body["status"] == "ok" and body["budgets"]["kprod"]["enforcement"] == "coordinated"

    late(clusters["redis"], "kprod", 2, 45)
    body = health()
    assert body["status"] == "degraded"
    assert body["budgets"]["kprod"]["enforcement"] == "fallback"
    assert body["degraded"]["budgets.kprod"].startswith("broker 2 last reported 45 s ago (lease 10 s)")

    # a registered broker that never reported is late too
    clusters["redis"].hdel(BudgetStore(clusters["redis"], "kprod").brokers_key, "2")
    reason = health()["degraded"]["budgets.kprod"]
    assert "1 registered broker never reported" in reason and "budget / live brokers" in reason


def test_the_gauge_has_one_series_per_state(clusters: dict[str, Any]) -> None:
    budget(clusters["kprod"])
    rounds(clusters["redis"], "kprod", 1, 3)
    late(clusters["redis"], "kprod", 2, 30)
    rounds(clusters["redis"], "staging", 1, 2)

    figures = scrape()

    def state(cluster: str, name: str) -> float:
        return figures[("quotas_budget_enforcement", (("cluster", cluster), ("state", name)))]

    assert [state("kprod", s) for s in ("coordinated", "fallback", "off")] == [0, 1, 0]
    assert [state("staging", s) for s in ("coordinated", "fallback", "off")] == [1, 0, 0]
    assert figures[("quotas_budget_values", (("cluster", "kprod"),))] == 1
    assert figures[("quotas_budget_brokers_reporting", (("cluster", "kprod"),))] == 2
    assert not any(name.startswith("quotas_budget") and ("cluster", "one") in labels for name, labels in figures)


def test_the_api_detail_and_the_cluster_page_say_it(clusters: dict[str, Any]) -> None:
    budget(clusters["kprod"])
    rounds(clusters["redis"], "kprod", 1, 2)
    late(clusters["redis"], "kprod", 3, 20)
    reader = api(make_user("reader"))

    detail = reader.get("/api/clusters/kprod/").json()["budget_enforcement"]
    assert (detail["state"], detail["degraded"], detail["cluster_wide_values"]) == ("fallback", True, 1)
    assert (detail["brokers"], detail["reporting"], detail["lease_ms"]) == (3, 2, 10_000)
    assert [r["broker"] for r in detail["rounds"]] == [1, 2, 3] and detail["rounds"][2]["ms_ago"] >= 20_000
    assert detail["reason"].startswith("broker 3 last reported 20 s ago")
    assert reader.get("/api/clusters/one/").json()["budget_enforcement"] is None
    assert "budget_enforcement" not in reader.get("/api/clusters/").json()["results"][0]  # the detail's only

    browser = Client()
    browser.force_login(make_user("page-reader"))
    page = browser.get("/clusters/kprod/").content.decode()
    assert 'data-enforcement="fallback"' in page and "(degraded)" in page and "broker 3 last reported" in page
    assert 'id="budgets"' not in browser.get("/clusters/one/").content.decode()


def test_a_budget_redis_that_cannot_be_read_is_unknown_not_an_error(clusters: dict[str, Any], settings: Any) -> None:
    budget(clusters["kprod"])
    settings.QUOTAS_BUDGET_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # Kafka's budget Redis only
    body = health()
    assert body["redis"] == "ok" and body["status"] == "degraded"
    assert body["budgets"]["kprod"]["enforcement"] == "unknown"
    assert "could not be read (ConnectionError" in body["degraded"]["budgets.kprod"]
    assert body["budgets"]["staging"]["enforcement"] == "off"  # its brokers' Redis answers
    figures = scrape()
    assert all(figures[("quotas_budget_enforcement", (("cluster", "kprod"), ("state", s)))] == 0
               for s in ("coordinated", "fallback", "off"))


def test_groups_or_exempt_principals_without_the_callback_are_degraded(clusters: dict[str, Any]) -> None:
    """Only the brokers' quota callback enforces a group or an exemption: with none reporting, they do nothing."""
    from quotas.models import GroupKind, create_group, set_exempt, set_group_values

    tenant = make_tenant("team", users=["svc-*"])
    group = create_group(None, clusters["kprod"], tenant, "team", GroupKind.TENANT)
    body = health()
    assert body["status"] == "degraded"
    assert "its 1 group quota(s) and 0 exempt principal(s) are not enforced" in body["degraded"]["budgets.kprod"]
    set_group_values(None, group, {PBR: (3000.0, "cluster_wide")})
    assert health()["budgets"]["kprod"]["cluster_wide_values"] == 1, "a group's cluster-wide value is a budget"
    set_exempt(None, clusters["staging"], "replicator", True)
    assert "budgets.staging" in health()["degraded"]
    rounds(clusters["redis"], "kprod", 1, 2, 3)
    rounds(clusters["redis"], "staging", 1, 2)
    assert health()["status"] == "ok", "every broker's callback reports: enforced"
