"""A small synchronous Kafka Admin client: one blocking TCP connection to one broker at a time.

kafka-python's ``KafkaAdminClient`` has no public methods for client quotas and brings a whole
asynchronous cluster client; a push talks to one broker at a time and waits for its answer, so a
blocking socket is all it needs. Framing, request headers and correlation ids are kafka-python's
``KafkaProtocol``; requests and responses are its schema classes, so the bytes are Kafka's own.

It speaks PLAINTEXT or SASL_PLAINTEXT with SCRAM-SHA-256/512 (kafka-python's ``ScramClient`` computes the
proofs; TLS is out of scope), fails over along a comma-separated bootstrap list, and has the admin APIs the
portal, its tests and benchmarks need: client quotas, configs, the cluster's brokers, SCRAM credentials, topics.

Every failure is a ``KafkaClientError`` carrying Kafka's error name (``code``) and whether trying
again can help (``retriable``): the connector turns it into a ``PushError`` without guessing. No password
ever goes into an exception, a repr or a log line (AlterUserScramCredentials is sent without
kafka-python's debug logging of the request, since a salted password is as good as the password).
"""

from __future__ import annotations

import hashlib
import secrets
import socket
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as kafka_errors
from kafka.net.sasl.scram import ScramClient
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
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

# API keys (Kafka's numbering).
SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 17, 18, 19, 20
DESCRIBE_CONFIGS, SASL_AUTHENTICATE, INCREMENTAL_ALTER_CONFIGS = 32, 36, 44
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
DESCRIBE_CLUSTER = 60

#: The request class of every API this client speaks.
REQUEST_CLASSES: dict[int, type[ApiMessage]] = {
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

#: Kafka's ScramMechanism enum: the int8 of DescribeUserScramCredentials / AlterUserScramCredentials.
SCRAM_MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_MECHANISM_NAMES: dict[int, str] = {v: k for k, v in SCRAM_MECHANISMS.items()}
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's bounds for both mechanisms (ScramMechanism.minIterations / maxIterations); the broker refuses
#: credentials outside them with UNACCEPTABLE_CREDENTIAL, so they are not checked here.
SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 16384
#: Beyond this the client-side PBKDF2 would take minutes for a credential the broker refuses anyway.
_SCRAM_ITERATIONS_CEILING = 1_000_000

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
# Error codes this client reacts to itself.
_UNSUPPORTED_SASL_MECHANISM, _SASL_AUTHENTICATION_FAILED = 33, 58
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


class SaslAuthenticationError(KafkaClientError):
    """The broker refused the SASL login (wrong user or password), or its SCRAM answers did not verify.

    Not retriable: the same credentials fail the same way at every broker, and each attempt is a failed login.
    """

    code = "SASL_AUTHENTICATION_FAILED"
    retriable = False


class UnsupportedSaslMechanismError(KafkaClientError):
    """The broker does not offer the configured SASL mechanism; ``mechanisms`` are the ones it offers."""

    code = "UNSUPPORTED_SASL_MECHANISM"
    retriable = False

    def __init__(self, message: str, mechanisms: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.mechanisms = tuple(mechanisms)


class ScramCredentialError(KafkaBrokerError):
    """DescribeUserScramCredentials or AlterUserScramCredentials refused some users (Kafka answers per user).

    ``code`` / ``errno`` / ``user`` are those of the first refused user; ``errors`` has every refused user,
    ``described`` what was described of the others, ``altered`` the users whose alterations were applied.
    """

    def __init__(
        self,
        errors: Mapping[str, KafkaBrokerError],
        *,
        described: Mapping[str, list[tuple[str, int]]] | None = None,
        altered: Sequence[str] = (),
    ) -> None:
        user, first = next(iter(errors.items()))
        more = f" (and {len(errors) - 1} more users)" if len(errors) > 1 else ""
        super().__init__(first.errno, f"user {user!r}: {first.message}{more}")
        self.user = user
        self.errors = dict(errors)
        self.described = dict(described or {})
        self.altered = list(altered)


@dataclass(frozen=True)
class BrokerNode:
    """A broker as DescribeCluster names it, on the listener the request came through."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False

    @property
    def address(self) -> str:
        """``host:port`` (``[ipv6]:port``), as ``AdminClient`` takes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterDescription:
    """DescribeCluster's answer: which brokers there are, so each can be asked for its own view."""

    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerNode]

    @property
    def addresses(self) -> dict[int, str]:
        """Node id -> ``host:port``."""
        return {node_id: broker.address for node_id, broker in sorted(self.brokers.items())}


@dataclass(frozen=True)
class NewTopic:
    """A topic for CreateTopics; -1 partitions / replication factor = the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicResult:
    """Kafka's answer for one topic of CreateTopics / DeleteTopics (``error_code`` 0 = done)."""

    name: str
    error_code: int = 0
    error_message: str | None = None

    @property
    def code(self) -> str:
        """Kafka's error name (``NONE`` when it succeeded)."""
        return "NONE" if not self.error_code else kafka_errors.for_code(self.error_code).message


@dataclass(frozen=True)
class TopicResults:
    """Per-topic results and the throttle time the broker asked for (controller-mutation quotas, KIP-599)."""

    throttle_time_ms: int
    topics: dict[str, TopicResult]

    def raise_for_errors(self) -> None:
        """KafkaBrokerError for the first topic that failed."""
        raise_for_errors(self.topics.values())


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


def scram_mechanism_number(mechanism: str) -> int:
    """Kafka's ScramMechanism number of ``mechanism`` (SCRAM-SHA-256 = 1, SCRAM-SHA-512 = 2)."""
    try:
        return SCRAM_MECHANISMS[mechanism.upper()]
    except KeyError:
        raise ValueError(f"SCRAM mechanism is one of {', '.join(SCRAM_MECHANISMS)}, not {mechanism!r}.") from None


def scram_salt() -> bytes:
    """A random salt as Kafka's admin client makes one (``UserScramCredentialUpsertion``): a 130-bit random
    number written in base 36, as ASCII bytes."""
    number, digits = secrets.randbits(130), []
    while True:
        number, digit = divmod(number, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[digit])
        if not number:
            return "".join(reversed(digits)).encode("ascii")


def scram_salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's ``Hi(password, salt, iterations)`` (PBKDF2-HMAC of the mechanism's hash, RFC 5802), what Kafka's
    admin client sends in AlterUserScramCredentials; the broker derives the stored and server keys from it."""
    scram_mechanism_number(mechanism)
    if not 0 < iterations <= _SCRAM_ITERATIONS_CEILING:
        raise ValueError(f"SCRAM iterations must be 1..{_SCRAM_ITERATIONS_CEILING} (Kafka accepts "
                         f"{SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}), got {iterations}.")
    return hashlib.pbkdf2_hmac(_SCRAM_HASHES[mechanism.upper()], password.encode("utf-8"), salt, iterations)


def _sasl_name(username: str) -> str:
    """The SCRAM ``saslname`` of a user (RFC 5802: ``=`` -> ``=3D``, ``,`` -> ``=2C``), as Kafka decodes it."""
    return username.replace("=", "=3D").replace(",", "=2C")


class _Secret:
    """A password that no repr, str or log line shows."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__


