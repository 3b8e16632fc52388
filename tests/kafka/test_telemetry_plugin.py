"""The KIP-714 broker plugin on its own (no cluster): a JVM hands it pushes as a broker's request thread would.

``tests/kafka/java/ExporterDrops.java`` (Java's source-file mode, Kafka's jars and the plugin jar on the classpath)
exports 200 payloads to a ``PortalTelemetryExporter`` whose endpoint accepts connections and never answers, with a
queue of 5: the calls return at once (the broker is never blocked), the queue takes what fits and the rest is
counted as dropped in the JMX MBean ``kafka.server:type=portal-telemetry-exporter``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from devtools.kafka_cluster import (
    LIB_DIR,
    PLUGIN_JAR,
    KafkaError,
    ensure_kafka_jars,
    ensure_plugin_jar,
    java_executable,
)

HARNESS = Path(__file__).resolve().parent / "java" / "ExporterDrops.java"
PUSHES, CAPACITY = 200, 5


@pytest.mark.timeout(400)
def test_the_plugin_never_blocks_the_broker_and_counts_what_it_drops() -> None:
    try:
        ensure_kafka_jars()
        ensure_plugin_jar()
    except KafkaError as e:
        pytest.fail(f"the broker plugin could not be built: {e}", pytrace=False)
    black_hole = socket.create_server(("127.0.0.1", 0), backlog=16)
    held: list[socket.socket] = []

    def accept() -> None:  # take connections, never answer
        while True:
            try:
                conn, _ = black_hole.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    endpoint = f"http://127.0.0.1:{black_hole.getsockname()[1]}/v1/metrics"
    try:
        proc = subprocess.run(
            [java_executable(), "-Xmx128m", "-XX:+UseSerialGC", "-cp", f"{LIB_DIR / '*'}:{PLUGIN_JAR}", str(HARNESS),
             endpoint, str(PUSHES), str(CAPACITY)],
            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL, check=False,
        )
    finally:
        black_hole.close()
        for conn in held:
            conn.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    assert stats["capacity"] == CAPACITY and stats["sent"] == 0
    assert stats["enqueued"] + stats["dropped"] == PUSHES, stats
    # what the queue holds, plus the one the sender thread is stuck posting
    assert CAPACITY <= stats["enqueued"] <= CAPACITY + 1, stats
    # never waited for the receiver (which would take its 3 s timeout): the broker's thread only copies and offers
    assert stats["worst_export_us"] < 1_000_000, stats


def test_the_runner_keeps_kafkas_jmx_reporter_next_to_the_plugin(tmp_path: Path) -> None:
    """Kafka 4 drops its JmxReporter from a metric.reporters list that does not name it (then the quota sensors
    vanish from JMX and from the JMX exporter): the runner lists both; no endpoint, no plugin at all."""
    from devtools.kafka_cluster import JMX_REPORTER_CLASS, PLUGIN_CLASS, KafkaCluster

    on = KafkaCluster("plugin-props", root=tmp_path, telemetry_endpoint="http://127.0.0.1:1/v1/metrics",
                      telemetry_cluster="prod")
    props = on._telemetry_properties()
    assert props["metric.reporters"].split(",") == [JMX_REPORTER_CLASS, PLUGIN_CLASS]
    assert props["portal.telemetry.endpoint"] == "http://127.0.0.1:1/v1/metrics"
    assert props["portal.telemetry.cluster"] == "prod"
    assert str(PLUGIN_JAR.parent) in on._classpath()
    off = KafkaCluster("plugin-props", root=tmp_path, telemetry_endpoint="")
    assert off._telemetry_properties() == {} and str(PLUGIN_JAR.parent) not in off._classpath()
