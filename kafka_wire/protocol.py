"""Kafka's numbers this client uses (API keys, resource types, operations, match types) and broker addresses."""

from __future__ import annotations

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeUserScramCredentialsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

# API keys (Kafka's numbering, org.apache.kafka.common.protocol.ApiKeys).
METADATA = 3
SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 17, 18, 19, 20
DESCRIBE_CONFIGS, SASL_AUTHENTICATE, INCREMENTAL_ALTER_CONFIGS = 32, 36, 44
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
DESCRIBE_CLUSTER = 60

#: The request class of every API that ``AdminClient``'s methods send.
REQUEST_CLASSES: dict[int, type[ApiMessage]] = {
    METADATA: MetadataRequest,
    SASL_HANDSHAKE: SaslHandshakeRequest,
    API_VERSIONS: ApiVersionsRequest,
    CREATE_TOPICS: CreateTopicsRequest,
    DELETE_TOPICS: DeleteTopicsRequest,
    DESCRIBE_CONFIGS: DescribeConfigsRequest,
    SASL_AUTHENTICATE: SaslAuthenticateRequest,
    INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsRequest,
    DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasRequest,
    ALTER_CLIENT_QUOTAS: AlterClientQuotasRequest,
    DESCRIBE_USER_SCRAM_CREDENTIALS: DescribeUserScramCredentialsRequest,
    ALTER_USER_SCRAM_CREDENTIALS: AlterUserScramCredentialsRequest,
    DESCRIBE_CLUSTER: DescribeClusterRequest,
}

#: Security protocols this client speaks (TLS, i.e. SSL and SASL_SSL, is out of scope).
PLAINTEXT, SASL_PLAINTEXT = "PLAINTEXT", "SASL_PLAINTEXT"
SECURITY_PROTOCOLS = (PLAINTEXT, SASL_PLAINTEXT)

# Config resource types (DescribeConfigs / IncrementalAlterConfigs).
TOPIC_RESOURCE, BROKER_RESOURCE, CLIENT_METRICS_RESOURCE = 2, 4, 16

# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# DescribeConfigs ``config_source`` values.
SOURCE_UNKNOWN = 0
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_DYNAMIC_BROKER_LOGGER = 6
SOURCE_CLIENT_METRICS = 7

# DescribeClientQuotas filter component match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

UNSUPPORTED_VERSION = 35
DEFAULT_CLIENT_ID = "quota-portal"
SOFTWARE_NAME, SOFTWARE_VERSION = "quota-portal", "0.1.0"  # ApiVersions v3+ (brokers refuse empty names)


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` -> (host, port); ValueError when it is neither."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"A Kafka broker address is host:port, got {address!r}.")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def parse_addresses(addresses: str) -> tuple[str, ...]:
    """``"h1:p1,h2:p2"`` -> the addresses in order (each checked by ``parse_address``); ValueError if none."""
    found = tuple(a.strip() for a in addresses.split(",") if a.strip())
    if not found:
        raise ValueError(f"A Kafka bootstrap list is host:port[,host:port...], got {addresses!r}.")
    for address in found:
        parse_address(address)
    return found


def format_address(host: str, port: int) -> str:
    """``host:port`` (``[ipv6]:port``), as ``parse_address`` takes it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
