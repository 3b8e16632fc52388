"""KIP-714 end to end on real Kafka: a subscription made in the portal, a real librdkafka client, the broker plugin,
the portal's OTLP receiver, the telemetry pages.

The session cluster (tests/kafka_fixtures.py) runs ``PortalTelemetryExporter`` on every broker, pointed at a port
reserved for this module's uvicorn (the portal, on the test database and Redis). The test pushes a client-metrics
subscription for one client id to Kafka the portal's way (``alter_subscription`` + ``push_target``: Kafka's
IncrementalAlterConfigs on a client-metrics resource), runs a confluent-kafka producer with that client id and
another one the subscription does not match, and finds the first one's pushed metrics in the portal: the
telemetry store, the landing area, ``/telemetry/<cluster>/`` and the instance page, while the plugin's JMX
counters show the forwarded pushes and no drops.
"""

from __future__ import annotations

import gc
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from confluent_kafka import Producer
from django.test import Client

from quotas.choices import ConnectorKind
from quotas.models import Cluster, Push
from quotas.models.client_metrics import alter_subscription
from quotas.push import dispatch, target_push
from telemetry_ui.ingest import telemetry_store as store
from tests.kafka_fixtures import plugin_problem, release_telemetry_port
from tests.people import make_user
from tests.services import service_env, start_server
from tests.telemetry.test_sink import landed
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]

PRODUCE_S = 5.0
TOTALS = ("enqueued", "sent", "dropped", "failed", "rejected")


@pytest.fixture(scope="module")
def receiver(kafka_cluster: Any, redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, Any]]:
    """The portal under uvicorn on the port the brokers' plugin posts to: {"port", "landing", "redis"}."""
    if plugin_problem:
        pytest.fail(f"the session's Kafka runs without the KIP-714 plugin: {plugin_problem[0]}", pytrace=False)
    endpoint = getattr(kafka_cluster, "telemetry_endpoint", None)
    if not endpoint:
        pytest.skip("this Kafka runs no portal telemetry plugin (an external cluster started without one)")
    url = urlsplit(endpoint)
    if url.hostname not in ("127.0.0.1", "localhost") or url.path != "/v1/metrics" or not url.port:
        pytest.skip(f"the plugin posts to {endpoint}, not to a receiver this test can serve")
    logs = tmp_path_factory.mktemp("kip714")
    landing = logs / "landing"
    env = {**service_env(redis_url), "QUOTAS_LANDING_ROOT": str(landing), "QUOTAS_TELEMETRY_RELOAD_S": "0.2",
           "QUOTAS_OTLP_TOKEN": ""}
    release_telemetry_port()  # held by the session fixture so that no other server took it
    server, port = start_server(env, logs / "uvicorn.log", port=url.port)
    client = redis.Redis.from_url(redis_url)
    try:
        yield {"port": port, "landing": landing, "redis": client, "server": server}
    finally:
        client.close()
        server.stop()


def exporter_totals(kafka_cluster: Any) -> dict[str, int]:
    """The plugin's counters (JMX kafka.server:type=portal-telemetry-exporter) summed over the brokers."""
    stats = kafka_cluster.exporter_stats()
    assert stats and all(s is not None for s in stats.values()), f"a broker runs no exporter: {stats}"
    return {k: sum(int(s[k]) for s in stats.values()) for k in TOTALS}


def test_a_portal_subscription_reaches_a_real_client_whose_pushes_appear_on_the_telemetry_pages(
    kafka_cluster: Any, receiver: dict[str, Any]
) -> None:
    tag = uuid.uuid4().hex[:8]
    client_id, other_id = f"kip714-app-{tag}", f"kip714-other-{tag}"
    cluster = Cluster.objects.create(name=kafka_cluster.telemetry_cluster, connector=ConnectorKind.KAFKA,
                                     bootstrap_servers=kafka_cluster.bootstrap())
    name = f"kip714-{tag}"
    alter_subscription(cluster, name, {"metrics": "*", "interval.ms": "1000", "match": f"client_id={client_id}"},
                       None)
    dispatch.wait_direct_pushes()  # the commit's own push (QUOTAS_PUSH_DIRECT) may have brought it there already
    outcome = target_push.push_target(cluster.pk, None)
    row = Push.objects.get(cluster=cluster, broker=None, version=outcome.version)
    assert row.state == "applied" and row.answers and all("holds" in a for a in row.answers.values()), row.answers
    before = exporter_totals(kafka_cluster) if hasattr(kafka_cluster, "exporter_stats") else None
    try:
        topic = f"kip714-{tag}"
        producers = [Producer({"bootstrap.servers": kafka_cluster.bootstrap(), "client.id": cid, "log_level": 0,
                               "enable.metrics.push": True, "linger.ms": 5}) for cid in (client_id, other_id)]
        end = time.monotonic() + PRODUCE_S
        sent = 0
        while time.monotonic() < end:
            for p in producers:
                p.produce(topic, b"x" * 200)
                p.poll(0.02)
            sent += 1
        for p in producers:
            assert p.flush(15) == 0
        del p
        producers.clear()  # destroyed: the matched client's terminating push goes out
        gc.collect()

        r = receiver["redis"]

        def matched_instance() -> dict[str, Any] | None:
            for record in store.instances(cluster.name, r):
                if record.get("client_id") == client_id and record.get("terminated") and record["pushes"] >= 3:
                    return record
            return None

        record = wait_for(f"{client_id}'s pushes, terminating one included, in the telemetry store", matched_instance,
                          30)
        instance = record["instance"]
        assert len(instance) == 22  # Kafka's Uuid, base64url: the client instance id the broker assigned
        assert record["principal"] == "User:ANONYMOUS" and record["source_address"] == "127.0.0.1"
        assert record["push_interval_ms"] == 1000
        assert record["software_name"] == "confluent-kafka-python" and "rdkafka" in record["software_version"]
        # the subscription matched one client id only: the other client got none and pushed nothing
        assert [x for x in store.instances(cluster.name, r) if x.get("client_id") == other_id] == []

        entries = store.recent(cluster.name, instance, 0, client=r)
        assert len(entries) == record["pushes"]
        names = {p["name"] for e in entries for p in e["points"]}
        assert "org.apache.kafka.producer.node.request.latency.avg" in names, sorted(names)
        assert all(n.startswith("org.apache.kafka.producer.") for n in names), sorted(names)
        assert all(e["client_id"] == client_id for e in entries)
        assert {e["instance"] for e in landed(receiver["landing"], cluster.name)} == {instance}

        # the pages: the instance in the cluster's list, its own page
        admin = make_user(f"root-{tag}", staff=True)
        page = Client()
        page.force_login(admin)
        listing = page.get(f"/telemetry/{cluster.name}/")
        assert listing.status_code == 200
        html = listing.content.decode()
        assert instance in html and client_id in html and other_id not in html
        detail = page.get(f"/telemetry/{cluster.name}/instance/{instance}/")
        assert detail.status_code == 200 and client_id in detail.content.decode()

        # the plugin's counters: every push forwarded, none dropped or lost
        if before is not None:
            after = exporter_totals(kafka_cluster)
            delta = {k: after[k] - before[k] for k in TOTALS}
            assert delta["sent"] >= record["pushes"] and delta["enqueued"] == delta["sent"], delta
            assert delta["dropped"] == delta["failed"] == delta["rejected"] == 0, (delta, json.dumps(after))
    finally:
        alter_subscription(cluster, name, None, None)
        target_push.push_target(cluster.pk, None)
