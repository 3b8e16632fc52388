"""The project's one Kafka wire client: framing, the requests it sends and the answers it reads; no Django.

Kafka's own Java client splits the same work this way: ``org.apache.kafka.common.protocol`` (``ApiKeys``,
``Errors``, the message schemas) is here ``protocol`` (API keys and the enums this project uses) and
``errors`` (each error with Kafka's name and whether it is retriable), with kafka-python's generated schema
classes (``kafka.protocol``) as the ``*Request``/``*Response`` data of ``org.apache.kafka.common.requests``;
``org.apache.kafka.common.network`` (``NetworkClient``, ``KafkaChannel``: size-prefixed frames, request headers,
correlation ids, ApiVersions negotiation) is ``connection.Connection``, one blocking connection with one request
in flight that also times each exchange and gives the request's size as the broker counts it; the SCRAM
authenticator (``ScramSaslClient``, ``ScramFormatter``) is ``scram``; and ``Admin``/``KafkaAdminClient`` is
``admin.AdminClient``, with the admin calls the portal, its tests and tools need (client quotas, configs, the
cluster's brokers and metadata, SCRAM credentials, topics), bootstrap failover and reconnects. PLAINTEXT and
SASL_PLAINTEXT with SCRAM-SHA-256/512 only (TLS is out of scope); no password goes into an exception, a repr or
a log line. Users: the Kafka connector (``quotas.connectors.kafka``), ``quotas.scram``, the conformance oracle
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
