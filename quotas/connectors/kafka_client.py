"""A small synchronous Kafka Admin client: one blocking TCP connection to one broker, four admin APIs.

kafka-python's ``KafkaAdminClient`` has no public methods for client quotas and brings a whole
asynchronous cluster client; a push talks to one broker at a time and waits for its answer, so a
blocking socket is all it needs. Framing, request headers and correlation ids are kafka-python's
``KafkaProtocol``; requests and responses are its schema classes, so the bytes are Kafka's own.

Every failure is a ``KafkaClientError`` carrying Kafka's error name (``code``) and whether trying
again can help (``retriable``): the connector turns it into a ``PushError`` without guessing.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kafka.errors as kafka_errors
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol

# API keys (Kafka's numbering).
API_VERSIONS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 18, 32, 44
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49

#: The request class of every API this client speaks.
REQUEST_CLASSES: dict[int, type[ApiMessage]] = {
    API_VERSIONS: ApiVersionsRequest,
    DESCRIBE_CONFIGS: DescribeConfigsRequest,
    INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsRequest,
    DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasRequest,
    ALTER_CLIENT_QUOTAS: AlterClientQuotasRequest,
}

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


class KafkaClientError(Exception):
    """A request that got no usable answer. ``code`` is Kafka's error name; ``retriable``: trying again may help."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False

    def __init__(self, message: str, *, code: str | None = None, retriable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retriable is not None:
            self.retriable = retriable

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class KafkaConnectionError(KafkaClientError):
    """The broker could not be reached, or closed the connection before answering."""

    code = "NETWORK_EXCEPTION"
    retriable = True


class KafkaTimeoutError(KafkaClientError):
    """No answer within the timeout; the request may or may not have been applied (ours are idempotent)."""

    code = "REQUEST_TIMED_OUT"
    retriable = True


class KafkaProtocolError(KafkaClientError):
    """The broker's bytes did not decode as the expected response: a broken peer, not a passing fault."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False


class UnsupportedApiError(KafkaClientError):
    """The broker supports no version of an API that this client can speak."""

    code = "UNSUPPORTED_VERSION"
    retriable = False


class KafkaBrokerError(KafkaClientError):
    """An error code the broker answered with; ``errno`` is its number."""

    def __init__(self, errno: int, message: str | None = None) -> None:
        cls = kafka_errors.for_code(errno)
        text = message or cls.description or cls.message or f"error code {errno}"
        if errno not in kafka_errors.kafka_errors:  # newer than kafka-python: keep the number
            text = f"error code {errno}: {text}"
        super().__init__(text, code=cls.message, retriable=bool(cls.retriable))
        self.errno = errno


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` -> (host, port); ValueError when it is neither."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"A Kafka broker address is host:port, got {address!r}.")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class AdminClient:
    """One connection to one broker for AlterClientQuotas, DescribeClientQuotas, IncrementalAlterConfigs and
    DescribeConfigs, at the highest version both sides support (negotiated with ApiVersions on connect).

    The connection opens on first use and reopens after any failure or after ``max_idle`` seconds unused
    (brokers close idle connections: ``connections.max.idle.ms``). Thread-safe: one request at a time.
    """

    def __init__(
        self,
        address: str,
        *,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        client_id: str = DEFAULT_CLIENT_ID,
        max_idle: float = 300.0,
        max_frame_bytes: int = 100 * 1024 * 1024,
    ) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.client_id = client_id
        self.max_idle = max_idle
        self.max_frame_bytes = max_frame_bytes
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._protocol: KafkaProtocol | None = None
        self._broker_versions: dict[int, tuple[int, int]] = {}
        self._last_used = 0.0

    # -- connection -------------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Open the connection and negotiate API versions, unless it is open and fresh."""
        with self._lock:
            if self._sock is not None and time.monotonic() - self._last_used > self.max_idle:
                self._drop()
            if self._sock is None:
                self._open()

    def close(self) -> None:
        """Close the connection (the next request reopens it)."""
        with self._lock:
            self._drop()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except TimeoutError as e:
            raise KafkaTimeoutError(f"connecting to {self.address} took more than {self.connect_timeout}s") from e
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {self.address}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._protocol = KafkaProtocol(
            client_id=self.client_id, ident=self.address, receive_message_max_bytes=self.max_frame_bytes
        )
        self._last_used = time.monotonic()
        try:
            self._negotiate()
        except BaseException:
            self._drop()
            raise

    def _drop(self) -> None:
        sock, self._sock, self._protocol = self._sock, None, None
        self._broker_versions = {}
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _negotiate(self) -> None:
        """ApiVersions at our highest version; a broker that does not know it answers UNSUPPORTED_VERSION in v0
        with the ApiVersions range it does support, and we ask once more at that version."""
        version = ApiVersionsRequest.max_version
        for _attempt in range(2):
            request = ApiVersionsRequest(client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION)
            request.API_VERSION = version
            response = self._roundtrip(request)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys or ()}
            if response.error_code == UNSUPPORTED_VERSION and API_VERSIONS in ranges:
                theirs = min(ranges[API_VERSIONS][1], ApiVersionsRequest.max_version)
                if theirs < version:
                    version = theirs
                    continue
            if response.error_code:
                raise KafkaBrokerError(response.error_code, f"ApiVersions failed at {self.address}")
            self._broker_versions = ranges
            return
        raise UnsupportedApiError(f"{self.address} accepts no ApiVersions request version this client can send")

    @property
    def broker_api_versions(self) -> dict[int, tuple[int, int]]:
        """What the broker advertised: API key -> (min version, max version)."""
        with self._lock:
            self.connect()
            return dict(self._broker_versions)

    def api_version(self, api_key: int) -> int:
        """The version used for ``api_key``: the highest both sides support; UnsupportedApiError when none."""
        with self._lock:
            self.connect()
            request_class = REQUEST_CLASSES[api_key]
            name = request_class.name.removesuffix("Request")
            ours_min, ours_max = request_class.valid_versions
            theirs = self._broker_versions.get(api_key)
            if theirs is None:
                raise UnsupportedApiError(f"the broker at {self.address} does not support {name} (API key {api_key})")
            low, high = max(ours_min, theirs[0]), min(ours_max, theirs[1])
            if high < low:
                raise UnsupportedApiError(
                    f"the broker at {self.address} supports {name} versions {theirs[0]}-{theirs[1]}, "
                    f"this client {ours_min}-{ours_max}: no common version"
                )
            return high

    # -- requests ---------------------------------------------------------------------------------------------

    def send(self, request: ApiMessage) -> Any:
        """Send ``request`` at the negotiated version and wait for its response (decoded)."""
        with self._lock:
            request.API_VERSION = self.api_version(request.API_KEY)
            return self._roundtrip(request)

    def _roundtrip(self, request: ApiMessage) -> Any:
        sock, protocol = self._sock, self._protocol
        assert sock is not None and protocol is not None
        name = type(request).name
        deadline = time.monotonic() + self.request_timeout
        try:
            correlation_id = protocol.send_request(request)
            sock.settimeout(self.request_timeout)
            sock.sendall(protocol.send_bytes())
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                data = sock.recv(65536)
                if not data:
                    raise KafkaConnectionError(f"{self.address} closed the connection before answering {name}")
                for received_id, response in protocol.receive_bytes(data):
                    if received_id == correlation_id:
                        self._last_used = time.monotonic()
                        return response
        except KafkaClientError:
            self._drop()
            raise
        except TimeoutError as e:
            self._drop()
            raise KafkaTimeoutError(f"{self.address} did not answer {name} within {self.request_timeout}s") from e
        except OSError as e:
            self._drop()
            raise KafkaConnectionError(f"connection to {self.address} failed during {name}: {e}") from e
        except (kafka_errors.KafkaError, ValueError, struct.error) as e:
            self._drop()
            raise KafkaProtocolError(f"{self.address} answered {name} with bytes that do not decode: {e}") from e

    def alter_client_quotas(
        self,
        entries: Iterable[tuple[Mapping[str, str | None], Mapping[str, float | None]]],
        *,
        validate_only: bool = False,
    ) -> Any:
        """AlterClientQuotas: per entity (type -> name, None = the default entity), key -> value (None = remove).

        Returns the response; its per-entry ``error_code`` is the caller's to check (see ``raise_for_errors``).
        """
        r = AlterClientQuotasRequest
        request = r(
            entries=[
                r.EntryData(
                    entity=[r.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
                    ops=[
                        r.EntryData.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                        for k, v in ops.items()
                    ],
                )
                for entity, ops in entries
            ],
            validate_only=validate_only,
        )
        return self.send(request)

    def describe_client_quotas(
        self, components: Sequence[tuple[str, int, str | None]] = (), *, strict: bool = False
    ) -> Any:
        """DescribeClientQuotas with filter components (entity type, MATCH_*, match); none + not strict = all."""
        r = DescribeClientQuotasRequest
        request = r(
            components=[r.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components],
            strict=strict,
        )
        return self.send(request)

    def incremental_alter_configs(
        self,
        resources: Mapping[tuple[int, str], Sequence[tuple[str, int, str | None]]],
        *,
        validate_only: bool = False,
    ) -> Any:
        """IncrementalAlterConfigs: (resource type, name) -> [(config name, OP_*, value)]."""
        r = IncrementalAlterConfigsRequest
        request = r(
            resources=[
                r.AlterConfigsResource(
                    resource_type=rtype,
                    resource_name=rname,
                    configs=[
                        r.AlterConfigsResource.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops
                    ],
                )
                for (rtype, rname), ops in resources.items()
            ],
            validate_only=validate_only,
        )
        return self.send(request)

    def describe_configs(
        self, resources: Iterable[tuple[int, str, Sequence[str] | None]], *, include_synonyms: bool = False
    ) -> Any:
        """DescribeConfigs: [(resource type, name, config names or None for all)]."""
        r = DescribeConfigsRequest
        request = r(
            resources=[
                r.DescribeConfigsResource(
                    resource_type=rtype, resource_name=rname, configuration_keys=None if keys is None else list(keys)
                )
                for rtype, rname, keys in resources
            ],
            include_synonyms=include_synonyms,
            include_documentation=False,
        )
        return self.send(request)


def raise_for_errors(results: Iterable[Any]) -> None:
    """Raise KafkaBrokerError for the first result (entry, resource) whose ``error_code`` is not 0."""
    for result in results:
        if result.error_code:
            raise KafkaBrokerError(result.error_code, result.error_message)
