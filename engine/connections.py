"""Connection quotas inside the acceptor (Kafka's ``ConnectionQuotas``, KIP-612).

Count limits (broker, listener, per IP with overrides) and creation-rate limits
(broker, listener, per IP through ``connection_creation_rate`` on ip entities),
decided as Kafka's acceptor decides them:

1. record the connection in the broker and listener rate sensors (the protected
   inter-broker listener skips the broker's); a throttle, or no free slot,
   means the acceptor waits (``blocked``: delay and try again);
2. record it in the IP's rate sensor; a violation drops the connection and
   un-records it from the IP, listener and broker rates (``ip_throttled``);
3. count it; reaching the per-IP maximum rejects it *after* counting
   (``too_many_connections``), as Kafka does: the caller releases it.

Two implementations, kept equal by the conformance cases: ``ModelConnectionQuotas``
(pure Python, the reference) and ``RedisConnectionQuotas`` (``lua/connection.lua``,
one script call for a batch of admissions, state under one hash tag per broker).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import redis

from .config import QuotaConfigStore
from .decisions import SENSOR_EXPIRY_MS, check_sampling
from .entities import DEFAULT, normalize_ip
from .errors import EngineUnavailable, JavaIllegalArgument, QuotaValidationError
from .javamath import INT_MAX, to_int
from .quota_utils import bounded_throttle_time_ms
from .redis_backend import UNAVAILABLE, redis_error
from .sensor import QuotaViolation, Sensor
from .stats import MetricConfig, Quota, Rate, WindowedSum

ACCEPTED, IP_THROTTLED, TOO_MANY, BLOCKED, OK = "accepted", "ip_throttled", "too_many_connections", "blocked", "ok"


class Admission(NamedTuple):
    """The acceptor's answer. ``decision``: admit, delay (wait ``throttle_ms``, or for a slot when 0), reject."""

    result: str
    throttle_ms: int = 0
    count: int = 0  # connections of this IP
    total: int = 0  # connections of the broker
    epoch: int = 0  # blocked: releases and limit changes seen so far (hand it to wait_for_slot)

    @property
    def decision(self) -> str:
        return {ACCEPTED: "admit", BLOCKED: "delay", OK: "ok"}.get(self.result, "reject")


