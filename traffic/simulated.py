"""The load generator's state per broker and per simulated client: its engine namespace, connections and the
clients' steps (``traffic.loadgen`` drives them)."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis

from engine import usage_log
from engine.config import QuotaEngine, namespace_for_broker
from engine.connections import (
    ConnectionConfig,
    IpRates,
    RedisConnectionQuotas,
)
from engine.desired import BrokerConfigStore
from engine.entities import QuotaType
from engine.errors import QuotaEngineError, ThrottlingQuotaExceeded
from engine.managers import UsageRecord
from engine.monitor import Sampler
from engine.replication import BROKER_RATE_KEYS
from traffic.workload import (
    ADMIN_RETRY_BACKOFF_MS,
    BUFFER_S,
    FETCH_MAX_BYTES,
    MAX_REQUEST_BYTES,
    RECONNECT_BACKOFF_MS,
    BrokerTarget,
    ConnectionStorm,
    TopicBursts,
    Traffic,
)

from .engine_budgets import BrokerBudgets

if TYPE_CHECKING:
    from traffic.loadgen import LoadGenerator

log = logging.getLogger(__name__)

# ------------------------------------------------------------------ per broker


@dataclass
class _IpStats:
    """One IP's admissions on one broker since the last sample."""

    attempts: int = 0
    accepted: int = 0
    rejected: int = 0
    throttles: list[int] = field(default_factory=list)
    covered_ms: int = 0  # of the last second, the time the IP spent throttled
    until: int = 0
    count: int = 0
    seen: int = 0

    def throttled(self, t: int, ms: int) -> None:
        self.throttles.append(ms)
        end = t + ms
        self.covered_ms += max(0, end - max(t, self.until))
        self.until = max(self.until, end)


