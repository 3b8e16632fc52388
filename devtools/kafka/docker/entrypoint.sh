#!/bin/sh
# One KRaft node (process.roles=broker,controller) of docker-compose.yml's Kafka cluster, configured from the
# environment: KAFKA_NODE_ID, KAFKA_CLUSTER_ID (the same on every node), KAFKA_VOTERS (id@host:9093,...),
# KAFKA_ADVERTISED_HOST (the service name), and optionally KAFKA_TELEMETRY_ENDPOINT (the portal's KIP-714 sink,
# e.g. http://portal-a:8000/v1/metrics) with KAFKA_TELEMETRY_CLUSTER, and KAFKA_BUDGET_REDIS_URL (the engine's Redis,
# for cluster-wide budgets) with KAFKA_BUDGET_CLUSTER. The portal's quota callback (BudgetQuotaCallback) is every
# node's client quota callback; without a budget Redis it answers as Kafka's default one. The log directory is
# formatted once.
set -eu
: "${KAFKA_NODE_ID:?}" "${KAFKA_CLUSTER_ID:?}" "${KAFKA_VOTERS:?}" "${KAFKA_ADVERTISED_HOST:?}"
CONF=/var/lib/kafka/server.properties
CP="/opt/kafka/lib/*:/opt/kafka/plugin/*"
cat > "$CONF" <<PROPS
process.roles=broker,controller
node.id=${KAFKA_NODE_ID}
controller.quorum.voters=${KAFKA_VOTERS}
listeners=PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093
advertised.listeners=PLAINTEXT://${KAFKA_ADVERTISED_HOST}:9092
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=/var/lib/kafka/data
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
client.quota.callback.class=quotaportal.kafka.quota.BudgetQuotaCallback
PROPS
if [ -n "${KAFKA_BUDGET_REDIS_URL:-}" ]; then
    cat >> "$CONF" <<PROPS
quota.budget.redis.url=${KAFKA_BUDGET_REDIS_URL}
quota.budget.cluster=${KAFKA_BUDGET_CLUSTER:-prod}
PROPS
fi
if [ -n "${KAFKA_TELEMETRY_ENDPOINT:-}" ]; then
    cat >> "$CONF" <<PROPS
metric.reporters=org.apache.kafka.common.metrics.JmxReporter,quotaportal.kafka.telemetry.PortalTelemetryExporter
portal.telemetry.endpoint=${KAFKA_TELEMETRY_ENDPOINT}
portal.telemetry.cluster=${KAFKA_TELEMETRY_CLUSTER:-prod}
PROPS
fi
java -cp "$CP" kafka.tools.StorageTool format -t "$KAFKA_CLUSTER_ID" -c "$CONF" --ignore-formatted
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} \
    -javaagent:/opt/kafka/agent/jmx_prometheus_javaagent.jar=9404:/opt/kafka/jmx-exporter.yml \
    -cp "$CP" kafka.Kafka "$CONF"
