"""The admin client: the admin requests on one connection at a time, with failover, SCRAM logins and reconnects.

kafka-python's ``KafkaAdminClient`` has no public methods for client quotas and brings a whole asynchronous
cluster client; a push talks to one broker at a time and waits for its answer, so a blocking socket is all it
needs. Every failure is a ``KafkaClientError`` carrying Kafka's error name (``code``) and whether trying again
can help (``retriable``): the connector turns it into a ``PushError`` without guessing. No password ever goes
into an exception, a repr or a log line (AlterUserScramCredentials is sent without kafka-python's debug logging
of the request, since a salted password is as good as the password).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
from kafka.protocol.metadata import MetadataRequest

from kafka_wire.connection import Connection
from kafka_wire.errors import (
    KafkaBrokerError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    ScramCredentialError,
)
from kafka_wire.protocol import (
    DEFAULT_CLIENT_ID,
    PLAINTEXT,
    REQUEST_CLASSES,
    SASL_PLAINTEXT,
    SECURITY_PROTOCOLS,
    parse_address,
    parse_addresses,
)
from kafka_wire.results import BrokerNode, ClusterDescription, NewTopic, TopicResult, TopicResults
from kafka_wire.scram import (
    SCRAM_MECHANISM_NAMES,
    SCRAM_MECHANISMS,
    Secret,
    authenticate,
    scram_mechanism_number,
    scram_salt,
    scram_salted_password,
)

#: Metadata v13 adds a top-level error code (KIP-1102); the readiness probes and the oracle ask v12 at most.
MAX_METADATA_VERSION = 12


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
    """One connection (``Connection``) to one broker at a time for the admin APIs of ``REQUEST_CLASSES``, each
    at the highest version both sides support (negotiated with ApiVersions on connect).

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
        self._sasl_password = Secret(sasl_password) if self.sasl_mechanism and sasl_password else None
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.client_id = client_id
        self.max_idle = max_idle
        self.max_frame_bytes = max_frame_bytes
        self._lock = threading.RLock()
        self._conn: Connection | None = None
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
        return self._conn is not None

    @property
    def connected_address(self) -> str | None:
        """The address of the open connection (one of ``addresses``), None when not connected."""
        current = self._current
        return self.addresses[current] if self._conn is not None and current is not None else None

    def connect(self) -> Connection:
        """Open the connection, negotiate API versions and log in, unless it is open and fresh."""
        with self._lock:
            if self._conn is not None:
                now = time.monotonic()
                stale = now - self._conn.last_used > self.max_idle
                if stale or (self._session_ends is not None and now >= self._session_ends):
                    self._drop()
            if self._conn is None:
                self._open()
            assert self._conn is not None
            return self._conn

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
        conn = Connection(
            self.addresses[index],
            client_id=self.client_id,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            max_frame_bytes=self.max_frame_bytes,
        )
        try:
            session_ends = None
            if self.security_protocol == SASL_PLAINTEXT:
                assert self.sasl_mechanism and self.sasl_username and self._sasl_password
                session_ends = authenticate(conn, self.sasl_mechanism, self.sasl_username, self._sasl_password)
        except BaseException:
            conn.close()
            raise
        self._conn, self._current, self._session_ends = conn, index, session_ends

    def _drop(self, *, failed: bool = False) -> None:
        """Close the connection; ``failed``: it broke, so the next connect starts with the next address."""
        if failed and self._current is not None:
            self._start = (self._current + 1) % len(self.addresses)
        conn, self._conn, self._current, self._session_ends = self._conn, None, None, None
        if conn is not None:
            conn.close()

    @property
    def broker_api_versions(self) -> dict[int, tuple[int, int]]:
        """What the broker advertised: API key -> (min version, max version)."""
        with self._lock:
            return dict(self.connect().broker_versions)

    def api_version(self, api_key: int) -> int:
        """The version used for ``api_key``: the highest both sides support; UnsupportedApiError when none."""
        with self._lock:
            return self.connect().version(REQUEST_CLASSES[api_key])

    # -- requests ---------------------------------------------------------------------------------------------

    def send(self, request: ApiMessage, *, cap: int | None = None, quiet: bool = False) -> Any:
        """Send ``request`` at the highest version both sides speak (at most ``cap``) and wait for its response
        (decoded). ``quiet``: the request carries a credential, which kafka-python would log at DEBUG."""
        with self._lock:
            conn = self.connect()
            try:
                return conn.call(request, conn.version(type(request), cap), quiet=quiet)
            except KafkaClientError as e:
                if conn.closed:  # the connection broke (not: no common version)
                    self._drop(failed=True)
                raise e

    def metadata(self, topics: Sequence[str] | None = ()) -> Any:
        """Metadata (v12 at most) for ``topics`` (None = every topic, empty = none): the brokers on the listener
        asked, and each topic's partitions and leaders. Never creates a topic."""
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        return self.send(request, cap=MAX_METADATA_VERSION)

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
            for result in self.send(request, quiet=True).results:
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
