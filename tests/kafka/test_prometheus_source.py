"""The Prometheus source against the real thing: the session's Kafka (JMX exporter on every broker), a real Prometheus
scraping it each second, a real producer throttled by a user/client-id quota. The poller returns a produce sample of
that very sensor with its throttle time, and ``manage.py prometheus_source`` publishes it into the monitor's streams
with the quota the portal resolves for it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from django.core.management import call_command

from engine import monitor
from observe.kafka_quotas import Entity, PrometheusSource
from observe.prometheus import PrometheusClient
from quotas.models import Cluster, QuotaEntity, QuotaValue
from tests.kafka.test_exporter import throttle_producer
from tests.redis_keys import keys_cleared

#: PLAINTEXT clients are principal ANONYMOUS: a user/client-id quota is the most specific level, whatever
#: other tests of the session set, so the sensor's tags are "ANONYMOUS:<client-id>"
USER = "ANONYMOUS"


def wait_for_sample(source: PrometheusSource, tags: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        last = [s for s in source.poll().samples if s["q"] == "produce" and s["e"] == tags]
        if last and last[0]["thr_max"] > 0:
            return last[0]
        time.sleep(0.5)
    raise AssertionError(f"no throttled produce sample of {tags!r} within {timeout:.0f}s (last: {last})")


def test_the_poller_returns_the_throttled_producers_sample(kafka_cluster: Any, fast_prometheus: Any) -> None:
    prometheus = fast_prometheus
    client_id = f"prom-{uuid.uuid4().hex[:8]}"
    throttle_producer(kafka_cluster, client_id, user=USER)
    asked: list[Entity] = []

    def bound(entity: Entity) -> float | None:
        asked.append(entity)
        return 1024.0 if entity.client_id == client_id else None

    with PrometheusClient(prometheus.url) as client:
        source = PrometheusSource(client, "prod", bound=bound, selector={"cluster": kafka_cluster.name})
        sample = wait_for_sample(source, f"{USER}:{client_id}")
        # each sample says the interval it stands for: the time between the series' newest two scrapes. Right after
        # the switch from 5 s to 1 s scrapes that gap is anything in between, so poll until two 1 s scrapes are in
        deadline, res, seen = time.monotonic() + 20, set(), set()
        while res != {1000} and time.monotonic() < deadline:
            res = {s["res_ms"] for s in source.poll().samples if s["e"] == f"{USER}:{client_id}"} - {None}
            seen |= res
            time.sleep(0.5)

    assert sample["src"] == "prometheus" and sample["c"] == "prod"
    assert sample["b"] in {n.node_id for n in kafka_cluster.nodes}
    assert sample["thr_max"] > 0 and sample["thr_avg"] > 0
    # Kafka's rate: the bytes of its quota window (11 s) per second, decaying once the producer waits
    assert sample["bound"] == 1024.0 and sample["rate"] > 0 and sample["util"] == sample["rate"] / 1024.0
    assert sample["tokens"] is None
    assert set(sample) == {"t", "c", "b", "q", "e", "rate", "bound", "util", "thr_avg", "thr_max", "thr_frac",
                           "tokens", "src", "res_ms"}
    assert res == {1000}, seen  # the scrape interval: each sample stands for one second of Kafka's sensor
    assert all(r % 100 == 0 for r in seen), seen  # to 100 ms
    assert Entity("produce", f"{USER}:{client_id}", USER, client_id) in asked


@pytest.mark.django_db
def test_the_command_publishes_kafkas_sensors_with_the_portals_quota(
    kafka_cluster: Any, fast_prometheus: Any, redis_url: str
) -> None:
    prometheus = fast_prometheus
    client_id = f"promcmd-{uuid.uuid4().hex[:8]}"
    name = f"promsrc-{uuid.uuid4().hex[:6]}"
    cluster = Cluster.objects.create(name=name, connector="kafka", bootstrap_servers=kafka_cluster.bootstrap())
    entity = QuotaEntity.objects.create(cluster=cluster, user=USER, client_id=client_id)
    QuotaValue.objects.create(entity=entity, key="producer_byte_rate", value=1024.0)
    throttle_producer(kafka_cluster, client_id, user=USER)
    tags = f"{USER}:{client_id}"

    with keys_cleared(redis_url, f"mon:{{{name}}}*") as redis_client:
        deadline = time.monotonic() + 30
        found: list[dict[str, Any]] = []
        listeners: list[dict[str, Any]] = []
        # polled until the producer's sensor and every broker's listener sensor are in: Prometheus scrapes the
        # brokers one by one, so one poll may see some brokers' newest series before the others'
        while (not found or len(listeners) < len(kafka_cluster.nodes)) and time.monotonic() < deadline:
            call_command("prometheus_source", "--cluster", name, "--url", prometheus.url,
                         "--match", f"cluster={kafka_cluster.name}", "--duration", "1.5", "--status-every", "60")
            latest = monitor.latest(redis_client, name)
            found = [s for s in latest if s["q"] == "produce" and s["e"] == tags and s["thr_max"] > 0]
            listeners = [s for s in latest if s["e"] == "listener:PLAINTEXT"]
        assert found, f"no sample of {tags} in the monitor's latest hash"
        (sample,) = found
        assert sample["src"] == "prometheus" and sample["bound"] == 1024.0 and sample["util"] is not None
        assert monitor.recent(redis_client, name, "produce", tags, 0)
        # the connection sensors of every broker came along, without a client quota's bound
        listeners = [s for s in monitor.latest(redis_client, name) if s["e"] == "listener:PLAINTEXT"]
        assert len(listeners) == len(kafka_cluster.nodes) and all(s["bound"] is None for s in listeners)