def _non_negative_int(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise QuotaValidationError(f"{key} must be an integer, got {value!r}.")
    try:
        v = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise QuotaValidationError(f"{key} must be an integer, got {value!r}.") from None
    if v < 0:
        raise QuotaValidationError(f"{key} must be at least 0, got {v}.")
    if v > INT_MAX:
        raise QuotaValidationError(f"{key}={v} is too large for an INT.")
    return v


def parse_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``ip:count,ip:count`` (IP literals; IPv6 may be bracketed)."""
    overrides: dict[str, int] = {}
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host:
            raise QuotaValidationError(
                f"max.connections.per.ip.overrides entry {entry!r} is not of the form ip:count."
            )
        overrides[normalize_ip(host.strip("[]"))] = _non_negative_int("max.connections.per.ip.overrides", count)
    return overrides


@dataclass(frozen=True)
class ConnectionConfig:
    """A broker's connection limits, by Kafka's config names (``from_props``)."""

    listeners: tuple[str, ...] = ("PLAINTEXT",)
    inter_broker_listener: str | None = None
    samples: int = 11
    window_s: int = 1
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = INT_MAX
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    listener_max_connection_creation_rate: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.listeners or len(set(self.listeners)) != len(self.listeners):
            raise QuotaValidationError(f"listeners must name distinct listeners, got {list(self.listeners)}.")
        for name in (self.inter_broker_listener, *self.listener_max_connections,
                     *self.listener_max_connection_creation_rate):
            if name is not None and name not in self.listeners:
                raise QuotaValidationError(f"Unknown listener {name!r}; listeners are {', '.join(self.listeners)}.")
        check_sampling(self.samples, self.window_s * 1000)
        if self.max_connections_per_ip == 0 and not self.per_ip_overrides:
            raise QuotaValidationError(
                "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides is set."
            )
        for name, v in self.listener_max_connections.items():
            if v <= 0:
                raise QuotaValidationError(f"Invalid listener.name.{name}.max.connections {v}: it must be positive.")
        for name, v in self.listener_max_connection_creation_rate.items():
            if v <= 0:
                raise QuotaValidationError(
                    f"Invalid listener.name.{name}.max.connection.creation.rate {v}: it must be positive."
                )

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> ConnectionConfig:
        """Build from broker properties; an unknown ``listener.name.X`` or a bad value is refused whole."""
        listeners = tuple(
            p.split(":", 1)[0].strip().upper() if "://" in p else p.strip().upper()
            for p in str(props.get("listeners", "PLAINTEXT")).split(",") if p.strip()
        )
        kwargs: dict[str, object] = {"listeners": listeners}
        lmax: dict[str, int] = {}
        lrate: dict[str, int] = {}
        for key, value in props.items():
            if key == "inter.broker.listener.name":
                kwargs["inter_broker_listener"] = str(value).strip().upper()
            elif key in ("quota.window.num", "quota.window.size.seconds"):
                n = _non_negative_int(key, value)
                if n < 1:
                    raise QuotaValidationError(f"{key} must be at least 1, got {n}.")
                kwargs["samples" if key == "quota.window.num" else "window_s"] = n
            elif key == "max.connections":
                kwargs["max_connections"] = _non_negative_int(key, value)
            elif key == "max.connections.per.ip":
                kwargs["max_connections_per_ip"] = _non_negative_int(key, value)
            elif key == "max.connections.per.ip.overrides":
                kwargs["per_ip_overrides"] = parse_ip_overrides(str(value))
            elif key == "max.connection.creation.rate":
                kwargs["max_connection_creation_rate"] = _non_negative_int(key, value)
            elif key.startswith("listener.name."):
                rest = key[len("listener.name."):]
                name, _, prop = rest.partition(".")
                name = name.upper()
                if prop == "max.connections":
                    lmax[name] = _non_negative_int(key, value)
                elif prop == "max.connection.creation.rate":
                    lrate[name] = _non_negative_int(key, value)
                else:
                    raise QuotaValidationError(f"Unknown listener config {key!r}.")
            elif key != "listeners":
                raise QuotaValidationError(f"Unknown connection quota config {key!r}.")
        return cls(listener_max_connections=lmax, listener_max_connection_creation_rate=lrate, **kwargs)  # type: ignore[arg-type]

    @property
    def window_ms(self) -> int:
        return self.window_s * 1000

    def check_listener(self, listener: str) -> str:
        if listener not in self.listeners:
            raise QuotaValidationError(f"Unknown listener {listener!r}; listeners are {', '.join(self.listeners)}.")
        return listener

    def protected(self, listener: str) -> bool:
        """The inter-broker listener bypasses the broker-wide count and rate when there are several listeners."""
        return listener == self.inter_broker_listener and len(self.listeners) > 1

    def max_for_ip(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)


class IpRates:
    """``connection_creation_rate`` of ip entities: overrides and the ``<default>`` (Int.MAX = no quota)."""

    def __init__(self) -> None:
        self.overrides: dict[str, int] = {}
        self.default = INT_MAX

    def update(self, ip: str | None, rate: int | None) -> None:
        if rate is not None:
            rate = _non_negative_int("connection_creation_rate", rate)
        if ip is None:
            self.default = INT_MAX if rate is None else rate
        elif rate is None:
            self.overrides.pop(normalize_ip(ip), None)
        else:
            self.overrides[normalize_ip(ip)] = rate

    def rate_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.default)

    @classmethod
    def from_store(cls, store: QuotaConfigStore) -> IpRates:
        """The ``connection_creation_rate`` of every ip entity in a namespace's quota config."""
        rates = cls()
        _, config = store.load()
        for entity, values in config.items():
            if entity.ip is not None and "connection_creation_rate" in values:
                rates.update(None if entity.ip == DEFAULT else entity.ip, int(values["connection_creation_rate"]))
        return rates


# ---------------------------------------------------------------- the reference model


class ModelConnectionQuotas:
    """Kafka's ConnectionQuotas on the reference sensors, one broker, in process."""

    def __init__(self, config: ConnectionConfig, expiry_ms: int = SENSOR_EXPIRY_MS) -> None:
        self.config = config
        self.ip_rates = IpRates()
        self.expiry_ms = expiry_ms
        self.counts: dict[str, int] = {}
        self.listener_counts = {name: 0 for name in config.listeners}
        self.total = 0
        self.epoch = 0
        self.sensors: dict[str, Sensor] = {}
        # the broker's and each listener's rate sensors exist from the start and never expire
        self._broker_sensor(0)
        for name in config.listeners:
            self._listener_sensor(name, 0)

    def _sensor(self, name: str, bound: int, t: int, expires: bool) -> Sensor:
        s = self.sensors.get(name)
        if s is None or (expires and t - s.last_record_ms > self.expiry_ms):
            s = Sensor(name, last_record_ms=t)
            s.add(name, Rate(WindowedSum()), MetricConfig())
            self.sensors[name] = s
        c = self.config
        s.metrics[0].config = MetricConfig(c.samples, c.window_ms, Quota(float(bound)))
        return s

    def _record(self, sensor: Sensor, t: int) -> int:
        """``recordAndGetThrottleTimeMs``: the bounded throttle, 0 when within the rate."""
        try:
            sensor.record(1.0, t, True)
            return 0
        except QuotaViolation as e:
            ws = e.metric.stat.window_size(e.metric.config, t)  # type: ignore[union-attr]
            return to_int(bounded_throttle_time_ms(e.value, e.bound, ws, self.config.window_ms))

    def _listener_sensor(self, listener: str, t: int) -> Sensor:
        rate = self.config.listener_max_connection_creation_rate.get(listener, INT_MAX)
        return self._sensor(f"listener:{listener}", rate, t, expires=False)

    def _broker_sensor(self, t: int) -> Sensor:
        return self._sensor("broker", self.config.max_connection_creation_rate, t, expires=False)

    def _slot_available(self, listener: str) -> bool:
        c = self.config
        if self.listener_counts[listener] >= c.listener_max_connections.get(listener, INT_MAX):
            return False
        if c.protected(listener):
            return True
        return self.total < c.max_connections

    def inc(self, listener: str, ip: str, t: int) -> Admission:
        """An accepted socket: wait-or-go on the broker/listener limits, then the IP's rate and count."""
        self.config.check_listener(listener)
        ip = normalize_ip(ip)
        if self.config.protected(listener):
            throttle = max(0, self._record(self._listener_sensor(listener, t), t))
        else:
            broker = self._record(self._broker_sensor(t), t)
            throttle = max(broker, self._record(self._listener_sensor(listener, t), t))
        if throttle > 0 or not self._slot_available(listener):
            return Admission(BLOCKED, throttle, self.counts.get(ip, 0), self.total, self.epoch)
        return self._admit_ip(listener, ip, t)

    def inc_after_wait(self, listener: str, ip: str, t: int) -> Admission:
        """After the delay: go on when a slot is free (Kafka's acceptor loop), else keep waiting."""
        self.config.check_listener(listener)
        ip = normalize_ip(ip)
        if not self._slot_available(listener):
            return Admission(BLOCKED, 0, self.counts.get(ip, 0), self.total, self.epoch)
        return self._admit_ip(listener, ip, t)

    def _admit_ip(self, listener: str, ip: str, t: int) -> Admission:
        rate = self.ip_rates.rate_for(ip)
        if rate != INT_MAX:
            sensor = self._sensor(f"ip:{ip}", rate, t, expires=True)
            throttle = self._record(sensor, t)
            if throttle > 0:
                sensor.record(-1.0, t, False)
                if not self.config.protected(listener):
                    self._broker_sensor(t).record(-1.0, t, False)
                self._listener_sensor(listener, t).record(-1.0, t, False)
                return Admission(IP_THROTTLED, throttle, self.counts.get(ip, 0), self.total)
        count = self.counts.get(ip, 0)
        self.counts[ip] = count + 1
        self.total += 1
        self.listener_counts[listener] += 1
        result = TOO_MANY if count >= self.config.max_for_ip(ip) else ACCEPTED
        return Admission(result, 0, count + 1, self.total)

    def dec(self, listener: str, ip: str, t: int = 0) -> Admission:
        """A closed connection; frees a slot for a waiting acceptor."""
        self.config.check_listener(listener)
        ip = normalize_ip(ip)
        count = self.counts.get(ip)
        if count is None:
            raise JavaIllegalArgument(f"Attempted to decrease connection count for address with no connections: {ip}")
        if count == 1:
            del self.counts[ip]
        else:
            self.counts[ip] = count - 1
        self.total -= 1
        self.epoch += 1
        if self.listener_counts[listener] > 0:
            self.listener_counts[listener] -= 1
        return Admission(OK, 0, count - 1, self.total)

    def get(self, ip: str) -> int:
        return self.counts.get(normalize_ip(ip), 0)

    def max_connections_exceeded(self, listener: str) -> bool:
        self.config.check_listener(listener)
        return self.total > self.config.max_connections and not self.config.protected(listener)

    def measure(self, which: str, name: str | None, t: int) -> float | None:
        """The measured rate of the broker, a listener or an IP sensor (None when it does not exist)."""
        key = "broker" if which == "broker" else f"{which}:{normalize_ip(name) if which == 'ip' else name}"
        s = self.sensors.get(key)
        return None if s is None else s.metrics[0].value(t)

    def ip_sensor_bound(self, ip: str) -> float | None:
        """Kafka re-configures an IP's sensor whenever its quota changes: its bound is the IP's rate."""
        ip = normalize_ip(ip)
        return float(self.ip_rates.rate_for(ip)) if f"ip:{ip}" in self.sensors else None


# ---------------------------------------------------------------- Redis


_OP = {"inc": 1, "inc_after_wait": 2, "dec": 3, "get": 4, "ip": 5, "listener": 6, "broker": 7, "exceeded": 8}
_RESULT = {1: ACCEPTED, 2: IP_THROTTLED, 3: TOO_MANY, 4: BLOCKED, 5: OK}
_ROW = struct.Struct("<Biiid")


class RedisConnectionQuotas:
    """ConnectionQuotas held in Redis: one broker's counts and rate sensors under one hash tag.

    Each call runs ``lua/connection.lua`` once, for one operation or a batch (``admit_many``),
    so acceptors of several processes share one consistent view. Limits come from the
    ``ConnectionConfig`` and ``ip_rates`` held here (as the broker holds its config).
    """

    def __init__(
        self, client: redis.Redis, namespace: str, config: ConnectionConfig, expiry_ms: int = SENSOR_EXPIRY_MS
    ) -> None:
        from .managers import check_namespace
        from .redis_backend import lua_script

        check_namespace(namespace)
        self.client = client
        self.namespace = namespace
        self.config = config
        self.ip_rates = IpRates()
        self.expiry_ms = expiry_ms
        self.prefix = f"qe:{{{namespace}|conn}}"
        self.counts_key = f"{self.prefix}:counts"
        self._script = client.register_script(lua_script("connection.lua"))
        self._prepare()

    def _prepare(self) -> None:
        """What every call sends about the broker and its listeners, built once per config."""
        c = self.config
        self._lindex = {name: i + 1 for i, name in enumerate(c.listeners)}
        self._static_keys = [self.counts_key, f"{self.prefix}:rate:broker"] + [
            f"{self.prefix}:rate:l:{name}" for name in c.listeners
        ]
        self._config_blob = struct.pack(
            "<HiidiH", c.samples, c.window_ms, c.window_ms, float(c.max_connection_creation_rate),
            c.max_connections, len(c.listeners),
        )
        self._listener_blob = b"".join(
            struct.pack("<diB", float(c.listener_max_connection_creation_rate.get(name, INT_MAX)),
                        c.listener_max_connections.get(name, INT_MAX), 1 if c.protected(name) else 0)
            for name in c.listeners
        )

    def update_config(self, config: ConnectionConfig) -> None:
        """New limits apply to the next operation; waiting acceptors are told to re-check their slot."""
        self.config = config
        self._prepare()
        self._publish()

    def update_ip_rate(self, ip: str | None, rate: int | None) -> None:
        self.ip_rates.update(ip, rate)

    def _publish(self) -> None:
        try:
            self.client.hincrby(self.counts_key, "epoch", 1)
            self.client.publish(self.counts_key, "limits")
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for connection quotas: {e}") from e

    def _run(self, ops: Sequence[tuple[str, str | None, str | None, int]]) -> list[tuple[int, int, int, int, float]]:
        """One script call per 1,000 operations, in order (Lua's stack bounds one call)."""
        if len(ops) > 1000:
            return [row for i in range(0, len(ops), 1000) for row in self._run(ops[i : i + 1000])]
        c = self.config
        lindex = self._lindex
        ips: dict[str, int] = {}
        flat: list[float] = []
        for op, listener, ip, t in ops:
            if listener is None:
                li = 1
            else:
                li = lindex.get(listener) or lindex[c.check_listener(listener)]
            ii = 0
            if ip is not None:
                ip = normalize_ip(ip)
                ii = ips.setdefault(ip, len(ips) + 1)
            flat += (_OP[op], li, ii, t)
        rate_for, max_for = self.ip_rates.rate_for, c.max_for_ip
        args = [
            struct.pack("<" + "BHHd" * len(ops), *flat),
            self.expiry_ms,
            self._config_blob,
            self._listener_blob,
            struct.pack("<" + "di" * len(ips), *[x for ip in ips for x in (float(rate_for(ip)), max_for(ip))]),
            *c.listeners,
            *ips,
        ]
        keys = self._static_keys + [f"{self.prefix}:rate:ip:{ip}" for ip in ips]
        try:
            raw = self._script(keys=keys, args=args)
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis did not answer a connection admission (outcome unknown): {e}") from e
        except redis.exceptions.ResponseError as e:
            raise redis_error(e, "The connection quota script failed") from e
        return list(_ROW.iter_unpack(raw))

    @staticmethod
    def _admission(row: tuple[int, int, int, int, float]) -> Admission:
        code, throttle, count, total, value = row
        if code == 7:
            raise JavaIllegalArgument("Attempted to decrease connection count for address with no connections")
        return Admission(_RESULT[code], throttle, count, total, int(value) if code == 4 else 0)

    def admit_many(self, requests: Iterable[tuple[str, str, int]]) -> list[Admission]:
        """Many accepted sockets (listener, ip, t), decided in order (one script call per 1,000)."""
        return [self._admission(r) for r in self._run([("inc", lst, ip, t) for lst, ip, t in requests])]

    def inc(self, listener: str, ip: str, t: int) -> Admission:
        return self.admit_many([(listener, ip, t)])[0]

    def inc_after_wait(self, listener: str, ip: str, t: int) -> Admission:
        return self._admission(self._run([("inc_after_wait", listener, ip, t)])[0])

    def dec(self, listener: str, ip: str, t: int = 0) -> Admission:
        return self._admission(self._run([("dec", listener, ip, t)])[0])

    def get(self, ip: str) -> int:
        return self._run([("get", None, ip, 0)])[0][2]

    def measure(self, which: str, name: str | None, t: int) -> float | None:
        if which == "ip":
            row = self._run([("ip", None, name, t)])[0]
        else:
            row = self._run([(which, name if which == "listener" else None, None, t)])[0]
        return None if row[4] != row[4] else row[4]

    def max_connections_exceeded(self, listener: str) -> bool:
        return self._run([("exceeded", listener, None, 0)])[0][4] == 1.0

    def ip_sensor_bound(self, ip: str) -> float | None:
        ip = normalize_ip(ip)
        return float(self.ip_rates.rate_for(ip)) if self.client.exists(f"{self.prefix}:rate:ip:{ip}") else None

    def wait_for_slot(self, timeout_s: float, epoch: int) -> bool:
        """Block until a connection closes or the limits change (Kafka's counts.notifyAll), or time out.

        ``epoch`` is the blocked admission's: a release that came before this call subscribed
        is seen through the epoch, so no wake-up is lost.
        """
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self.counts_key)
            if int(self.client.hget(self.counts_key, "epoch") or 0) != epoch:
                return True
            deadline = time.monotonic() + timeout_s
            while (left := deadline - time.monotonic()) > 0:
                if pubsub.get_message(timeout=left) is not None:
                    return True
            return False
        finally:
            pubsub.close()
