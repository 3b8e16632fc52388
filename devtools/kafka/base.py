"""Where the project's Kafka lives and what it runs with: paths, versions, listeners, the runner's error."""


from __future__ import annotations

import fcntl
import hashlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.redis_server import ROOT, RUN_DIR

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).resolve().parent / "pom.xml"
KAFKA_DIR = RUN_DIR / "kafka"
LIB_DIR = KAFKA_DIR / "lib"
AGENT_DIR = KAFKA_DIR / "agent"
LIB_STAMP = KAFKA_DIR / "lib.sha256"
JMX_AGENT_JAR = AGENT_DIR / "jmx_prometheus_javaagent.jar"
#: The portal's broker plugins: one Maven build (a parent pom and its modules), where the jars land (the brokers'
#: classpath) and their classes. The quota callback's jar carries the engine's Lua script, so it is a source too.
PLUGINS_POM = ROOT / "broker-plugins" / "pom.xml"
PLUGIN_MODULES = ("telemetry-exporter", "quota-callback")
BUDGET_LUA = ROOT / "engine" / "lua" / "budget_share.lua"
PLUGIN_DIR = KAFKA_DIR / "plugin"
PLUGIN_BUILD_DIR = KAFKA_DIR / "plugin-build"
PLUGIN_JAR = PLUGIN_DIR / "portal-telemetry-exporter.jar"
QUOTA_CALLBACK_JAR = PLUGIN_DIR / "portal-quota-callback.jar"
PLUGIN_STAMP = KAFKA_DIR / "plugin.sha256"
PLUGIN_CLASS = "quotaportal.kafka.telemetry.PortalTelemetryExporter"
QUOTA_CALLBACK_CLASS = "quotaportal.kafka.quota.BudgetQuotaCallback"
BUDGET_REDIS_URL_ENV = "QUOTAS_KAFKA_BUDGET_REDIS_URL"
JMX_REPORTER_CLASS = "org.apache.kafka.common.metrics.JmxReporter"
PLUGIN_STATS_CLASS = "quotaportal.kafka.telemetry.StatsTool"
TELEMETRY_ENDPOINT_ENV = "QUOTAS_KAFKA_TELEMETRY_ENDPOINT"
TELEMETRY_TOKEN_ENV = "QUOTAS_KAFKA_TELEMETRY_TOKEN"
#: The exporter's rules, kept in the project; the port name of each node's exporter in ``ports``.
JMX_EXPORTER_RULES = POM.parent / "jmx-exporter.yml"
JMX_EXPORTER = "JMX_EXPORTER"

SUPER_USER = "portal-admin"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "CONTROLLER")
DEFAULT_SIZE = 3
# Small heaps: three of them next to Redis, the portal, Celery and Spark on 2 cores / 24 GB. The serial
# collector has no GC threads to compete for the two cores and short pauses at this heap size.
DEFAULT_HEAP_OPTS = ("-Xms256m", "-Xmx384m")
DEFAULT_GC_OPTS = ("-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError")
#: Seconds a node may still take to exit once fewer than a majority of the voters run (see KafkaCluster.stop).
QUORUM_LOST_GRACE_S = 3.0
TOOL_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class KafkaError(RuntimeError):
    """The cluster could not be fetched, formatted, started or stopped; the message says where to look."""


def _log(message: str) -> None:
    print(f"kafka_cluster: {message}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (two test sessions, a test run and the CLI) on ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])
