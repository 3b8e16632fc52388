"""A real KIP-714 client loop against the portal's sink, and its metrics in a browser chart.

The Python client talks HTTP to the real uvicorn (the same server the browser uses): it subscribes, pushes,
is throttled when it pushes early, recovers from UNKNOWN_SUBSCRIPTION_ID after the subscription changes, and
what it pushed appears, through the relay and the WebSocket, on the instance's page in chromium.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from kip714.client import TelemetryClient
from quotas.models import Cluster
from quotas.models.client_metrics import alter_subscription
from tests.waiting import wait_for

from .conftest import Portal, log_in, person, screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
TEL_CLUSTER = "tprod"
METRIC = "org.apache.kafka.producer.record.send.rate"


def chart_points(page: Any) -> int:
    return int(page.get_attribute("#telemetry-charts", "data-points") or 0)


def test_a_client_loop_subscribes_pushes_obeys_throttling_recovers_and_its_metrics_show_in_the_browser(
    portal: Portal, context: Any, engine_redis: redis.Redis
) -> None:
    person("root", staff=True)
    cluster = Cluster.objects.create(name=TEL_CLUSTER)
    alter_subscription(cluster, "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "500"}, None)
    client = TelemetryClient(portal.url, TEL_CLUSTER, "app-1", "apache-kafka-java", "3.9.0", compression="zstd")
    try:
        got = client.get_subscriptions()
        assert got["error_code"] == "NONE" and got["push_interval_ms"] == 500
        instance = client.client_instance_id
        assert client.push([(METRIC, 10.0)])["error_code"] == "NONE"  # the one push a get allows
        early = client.push([(METRIC, 11.0)])
        assert early["error_code"] == "THROTTLING_QUOTA_EXCEEDED" and early["retry_after_ms"] > 0

        page = context.new_page()
        log_in(page, "root")
        page.goto(f"/telemetry/{TEL_CLUSTER}/instance/{instance}/")
        wait_for("the first push on the chart", lambda: chart_points(page) >= 1, 10)
        before = chart_points(page)

        # the subscription changes: the next push is refused, the client gets again and goes on
        alter_subscription(cluster, "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "400"}, None)
        steps = client.loop(
            lambda: [(METRIC, 12.0)],
            until=lambda s: (
                sum(x.action == "push" and x.response and x.response["error_code"] == "NONE" for x in s) >= 3
            ),
            duration_s=30,
        )
        codes = [x.response["error_code"] for x in steps if x.response]
        assert "UNKNOWN_SUBSCRIPTION_ID" in codes and codes[-1] == "NONE"
        wait_for("the pushes after the change on the chart", lambda: chart_points(page) >= before + 3, 10)
        assert page.locator(f"[data-metric='{METRIC}']").count() == 1
        screenshot(page, "11-telemetry-instance-admin")
    finally:
        client.close(terminating=True)