class _Namespace:
    """A quota namespace: its engine, its pushed broker configs, and the brokers that use it."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.engine = QuotaEngine(client, namespace)
        self.configs = BrokerConfigStore(client, namespace)
        self.configs_version = -1
        self.brokers: list[_Broker] = []

    @property
    def channels(self) -> list[str]:
        return [self.engine.store.channel, self.configs.channel]

    def reload(self, force: bool = False) -> bool:
        """Reload what changed (quotas, ip rates, connection limits); True when something did."""
        changed = False
        if self.engine.refresh(force):
            changed = True
            rates = IpRates.from_store(self.engine.store)
            for b in self.brokers:
                b.conn.ip_rates = rates
        version = self.configs.version()
        if force or version != self.configs_version:
            self.configs_version = version
            for b in self.brokers:
                changed |= b.load_connection_config()
        return changed


class _Broker:
    def __init__(self, target: BrokerTarget, ns: _Namespace, index: int, monitor: redis.Redis | None = None) -> None:
        self.target = target
        self.index = index  # its position among its cluster's brokers (a client's link to it)
        self.cluster = target.cluster
        self.id = target.broker_id
        self.ns = ns
        managers = ns.engine.managers
        self.produce = managers[QuotaType.PRODUCE]
        self.fetch = managers[QuotaType.FETCH]
        self.request = managers[QuotaType.REQUEST]
        self.mutation = managers[QuotaType.CONTROLLER_MUTATION]
        self.sampler = Sampler(ns.client, target.cluster, target.broker_id, managers, monitor=monitor)
        self.listeners = target.listeners
        self.base_props: dict[str, object] = {"listeners": ",".join(target.listeners)}
        if target.inter_broker_listener:
            self.base_props["inter.broker.listener.name"] = target.inter_broker_listener
        config = ConnectionConfig.from_props(self.base_props)
        self.conn = RedisConnectionQuotas(ns.client, namespace_for_broker(target.cluster, target.broker_id), config)
        self.props: dict[str, str] = {}
        # this tick's requests: (client, kind, bytes, thread ns)
        self.requests: list[tuple[_ByteClient, str, float, float]] = []
        # connections: admissions due, open ones (close time), blocked ones waiting
        self.admit_due: list[tuple[str, str, _Owner]] = []
        self.open: list[tuple[int, int, str, str, _Owner]] = []  # heap of (close at, seq, listener, ip, owner)
        self.waiting: list[tuple[int, int, str, str, _Owner]] = []  # heap of (retry at, seq, listener, ip, owner)
        self.ips: dict[str, _IpStats] = {}
        self.listener_counts = {name: 0 for name in target.listeners}
        self.listener_accepted = {name: 0 for name in target.listeners}
        self.total = 0
        self._seq = 0
        self.budgets: BrokerBudgets  # set by the LoadGenerator, which knows the cluster's brokers

    def restart_connections(self) -> None:
        """A broker that starts has no connections: forget counts a previous run left (it may have been killed)."""
        fields = [f for f in self.conn.client.hkeys(self.conn.counts_key) if f != b"epoch"]
        if fields:
            self.conn.client.hdel(self.conn.counts_key, *fields)

    def load_connection_config(self) -> bool:
        """The broker's pushed configs (the default broker's, overlaid with its own) as its connection limits."""
        props = self.ns.configs.effective(self.id)
        if props == self.props:
            return False
        self.props = props
        usable = {k: v for k, v in props.items() if k not in BROKER_RATE_KEYS}
        try:
            config = ConnectionConfig.from_props({**self.base_props, **usable})
        except QuotaEngineError as e:
            log.warning("%s/broker-%s: ignoring pushed connection configs: %s", self.cluster, self.id, e)
            return False
        self.conn.update_config(config)
        return True

    def seq(self) -> int:
        self._seq += 1
        return self._seq

    def ip(self, ip: str, t: int) -> _IpStats:
        s = self.ips.get(ip)
        if s is None:
            s = self.ips[ip] = _IpStats()
        s.seen = t
        return s


# ------------------------------------------------------------------ clients


class _Owner:
    """Who holds a connection, and what it does when the connection ends or is refused."""

    ip: str
    lifetime_ms: tuple[int, int]

    def closed(self, broker: _Broker, listener: str, t: int) -> None:
        """The connection ended (its lifetime is up)."""

    def refused(self, broker: _Broker, listener: str, t: int) -> None:
        """The broker rejected the connection."""


class _ClientConnections(_Owner):
    """A well-behaved client: one connection per broker, re-opened now and then (and after a refusal)."""

    def __init__(self, ip: str, rng: random.Random) -> None:
        self.ip = ip
        self.lifetime_ms = (120_000, 360_000)
        self.rng = rng
        self.retry: list[tuple[int, _Broker, str]] = []

    def closed(self, broker: _Broker, listener: str, t: int) -> None:
        broker.admit_due.append((listener, self.ip, self))

    def refused(self, broker: _Broker, listener: str, t: int) -> None:
        self.retry.append((t + RECONNECT_BACKOFF_MS, broker, listener))

    def due(self, t: int) -> None:
        if not self.retry:
            return
        keep = []
        for at, broker, listener in self.retry:
            if at <= t:
                broker.admit_due.append((listener, self.ip, self))
            else:
                keep.append((at, broker, listener))
        self.retry = keep


class _StormConnections(_Owner):
    def __init__(self, storm: ConnectionStorm) -> None:
        self.ip = storm.ip
        ms = int(storm.lifetime_s * 1000)
        self.lifetime_ms = (ms, ms)


@dataclass
class _Link:
    """A client's connection to one broker: buffered data, consumer lag, and until when it is muted."""

    weight: float
    backlog: float = 0.0
    lag: float = 0.0
    produce_muted_until: int = 0
    fetch_muted_until: int = 0


