"""A Kafka broker double for tests: real wire protocol, in-memory state, fault injection.

No Kafka broker can run where the tests run, so this server answers the admin APIs the Kafka
connector uses with the bytes a broker would send. Requests are decoded and responses encoded with
kafka-python's schema classes (Kafka's own JSON message definitions), so a request that decodes
here is one a broker would read. It keeps client quotas per entity and dynamic configs per
(resource type, name), validates them as Kafka does for what the tests need, and records every
decoded request so tests can assert on what went over the wire.

Faults: ``fail_next`` (answer error codes), ``drop_next`` (close the connection without answering),
``hang_next`` (never answer), ``refuse_connections`` / ``accept_connections`` (the broker goes down and
comes back on the same port). For tests only.
"""

from __future__ import annotations

import ipaddress
import math
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasResponse,
    DescribeClientQuotasResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse

from kafka_wire import (
    ALTER_CLIENT_QUOTAS,
    API_VERSIONS,
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    REQUEST_CLASSES,
    SOURCE_CLIENT_METRICS,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_DYNAMIC_TOPIC,
    SOURCE_STATIC_BROKER,
    TOPIC_RESOURCE,
)

# Kafka error codes the double answers with.
UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_VERSION, INVALID_CONFIG, INVALID_REQUEST = 3, 35, 40, 42

RESPONSE_CLASSES: dict[int, type[ApiMessage]] = {
    API_VERSIONS: ApiVersionsResponse,
    DESCRIBE_CONFIGS: DescribeConfigsResponse,
    INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsResponse,
    DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasResponse,
    ALTER_CLIENT_QUOTAS: AlterClientQuotasResponse,
}

USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: Kafka's client-quota keys: whether the value must be integral (LONG/INT), and the entity kind they apply to.
QUOTA_KEYS = {
    "producer_byte_rate": (True, "client"),
    "consumer_byte_rate": (True, "client"),
    "request_percentage": (False, "client"),
    "controller_mutation_rate": (False, "client"),
    "connection_creation_rate": (True, "ip"),
}
CLIENT_METRICS_KEYS = frozenset({"metrics", "interval.ms", "match"})

#: Configs every broker reports from its server.properties (source STATIC_BROKER_CONFIG) ...
STATIC_BROKER_CONFIGS = {"max.connections": "1000", "num.network.threads": "3"}
#: ... and from Kafka's defaults (source DEFAULT_CONFIG).
DEFAULT_BROKER_CONFIGS = {"max.connections": "2147483647", "max.connections.per.ip": "2147483647"}
DEFAULT_TOPIC_CONFIGS = {"cleanup.policy": "delete", "leader.replication.throttled.replicas": ""}

Entity = tuple[tuple[str, str | None], ...]  # (entity type, name or None = default), sorted by type


def entity_key(entity: Mapping[str, str | None]) -> Entity:
    """The responder's key of an entity: its (type, name) pairs sorted by type."""
    return tuple(sorted(entity.items(), key=lambda kv: kv[0]))


