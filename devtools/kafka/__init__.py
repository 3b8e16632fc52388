"""Start and stop a project-local Apache Kafka 4.4 cluster (KRaft) on 127.0.0.1.

The jars come from Maven Central through the pinned Maven project ``devtools/kafka/pom.xml`` into
``.run/kafka/lib`` (fetched once; again only when the pom changes). Each cluster lives under
``.run/kafka/<name>/``: ``cluster.json`` (ports, pids, cluster id), ``credentials.json`` (the portal's
super user, mode 0600) and ``node-N/`` (``server.properties``, ``log4j2.xml``, ``data/``, ``logs/server.log``).

    python -m devtools.kafka start [--name NAME] [--fresh] [--no-jmx-exporter]   # one JSON line of facts
    python -m devtools.kafka start ... --telemetry-endpoint http://127.0.0.1:8000/v1/metrics  # KIP-714 plugin
    python -m devtools.kafka start ... --budget-redis-url redis://127.0.0.1:6379/0  # cluster-wide budgets
    python -m devtools.kafka status [--name NAME]            # the same for a running cluster, or exit 1
    python -m devtools.kafka stop [--name NAME]

Quorum layout: three nodes, each ``process.roles=broker,controller``, forming a static 3-voter quorum
(``controller.quorum.voters``). Combined mode runs three JVMs instead of four or six, which is what fits two
cores next to Redis, the portal, Celery and Spark; three voters still give a real Raft quorum (one node may
stop) and three brokers give real per-broker quotas and replication. A static voter set (not a dynamic
quorum formatted with ``--initial-controllers``) keeps the endpoints out of the log, so a restart may move a
node to other ports when its old ones are taken.

Listeners per node: ``PLAINTEXT`` (also inter-broker), ``SASL_PLAINTEXT`` with SCRAM-SHA-256 and
SCRAM-SHA-512, and ``CONTROLLER``. The super user ``portal-admin`` gets SCRAM credentials of both mechanisms at
format time (``--add-scram``) and is listed in ``super.users`` with ``User:ANONYMOUS``; no authorizer is
configured, so ACLs are out of scope and every authenticated or PLAINTEXT client may do everything.

Kafka's own metrics: each node runs the Prometheus JMX exporter java agent (``.run/kafka/agent/``, fetched by the
pom) on a free loopback port of its own (``ports.JMX_EXPORTER`` of each node in the facts and ``cluster.json``;
``http://127.0.0.1:<port>/metrics``) with the rules of ``devtools/kafka/jmx-exporter.yml`` (the quota sensors,
connection quotas and throttle histograms, in jmx-monitoring-stacks naming). On by default; ``jmx_exporter=False``
(``--no-jmx-exporter``) leaves it out, and so does an agent jar that cannot be had (with a warning).

The portal's broker plugins (``broker-plugins/``, one Maven build of two modules, built by
:func:`ensure_plugin_jars` into ``.run/kafka/plugin/`` when their sources or the engine's ``budget_share.lua``
change, offline when Maven can) are on every broker's classpath:

- Client quotas: every node runs ``BudgetQuotaCallback`` (``client.quota.callback.class``; ``quota_callback=False``
  or ``--no-quota-callback`` leaves it out, and Kafka's own default callback answers). Without a budget Redis it
  answers exactly as Kafka's default callback; with one (``budget_redis_url=``, ``--budget-redis-url`` or
  ``QUOTAS_KAFKA_BUDGET_REDIS_URL``) it shares the quota values the portal marked cluster-wide out to the brokers
  through the engine (``quota.budget.redis.url``, ``quota.budget.cluster`` = ``budget_cluster``, default this
  cluster's name). Its state is the JMX MBean ``kafka.server:type=quota-budget-callback``.
- Client telemetry (KIP-714): with a telemetry endpoint (``telemetry_endpoint=``, ``--telemetry-endpoint`` or
  ``QUOTAS_KAFKA_TELEMETRY_ENDPOINT``) every broker runs ``PortalTelemetryExporter`` (in ``metric.reporters``),
  which forwards every pushed payload to that OTLP/HTTP receiver (the portal's ``POST /v1/metrics``) with the header
  ``X-Quotas-Cluster: <telemetry_cluster>`` (default: this cluster's name). Without an endpoint the exporter stays
  off (and Kafka answers no client a telemetry subscription). :meth:`KafkaCluster.exporter_stats` reads its counters
  (JMX ``kafka.server:type=portal-telemetry-exporter``).

No Django, and nothing from the portal's packages: the tests, the benchmarks and the scripts use it alike.

Modules: ``base`` (paths, settings, the error), ``artifacts`` (jars, agent, plugins), ``probes`` (tools, ports,
metadata), ``node``, ``cluster``, ``cli``. What other code uses is imported here.
"""

from devtools.kafka.artifacts import ensure_kafka_jars, ensure_plugin_jar, ensure_plugin_jars, exporter_stats_of
from devtools.kafka.base import (
    JMX_AGENT_JAR,
    JMX_EXPORTER,
    JMX_EXPORTER_RULES,
    JMX_REPORTER_CLASS,
    KAFKA_DIR,
    LIB_DIR,
    PLUGIN_CLASS,
    PLUGIN_JAR,
    SCRAM_MECHANISMS,
    SUPER_USER,
    KafkaError,
)
from devtools.kafka.cluster import KafkaCluster, local_cluster_for, run_kafka_tool
from devtools.kafka.node import KafkaNode
from devtools.kafka.probes import java_executable, metadata_brokers

__all__ = [
    "JMX_AGENT_JAR", "JMX_EXPORTER", "JMX_EXPORTER_RULES", "JMX_REPORTER_CLASS", "KAFKA_DIR", "LIB_DIR",
    "PLUGIN_CLASS", "PLUGIN_JAR", "SCRAM_MECHANISMS", "SUPER_USER", "KafkaCluster", "KafkaError", "KafkaNode",
    "ensure_kafka_jars", "ensure_plugin_jar", "ensure_plugin_jars", "exporter_stats_of", "local_cluster_for",
    "java_executable", "metadata_brokers", "run_kafka_tool",
]
