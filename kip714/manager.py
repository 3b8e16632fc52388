"""KIP-714's broker side, as Kafka's ClientMetricsManager, on an explicit clock.

``ClientMetricsManager`` answers GetTelemetrySubscriptions and PushTelemetry for one broker:

- a client that sends no id (or the zero UUID) gets a fresh one (``id_generator``, default random);
- its subscription is resolved from every subscription whose ``match`` selects it: the union of the
  metric prefixes (collapsed to ``*`` when one of them says ``*``) and the smallest interval
  (300000 ms when none matches); the subscription id is
  ``(int) CRC32C(metrics.toString() + interval) ^ clientInstanceId.hashCode()`` (Java's texts);
- gets and pushes are gated by :class:`ClientMetricsInstance`; a push is then checked for a
  terminating client (INVALID_REQUEST), the subscription id (UNKNOWN_SUBSCRIPTION_ID), the
  compression type (UNSUPPORTED_COMPRESSION_TYPE) and the size (TELEMETRY_TOO_LARGE), then the
  payload goes to the exporter (a failure answers INVALID_RECORD);
- instances live in an LRU cache of 16384 and expire ``max(cache_expiry_ms, 3 x interval)`` after
  their last request; a subscription change re-evaluates a client on its next request (fresh
  timestamps, as Kafka builds a new instance).

Every entry point takes ``now_ms``; expirations due by then run first. Not thread-safe: one
manager per broker process, behind the caller's lock.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .compression import SUPPORTED_COMPRESSION_TYPES, is_known_compression_type
from .crc32c import crc32c
from .errors import TelemetryTooLarge
from .instance import ClientMetricsInstance
from .javautil import ZERO_UUID, KafkaUuid, hash_set_from_list, java_hash_set_order, java_set_to_string, to_int32
from .subscriptions import (
    ALL_SUBSCRIBED_METRICS,
    CLIENT_ID,
    CLIENT_INSTANCE_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
    INTERVAL_MS_DEFAULT,
    Subscription,
    validate_subscription,
)

CACHE_MAX_SIZE = 16_384
DEFAULT_CACHE_EXPIRY_MS = 60_000
DEFAULT_TELEMETRY_MAX_BYTES = 1_048_576

NONE = "NONE"
INVALID_REQUEST = "INVALID_REQUEST"
THROTTLING_QUOTA_EXCEEDED = "THROTTLING_QUOTA_EXCEEDED"
UNKNOWN_SUBSCRIPTION_ID = "UNKNOWN_SUBSCRIPTION_ID"
UNSUPPORTED_COMPRESSION_TYPE = "UNSUPPORTED_COMPRESSION_TYPE"
TELEMETRY_TOO_LARGE = "TELEMETRY_TOO_LARGE"
INVALID_RECORD = "INVALID_RECORD"


@dataclass(frozen=True)
class RequestContext:
    """What the broker knows of the connection a telemetry request came on."""

    client_id: str | None = None
    software_name: str | None = None
    software_version: str | None = None
    source_address: str | None = None
    source_port: int | None = None
    connection_id: str = ""

    def attributes(self, client_instance_id: KafkaUuid) -> dict[str, str | None]:
        return {
            CLIENT_INSTANCE_ID: str(client_instance_id),
            CLIENT_ID: self.client_id,
            CLIENT_SOFTWARE_NAME: self.software_name,
            CLIENT_SOFTWARE_VERSION: self.software_version,
            CLIENT_SOURCE_ADDRESS: self.source_address,
            CLIENT_SOURCE_PORT: None if self.source_port is None else str(self.source_port),
        }


@dataclass
class GetTelemetryResponse:
    error: str
    client_instance_id: str | None = None
    subscription_id: int = 0
    push_interval_ms: int = 0
    requested_metrics: list[str] = field(default_factory=list)
    accepted_compression_types: list[int] = field(default_factory=list)
    telemetry_max_bytes: int = 0
    delta_temporality: bool = False
    throttle_time_ms: int = 0  # Kafka answers 0 even when throttled
    retry_after_ms: int = 0  # when THROTTLING_QUOTA_EXCEEDED: how long until a get is accepted
    message: str | None = None


@dataclass
class PushTelemetryResponse:
    error: str
    throttle_time_ms: int = 0
    retry_after_ms: int = 0
    message: str | None = None


class Exporter(Protocol):
    def __call__(
        self,
        context: RequestContext,
        instance: ClientMetricsInstance,
        compression_type: int,
        payload: bytes,
        max_bytes: int,
    ) -> None: ...


def compute_subscription_id(
    metrics: list[str] | tuple[str, ...], push_interval_ms: int, client_instance_id: KafkaUuid
) -> int:
    """``(int) CRC32C((metrics.toString() + pushIntervalMs).getBytes(UTF_8)) ^ clientInstanceId.hashCode()``.

    ``metrics`` in the set's iteration order (it is part of the text).
    """
    text = (java_set_to_string(metrics) + str(push_interval_ms)).encode("utf-8")
    return to_int32(to_int32(crc32c(text)) ^ client_instance_id.java_hash_code())


@dataclass(order=True)
class _Timer:
    deadline_ms: int
    seq: int
    client_instance_id: KafkaUuid = field(compare=False)
    connection_id: str = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


def _parse_id(value: str | KafkaUuid | None) -> KafkaUuid | None:
    if value is None or isinstance(value, KafkaUuid):
        return value
    return KafkaUuid.from_string(value)


class ClientMetricsManager:
    def __init__(
        self,
        telemetry_max_bytes: int = DEFAULT_TELEMETRY_MAX_BYTES,
        cache_expiry_ms: int = DEFAULT_CACHE_EXPIRY_MS,
        exporter: Exporter | None = None,
        id_generator: Callable[[], KafkaUuid | str] | None = None,
        cache_max_size: int = CACHE_MAX_SIZE,
    ) -> None:
        self.telemetry_max_bytes = int(telemetry_max_bytes)
        self.cache_expiry_ms = int(cache_expiry_ms)
        self.exporter = exporter
        self.id_generator = id_generator or KafkaUuid.random
        self.cache_max_size = int(cache_max_size)
        self.subscription_update_version = 0
        self._subscriptions: dict[str, Subscription] = {}
        self._cache: OrderedDict[KafkaUuid, ClientMetricsInstance] = OrderedDict()
        self._connections: dict[str, KafkaUuid] = {}
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._instance_stats: dict[KafkaUuid, dict[str, int]] = {}
        self.unknown_subscription_count = 0

    # ------------------------------------------------------------ subscriptions

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        return dict(self._subscriptions)

    def update_subscription(self, name: str, configs: Mapping[str, str]) -> Subscription:
        """Validate and apply one subscription's whole config; empty ``configs`` removes it.

        Raises the typed validation error (nothing changed). Every applied change bumps
        ``subscription_update_version`` (a removal of an absent name does not).
        """
        sub = validate_subscription(name, configs)
        if sub.deleted:
            if name in self._subscriptions:
                del self._subscriptions[name]
                self.subscription_update_version += 1
            return sub
        self._subscriptions[name] = sub
        self.subscription_update_version += 1
        return sub

    def resolve(self, attributes: Mapping[str, str | None]) -> tuple[list[str], int]:
        """The metric set (HashSet order) and push interval of a client with these attributes."""
        interval = INTERVAL_MS_DEFAULT
        union: list[str] = []
        all_metrics = False
        for name in java_hash_set_order(self._subscriptions):  # ConcurrentHashMap iteration order
            sub = self._subscriptions[name]
            if sub.matches(attributes):
                all_metrics = all_metrics or sub.all_metrics
                union.extend(hash_set_from_list(list(sub.metrics)))
                interval = min(interval, sub.interval_ms)
        metrics = [ALL_SUBSCRIBED_METRICS] if all_metrics else java_hash_set_order(union)
        return metrics, interval

    # ------------------------------------------------------------ cache and expiry

    def advance(self, now_ms: int) -> None:
        """Run the expiration tasks due by ``now_ms``."""
        while self._timers and self._timers[0].deadline_ms <= now_ms:
            t = heapq.heappop(self._timers)
            if t.cancelled:
                continue
            self._instance_stats.pop(t.client_instance_id, None)
            self._connections.pop(t.connection_id, None)
            self._cache.pop(t.client_instance_id, None)

    def disconnect(self, connection_id: str, now_ms: int) -> None:
        """The connection closed: forget its instance (Kafka's ConnectionDisconnectListener)."""
        self.advance(now_ms)
        cid = self._connections.pop(connection_id, None)
        if cid is None:
            return
        self._instance_stats.pop(cid, None)
        inst = self._cache.pop(cid, None)
        if inst is not None and isinstance(inst.timer, _Timer):
            inst.timer.cancelled = True

    def _cache_get(self, cid: KafkaUuid) -> ClientMetricsInstance | None:
        inst = self._cache.get(cid)
        if inst is not None:
            self._cache.move_to_end(cid)
        return inst

    def _cache_put(self, cid: KafkaUuid, inst: ClientMetricsInstance) -> None:
        self._cache[cid] = inst
        self._cache.move_to_end(cid)
        while len(self._cache) > self.cache_max_size:
            self._cache.popitem(last=False)  # LRU eviction: its timer still runs, as in Kafka

    def client_instance(self, client_instance_id: str | KafkaUuid) -> ClientMetricsInstance | None:
        """Look without touching the LRU order."""
        return self._cache.get(_parse_id(client_instance_id))  # type: ignore[arg-type]

    @property
    def instance_count(self) -> int:
        return len(self._cache)

    def _create(self, cid: KafkaUuid, attributes: dict[str, str | None], connection_id: str) -> ClientMetricsInstance:
        metrics, interval = self.resolve(attributes)
        inst = ClientMetricsInstance(
            client_instance_id=cid,
            subscription_id=compute_subscription_id(metrics, interval, cid),
            subscription_version=self.subscription_update_version,
            metrics=tuple(metrics),
            push_interval_ms=interval,
            attributes=attributes,
        )
        self._instance_stats.setdefault(cid, {"throttle": 0, "plugin_export": 0, "plugin_error": 0})
        self._cache_put(cid, inst)
        self._connections[connection_id] = cid
        return inst

    def _instance(self, cid: KafkaUuid, context: RequestContext, now_ms: int) -> ClientMetricsInstance:
        inst = self._cache_get(cid)
        if inst is None:
            inst = self._create(cid, context.attributes(cid), context.connection_id)
        elif inst.subscription_version < self.subscription_update_version:
            if isinstance(inst.timer, _Timer):
                inst.timer.cancelled = True
            inst = self._create(cid, inst.attributes, context.connection_id)
        if isinstance(inst.timer, _Timer):
            inst.timer.cancelled = True
        timer = _Timer(now_ms + self.expiration_ms(inst), next(self._seq), cid, context.connection_id)
        inst.timer = timer
        heapq.heappush(self._timers, timer)
        return inst

    def expiration_ms(self, inst: ClientMetricsInstance) -> int:
        return max(self.cache_expiry_ms, inst.push_interval_ms * 3)

    def _generate_id(self) -> KafkaUuid:
        while True:
            cid = _parse_id(self.id_generator())
            assert cid is not None
            if cid not in self._cache:
                return cid

    def _count(self, cid: KafkaUuid, name: str) -> None:
        stats = self._instance_stats.get(cid)
        if stats is not None:
            stats[name] += 1

    def counters(self) -> dict[str, int]:
        """Totals of the throttle / plugin sensors of the registered instances, unknown-subscription
        requests and the live instance count."""
        total = {"throttle": 0, "plugin_export": 0, "plugin_error": 0}
        for stats in self._instance_stats.values():
            for k in total:
                total[k] += stats[k]
        return {
            "throttle": total["throttle"],
            "unknown_subscription": self.unknown_subscription_count,
            "plugin_export": total["plugin_export"],
            "plugin_error": total["plugin_error"],
            "instances": len(self._cache),
        }

    # ------------------------------------------------------------ the two RPCs

    def get_telemetry_subscriptions(
        self, client_instance_id: str | KafkaUuid | None, context: RequestContext, now_ms: int
    ) -> GetTelemetryResponse:
        self.advance(now_ms)
        try:
            cid = _parse_id(client_instance_id)
        except ValueError as e:
            return GetTelemetryResponse(INVALID_REQUEST, message=str(e))
        if cid is None or cid == ZERO_UUID:
            cid = self._generate_id()
        inst = self._instance(cid, context, now_ms)
        if not inst.maybe_update_get_request_timestamp(now_ms) and inst.last_known_error not in (
            UNKNOWN_SUBSCRIPTION_ID,
            UNSUPPORTED_COMPRESSION_TYPE,
        ):
            self._count(cid, "throttle")
            return GetTelemetryResponse(
                THROTTLING_QUOTA_EXCEEDED,
                client_instance_id=str(cid),
                retry_after_ms=inst.get_retry_after_ms(now_ms),
                message=f"Request from the client [{cid}] arrived before the next push interval time",
            )
        inst.last_known_error = NONE
        return GetTelemetryResponse(
            NONE,
            client_instance_id=str(cid),
            subscription_id=inst.subscription_id,
            push_interval_ms=inst.push_interval_ms,
            requested_metrics=list(inst.metrics),
            accepted_compression_types=list(SUPPORTED_COMPRESSION_TYPES),
            telemetry_max_bytes=self.telemetry_max_bytes,
            delta_temporality=True,
        )

    def push_telemetry(
        self,
        client_instance_id: str | KafkaUuid | None,
        subscription_id: int,
        compression_type: int,
        metrics: bytes | None,
        terminating: bool,
        context: RequestContext,
        now_ms: int,
    ) -> PushTelemetryResponse:
        self.advance(now_ms)
        try:
            cid = _parse_id(client_instance_id)
        except ValueError:
            cid = None
        if cid is None or cid.is_reserved():
            return PushTelemetryResponse(
                INVALID_REQUEST,
                message=f"Invalid request from the client [{client_instance_id}], invalid client instance id",
            )
        inst = self._instance(cid, context, now_ms)
        error, message, retry = self._validate_push(
            inst, cid, subscription_id, compression_type, metrics, terminating, now_ms
        )
        inst.terminating = bool(terminating)  # Kafka sets it whatever the outcome
        if error != NONE:
            inst.last_known_error = error
            return PushTelemetryResponse(error, retry_after_ms=retry, message=message)
        if metrics:
            try:
                if self.exporter is not None:
                    self.exporter(context, inst, compression_type, metrics, self.telemetry_max_bytes)
                self._count(cid, "plugin_export")
            except TelemetryTooLarge as e:
                self._count(cid, "plugin_error")
                inst.last_known_error = TELEMETRY_TOO_LARGE
                return PushTelemetryResponse(TELEMETRY_TOO_LARGE, message=str(e))
            except Exception as e:  # noqa: BLE001 - any exporter failure is INVALID_RECORD, as in Kafka
                self._count(cid, "plugin_error")
                inst.last_known_error = INVALID_RECORD
                return PushTelemetryResponse(INVALID_RECORD, message=str(e))
        inst.last_known_error = NONE
        return PushTelemetryResponse(NONE)

    def _validate_push(
        self,
        inst: ClientMetricsInstance,
        cid: KafkaUuid,
        subscription_id: int,
        compression_type: int,
        metrics: bytes | None,
        terminating: bool,
        now_ms: int,
    ) -> tuple[str, str | None, int]:
        if inst.terminating:
            return (
                INVALID_REQUEST,
                f"Client [{cid}] sent the previous request with state terminating to TRUE, can not accept"
                "any requests after that",
                0,
            )
        retry = inst.push_retry_after_ms(now_ms)
        if not inst.maybe_update_push_request_timestamp(now_ms) and not terminating:
            self._count(cid, "throttle")
            message = f"Request from the client [{cid}] arrived before the next push interval time"
            return THROTTLING_QUOTA_EXCEEDED, message, retry
        if subscription_id != inst.subscription_id:
            self.unknown_subscription_count += 1
            return UNKNOWN_SUBSCRIPTION_ID, f"Unknown client subscription id for the client [{cid}]", 0
        if not is_known_compression_type(compression_type):
            return (
                UNSUPPORTED_COMPRESSION_TYPE,
                f"Unknown compression type [{compression_type}] is received in telemetry request from [{cid}]",
                0,
            )
        if metrics is not None and len(metrics) > self.telemetry_max_bytes:
            return (
                TELEMETRY_TOO_LARGE,
                f"Telemetry request from [{cid}] is larger than the maximum allowed size [{self.telemetry_max_bytes}]",
                0,
            )
        return NONE, None, 0
