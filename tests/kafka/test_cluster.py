"""Smoke test of the project-local Apache Kafka 4.4 cluster (devtools/kafka/) with real clients.

Every broker is in the metadata, the portal's super user authenticates with both SCRAM mechanisms and a wrong
password is refused, a message goes round trip, and a client-id byte-rate quota set with Kafka's own
kafka-configs (ConfigCommand) really throttles a producer.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from devtools.kafka import SCRAM_MECHANISMS, metadata_brokers

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"  # what bin/kafka-configs.sh runs


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _quiet(config: dict[str, str]) -> dict[str, Any]:
    """librdkafka settings for a test client: no log lines on stderr (errors come through callbacks)."""
    return {**config, "log_level": 0}


def _create_topic(cluster: Any, name: str) -> None:
    admin = AdminClient(_quiet(cluster.client_config()))
    for future in admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3)]).values():
        future.result(timeout=20)


def test_every_broker_is_in_the_metadata(kafka_cluster: Any) -> None:
    admin = AdminClient(_quiet(kafka_cluster.client_config()))  # referenced until the answer is in
    described = admin.describe_cluster(request_timeout=10).result()
    ids = sorted(node.id for node in described.nodes)
    assert len(ids) == 3
    if kafka_cluster.nodes:  # started here: each node, asked itself, knows all three
        assert ids == sorted(n.node_id for n in kafka_cluster.nodes)
        for node in kafka_cluster.nodes:
            assert sorted(metadata_brokers("127.0.0.1", node.ports["PLAINTEXT"])) == ids


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_super_user_authenticates_with_scram(kafka_cluster: Any, mechanism: str) -> None:
    admin = AdminClient(_quiet(kafka_cluster.client_config(mechanism)))
    described = admin.describe_cluster(request_timeout=10).result()
    assert len(described.nodes) == 3


def test_a_wrong_password_is_refused(kafka_cluster: Any) -> None:
    errors: list[KafkaError] = []
    config = {**kafka_cluster.client_config("SCRAM-SHA-256"), "sasl.password": "not-the-password"}
    producer = Producer(_quiet({**config, "error_cb": errors.append}))
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error from a client with a wrong password"
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0].str()
    assert "invalid credentials" in errors[0].str()


def test_produce_and_consume_one_message(kafka_cluster: Any) -> None:
    topic = _unique("smoke")
    _create_topic(kafka_cluster, topic)
    delivered: list[Any] = []
    producer = Producer(_quiet({**kafka_cluster.client_config("SCRAM-SHA-512"), "acks": "all"}))
    producer.produce(topic, key=b"k", value=b"hello kafka", on_delivery=lambda err, msg: delivered.append(err or msg))
    assert producer.flush(20) == 0
    assert len(delivered) == 1 and not isinstance(delivered[0], KafkaError), delivered

    consumer = Consumer(_quiet({
        **kafka_cluster.client_config(),
        "group.id": _unique("smoke-group"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }))
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        message = None
        while message is None and time.monotonic() < deadline:
            polled = consumer.poll(0.5)
            if polled is not None and not polled.error():
                message = polled
        assert message is not None, "the message did not come back within 20 s"
        assert (message.key(), message.value()) == (b"k", b"hello kafka")
    finally:
        consumer.close()


def _produce_watching_throttle(
    cluster: Any, topic: str, client_id: str, total_bytes: int, wait_s: float
) -> list[float]:
    """Produce ``total_bytes`` in 10 KiB messages as ``client_id``; the broker throttle times (s) the producer
    was told of, collected until the first one or ``wait_s``."""
    throttles: list[float] = []
    producer = Producer(_quiet({
        **cluster.client_config(),
        "client.id": client_id,
        "linger.ms": 5,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    }))
    payload = b"q" * 10240
    sent = 0
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not any(t > 0 for t in throttles):
        if sent < total_bytes:
            producer.produce(topic, payload)
            sent += len(payload)
        producer.poll(0.02)
    if not any(t > 0 for t in throttles):
        producer.flush(10)
    producer.purge()  # a throttled producer is muted for a long time: drop what is still queued
    producer.poll(0)
    return throttles


def test_a_producer_byte_rate_quota_throttles(kafka_cluster: Any) -> None:
    topic = _unique("quota")
    _create_topic(kafka_cluster, topic)
    throttled_id, free_id = _unique("throttled"), _unique("unthrottled")
    result = kafka_cluster.run_tool(
        CONFIG_COMMAND, "--bootstrap-server", kafka_cluster.bootstrap(), "--alter",
        "--add-config", "producer_byte_rate=1024", "--entity-type", "clients", "--entity-name", throttled_id,
    )
    assert result.returncode == 0, result.stderr
    assert f"Completed updating config for client {throttled_id}" in result.stdout

    # Without a quota the same traffic is not throttled ...
    assert not any(t > 0 for t in _produce_watching_throttle(kafka_cluster, topic, free_id, 300 * 1024, 2.0))
    # ... with 1 KiB/s it is, as soon as the broker has seen a few batches.
    throttles = _produce_watching_throttle(kafka_cluster, topic, throttled_id, 300 * 1024, 15.0)
    assert any(t > 0 for t in throttles), f"no throttle reported to {throttled_id}: {throttles}"