def _security(
    protocol: str, mechanism: str | None, username: str | None, password: str | None
) -> tuple[str, str | None]:
    """(security protocol, SASL mechanism), checked; ValueError (never naming the password) when unusable."""
    name = (protocol or "").strip().upper()
    if name in ("SSL", "SASL_SSL"):
        raise ValueError(
            f"security_protocol {protocol!r}: TLS (SSL, SASL_SSL) is out of scope for this client; "
            f"use {PLAINTEXT} or {SASL_PLAINTEXT}."
        )
    if name not in SECURITY_PROTOCOLS:
        raise ValueError(f"security_protocol is {PLAINTEXT} or {SASL_PLAINTEXT}, not {protocol!r}.")
    if name == PLAINTEXT:
        if mechanism or username or password:
            raise ValueError(f"SASL settings (mechanism, username, password) need security_protocol {SASL_PLAINTEXT}.")
        return name, None
    if not mechanism or mechanism.strip().upper() not in SCRAM_MECHANISMS:
        raise ValueError(f"{SASL_PLAINTEXT} needs sasl_mechanism {' or '.join(SCRAM_MECHANISMS)}, got {mechanism!r}.")
    if not username or not password:
        raise ValueError(f"{SASL_PLAINTEXT} needs sasl_username and sasl_password.")
    return name, mechanism.strip().upper()


