"""Where a push goes: a target of a cluster (an engine broker, the engine's cluster-wide namespace, a Kafka cluster
through its bootstrap servers and credentials), and how audits name it."""

from __future__ import annotations

from quotas.choices import ConnectorKind
from quotas.connectors.base import Credentials, PushError, Target
from quotas.models import Broker, Cluster


def target_of(cluster: Cluster, broker: Broker | None) -> Target:
    """Where a push goes: an engine broker's namespace, the engine's cluster-wide one, or a Kafka cluster through
    its bootstrap servers (the cluster's own, else its brokers' hosts) with its credentials."""
    if cluster.connector == ConnectorKind.KAFKA:
        return Target(cluster.name, None, kafka_bootstrap(cluster), kafka_credentials(cluster))
    if broker is None:
        return Target(cluster.name, None, "")
    return Target(cluster.name, broker.broker_id, broker.engine_url)


def kafka_bootstrap(cluster: Cluster) -> str:
    """The bootstrap servers of a Kafka cluster: its own setting, else every broker's host."""
    if cluster.bootstrap_servers.strip():
        return cluster.bootstrap_servers.strip()
    return ",".join(b.host for b in Broker.objects.filter(cluster=cluster).order_by("broker_id"))


def kafka_credentials(cluster: Cluster) -> Credentials:
    """The connector's credentials for a Kafka cluster; the password from the workers' environment or a secret file,
    read at each push (never the database)."""
    if cluster.security_protocol == "PLAINTEXT":
        return Credentials()
    password = cluster.kafka_password()
    if not cluster.sasl_mechanism or not cluster.sasl_username or not password:
        raise PushError(
            "SASL_AUTHENTICATION_FAILED",
            f"Cluster {cluster.name!r} uses {cluster.security_protocol}: it needs a SCRAM mechanism and user (the "
            f"cluster's settings) and the user's password in the environment variable {cluster.password_env} of the "
            f"portal's workers, or in a readable file named by {cluster.password_env}_FILE.",
            retriable=False,
        )
    return Credentials(cluster.security_protocol, cluster.sasl_mechanism, cluster.sasl_username, password)


def _where(cluster: Cluster, broker: Broker | None) -> str:
    if broker is not None:
        return f"broker {broker.broker_id}"
    return "the cluster" if cluster.connector == ConnectorKind.KAFKA else "cluster-wide namespace"
