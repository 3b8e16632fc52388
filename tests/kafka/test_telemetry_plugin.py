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
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from devtools.kafka import (
    LIB_DIR,
    PLUGIN_JAR,
    KafkaError,
    ensure_kafka_jars,
    ensure_plugin_jar,
    exporter_stats_of,
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
    vanish from JMX and from the JMX exporter): the runner lists both; no endpoint, no exporter (the jars stay on the
    classpath for the quota callback, unless that is off too)."""
    from devtools.kafka import JMX_REPORTER_CLASS, PLUGIN_CLASS, KafkaCluster

    on = KafkaCluster("plugin-props", root=tmp_path, telemetry_endpoint="http://127.0.0.1:1/v1/metrics",
                      telemetry_cluster="prod")
    props = on._telemetry_properties()
    assert props["metric.reporters"].split(",") == [JMX_REPORTER_CLASS, PLUGIN_CLASS]
    assert props["portal.telemetry.endpoint"] == "http://127.0.0.1:1/v1/metrics"
    assert props["portal.telemetry.cluster"] == "prod"
    assert str(PLUGIN_JAR.parent) in on._classpath()
    callback_only = KafkaCluster("plugin-props", root=tmp_path, telemetry_endpoint="")
    assert callback_only._telemetry_properties() == {} and str(PLUGIN_JAR.parent) in callback_only._classpath()
    off = KafkaCluster("plugin-props", root=tmp_path, telemetry_endpoint="", quota_callback=False)
    assert off._telemetry_properties() == {} and str(PLUGIN_JAR.parent) not in off._classpath()


@pytest.mark.timeout(400)
def test_the_drop_counter_is_a_metric_of_the_jmx_exporter() -> None:
    """The same harness with the Prometheus JMX exporter agent and the project's rules: what the plugin dropped is
    ``kafka_server_portal_telemetry_exporter_dropped`` on the agent's /metrics (what Prometheus scrapes), equal to
    the MBean's count, next to the queue's capacity."""
    from devtools.kafka import JMX_AGENT_JAR, JMX_EXPORTER_RULES
    from devtools.redis_server import free_port
    from tests.kafka.test_exporter import scrape

    try:
        ensure_kafka_jars()
        ensure_plugin_jar()
    except KafkaError as e:
        pytest.fail(f"the broker plugin could not be built: {e}", pytrace=False)
    if not JMX_AGENT_JAR.exists():
        pytest.skip(f"no JMX exporter agent at {JMX_AGENT_JAR} (Maven could not fetch it)")
    port = free_port()
    refuse = socket.create_server(("127.0.0.1", 0))  # accepts nothing: every post fails at once, nothing waits
    endpoint = f"http://127.0.0.1:{refuse.getsockname()[1]}/v1/metrics"
    refuse.close()
    proc = subprocess.Popen(
        [java_executable(), "-Xmx128m", "-XX:+UseSerialGC", f"-javaagent:{JMX_AGENT_JAR}=127.0.0.1:{port}:"
         f"{JMX_EXPORTER_RULES}", "-cp", f"{LIB_DIR / '*'}:{PLUGIN_JAR}", str(HARNESS), endpoint, str(PUSHES),
         "1", "120000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, (proc.communicate(timeout=30)[1] or "")[-3000:]
        stats = json.loads(line)
        series = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert stats["dropped"] > 0, stats  # a queue of 1 against 200 pushes: most are dropped
    (dropped,) = series["kafka_server_portal_telemetry_exporter_dropped"]
    assert dropped == ({}, float(stats["dropped"]))
    (enqueued,) = series["kafka_server_portal_telemetry_exporter_enqueued"]
    assert enqueued[1] == stats["enqueued"] and enqueued[1] + dropped[1] == PUSHES
    assert series["kafka_server_portal_telemetry_exporter_queue_capacity"] == [({}, 1.0)]
    assert "kafka_server_portal_telemetry_exporter_failed" in series


def test_prometheus_scrapes_the_plugins_counters_from_every_broker(kafka_cluster: Any, prometheus: Any) -> None:
    """On the session's Kafka (plugin on every broker), the real Prometheus holds the drop counter of each broker,
    between what the broker's MBean said before and after the scrape."""
    if not getattr(kafka_cluster, "telemetry_endpoint", None):
        pytest.skip(f"the Kafka cluster {kafka_cluster.name!r} runs without the KIP-714 plugin")
    import time

    first = kafka_cluster.nodes[0]
    before = exporter_stats_of(first.pid)
    assert before is not None, "the broker runs no plugin"
    asked = time.time()
    # the raw samples of the last 30 s, each with the time Prometheus scraped it
    expr = f'kafka_server_portal_telemetry_exporter_dropped{{cluster="{kafka_cluster.name}"}}[30s]'
    deadline = time.monotonic() + 30
    while True:
        found = prometheus.api(f"query?query={urllib.parse.quote(expr)}")["result"]
        mine = [r for r in found if r["metric"].get("broker") == str(first.node_id)]
        scraped = [(float(t), float(v)) for t, v in (mine[0]["values"] if mine else []) if float(t) > asked]
        if len({r["metric"]["broker"] for r in found}) == len(kafka_cluster.nodes) and scraped:
            break
        assert time.monotonic() < deadline, f"no fresh drop counter of every broker in Prometheus: {found}"
        time.sleep(0.5)
    after = exporter_stats_of(first.pid)
    assert after is not None
    assert int(before["dropped"]) <= scraped[0][1] <= int(after["dropped"])
