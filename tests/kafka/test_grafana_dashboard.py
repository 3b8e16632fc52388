"""The Grafana dashboard kept in the project (docs/grafana/quotas-dashboard.json) against the real Prometheus of the
session, which scrapes the session Kafka's JMX exporters and, for this test, the portal's own ``/metrics`` (uvicorn on
the test database and Redis): every PromQL expression of the dashboard parses and runs, and each one whose metrics
have series in Prometheus returns data. The cluster variable's query finds the session's cluster.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.prometheus import PrometheusError, PrometheusServer, Target
from tests.services import service_env, start_server
from tests.waiting import wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "quotas-dashboard.json"
#: What Grafana puts in place of its variables when it asks Prometheus (the cluster: the session's, as a regex)
RATE_INTERVAL = "30s"
METRIC = re.compile(r"\b(?:kafka|quotas)_[a-z0-9_]+")
#: Families every scrape brings (brokers' listeners and throttle histograms, the portal's gauges): the test is not
#: vacuous when these answer.
ALWAYS_THERE = ("kafka_server_socketservermetrics_connection_count", "kafka_network_requestmetrics_throttletimems",
                "quotas_requests", "quotas_redis_up", "quotas_celery_queue_depth")


def expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query target of every panel, rows' nested panels included."""
    found = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets") or []:
                if target.get("expr"):
                    found.append((panel.get("title", ""), target["expr"]))
            walk(panel.get("panels") or [])

    walk(dashboard["panels"])
    return found


def grafana_to_promql(expr: str, cluster: str) -> str:
    return (expr.replace("$__rate_interval", RATE_INTERVAL).replace("${cluster}", re.escape(cluster))
            .replace("$cluster", re.escape(cluster)))


def query(prometheus: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    try:
        return prometheus.api(f"query?query={urllib.parse.quote(expr)}")["result"]
    except urllib.error.HTTPError as e:  # 400: Prometheus's parser refused it
        raise AssertionError(f"Prometheus refused {expr!r}: {e.read().decode(errors='replace')[:500]}") from None


@pytest.fixture
def portal_scraped(fast_prometheus: PrometheusServer, redis_url: str, django_db_setup: None,
                   tmp_path: Path) -> Iterator[PrometheusServer]:
    """The portal under uvicorn, scraped by the session's Prometheus (job ``portal``) during the test, every second
    (two scrapes in 2 s, not 10)."""
    prometheus = fast_prometheus
    server, port = start_server(service_env(redis_url), tmp_path / "uvicorn.log")
    target = Target("portal", f"127.0.0.1:{port}", "/metrics")
    prometheus.extra_targets.append(target)
    try:
        prometheus.reload()
        # twice, and each time answered (up is 1; a scrape that timed out on a busy machine counts 0): a rate()
        # over the portal's series needs two samples in its range
        up = f'sum_over_time(up{{job="portal", instance="127.0.0.1:{port}"}}[{RATE_INTERVAL}]) >= 2'
        try:
            wait_for("Prometheus to scrape the portal twice", lambda: query(prometheus, up), 30, 0.5)
        except BaseException:
            targets = prometheus.api("targets")["activeTargets"]
            said = [t.get("lastError") for t in targets if t["labels"]["job"] == "portal"]
            print(f"the portal's scrape said: {said}; uvicorn's log: {(tmp_path / 'uvicorn.log').read_text()[-3000:]}")
            raise
        yield prometheus
    finally:
        prometheus.extra_targets.remove(target)
        try:
            prometheus.reload()
        except PrometheusError:
            pass
        server.stop()


@pytest.mark.django_db  # the test database is made (and migrated) for the portal's uvicorn even when run alone
def test_every_dashboard_query_runs_on_the_real_prometheus(kafka_cluster: Any, portal_scraped: PrometheusServer
                                                           ) -> None:
    prometheus = portal_scraped
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = expressions(dashboard)
    assert len(exprs) >= 20

    # the cluster variable: label_values(<metric>, cluster) finds the session's cluster
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "cluster"]
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"]).groups()
    values = wait_for("the cluster label in Prometheus", lambda: prometheus.api(
        f"label/{label}/values?match[]={urllib.parse.quote(metric)}"), 30, 0.5)
    assert kafka_cluster.name in values

    present = {name: bool(query(prometheus, f"count({name})")) for name in ALWAYS_THERE}
    assert all(present.values()), f"families every scrape brings are missing: {present}"
    answered, unknown = [], []
    for title, expr in exprs:
        promql = grafana_to_promql(expr, kafka_cluster.name)
        assert "$" not in promql, f"{title}: a Grafana variable the test does not know in {expr!r}"
        result = query(prometheus, promql)  # parses and runs, or the assertion says why not
        names = set(METRIC.findall(promql))
        exists = all(present.setdefault(n, bool(query(prometheus, f"count({n})"))) for n in names)
        if exists:
            assert result, f"{title}: {promql!r} returned nothing although its series exist"
            answered.append(title)
        else:
            unknown.append((title, sorted(n for n in names if not present[n])))
    # the brokers' always-there families and the portal's gauges answered
    assert {"Open connections", "Throttle time p99 by request type", "Quota requests by state",
            "Celery queue depth"} <= set(answered), (answered, unknown)
    plugin = getattr(kafka_cluster, "telemetry_endpoint", None)
    if plugin:
        assert "Plugin queue" in answered, unknown
