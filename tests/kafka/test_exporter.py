"""The Prometheus JMX exporter on the brokers of the project's Kafka (devtools/kafka/, rules in
devtools/kafka/jmx-exporter.yml): a producer throttled by a real client-id quota shows on the exporter's /metrics with
its label and a throttle time, in jmx-monitoring-stacks naming; connection quotas and the throttle histograms are
there too; the runner gives each node a port of its own, and none when the exporter is turned off.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from devtools.kafka import JMX_AGENT_JAR, JMX_EXPORTER, JMX_EXPORTER_RULES, KafkaCluster
from kafka_wire import AdminClient

Series = dict[str, list[tuple[dict[str, str], float]]]


def _exporters(cluster: Any) -> list[Any]:
    nodes = [n for n in cluster.nodes if JMX_EXPORTER in getattr(n, "ports", {})]
    if not nodes:
        pytest.skip(f"the Kafka cluster {cluster.name!r} runs without the JMX exporter")
    return nodes


def scrape(url: str) -> Series:
    """The exporter's /metrics: metric name -> [(labels, value)]."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def throttle_producer(cluster: Any, client_id: str, *, user: str | None = None, kib: int = 300) -> None:
    """A client quota of 1 KiB/s for ``client_id`` (and ``user``: ANONYMOUS is a PLAINTEXT client's principal),
    then ``kib`` KiB produced by a real producer of that client-id in one request: Kafka accepts it, answers with a
    throttle time and records it in the entity's sensors (the client then waits it out; what it did not send in
    20 s is dropped)."""
    entity = {"client-id": client_id} if user is None else {"user": user, "client-id": client_id}
    answer = AdminClient(cluster.bootstrap()).alter_client_quotas([(entity, {"producer_byte_rate": 1024.0})])
    assert [e.error_code for e in answer.entries] == [0]
    topic = f"exporter-{client_id}"
    admin = KafkaAdmin({**cluster.client_config(), "log_level": 0})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # the new partition's leader is known before the first produce
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if partitions and partitions[0].leader >= 0:
            break
        assert time.monotonic() < deadline, f"no leader for {topic} after 30 s"
        time.sleep(0.2)
    errors: list[str] = []
    for _attempt in range(3):  # a leader that has just moved (a node killed by an earlier test) answers late once
        producer = Producer({**cluster.client_config(), "client.id": client_id, "linger.ms": 200, "log_level": 0})
        if _acknowledged(producer, topic, [b"w"], 15, errors):  # a small first record: metadata and connection ready
            break
    else:
        raise AssertionError(f"no record produced to {topic} was acknowledged: {errors[-6:]}")
    payload = b"q" * 10_240
    assert _acknowledged(producer, topic, [payload] * (kib // 10), 20, errors), \
        f"nothing of {kib} KiB produced to {topic} was acknowledged: {errors[-6:]}"


def _acknowledged(producer: Any, topic: str, values: list[bytes], timeout: float, errors: list[str]) -> bool:
    """Produce ``values`` and wait ``timeout`` s; True when Kafka acknowledged at least one (what is left is purged)."""
    delivered: list[bool] = []

    def report(err: Any, _msg: Any) -> None:
        delivered.append(err is None)
        if err is not None:
            errors.append(str(err))

    for value in values:
        producer.produce(topic, value, on_delivery=report)
    if producer.flush(timeout):
        producer.purge()
        producer.flush(0)
    return any(delivered)


def test_a_throttled_producer_shows_on_the_exporter_with_its_labels(kafka_cluster: Any) -> None:
    nodes = _exporters(kafka_cluster)
    client_id = f"exp-{uuid.uuid4().hex[:8]}"
    throttle_producer(kafka_cluster, client_id)

    deadline = time.monotonic() + 20
    seen: dict[str, float] = {}
    while time.monotonic() < deadline and not (seen.get("throttle", 0) > 0 and seen.get("rate", 0) > 0):
        for node in nodes:  # the partition's leader holds the sensor
            series = scrape(node.metrics_url)
            for name, key in (("kafka_server_produce_throttle_time", "throttle"),
                              ("kafka_server_produce_byte_rate", "rate")):
                for labels, value in series.get(name, []):
                    if labels.get("client_id") == client_id:
                        seen[key] = value
                        assert "user" not in labels  # a client-id quota: Kafka drops the empty user tag
        time.sleep(0.5)
    assert seen.get("throttle", 0) > 0, f"no throttle time for {client_id} on any exporter: {seen}"
    assert seen["rate"] > 0


def test_connection_quotas_and_throttle_histograms_are_exported(kafka_cluster: Any) -> None:
    series = scrape(_exporters(kafka_cluster)[0].metrics_url)
    assert "kafka_server_socketservermetrics_connection_accept_rate" in series, sorted(series)
    accept = series["kafka_server_socketservermetrics_connection_accept_rate"]
    listeners = {labels["listener"] for labels, _ in accept if "listener" in labels}  # ip=... series have no listener
    assert {"PLAINTEXT", "SASL_PLAINTEXT"} <= listeners
    for name in ("kafka_server_socketservermetrics_connection_accept_throttle_time",
                 "kafka_server_socketservermetrics_ip_connection_accept_throttle_time",
                 "kafka_server_socketservermetrics_connection_count"):
        assert series[name], name
    quantiles = {labels["quantile"] for labels, _ in series["kafka_network_requestmetrics_throttletimems"]
                 if labels["request"] == "Produce"}
    assert quantiles == {"0.50", "0.95", "0.99", "0.999"}
    counts = series["kafka_network_requestmetrics_throttletimems_count"]
    assert any(labels["request"] == "Fetch" for labels, _ in counts)
    # only what the rules name: no JMX default-format names of other MBeans
    assert not [n for n in series if n.startswith("kafka_") and not n.startswith(("kafka_server_", "kafka_network_"))]


def test_each_node_runs_the_agent_with_the_projects_rules(kafka_cluster: Any) -> None:
    nodes = _exporters(kafka_cluster)
    ports = [n.ports[JMX_EXPORTER] for n in nodes]
    assert len(set(ports)) == len(nodes)
    for node in nodes:
        agent = f"-javaagent:{JMX_AGENT_JAR}=127.0.0.1:{node.ports[JMX_EXPORTER]}:{JMX_EXPORTER_RULES}"
        assert agent in node.jvm_opts
        assert node.metrics_url == f"http://127.0.0.1:{node.ports[JMX_EXPORTER]}/metrics"
    assert kafka_cluster.facts()["nodes"][0]["ports"][JMX_EXPORTER] == ports[0]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_exporter_can_be_turned_off(tmp_path: Path, enabled: bool) -> None:
    cluster = KafkaCluster("planned", jmx_exporter=enabled, root=tmp_path)
    cluster._plan_nodes(None)
    for node in cluster.nodes:
        assert (JMX_EXPORTER in node.ports) is enabled
        cluster._write_node_files(node)
        assert any(o.startswith("-javaagent:") for o in node.jvm_opts) is enabled
    all_ports = [p for n in cluster.nodes for p in n.ports.values()]
    assert len(all_ports) == len(set(all_ports))