class _ByteClient:
    def __init__(self, p: Traffic, scale: float, brokers: int, rng: random.Random) -> None:
        self.p = p
        self.user, self.client_id = p.user, p.client_id
        self.produce_rate = p.produce * scale
        self.fetch_rate = p.fetch * scale
        self.rng = rng
        weights = [rng.uniform(0.85, 1.15) for _ in range(brokers)]  # partition leadership is never quite even
        total = sum(weights)
        self.links = [_Link(w / total) for w in weights]
        self.fetch_window: dict[int, tuple[int, float]] = {}  # broker index -> (its config version, max fetch)

    def thread_ns(self) -> float:
        return self.p.thread_ms * 1e6 * self.rng.uniform(0.8, 1.2)

    def max_fetch(self, broker: _Broker) -> float:
        """Kafka caps a fetch at what the quota window may carry (``getMaxValueInQuotaWindow``)."""
        version = broker.ns.engine.version
        cached = self.fetch_window.get(broker.index)
        if cached is None or cached[0] != version:
            cached = (version, broker.fetch.max_value_in_quota_window(self.user, self.client_id))
            self.fetch_window[broker.index] = cached
        return min(FETCH_MAX_BYTES, cached[1])

    def step(self, t: int, dt_ms: int, brokers: Sequence[_Broker]) -> None:
        f = self.p.factor(t) * self.rng.uniform(0.85, 1.15)
        dt_s = dt_ms / 1000.0
        for link, broker in zip(self.links, brokers, strict=True):
            if self.produce_rate:
                want = self.produce_rate * f * link.weight
                link.backlog = min(link.backlog + want * dt_s, max(want, self.produce_rate * link.weight) * BUFFER_S)
                if t >= link.produce_muted_until and link.backlog >= 1.0:
                    size = float(int(min(link.backlog, MAX_REQUEST_BYTES)))
                    link.backlog -= size
                    broker.requests.append((self, "produce", size, self.thread_ns()))
            if self.fetch_rate:
                link.lag = min(link.lag + self.fetch_rate * f * link.weight * dt_s, 1e12)
                if t >= link.fetch_muted_until and link.lag >= 1.0:
                    size = float(int(min(link.lag, self.max_fetch(broker))))
                    broker.requests.append((self, "fetch", size, self.thread_ns()))


class _AdminClient:
    def __init__(self, p: TopicBursts, t0: int) -> None:
        self.p = p
        every = int(p.every_s * 1000)
        phase = int(p.phase_s * 1000)
        self.next_burst = ((t0 + phase) // every + 1) * every - phase
        self.pending: list[str] = []
        self.tried: set[str] = set()  # the topics of the last request that were refused (and are retried)
        self.bursts = 0
        self.next_send = 0

    def step(self, t: int, controller: _Broker, gen: LoadGenerator) -> None:
        p = self.p
        if t >= self.next_burst:
            self.bursts += 1
            self.pending += [f"{p.client_id}-{self.bursts}-{i}" for i in range(p.topics)]
            self.next_burst += int(p.every_s * 1000)
        if not self.pending or t < self.next_send:
            return
        batch, rest = self.pending[: p.per_request], self.pending[p.per_request :]
        quota = controller.mutation.new_quota_for(p.user, p.client_id, p.strict)
        refused = []
        for topic in batch:
            try:
                quota.record(p.partitions, t)
            except ThrottlingQuotaExceeded:
                refused.append(topic)  # THROTTLING_QUOTA_EXCEEDED for this topic: the admin client retries it
        self.pending = refused + rest
        # each topic's first attempt, for the what-if replay (a retry exists only because this quota refused it)
        first = [UsageRecord(p.user, p.client_id, float(p.partitions), t) for topic in batch if topic not in self.tried]
        self.tried = set(refused)  # refused topics lead the next batch
        usage_log.append_many(controller.ns.client, controller.cluster, controller.id,
                              ((controller.mutation.quota_type, first),))
        throttle = quota.throttle_time(t)
        self.next_send = t + max(throttle, ADMIN_RETRY_BACKOFF_MS if refused else 0)
        controller.sampler.touch(p.user, p.client_id, t)
        created = len(batch) - len(refused)
        gen.stats["topics"] += created
        gen.stats["topics_asked"] += len(first)
        gen.stats["topics_refused"] += len(refused)
        gen.event(t, controller, "mutation", p.user, p.client_id, created, throttle, f"refused={len(refused)}")


class _Storm:
    def __init__(self, p: ConnectionStorm) -> None:
        self.p = p
        self.owner = _StormConnections(p)
        self.carry = 0.0

    def step(self, t: int, dt_ms: int, brokers: Sequence[_Broker]) -> None:
        p = self.p
        if (t / 1000.0 + p.phase_s) % p.every_s >= p.for_s:
            self.carry = 0.0
            return
        self.carry += p.attempts_per_s * dt_ms / 1000.0
        n = int(self.carry)
        self.carry -= n
        for broker in brokers:
            broker.admit_due += [(p.listener, p.ip, self.owner)] * n