class RequestError(Exception):
    """An entry or resource Kafka would refuse: answered with ``code`` and ``message``, nothing changed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Fault:
    kind: str  # "error", "drop" or "hang"
    code: int = 0
    message: str | None = None


class KafkaResponder:
    """A broker (id ``broker_id``) on 127.0.0.1 with an ephemeral port; ``address`` is its ``host:port``.

    ``api_versions`` overrides what ApiVersions advertises (API key -> (min, max), None = not supported);
    by default every API at the versions kafka-python knows. ``topics`` exist; others are unknown.
    """

    def __init__(
        self,
        *,
        broker_id: int = 1,
        api_versions: Mapping[int, tuple[int, int] | None] | None = None,
        topics: Iterable[str] = (),
    ) -> None:
        self.broker_id = broker_id
        self.api_versions: dict[int, tuple[int, int]] = {k: cls.valid_versions for k, cls in REQUEST_CLASSES.items()}
        for key, versions in (api_versions or {}).items():
            if versions is None:
                self.api_versions.pop(key, None)
            else:
                self.api_versions[key] = versions
        self.topics = set(topics)
        self.quotas: dict[Entity, dict[str, float]] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}  # dynamic configs only
        self.requests: list[Any] = []  # every decoded request, in arrival order
        self.unsupported: list[tuple[int, int]] = []  # (api key, version) of requests refused undecoded
        self.connections_accepted = 0
        self.errors: list[Exception] = []  # exceptions of the double itself (a test should see none)
        self.host = "127.0.0.1"
        self.port = 0
        self._lock = threading.RLock()
        self._faults: dict[int, deque[Fault]] = {}
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> KafkaResponder:
        self._listen()
        return self

    def stop(self) -> None:
        """Stop listening, drop every connection and wait for the server threads."""
        self.refuse_connections()
        for thread in self._threads:
            thread.join(timeout=2)
        self._threads = [t for t in self._threads if t.is_alive()]

    def __enter__(self) -> KafkaResponder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def refuse_connections(self) -> None:
        """The broker goes down: stop listening (connecting is refused) and drop the open connections."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = list(self._conns), set()
        for sock in ([listener] if listener is not None else []) + conns:
            _shut(sock)

    def accept_connections(self) -> None:
        """The broker comes back, on the same port."""
        with self._lock:
            if self._listener is None:
                self._listen()

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(16)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._spawn(self._accept_loop, sock)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"kafka-responder-{self.port}")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                if listener is not self._listener:
                    _shut(conn)
                    return
                self._conns.add(conn)
                self.connections_accepted += 1
            self._spawn(self._serve, conn)

    # -- state and faults -------------------------------------------------------------------------------------

    def set_quota(self, entity: Mapping[str, str | None], key: str, value: float) -> None:
        with self._lock:
            self.quotas.setdefault(entity_key(entity), {})[key] = float(value)

    def quota(self, entity: Mapping[str, str | None]) -> dict[str, float]:
        """The quotas of one entity (type -> name, None = default): key -> value."""
        with self._lock:
            return dict(self.quotas.get(entity_key(entity), {}))

    def set_config(self, resource_type: int, name: str, key: str, value: str) -> None:
        """Set a dynamic config, as if another admin had."""
        with self._lock:
            self.configs.setdefault((resource_type, name), {})[key] = value

    def config(self, resource_type: int, name: str) -> dict[str, str]:
        """The dynamic configs of one resource."""
        with self._lock:
            return dict(self.configs.get((resource_type, name), {}))

    def requests_of(self, api_key: int) -> list[Any]:
        """The decoded requests of one API, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.API_KEY == api_key]

    def fail_next(self, api_key: int, error_code: int, message: str | None = None, *, times: int = 1) -> None:
        """The next ``times`` requests of ``api_key`` answer ``error_code`` (with ``message``) for every entry or
        resource (top level where the API has only that), and change nothing."""
        self._add_fault(api_key, Fault("error", error_code, message), times)

    def drop_next(self, api_key: int, *, times: int = 1) -> None:
        """The next ``times`` requests of ``api_key`` close the connection without an answer (nothing changes)."""
        self._add_fault(api_key, Fault("drop"), times)

    def hang_next(self, api_key: int, *, times: int = 1) -> None:
        """The next ``times`` requests of ``api_key`` are never answered (nothing changes)."""
        self._add_fault(api_key, Fault("hang"), times)

    def _add_fault(self, api_key: int, fault: Fault, times: int) -> None:
        with self._lock:
            self._faults.setdefault(api_key, deque()).extend([fault] * times)

    def _take_fault(self, api_key: int) -> Fault | None:
        faults = self._faults.get(api_key)
        return faults.popleft() if faults else None

    # -- the wire ---------------------------------------------------------------------------------------------

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                head = _read_exact(conn, 4)
                if head is None:
                    return
                (size,) = struct.unpack(">i", head)
                payload = _read_exact(conn, size)
                if payload is None:
                    return
                answer = self._answer(payload)
                if answer is _DROP:
                    return
                if answer is not _HANG:
                    conn.sendall(answer)
        except OSError:
            return
        except Exception as e:  # a bug of the double: keep it for the test to see, drop the connection
            self.errors.append(e)
        finally:
            with self._lock:
                self._conns.discard(conn)
            _shut(conn)

    def _answer(self, payload: bytes) -> Any:
        """The framed response bytes for one request, or _DROP / _HANG."""
        api_key, version, correlation_id = struct.unpack_from(">hhi", payload)
        with self._lock:
            supported = self.api_versions.get(api_key)
            if supported is None or not supported[0] <= version <= supported[1] or api_key not in REQUEST_CLASSES:
                self.unsupported.append((api_key, version))
                if api_key == API_VERSIONS and supported is not None and version > supported[1]:
                    # Kafka answers an ApiVersions it cannot read in v0, with the range it can, so the client retries.
                    body = {"error_code": UNSUPPORTED_VERSION, "api_keys": self._api_keys([API_VERSIONS])}
                    return _encode(ApiVersionsResponse, 0, correlation_id, body)
                return _DROP  # Kafka closes the connection on a request it cannot parse
            try:
                request = REQUEST_CLASSES[api_key].decode(payload, version=version, header=True)
            except Exception:  # noqa: BLE001 - undecodable bytes: a broker closes the connection
                return _DROP
            self.requests.append(request)
            fault = self._take_fault(api_key)
            if fault is not None and fault.kind == "drop":
                return _DROP
            if fault is not None and fault.kind == "hang":
                return _HANG
            handler = getattr(self, f"_handle_{api_key}")
            body = handler(request, fault)
            if api_key == API_VERSIONS and body.get("error_code"):
                version = 0  # an ApiVersions error is always answered in v0
            return _encode(RESPONSE_CLASSES[api_key], version, request.header.correlation_id, body)

    def _api_keys(self, keys: Iterable[int] | None = None) -> list[Any]:
        keys = sorted(self.api_versions) if keys is None else keys
        v = ApiVersionsResponse.ApiVersion
        return [v(api_key=k, min_version=self.api_versions[k][0], max_version=self.api_versions[k][1]) for k in keys]

    # -- ApiVersions ------------------------------------------------------------------------------------------

    def _handle_18(self, request: Any, fault: Fault | None) -> dict[str, Any]:
        if fault is not None:
            return {"error_code": fault.code, "api_keys": self._api_keys([API_VERSIONS])}
        return {"error_code": 0, "api_keys": self._api_keys(), "throttle_time_ms": 0}

    # -- AlterClientQuotas ------------------------------------------------------------------------------------

    def _handle_49(self, request: Any, fault: Fault | None) -> dict[str, Any]:
        r = AlterClientQuotasResponse
        entries = []
        for entry in request.entries:
            code, message = (fault.code, fault.message) if fault is not None else (0, None)
            if fault is None:
                try:
                    self._alter_quotas(entry, request.validate_only)
                except RequestError as e:
                    code, message = e.code, e.message
            entity = [
                r.EntryData.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity
            ]
            entries.append(r.EntryData(error_code=code, error_message=message, entity=entity))
        return {"throttle_time_ms": 0, "entries": entries}

    def _alter_quotas(self, entry: Any, validate_only: bool) -> None:
        """One entry, whole or nothing, after Kafka's checks of the entity and of every op."""
        entity: dict[str, str | None] = {}
        for component in entry.entity:
            if component.entity_type not in (USER, CLIENT_ID, IP):
                raise RequestError(INVALID_REQUEST, f"Unhandled client quota entity type: {component.entity_type}")
            if component.entity_type in entity:
                raise RequestError(INVALID_REQUEST, f"Duplicate {component.entity_type} entity in the request.")
            entity[component.entity_type] = component.entity_name
        if not entity:
            raise RequestError(INVALID_REQUEST, "Invalid empty client quota entity")
        if IP in entity and len(entity) > 1:
            raise RequestError(
                INVALID_REQUEST,
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId entities.",
            )
        if entity.get(IP) is not None:
            try:
                ipaddress.ip_address(entity[IP])
            except ValueError:
                raise RequestError(INVALID_REQUEST, f"{entity[IP]} is not a valid IP address.") from None
        kind = "ip" if IP in entity else "client"
        key = entity_key(entity)
        values = dict(self.quotas.get(key, {}))
        seen = set()
        for op in entry.ops:
            spec = QUOTA_KEYS.get(op.key)
            if spec is None or spec[1] != kind:
                raise RequestError(INVALID_REQUEST, f"Invalid configuration key {op.key}")
            if op.key in seen:
                raise RequestError(INVALID_REQUEST, f"Duplicate quota key {op.key} for the entity.")
            seen.add(op.key)
            if op.remove:
                values.pop(op.key, None)
                continue
            if math.isnan(op.value) or math.isinf(op.value) or op.value <= 0:
                raise RequestError(INVALID_REQUEST, f"Illegal value {op.value} for quota key {op.key}")
            if spec[0] and op.value != math.floor(op.value):
                raise RequestError(INVALID_REQUEST, f"Configuration {op.key} must be a Long value")
            values[op.key] = op.value
        if validate_only:
            return
        if values:
            self.quotas[key] = values
        else:
            self.quotas.pop(key, None)

    # -- DescribeClientQuotas ---------------------------------------------------------------------------------

    def _handle_48(self, request: Any, fault: Fault | None) -> dict[str, Any]:
        if fault is not None:
            return {"throttle_time_ms": 0, "error_code": fault.code, "error_message": fault.message, "entries": None}
        try:
            matching = self._match_quotas(request.components, request.strict)
        except RequestError as e:
            return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "entries": None}
        r = DescribeClientQuotasResponse
        entries = [
            r.EntryData(
                entity=[r.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                values=[r.EntryData.ValueData(key=k, value=v) for k, v in sorted(self.quotas[entity].items())],
            )
            for entity in matching
        ]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}

    def _match_quotas(self, components: Iterable[Any], strict: bool) -> list[Entity]:
        """Kafka's filter: exact name / default (null) name / any name per listed type; strict = no other types."""
        exact: dict[str, str | None] = {}
        any_name: set[str] = set()
        for c in components:
            if c.entity_type in exact or c.entity_type in any_name:
                raise RequestError(INVALID_REQUEST, f"Entity type {c.entity_type} cannot appear more than once.")
            if c.entity_type not in (USER, CLIENT_ID, IP):
                raise RequestError(UNSUPPORTED_VERSION, f"Custom entity type {c.entity_type} not supported")
            if c.match_type == MATCH_EXACT:
                if c.match is None:
                    raise RequestError(INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but match is null.")
                exact[c.entity_type] = c.match
            elif c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
                if c.match is not None:
                    raise RequestError(INVALID_REQUEST, f"Match type {c.match_type} takes no match string.")
                if c.match_type == MATCH_DEFAULT:
                    exact[c.entity_type] = None
                else:
                    any_name.add(c.entity_type)
            else:
                raise RequestError(UNSUPPORTED_VERSION, f"Unknown match type {c.match_type}")
        typed = set(exact) | any_name
        if IP in typed and typed - {IP}:
            raise RequestError(
                INVALID_REQUEST, "IP filter component should not be used with user or clientId filter component."
            )
        found = []
        for entity in sorted(self.quotas, key=repr):
            names = dict(entity)
            if strict and len(names) != len(typed):
                continue
            if all(t in names and names[t] == n for t, n in exact.items()) and any_name <= names.keys():
                found.append(entity)
        return found

    # -- IncrementalAlterConfigs ------------------------------------------------------------------------------

    def _handle_44(self, request: Any, fault: Fault | None) -> dict[str, Any]:
        r = IncrementalAlterConfigsResponse
        responses = []
        for resource in request.resources:
            code, message = (fault.code, fault.message) if fault is not None else (0, None)
            if fault is None:
                try:
                    self._alter_configs(resource, request.validate_only)
                except RequestError as e:
                    code, message = e.code, e.message
            responses.append(
                r.AlterConfigsResourceResponse(
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        return {"throttle_time_ms": 0, "responses": responses}

    def _check_resource(self, resource_type: int, name: str) -> None:
        if resource_type == BROKER_RESOURCE:
            if name and not name.isdigit():
                raise RequestError(INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}")
            if name and int(name) != self.broker_id:
                raise RequestError(
                    INVALID_REQUEST,
                    f"Unexpected broker id, expected {self.broker_id} or empty string, but received {name}",
                )
        elif resource_type == TOPIC_RESOURCE:
            if name not in self.topics:
                raise RequestError(UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        elif resource_type == CLIENT_METRICS_RESOURCE:
            if not name:
                raise RequestError(INVALID_REQUEST, "Subscription name can't be empty")
        else:
            raise RequestError(INVALID_REQUEST, f"Unsupported resource type {resource_type}")

    def _alter_configs(self, resource: Any, validate_only: bool) -> None:
        rtype, name = resource.resource_type, resource.resource_name
        self._check_resource(rtype, name)
        configs = dict(self.configs.get((rtype, name), {}))
        seen = set()
        for c in resource.configs:
            if c.name in seen:
                raise RequestError(INVALID_REQUEST, "Error due to duplicate config keys")
            seen.add(c.name)
            if rtype == CLIENT_METRICS_RESOURCE and c.name not in CLIENT_METRICS_KEYS:
                raise RequestError(INVALID_CONFIG, f"Unknown client metrics configuration: {c.name}")
            if c.config_operation == OP_SET:
                if c.value is None:
                    raise RequestError(INVALID_REQUEST, f"Null value not supported for : {c.name}")
                configs[c.name] = c.value
            elif c.config_operation == OP_DELETE:
                configs.pop(c.name, None)
            elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
                items = [v for v in configs.get(c.name, "").split(",") if v]
                given = [v for v in (c.value or "").split(",") if v]
                if c.config_operation == OP_APPEND:
                    items += [v for v in given if v not in items]
                else:
                    items = [v for v in items if v not in given]
                configs[c.name] = ",".join(items)
            else:
                raise RequestError(INVALID_REQUEST, f"Unknown config operation {c.config_operation}")
        if validate_only:
            return
        if configs:
            self.configs[(rtype, name)] = configs
        else:
            self.configs.pop((rtype, name), None)

    # -- DescribeConfigs --------------------------------------------------------------------------------------

    def _handle_32(self, request: Any, fault: Fault | None) -> dict[str, Any]:
        r = DescribeConfigsResponse.DescribeConfigsResult
        results = []
        for resource in request.resources:
            code, message, configs = (fault.code, fault.message, []) if fault is not None else (0, None, [])
            if fault is None:
                try:
                    configs = self._describe_configs(resource, request.include_synonyms)
                except RequestError as e:
                    code, message = e.code, e.message
            results.append(
                r(
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=configs,
                )
            )
        return {"throttle_time_ms": 0, "results": results}

    def _layers(self, rtype: int, name: str) -> list[tuple[int, Mapping[str, str]]]:
        """The config layers of a resource, most specific first: (config_source, configs)."""
        if rtype == BROKER_RESOURCE and not name:
            return [(SOURCE_DYNAMIC_DEFAULT_BROKER, self.configs.get((rtype, ""), {}))]
        if rtype == BROKER_RESOURCE:
            return [
                (SOURCE_DYNAMIC_BROKER, self.configs.get((rtype, name), {})),
                (SOURCE_DYNAMIC_DEFAULT_BROKER, self.configs.get((rtype, ""), {})),
                (SOURCE_STATIC_BROKER, STATIC_BROKER_CONFIGS),
                (SOURCE_DEFAULT, DEFAULT_BROKER_CONFIGS),
            ]
        if rtype == TOPIC_RESOURCE:
            return [
                (SOURCE_DYNAMIC_TOPIC, self.configs.get((rtype, name), {})),
                (SOURCE_DEFAULT, DEFAULT_TOPIC_CONFIGS),
            ]
        return [(SOURCE_CLIENT_METRICS, self.configs.get((rtype, name), {}))]

    def _describe_configs(self, resource: Any, include_synonyms: bool) -> list[Any]:
        rtype, name = resource.resource_type, resource.resource_name
        self._check_resource(rtype, name)
        r = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
        layers = self._layers(rtype, name)
        keys = sorted({k for _, configs in layers for k in configs})
        if resource.configuration_keys is not None:
            keys = [k for k in keys if k in resource.configuration_keys]
        out = []
        for key in keys:
            found = [(source, configs[key]) for source, configs in layers if key in configs]
            source, value = found[0]
            synonyms = [r.DescribeConfigsSynonym(name=key, value=v, source=s) for s, v in found]
            out.append(
                r(
                    name=key,
                    value=value,
                    read_only=False,
                    config_source=source,
                    is_default=source == SOURCE_DEFAULT,
                    is_sensitive=False,
                    synonyms=synonyms if include_synonyms else [],
                    config_type=0,
                    documentation=None,
                )
            )
        return out


_DROP, _HANG = object(), object()


def _encode(response_class: type[ApiMessage], version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
    response = response_class(**body)
    response.API_VERSION = version  # before the header: kafka-python's encode(version=) assumes a request header
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def _read_exact(conn: socket.socket, n: int) -> bytes | None:
    chunks, missing = [], n
    while missing:
        chunk = conn.recv(min(missing, 1 << 16))
        if not chunk:
            return None
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
