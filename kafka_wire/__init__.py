"""The project's one Kafka wire client: framing, the requests it sends and the answers it reads; no Django.

It maps onto Kafka's own Java client as follows. ``protocol`` holds what this project needs of
``org.apache.kafka.common.protocol`` (``ApiKeys``, and the enums of the admin messages); ``errors`` is
``Errors`` (each error with Kafka's name and whether it is retriable); the ``*Request``/``*Response`` classes of
``org.apache.kafka.common.requests`` and their generated message schemas are kafka-python's (``kafka.protocol``),
so the bytes are Kafka's own. ``connection.Connection`` is the part of ``org.apache.kafka.clients.NetworkClient``
and ``org.apache.kafka.common.network`` (``KafkaChannel``, size-delimited sends and receives) that a blocking
client needs: one connection to one broker, one request in flight, ``RequestHeader`` and correlation ids,
ApiVersions negotiation (``NodeApiVersions``), and each exchange timed and sized as the broker counts it.
``scram`` is the SCRAM authenticator (``ScramSaslClient``, ``ScramFormatter``) and ``admin.AdminClient`` the
calls of ``org.apache.kafka.clients.admin.Admin`` that the project uses (client quotas, configs, the cluster's
brokers and metadata, SCRAM credentials, topics), with bootstrap failover and reconnects. PLAINTEXT and
SASL_PLAINTEXT with SCRAM-SHA-256/512 only (TLS is out of scope); no password goes into an exception, a repr or a
log line. Its users: the Kafka connector (``quotas.connectors.kafka``), ``quotas.scram``, the conformance oracle
(``conformance.oracle``), the dev cluster's readiness probe (``devtools.kafka``), tests and benchmarks.
"""

from kafka_wire.admin import MAX_METADATA_VERSION, AdminClient
from kafka_wire.connection import Connection, Exchange, wall_ms
from kafka_wire.errors import (
    KafkaBrokerError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaProtocolError,
    KafkaTimeoutError,
    SaslAuthenticationError,
    ScramCredentialError,
    UnsupportedApiError,
    UnsupportedSaslMechanismError,
    error_name,
    raise_for_errors,
)
from kafka_wire.protocol import (
    ALTER_CLIENT_QUOTAS,
    ALTER_USER_SCRAM_CREDENTIALS,
    API_VERSIONS,
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    CREATE_TOPICS,
    DEFAULT_CLIENT_ID,
    DELETE_TOPICS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    INCREMENTAL_ALTER_CONFIGS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    METADATA,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    PLAINTEXT,
    REQUEST_CLASSES,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SASL_PLAINTEXT,
    SECURITY_PROTOCOLS,
    SOFTWARE_NAME,
    SOFTWARE_VERSION,
    SOURCE_CLIENT_METRICS,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_BROKER_LOGGER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_DYNAMIC_TOPIC,
    SOURCE_STATIC_BROKER,
    SOURCE_UNKNOWN,
    TOPIC_RESOURCE,
    UNSUPPORTED_VERSION,
    format_address,
    parse_address,
    parse_addresses,
)
from kafka_wire.results import BrokerNode, ClusterDescription, NewTopic, TopicResult, TopicResults
from kafka_wire.scram import (
    SCRAM_MAX_ITERATIONS,
    SCRAM_MECHANISM_NAMES,
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    scram_mechanism_number,
    scram_salt,
    scram_salted_password,
)

__all__ = [
    "ALTER_CLIENT_QUOTAS", "ALTER_USER_SCRAM_CREDENTIALS", "API_VERSIONS", "BROKER_RESOURCE",
    "CLIENT_METRICS_RESOURCE", "CREATE_TOPICS", "DEFAULT_CLIENT_ID", "DELETE_TOPICS", "DESCRIBE_CLIENT_QUOTAS",
    "DESCRIBE_CLUSTER", "DESCRIBE_CONFIGS", "DESCRIBE_USER_SCRAM_CREDENTIALS", "INCREMENTAL_ALTER_CONFIGS",
    "MATCH_DEFAULT", "MATCH_EXACT", "MATCH_SPECIFIED", "MAX_METADATA_VERSION", "METADATA", "OP_APPEND", "OP_DELETE",
    "OP_SET", "OP_SUBTRACT", "PLAINTEXT", "REQUEST_CLASSES", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "SASL_PLAINTEXT",
    "SCRAM_MAX_ITERATIONS", "SCRAM_MECHANISMS", "SCRAM_MECHANISM_NAMES", "SCRAM_MIN_ITERATIONS",
    "SECURITY_PROTOCOLS", "SOFTWARE_NAME", "SOFTWARE_VERSION", "SOURCE_CLIENT_METRICS", "SOURCE_DEFAULT",
    "SOURCE_DYNAMIC_BROKER", "SOURCE_DYNAMIC_BROKER_LOGGER", "SOURCE_DYNAMIC_DEFAULT_BROKER",
    "SOURCE_DYNAMIC_TOPIC", "SOURCE_STATIC_BROKER", "SOURCE_UNKNOWN", "TOPIC_RESOURCE", "UNSUPPORTED_VERSION",
    "AdminClient", "BrokerNode", "ClusterDescription", "Connection", "Exchange", "KafkaBrokerError",
    "KafkaClientError", "KafkaConnectionError", "KafkaProtocolError", "KafkaTimeoutError", "NewTopic",
    "SaslAuthenticationError", "ScramCredentialError", "TopicResult", "TopicResults", "UnsupportedApiError",
    "UnsupportedSaslMechanismError", "error_name", "format_address", "parse_address", "parse_addresses",
    "raise_for_errors", "scram_mechanism_number", "scram_salt", "scram_salted_password", "wall_ms",
]