class AdminClient:
    """One connection to one broker at a time for the admin APIs of ``REQUEST_CLASSES``, each at the highest
    version both sides support (negotiated with ApiVersions on connect).

    ``address`` is one ``host:port`` or a bootstrap list ``h1:p1,h2:p2``: connecting tries them in order,
    starting after the last one that failed, so one broker down does not stop a push (``connected_address``
    is the one in use). With ``security_protocol="SASL_PLAINTEXT"`` every connection logs in with SCRAM
    (``sasl_mechanism``, ``sasl_username``, ``sasl_password``) before its first request.

    The connection opens on first use and reopens after any failure, after ``max_idle`` seconds unused
    (brokers close idle connections: ``connections.max.idle.ms``) and before the SASL session the broker
    granted runs out (``connections.max.reauth.ms``). Thread-safe: one request at a time.
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
        security_protocol: str = PLAINTEXT,
        sasl_mechanism: str | None = None,
        sasl_username: str | None = None,
        sasl_password: str | None = None,
    ) -> None:
        self.address = address
        self.addresses = parse_addresses(address)
        self.host, self.port = parse_address(self.addresses[0])
        self.security_protocol, self.sasl_mechanism = _security(
            security_protocol, sasl_mechanism, sasl_username, sasl_password
        )
        self.sasl_username = sasl_username if self.sasl_mechanism else None
        self._sasl_password = _Secret(sasl_password) if self.sasl_mechanism and sasl_password else None
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
        self._current: int | None = None  # index in ``addresses`` of the open connection
        self._start = 0  # where the next connect starts: the one in use, or the one after the last failure
        self._session_ends: float | None = None  # when to reconnect, before the broker ends the SASL session

    def __repr__(self) -> str:
        parts = [f"address={self.address!r}", f"security_protocol={self.security_protocol!r}"]
        if self.sasl_mechanism:
            parts += [f"sasl_mechanism={self.sasl_mechanism!r}", f"sasl_username={self.sasl_username!r}"]
        if self.connected_address:
            parts.append(f"connected_address={self.connected_address!r}")
        return f"AdminClient({', '.join(parts)})"

    def for_address(self, address: str) -> AdminClient:
        """A new client with the same settings (security, credentials, timeouts) to ``address``: for asking one
        given broker, e.g. one that ``describe_cluster()`` named, for its own view."""
        return AdminClient(
            address,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            client_id=self.client_id,
            max_idle=self.max_idle,
            max_frame_bytes=self.max_frame_bytes,
            security_protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self._sasl_password.reveal() if self._sasl_password else None,
        )

    def broker_clients(self) -> dict[int, AdminClient]:
        """One client per broker of the cluster (node id -> client, not connected yet; the caller closes them)."""
        return {node_id: self.for_address(address) for node_id, address in self.describe_cluster().addresses.items()}

    # -- connection -------------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def connected_address(self) -> str | None:
        """The address of the open connection (one of ``addresses``), None when not connected."""
        current = self._current
        return self.addresses[current] if self._sock is not None and current is not None else None

    @property
    def _peer(self) -> str:
        """The address to name in messages: the one connected (or connecting), else what was given."""
        current = self._current
        return self.addresses[current] if current is not None else self.address

    def connect(self) -> None:
        """Open the connection, negotiate API versions and log in, unless it is open and fresh."""
        with self._lock:
            if self._sock is not None:
                now = time.monotonic()
                stale = now - self._last_used > self.max_idle
                if stale or (self._session_ends is not None and now >= self._session_ends):
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
        """Connect to the first address that answers, from ``_start`` on; a failure that another broker would
        answer the same way (a refused login, an unsupported API) is raised at once."""
        count, first = len(self.addresses), self._start
        failures: list[KafkaClientError] = []
        for step in range(count):
            index = (first + step) % count
            try:
                self._open_at(index)
            except KafkaClientError as e:
                self._start = (index + 1) % count
                if count == 1 or not e.retriable:
                    raise
                failures.append(e)
                continue
            self._start = index
            return
        timeouts = all(isinstance(e, KafkaTimeoutError) for e in failures)
        error_class = KafkaTimeoutError if timeouts else KafkaConnectionError
        details = "; ".join(str(e) for e in failures)
        raise error_class(f"no broker of {self.address} answered: {details}") from failures[-1]

    def _open_at(self, index: int) -> None:
        address = self.addresses[index]
        host, port = parse_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=self.connect_timeout)
        except TimeoutError as e:
            raise KafkaTimeoutError(f"connecting to {address} took more than {self.connect_timeout}s") from e
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {address}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._current = sock, index
        self._protocol = KafkaProtocol(
            client_id=self.client_id, ident=address, receive_message_max_bytes=self.max_frame_bytes
        )
        self._last_used = time.monotonic()
        try:
            self._negotiate()
            if self.security_protocol == SASL_PLAINTEXT:
                self._authenticate()
        except BaseException:
            self._drop()
            raise

    def _drop(self, *, failed: bool = False) -> None:
        """Close the connection; ``failed``: it broke, so the next connect starts with the next address."""
        if failed and self._current is not None:
            self._start = (self._current + 1) % len(self.addresses)
        sock, self._sock, self._protocol, self._current = self._sock, None, None, None
        self._broker_versions = {}
        self._session_ends = None
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
                raise KafkaBrokerError(response.error_code, f"ApiVersions failed at {self._peer}")
            self._broker_versions = ranges
            return
        raise UnsupportedApiError(f"{self._peer} accepts no ApiVersions request version this client can send")

    def _authenticate(self) -> None:
        """SaslHandshake v1, then SCRAM's two SaslAuthenticate rounds (client-first, client-final), checking the
        server's signature: the broker proves it knows the credential too."""
        address, mechanism, username = self._peer, self.sasl_mechanism, self.sasl_username
        assert mechanism is not None and username is not None and self._sasl_password is not None
        version = self._version_for(SASL_HANDSHAKE)
        if version < 1:
            raise UnsupportedApiError(f"{address} has SaslHandshake v0 only, this client needs v1 (SaslAuthenticate)")
        handshake = SaslHandshakeRequest(mechanism=mechanism)
        handshake.API_VERSION = version
        response = self._roundtrip(handshake)
        offered = list(response.mechanisms or ())
        if response.error_code == _UNSUPPORTED_SASL_MECHANISM or (not response.error_code and mechanism not in offered):
            raise UnsupportedSaslMechanismError(
                f"{address} does not offer SASL mechanism {mechanism}; it offers {', '.join(offered) or 'none'}",
                offered,
            )
        if response.error_code:
            raise KafkaBrokerError(
                response.error_code, f"{address} refused the SASL handshake for {mechanism} (is it a SASL listener?)"
            )
        scram = ScramClient(_sasl_name(username), self._sasl_password.reveal(), mechanism)
        try:
            server_first = self._sasl_step(scram.first_message())
            scram.process_server_first_message(server_first.auth_bytes)
            server_final = self._sasl_step(scram.final_message())
            scram.process_server_final_message(server_final.auth_bytes)
        except (ValueError, KeyError, UnicodeDecodeError) as e:  # kafka-python's checks of the server's messages
            raise SaslAuthenticationError(
                f"{address} answered the {mechanism} login of user {username!r} with a message that does not "
                f"verify: {e!r}"
            ) from None
        lifetime_ms = getattr(server_final, "session_lifetime_ms", 0) or 0
        if lifetime_ms > 0:  # reconnect (and so log in again) before the broker ends the session
            self._session_ends = time.monotonic() + 0.85 * lifetime_ms / 1000

    def _sasl_step(self, token: bytes) -> Any:
        """One SaslAuthenticate round; a refusal becomes SaslAuthenticationError (the password never named)."""
        request = SaslAuthenticateRequest(auth_bytes=token)
        request.API_VERSION = self._version_for(SASL_AUTHENTICATE)
        response = self._roundtrip(request)
        if response.error_code == _SASL_AUTHENTICATION_FAILED:
            detail = self._scrub(response.error_message or "invalid credentials")
            raise SaslAuthenticationError(
                f"{self._peer} refused the {self.sasl_mechanism} login of user {self.sasl_username!r}: {detail}"
            )
        if response.error_code:
            raise KafkaBrokerError(response.error_code, self._scrub(response.error_message or "") or None)
        return response

    def _scrub(self, text: str) -> str:
        """``text`` without the password, should a broker ever echo it."""
        if self._sasl_password is not None and self._sasl_password.reveal() in text:
            return text.replace(self._sasl_password.reveal(), "***")
        return text

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
            return self._version_for(api_key)

    def _version_for(self, api_key: int) -> int:
        request_class = REQUEST_CLASSES[api_key]
        name = request_class.name.removesuffix("Request")
        ours_min, ours_max = request_class.valid_versions
        theirs = self._broker_versions.get(api_key)
        if theirs is None:
            raise UnsupportedApiError(f"the broker at {self._peer} does not support {name} (API key {api_key})")
        low, high = max(ours_min, theirs[0]), min(ours_max, theirs[1])
        if high < low:
            raise UnsupportedApiError(
                f"the broker at {self._peer} supports {name} versions {theirs[0]}-{theirs[1]}, "
                f"this client {ours_min}-{ours_max}: no common version"
            )
        return high

    # -- requests ---------------------------------------------------------------------------------------------

    def send(self, request: ApiMessage) -> Any:
        """Send ``request`` at the negotiated version and wait for its response (decoded)."""
        with self._lock:
            request.API_VERSION = self.api_version(request.API_KEY)
            return self._roundtrip(request)

    def _send_quietly(self, request: ApiMessage) -> Any:
        """``send`` for a request that carries a credential: kafka-python's protocol would log it at DEBUG."""
        with self._lock:
            request.API_VERSION = self.api_version(request.API_KEY)
            return self._roundtrip(request, quiet=True)

    def _roundtrip(self, request: ApiMessage, *, quiet: bool = False) -> Any:
        sock, protocol = self._sock, self._protocol
        assert sock is not None and protocol is not None
        name, address = type(request).name, self._peer
        deadline = time.monotonic() + self.request_timeout
        try:
            if quiet:  # KafkaProtocol.send_request / send_bytes without their debug logging of the request
                correlation_id = protocol._next_correlation_id()
                request.with_header(correlation_id=correlation_id, client_id=self.client_id)
                data = bytes(request.encode(framed=True, header=True))
                protocol.in_flight_requests.append(request.header)
            else:
                correlation_id = protocol.send_request(request)
                data = protocol.send_bytes()
            sock.settimeout(self.request_timeout)
            sock.sendall(data)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                data = sock.recv(65536)
                if not data:
                    raise KafkaConnectionError(f"{address} closed the connection before answering {name}")
                for received_id, response in protocol.receive_bytes(data):
                    if received_id == correlation_id:
                        self._last_used = time.monotonic()
                        return response
        except KafkaClientError:
            self._drop(failed=True)
            raise
        except TimeoutError as e:
            self._drop(failed=True)
            raise KafkaTimeoutError(f"{address} did not answer {name} within {self.request_timeout}s") from e
        except OSError as e:
            self._drop(failed=True)
            raise KafkaConnectionError(f"connection to {address} failed during {name}: {e}") from e
        except (kafka_errors.KafkaError, ValueError, struct.error) as e:
            self._drop(failed=True)
            raise KafkaProtocolError(f"{address} answered {name} with bytes that do not decode: {e}") from e

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

    def describe_cluster(self, *, include_fenced: bool = False) -> ClusterDescription:
        """DescribeCluster: the brokers (node id -> host:port on the listener asked), so that each broker can be
        asked for its own view (``for_address``)."""
        request = DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=include_fenced
        )
        response = self.send(request)
        if response.error_code:
            raise KafkaBrokerError(response.error_code, response.error_message)
        brokers = {
            b.broker_id: BrokerNode(b.broker_id, b.host, b.port, b.rack, bool(getattr(b, "is_fenced", False)))
            for b in response.brokers
        }
        return ClusterDescription(response.cluster_id, response.controller_id, brokers)

    def describe_user_scram_credentials(self, users: Sequence[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """DescribeUserScramCredentials: user -> [(mechanism name, iterations)] for ``users`` (None = every user
        that has one; an empty list asks nothing). A user Kafka refuses (RESOURCE_NOT_FOUND for one without
        credentials) raises ScramCredentialError, which keeps what was described of the others."""
        if users is not None and not users:
            return {}
        r = DescribeUserScramCredentialsRequest
        response = self.send(r(users=None if users is None else [r.UserName(name=user) for user in users]))
        if response.error_code:
            raise KafkaBrokerError(response.error_code, response.error_message)
        described: dict[str, list[tuple[str, int]]] = {}
        errors: dict[str, KafkaBrokerError] = {}
        for result in response.results:
            if result.error_code:
                errors[result.user] = KafkaBrokerError(result.error_code, result.error_message)
                continue
            described[result.user] = [
                (SCRAM_MECHANISM_NAMES.get(info.mechanism, f"UNKNOWN({info.mechanism})"), info.iterations)
                for info in result.credential_infos
            ]
        if errors:
            raise ScramCredentialError(errors, described=described)
        return described

    def alter_user_scram_credentials(
        self,
        upsertions: Iterable[tuple[str, str, int, str]] = (),
        deletions: Iterable[tuple[str, str]] = (),
    ) -> list[str]:
        """AlterUserScramCredentials: set [(user, mechanism, iterations, password)], remove [(user, mechanism)].

        As Kafka's admin client does, the password never leaves this process: a random salt and
        ``Hi(password, salt, iterations)`` are sent. A KRaft controller takes one alteration per user and request
        (a second one is DUPLICATE_RESOURCE, e.g. both mechanisms of a new user), so a user's alterations go in
        successive requests, deletions first, each in the order given; one refused skips that user's later ones
        (the earlier stay applied). Returns the users whose alterations were all applied; users Kafka refused
        (UNACCEPTABLE_CREDENTIAL for iterations outside 4096..16384, RESOURCE_NOT_FOUND for deleting a credential
        that does not exist) raise ScramCredentialError, whose ``altered`` lists the others.
        """
        r = AlterUserScramCredentialsRequest
        removals = [(user, scram_mechanism_number(mechanism)) for user, mechanism in deletions]
        additions = [(user, scram_mechanism_number(m), m, i, p) for user, m, i, p in upsertions]
        seen: set[tuple[str, int]] = set()
        for user, number in removals + [(a[0], a[1]) for a in additions]:
            if (user, number) in seen:
                raise ValueError(f"The {SCRAM_MECHANISM_NAMES[number]} credential of user {user!r} is altered twice.")
            seen.add((user, number))
        # user -> its alterations in order, each as (deletions, upsertions) of one request
        per_user: dict[str, list[tuple[list[Any], list[Any]]]] = {}
        for user, number in removals:
            per_user.setdefault(user, []).append(([r.ScramCredentialDeletion(name=user, mechanism=number)], []))
        for user, number, mechanism, iterations, password in additions:
            salt = scram_salt()
            salted = scram_salted_password(mechanism, password, salt, iterations)
            upsertion = r.ScramCredentialUpsertion(
                name=user, mechanism=number, iterations=iterations, salt=salt, salted_password=salted
            )
            per_user.setdefault(user, []).append(([], [upsertion]))
        errors: dict[str, KafkaBrokerError] = {}
        for step in range(max(map(len, per_user.values()), default=0)):
            batch = [alts[step] for user, alts in per_user.items() if step < len(alts) and user not in errors]
            if not batch:
                break
            request = r(deletions=[d for ds, _ in batch for d in ds], upsertions=[u for _, us in batch for u in us])
            for result in self._send_quietly(request).results:
                if result.error_code:
                    errors[result.user] = KafkaBrokerError(result.error_code, result.error_message)
        altered = [user for user in per_user if user not in errors]
        if errors:
            raise ScramCredentialError(errors, altered=altered)
        return altered

    def create_topics(
        self, topics: Iterable[NewTopic], *, timeout_ms: int = 30_000, validate_only: bool = False
    ) -> TopicResults:
        """CreateTopics (for tests and benchmarks): per-topic results and ``throttle_time_ms``, unchecked (a
        controller-mutation quota answers THROTTLING_QUOTA_EXCEEDED with a throttle time; see
        ``TopicResults.raise_for_errors``). Keep ``timeout_ms`` below ``request_timeout``."""
        r = CreateTopicsRequest
        request = r(
            topics=[
                r.CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    assignments=[],
                    configs=[r.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
                )
                for t in topics
            ],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )
        response = self.send(request)
        return TopicResults(
            response.throttle_time_ms or 0,
            {t.name: TopicResult(t.name, t.error_code, t.error_message) for t in response.topics},
        )

    def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30_000) -> TopicResults:
        """DeleteTopics by name (for tests and benchmarks): per-topic results and ``throttle_time_ms``, unchecked."""
        names = list(names)
        r = DeleteTopicsRequest
        request = r(
            topics=[r.DeleteTopicState(name=name) for name in names],  # v6+
            topic_names=names,  # v1-v5
            timeout_ms=timeout_ms,
        )
        response = self.send(request)
        return TopicResults(
            response.throttle_time_ms or 0,
            {t.name: TopicResult(t.name, t.error_code, t.error_message) for t in response.responses},
        )


def raise_for_errors(results: Iterable[Any]) -> None:
    """Raise KafkaBrokerError for the first result (entry, resource) whose ``error_code`` is not 0."""
    for result in results:
        if result.error_code:
            raise KafkaBrokerError(result.error_code, result.error_message)
