"""The files and command line of each node: server.properties, log4j2.xml, the plugins' settings, the JVM."""


from __future__ import annotations

import os
from typing import Any

from devtools.kafka.artifacts import exporter_stats_of
from devtools.kafka.base import (
    DEFAULT_GC_OPTS,
    JMX_AGENT_JAR,
    JMX_EXPORTER,
    JMX_EXPORTER_RULES,
    JMX_REPORTER_CLASS,
    LISTENERS,
    PLUGIN_CLASS,
    PLUGIN_DIR,
    QUOTA_CALLBACK_CLASS,
    SCRAM_MECHANISMS,
    SUPER_USER,
    TOOL_JVM_OPTS,
)
from devtools.kafka.node import KafkaNode
from devtools.kafka.probes import (
    _tools_log_config,
    classpath,
    java_executable,
)


class NodeFiles:
    """What :class:`KafkaCluster` writes and runs for each node (a mixin: it reads the cluster's settings)."""

    def _properties(self, node: KafkaNode) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.ports['CONTROLLER']}" for n in self.nodes)
        rf = str(min(3, self.size))
        min_isr = str(min(2, self.size))
        scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(f"{lst}://127.0.0.1:{node.ports[lst]}" for lst in LISTENERS),
            "advertised.listeners": ",".join(
                f"{lst}://127.0.0.1:{node.ports[lst]}" for lst in ("PLAINTEXT", "SASL_PLAINTEXT")
            ),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram_jaas,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram_jaas,
            # No authorizer: super.users only matters once one is configured (ACLs are out of scope).
            "super.users": f"User:{SUPER_USER};User:ANONYMOUS",
            "log.dirs": str(node.data_dir),
            # Small and fast to start: few partitions for the internal topics, no rebalance delay, few threads.
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "num.replica.fetchers": "1",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # default 128 MiB would be a third of the heap
            "broker.heartbeat.interval.ms": "500",  # brokers are unfenced sooner after start
            "log.retention.hours": "24",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        return props

    def _log4j2_xml(self, node: KafkaNode) -> str:
        logs = node.log_file.parent
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- written by devtools/kafka/ for node {node.node_id} of cluster {self.name} -->
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <RollingFile name="server" fileName="{logs}/server.log" filePattern="{logs}/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="20 MB"/></Policies>
      <DefaultRolloverStrategy max="2"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
  </Loggers>
</Configuration>
"""

    def _telemetry_properties(self) -> dict[str, str]:
        """The KIP-714 plugin's broker settings (none without an endpoint)."""
        if not self.telemetry_endpoint:
            return {}
        props = {
            # Kafka 4 drops its own JmxReporter when metric.reporters is set: it must stay listed, or every metric of
            # Kafka's Metrics registry (quota sensors, socket-server-metrics, ...) vanishes from JMX
            "metric.reporters": f"{JMX_REPORTER_CLASS},{PLUGIN_CLASS}",
            "portal.telemetry.endpoint": self.telemetry_endpoint,
            "portal.telemetry.cluster": self.telemetry_cluster,
            "portal.telemetry.queue.capacity": "1000",
            "portal.telemetry.request.timeout.ms": "5000",
        }
        if self.telemetry_token:
            props["portal.telemetry.token"] = self.telemetry_token
        return props

    def _quota_callback_properties(self) -> dict[str, str]:
        """The quota callback's broker settings: the class, and with a budget Redis where and as which cluster it
        coordinates (the plugin's other settings keep their defaults)."""
        if not self.quota_callback:
            return {}
        props = {"client.quota.callback.class": QUOTA_CALLBACK_CLASS}
        if self.budget_redis_url:
            props["quota.budget.redis.url"] = self.budget_redis_url
            props["quota.budget.cluster"] = self.budget_cluster
        return props

    @property
    def plugins_on(self) -> bool:
        """Whether the brokers run a plugin of ``broker-plugins/`` (then both jars are on their classpath)."""
        return bool(self.telemetry_endpoint or self.quota_callback)

    def _classpath(self) -> str:
        """The brokers' classpath: Kafka's jars, and both plugin jars when a plugin is on."""
        if self.plugins_on:
            return f"{classpath()}{os.pathsep}{PLUGIN_DIR / '*'}"
        return classpath()

    def exporter_stats(self) -> dict[int, dict[str, Any] | None]:
        """Each running node's plugin counters (:func:`exporter_stats_of`), by node id."""
        return {n.node_id: exporter_stats_of(n.pid) for n in self.nodes if n.pid is not None and n.is_running()}

    def _extra_properties(self, node: KafkaNode) -> dict[str, str]:
        extra = self.server_properties(node) if callable(self.server_properties) else (self.server_properties or {})
        return {str(k): str(v) for k, v in extra.items()}

    def _write_node_files(self, node: KafkaNode) -> None:
        (node.dir / "logs").mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(parents=True, exist_ok=True)
        node.server_properties = self._extra_properties(node)
        node.jvm_opts = list(self.jvm_opts(node) if callable(self.jvm_opts) else self.jvm_opts)
        if JMX_EXPORTER in node.ports:  # the agent serves /metrics on loopback only
            node.jvm_opts.insert(
                0, f"-javaagent:{JMX_AGENT_JAR}=127.0.0.1:{node.ports[JMX_EXPORTER]}:{JMX_EXPORTER_RULES}"
            )
        props = {
            **self._properties(node), **self._telemetry_properties(), **self._quota_callback_properties(),
            **node.server_properties,
        }
        node.config_file.write_text(
            f"# written by devtools/kafka/ at each start of cluster {self.name!r}; edits are overwritten\n"
            + "".join(f"{k}={v}\n" for k, v in props.items())
        )
        (node.dir / "log4j2.xml").write_text(self._log4j2_xml(node))

    def _java_command(self, node: KafkaNode, main_class: str, *args: str, tool: bool = False) -> list[str]:
        """The java command line for a node's server, or for a short-lived tool run with the node's files (a
        small heap and only the C1 compiler, which starts faster)."""
        jvm = [*TOOL_JVM_OPTS] if tool else [*self.heap_opts, *DEFAULT_GC_OPTS, *node.jvm_opts]
        log_config = _tools_log_config() if tool else node.dir / "log4j2.xml"
        return [
            java_executable(),
            *jvm,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log_config}",
            f"-Dkafka.logs.dir={node.log_file.parent}",
            # the node's classpath for its tools too: the storage formatter validates the node's configuration,
            # which names the plugins' classes
            "-cp", self._classpath(),
            main_class,
            *args,
        ]

    # -- start and stop -------------------------------------------------------------------------------------------
