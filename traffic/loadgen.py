"""Demo traffic through the quota engine, recorded the way brokers record it, so the live charts have a story.

Per cluster and broker (each broker is a namespace of the engine, as ``quotas/connectors/engine.py`` pushes it):

- a ``QuotaEngine`` whose config is reloaded when a push lands (its pub/sub channel, and a version check every
  few seconds in case a message was missed), so an approved request changes the throttling at once;
- a ``Sampler`` ticked once a second: the live stream the relay and the charts read (``engine/monitor.py``),
  plus connection samples (``q`` ``"connection"``, ``e`` ``"ip:<addr>"`` / ``"listener:<name>"``);
- a ``RedisConnectionQuotas`` with the broker's pushed connection limits and the per-IP creation rates.

Simulated clients (``DEMO_TRAFFIC``, ``DEMO_TOPIC_BURSTS``, ``DEMO_STORMS``) are the demo data's principals:

- producers and consumers with byte rates that follow a slow wave, noise and a burst every minute, and request
  handler time per request. Each request is recorded into the produce or fetch quota and the request quota
  (``record_many``: one batch per broker, quota type and tick); the throttle is the larger of the two, as
  ``KafkaApis`` takes it. A throttled client obeys it as Kafka's clients do (KIP-219): it sends nothing more to
  that broker until the throttle time has passed (a producer's data waits in its buffer, a consumer's lag grows).
  A throttled fetch returns nothing, so its bytes are un-recorded (``unrecordQuotaSensor``);
- admin clients creating topics in bursts against ``controller_mutation_rate``: new request versions get a
  strict quota (topics beyond a negative bucket fail with THROTTLING_QUOTA_EXCEEDED and are retried after the
  throttle time, as the admin client does), old ones a permissive quota (always recorded, then throttled);
- one IP in a reconnect storm against its ``connection_creation_rate`` and ``max.connections.per.ip``.

Times are explicit milliseconds from ``clock`` (wall clock by default), so tests run simulated seconds with a
fake clock and no sleeping. Randomness comes from ``seed``. ``python manage.py loadgen`` runs it (SIGTERM or
SIGINT stops it cleanly: its connections are released).
"""

from __future__ import annotations

import heapq
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import redis

from engine import usage_log
from engine.budget_store import BudgetStore
from engine.config import QuotaEngine, namespace_for_broker
from engine.connections import (
    ACCEPTED,
    BLOCKED,
    IP_THROTTLED,
    TOO_MANY,
    Admission,
    ConnectionConfig,
    IpRates,
    RedisConnectionQuotas,
)
from engine.desired import BrokerConfigStore
from engine.entities import QuotaType
from engine.errors import EngineUnavailable, QuotaEngineError, ThrottlingQuotaExceeded
from engine.javamath import INT_MAX
from engine.managers import UsageRecord, nanos_to_percentage
from engine.monitor import ACTIVE_FOR_MS, CONNECTION, Sampler
from engine.redis_backend import connect
from engine.replication import BROKER_RATE_KEYS

from .engine_budgets import BrokerBudgets

log = logging.getLogger(__name__)

KIB, MIB = 1024, 1024 * 1024
MAX_REQUEST_BYTES = MIB  # a producer's max.request.size
FETCH_MAX_BYTES = 4 * MIB  # what one fetch of a consumer from one broker may carry
BUFFER_S = 3.0  # a producer buffers this many seconds of data while throttled (then its application blocks)
ADMIN_RETRY_BACKOFF_MS = 100  # retry.backoff.ms
RECONNECT_BACKOFF_MS = 1_000  # a rejected connection is tried again after this long
CONFIG_CHECK_MS = 5_000  # the version check behind pub/sub (a missed message costs at most this long)
WAVE_PERIOD_S = 300.0
ERROR_LOG_EVERY_MS = 10_000


# ------------------------------------------------------------------ the demo's clients


@dataclass(frozen=True)
class Traffic:
    """A producer and/or consumer: byte rates over the whole cluster (spread over the brokers it leads on)."""

    user: str
    client_id: str
    ip: str
    produce: float = 0.0  # bytes/s
    fetch: float = 0.0  # bytes/s
    thread_ms: float = 1.0  # request handler thread time per request
    wave: float = 0.2  # amplitude of the slow wave (period WAVE_PERIOD_S)
    burst_every_s: float = 60.0
    burst_for_s: float = 0.0
    burst_x: float = 1.0
    phase_s: float = 0.0

    def factor(self, t_ms: int) -> float:
        """How busy the client is at ``t_ms`` (absolute time, so every run and every broker agree)."""
        s = t_ms / 1000.0 + self.phase_s
        f = 1.0 + self.wave * math.sin(2 * math.pi * s / WAVE_PERIOD_S)
        if self.burst_for_s and s % self.burst_every_s < self.burst_for_s:
            f *= self.burst_x
        return f


@dataclass(frozen=True)
class TopicBursts:
    """An admin client creating ``topics`` topics of ``partitions`` partitions every ``every_s`` seconds."""

    user: str
    client_id: str
    ip: str
    strict: bool  # CreateTopics v6+ (strict quota) or an older version (permissive)
    topics: int
    partitions: int
    every_s: float = 60.0
    phase_s: float = 0.0
    per_request: int = 10


@dataclass(frozen=True)
class ConnectionStorm:
    """An IP opening ``attempts_per_s`` connections a second to every broker for ``for_s`` of every ``every_s``."""

    ip: str
    attempts_per_s: float
    for_s: float = 20.0
    every_s: float = 60.0
    phase_s: float = 0.0
    lifetime_s: float = 15.0
    listener: str = "PLAINTEXT"


STORM_IP = "10.20.0.99"

#: The demo data's principals (``demo/management/commands/demo_data.py`` sets their quotas).
DEMO_TRAFFIC: tuple[Traffic, ...] = (
    # svc-payments-api (user quota 512 KiB/s per broker): over it in its minute bursts and at the wave's top;
    # the demo's pending request (1.5 MiB/s) would relieve it
    Traffic("svc-payments-api", "payments-api-1", "10.10.1.11", produce=700_000, thread_ms=2, wave=0.15,
            burst_for_s=20, burst_x=2.2),
    Traffic("svc-payments-api", "payments-api-2", "10.10.1.12", produce=700_000, thread_ms=2, wave=0.15,
            burst_for_s=20, burst_x=2.2),
    Traffic("svc-payments-ledger", "payments-ledger", "10.10.1.21", produce=300_000, fetch=900_000, thread_ms=1,
            phase_s=40),
    # analytics-spark (user+client-id quota 2 MiB/s, boosted to 6 MiB/s for an hour): over the boost in bursts
    Traffic("svc-analytics-etl", "analytics-spark", "10.10.2.11", fetch=9_000_000, thread_ms=3, wave=0.15,
            burst_for_s=15, burst_x=2.5, phase_s=20),
    Traffic("svc-analytics-etl", "analytics-adhoc", "10.10.2.12", fetch=600_000, thread_ms=2, wave=0.5, phase_s=90),
    Traffic("svc-search-indexer", "search-indexer", "10.10.3.11", produce=1_800_000, thread_ms=2, wave=0.3,
            phase_s=150),
    # search-query (client-id request_percentage 20): 35 ms of handler time per request, ~35 % per broker
    Traffic("svc-search-query", "search-query", "10.10.3.21", fetch=1_200_000, thread_ms=35, wave=0.3, phase_s=60),
    Traffic("svc-search-query", "search-suggest", "10.10.3.22", fetch=300_000, thread_ms=4, phase_s=200),
    # nobody's tenant: the defaults apply
    Traffic("ANONYMOUS", "legacy-reporting", "10.30.0.5", produce=250_000, fetch=250_000, thread_ms=3, phase_s=10),
)
DEMO_TOPIC_BURSTS: tuple[TopicBursts, ...] = (
    # 72 partitions a minute against the user's 3/s (a bucket of 33): strict, so most wait for tokens
    TopicBursts("svc-search-indexer", "search-indexer-admin", "10.10.3.11", strict=True, topics=24, partitions=3,
                phase_s=30),
    # 80 partitions a minute against the default 5/s (a bucket of 55), from an old admin client: permissive
    TopicBursts("svc-analytics-etl", "analytics-etl-admin", "10.10.2.11", strict=False, topics=20, partitions=4,
                phase_s=45),
)
DEMO_STORMS: tuple[ConnectionStorm, ...] = (ConnectionStorm(STORM_IP, attempts_per_s=15, phase_s=10),)
#: Byte rates of a cluster relative to the profiles (staging is quieter and never throttled on bytes).
CLUSTER_SCALE = {"staging": 0.4}


# ------------------------------------------------------------------ where the traffic goes


@dataclass(frozen=True)
class BrokerTarget:
    """One broker: its cluster, id, engine Redis URL, quota namespace and listeners."""

    cluster: str
    broker_id: int
    url: str
    namespace: str
    listeners: tuple[str, ...] = ("PLAINTEXT",)
    inter_broker_listener: str | None = None


class Event(NamedTuple):
    """What a client did (kept when ``trace`` is on): the tests read it."""

    t: int
    cluster: str
    broker: int
    kind: str  # produce, fetch, mutation, connection
    user: str  # connection: ""
    client_id: str  # connection: the IP
    value: float  # bytes delivered; topics created; 1 for a connection
    throttle_ms: int
    note: str = ""  # fetch: "unrecorded"; mutation: refused=<n>; connection: the admission's result


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


# ------------------------------------------------------------------ the generator


class LoadGenerator:
    """Drives the demo clients through every broker of the given clusters; ``run()`` or ``step(t)`` by hand."""

    def __init__(
        self,
        targets: Mapping[str, Sequence[BrokerTarget]],
        *,
        tick_ms: int = 100,
        seed: int = 7,
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], Any] | None = None,
        traffic: Iterable[Traffic] = DEMO_TRAFFIC,
        topic_bursts: Iterable[TopicBursts] = DEMO_TOPIC_BURSTS,
        storms: Iterable[ConnectionStorm] = DEMO_STORMS,
        trace: bool = False,
        out: Callable[[str], Any] | None = None,
        status_every_s: float = 10.0,
        redis_timeout_s: float = 2.0,
        monitor_url: str | None = None,
    ) -> None:
        """``monitor_url``: the Redis the live samples are published to (the relay's and the charts'); None: each
        broker's engine Redis."""
        if tick_ms < 10:
            raise ValueError("tick_ms is at least 10")
        self.tick_ms = tick_ms
        self.redis_timeout_s = redis_timeout_s  # a decision never waits longer on Redis (it fails open)
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._stop = threading.Event()
        self.sleep = sleep or self._stop.wait
        self.trace: list[Event] | None = [] if trace else None
        self.out = out or (lambda line: log.info("%s", line))
        self.status_every_ms = int(status_every_s * 1000)
        self.stats: dict[str, float] = dict.fromkeys(
            ("requests", "throttled", "bytes", "topics", "topics_asked", "topics_refused", "conn_accepted",
             "conn_rejected",
             "samples", "errors", "reloads"), 0
        )
        self._clients: dict[str, redis.Redis] = {}
        self._pubsubs: dict[str, Any] = {}
        self._channels: dict[str, _Namespace] = {}
        self.namespaces: dict[tuple[str, str], _Namespace] = {}
        self.brokers: dict[str, list[_Broker]] = {}
        now = self.clock()
        for cluster, cluster_targets in targets.items():
            brokers = []
            for target in sorted(cluster_targets, key=lambda b: b.broker_id):
                client = self._client(target.url)
                ns = self.namespaces.get((target.url, target.namespace))
                if ns is None:
                    ns = self.namespaces[(target.url, target.namespace)] = _Namespace(client, target.namespace)
                broker = _Broker(target, ns, len(brokers), self._client(monitor_url) if monitor_url else None)
                ns.brokers.append(broker)
                brokers.append(broker)
            self.brokers[cluster] = brokers
            for b in brokers:  # cluster-wide budgets: each broker takes its shares from the cluster's key space
                b.budgets = BrokerBudgets(BudgetStore(b.ns.client, cluster), b.id, b.ns.engine.managers, len(brokers))
        # subscribe before the first load, so no change between the two is missed
        for (url, _name), ns in self.namespaces.items():
            self._subscribe(url, ns)
        for ns in self.namespaces.values():
            ns.reload(force=True)
        for brokers in self.brokers.values():
            for b in brokers:
                b.restart_connections()
        self.byte_clients: dict[str, list[_ByteClient]] = {}
        self.admin_clients: dict[str, list[_AdminClient]] = {}
        self.storms: dict[str, list[_Storm]] = {}
        self.conn_owners: dict[str, list[_ClientConnections]] = {}
        traffic, topic_bursts, storms = list(traffic), list(topic_bursts), list(storms)
        for cluster, brokers in self.brokers.items():
            scale = CLUSTER_SCALE.get(cluster, 1.0)
            self.byte_clients[cluster] = [
                _ByteClient(p, scale, len(brokers), random.Random(f"{seed}:{cluster}:{p.user}:{p.client_id}"))
                for p in traffic
            ]
            self.admin_clients[cluster] = [_AdminClient(p, now) for p in topic_bursts]
            self.storms[cluster] = [_Storm(p) for p in storms]
            rng = random.Random(f"{seed}:{cluster}:connections")
            self.conn_owners[cluster] = []
            for ip in dict.fromkeys([p.ip for p in traffic] + [p.ip for p in topic_bursts]):
                owner = _ClientConnections(ip, rng)
                self.conn_owners[cluster].append(owner)
                for b in brokers:
                    b.admit_due.append((self._client_listener(b), ip, owner))
        self._last_t: int | None = None
        self._next_sample = now - now % 1000 + 1000
        self._next_check = now + CONFIG_CHECK_MS
        self._next_status = now + self.status_every_ms
        self._status_mark = (now, time.process_time(), dict(self.stats))
        self._last_error = -ERROR_LOG_EVERY_MS

    # ---- plumbing

    def _client(self, url: str) -> redis.Redis:
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = connect(url, self.redis_timeout_s)
        return client

    @staticmethod
    def _client_listener(broker: _Broker) -> str:
        inter = broker.target.inter_broker_listener
        return next((name for name in broker.listeners if name != inter), broker.listeners[0])

    def _subscribe(self, url: str, ns: _Namespace) -> None:
        pubsub = self._pubsubs.get(url)
        if pubsub is None:
            pubsub = self._pubsubs[url] = ns.client.pubsub(ignore_subscribe_messages=True)
        for channel in ns.channels:
            self._channels[channel] = ns
        pubsub.subscribe(*ns.channels)

    def event(self, t: int, broker: _Broker, kind: str, user: str, client_id: str, value: float, throttle: int,
              note: str = "") -> None:
        if self.trace is not None:
            self.trace.append(Event(t, broker.cluster, broker.id, kind, user, client_id, value, throttle, note))

    def _error(self, t: int, what: str, e: Exception) -> None:
        self.stats["errors"] += 1
        if t - self._last_error >= ERROR_LOG_EVERY_MS:
            self._last_error = t
            self.out(f"loadgen: {what}: {e} (carrying on; errors so far: {int(self.stats['errors'])})")

    # ---- config changes

    def poll_config(self, t: int | None = None, force: bool = False) -> bool:
        """Reload the namespaces a push announced (and all of them every CONFIG_CHECK_MS, or when ``force``)."""
        t = self.clock() if t is None else t
        dirty: set[int] = set()
        by_id: dict[int, _Namespace] = {}
        for url, pubsub in list(self._pubsubs.items()):
            try:
                while (message := pubsub.get_message(timeout=0)) is not None:
                    ns = self._channels.get(message["channel"].decode())
                    if ns is not None:
                        dirty.add(id(ns))
                        by_id[id(ns)] = ns
            except (redis.RedisError, OSError) as e:
                self._error(t, f"config subscription to {url} lost", e)
                try:
                    pubsub.close()
                except (redis.RedisError, OSError):
                    pass
                del self._pubsubs[url]
                for (ns_url, _name), ns in self.namespaces.items():
                    if ns_url == url:
                        try:
                            self._subscribe(url, ns)
                        except (redis.RedisError, OSError):
                            pass
                force = True
        if force or t >= self._next_check:
            self._next_check = t + CONFIG_CHECK_MS
            targets = list(self.namespaces.values())
        else:
            targets = [by_id[i] for i in dirty]
        changed = False
        for ns in targets:
            try:
                if ns.reload(force=force):
                    changed = True
                    self.stats["reloads"] += 1
            except (redis.RedisError, OSError, EngineUnavailable) as e:
                self._error(t, f"reloading {ns.namespace}", e)
        return changed

    # ---- one tick

    def step(self, t: int | None = None) -> None:
        """Everything that happens at ``t``: config changes, every client's requests, connections, samples."""
        t = self.clock() if t is None else t
        dt = self.tick_ms if self._last_t is None else max(0, min(t - self._last_t, 5_000))
        self._last_t = t
        self.poll_config(t)
        for cluster, brokers in self.brokers.items():
            for c in self.byte_clients[cluster]:
                c.step(t, dt, brokers)
            for b in brokers:
                try:
                    self._flush_requests(b, t)
                except (redis.RedisError, OSError, EngineUnavailable) as e:
                    self._error(t, f"{cluster}/broker-{b.id} requests", e)
                b.requests.clear()
            if brokers:
                for a in self.admin_clients[cluster]:
                    try:
                        a.step(t, brokers[0], self)  # CreateTopics goes to the controller: the lowest id here
                    except (redis.RedisError, OSError, EngineUnavailable) as e:
                        self._error(t, f"{cluster} topic creation", e)
            for s in self.storms[cluster]:
                s.step(t, dt, brokers)
            for owner in self.conn_owners[cluster]:
                owner.due(t)
            for b in brokers:
                try:
                    self._connections(b, t)
                except (redis.RedisError, OSError, EngineUnavailable, QuotaEngineError) as e:
                    self._error(t, f"{cluster}/broker-{b.id} connections", e)
        if t >= self._next_sample:
            self._next_sample = t - t % 1000 + 1000
            self._budget_rounds(t)
            self._sample(t)
        if t >= self._next_status:
            self._next_status = t + self.status_every_ms
            self._status(t)

    def _flush_requests(self, b: _Broker, t: int) -> None:
        """One ``record_many`` per quota type for the broker's requests of this tick; clients obey the throttle."""
        if not b.requests:
            return
        produce = [r for r in b.requests if r[1] == "produce"]
        fetch = [r for r in b.requests if r[1] == "fetch"]
        ordered = produce + fetch
        def usage(requests: list[tuple[_ByteClient, str, float, float]]) -> list[UsageRecord]:
            return [UsageRecord(c.user, c.client_id, v, t) for c, _k, v, _n in requests]

        p_use, f_use = usage(produce), usage(fetch)
        r_use = [UsageRecord(c.user, c.client_id, nanos_to_percentage(n), t) for c, _k, _v, n in ordered]
        p_res = b.produce.record_many(p_use) if produce else []  # an empty batch would still cost a call
        f_res = b.fetch.record_many(f_use) if fetch else []
        r_res = b.request.record_many(r_use)
        stats = self.stats
        stats["requests"] += len(ordered)
        index = b.index
        answered = []  # the fetches answered with data: what a what-if replays (an empty one is asked for again)
        for i, (c, kind, size, _n) in enumerate(ordered):
            link = c.links[index]
            bytes_result = p_res[i] if kind == "produce" else f_res[i - len(produce)]
            throttle = max(bytes_result.throttle_ms, r_res[i].throttle_ms)
            b.sampler.touch(c.user, c.client_id, t)
            note = ""
            if kind == "produce":
                link.produce_muted_until = t + throttle if throttle > 0 else 0
                stats["bytes"] += size
                delivered = size
            elif throttle > 0:
                # KafkaApis: a throttled fetch (bytes or request quota) answers empty, so its bytes come back out
                if bytes_result.quotas_enabled:
                    b.fetch.unrecord(c.user, c.client_id, size, t)
                    note = "unrecorded"
                link.fetch_muted_until = t + throttle
                delivered = 0.0
            else:
                link.lag = max(0.0, link.lag - size)
                stats["bytes"] += size
                delivered = size
                answered.append(f_use[i - len(produce)])
            if throttle > 0:
                stats["throttled"] += 1
            b.budgets.note(b.produce.quota_type if kind == "produce" else b.fetch.quota_type, c.user, c.client_id,
                           size, bytes_result.throttle_ms, t)
            b.budgets.note(b.request.quota_type, c.user, c.client_id, r_use[i].value, r_res[i].throttle_ms, t)
            self.event(t, b, kind, c.user, c.client_id, delivered, throttle, note)
        # what the clients asked for, for the landing area (pipeline/landing.py): one XADD per batch, one round trip
        usage_log.append_many(b.ns.client, b.cluster, b.id, ((b.produce.quota_type, p_use),
                              (b.fetch.quota_type, answered), (b.request.quota_type, r_use)))

    def _connections(self, b: _Broker, t: int) -> None:
        """Close what is due, admit this tick's sockets in one call, retry blocked ones after their delay."""
        while b.open and b.open[0][0] <= t:
            _at, _seq, listener, ip, owner = heapq.heappop(b.open)
            self._release(b, listener, ip, t)
            owner.closed(b, listener, t)
        due, b.admit_due = b.admit_due, []
        if due:
            answers = b.conn.admit_many([(listener, ip, t) for listener, ip, _o in due])
            for (listener, ip, owner), a in zip(due, answers, strict=True):
                self._admitted(b, listener, ip, owner, a, t)
        while b.waiting and b.waiting[0][0] <= t:
            _at, _seq, listener, ip, owner = heapq.heappop(b.waiting)
            self._admitted(b, listener, ip, owner, b.conn.inc_after_wait(listener, ip, t), t)

    def _admitted(self, b: _Broker, listener: str, ip: str, owner: _Owner, a: Admission, t: int) -> None:
        s = b.ip(ip, t)
        if a.result != BLOCKED:
            s.attempts += 1
            s.count = a.count
            b.total = a.total
        if a.result == ACCEPTED:
            s.accepted += 1
            b.listener_counts[listener] += 1
            b.listener_accepted[listener] += 1
            self.stats["conn_accepted"] += 1
            low, high = owner.lifetime_ms
            life = low if low == high else random.Random(f"{ip}:{t}:{b.id}").randint(low, high)
            heapq.heappush(b.open, (t + life, b.seq(), listener, ip, owner))
        elif a.result == BLOCKED:
            # the acceptor waits: the broker or listener rate (throttle_ms), or a free slot (0: look again soon)
            heapq.heappush(b.waiting, (t + max(a.throttle_ms, self.tick_ms), b.seq(), listener, ip, owner))
            return
        else:
            s.rejected += 1
            self.stats["conn_rejected"] += 1
            if a.result == IP_THROTTLED:
                s.throttled(t, a.throttle_ms)
            elif a.result == TOO_MANY:  # counted before it was refused (as Kafka does): release it
                b.listener_counts[listener] += 1
                self._release(b, listener, ip, t)
            owner.refused(b, listener, t)
        self.event(t, b, "connection", "", ip, 1, a.throttle_ms, a.result)

    def _release(self, b: _Broker, listener: str, ip: str, t: int) -> None:
        a = b.conn.dec(listener, ip, t)
        b.listener_counts[listener] = max(0, b.listener_counts[listener] - 1)
        b.ip(ip, t).count = a.count
        b.total = a.total

    # ---- samples

    def connection_samples(self, b: _Broker, t: int, elapsed_ms: int = 1000) -> list[dict[str, Any]]:
        """The broker's connection samples: every IP active in the last 30 s, and each client listener."""
        secs = max(elapsed_ms, 1) / 1000.0
        out: list[dict[str, Any]] = []
        for ip, s in list(b.ips.items()):
            if t - s.seen > ACTIVE_FOR_MS:
                del b.ips[ip]
                continue
            rate = b.conn.measure("ip", ip, t)
            limit = b.conn.ip_rates.rate_for(ip)
            bound = None if limit == INT_MAX else float(limit)
            out.append({
                "t": t, "c": b.cluster, "b": b.id, "q": CONNECTION, "e": f"ip:{ip}",
                "rate": rate, "bound": bound, "util": rate / bound if rate is not None and bound else None,
                "accept_rate": s.accepted / secs, "attempt_rate": s.attempts / secs, "reject_rate": s.rejected / secs,
                "count": s.count,
                "thr_avg": sum(s.throttles) / len(s.throttles) if s.throttles else 0.0,
                "thr_max": float(max(s.throttles)) if s.throttles else 0.0,
                "thr_frac": min(1.0, s.covered_ms / max(elapsed_ms, 1)),
                "tokens": None,
            })
            s.attempts = s.accepted = s.rejected = s.covered_ms = 0
            s.throttles = []
        inter = b.target.inter_broker_listener
        for name in b.listeners:
            if name == inter:
                continue
            rate = b.conn.measure("listener", name, t)
            limit = b.conn.config.listener_max_connection_creation_rate.get(name, INT_MAX)
            bound = None if limit == INT_MAX else float(limit)
            out.append({
                "t": t, "c": b.cluster, "b": b.id, "q": CONNECTION, "e": f"listener:{name}",
                "rate": rate, "bound": bound, "util": rate / bound if rate is not None and bound else None,
                "accept_rate": b.listener_accepted[name] / secs, "count": b.listener_counts[name],
                "total": b.total, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0, "tokens": None,
            })
            b.listener_accepted[name] = 0
        return out

    def _budget_rounds(self, t: int) -> None:
        """Once a second, each broker's round of its cluster's budgets (a failed one falls back inside)."""
        for brokers in self.brokers.values():
            for b in brokers:
                b.budgets.round(t)

    def _sample(self, t: int) -> None:
        for brokers in self.brokers.values():
            for b in brokers:
                try:
                    self.stats["samples"] += b.sampler.tick(t, extra=self.connection_samples(b, t))
                except (redis.RedisError, OSError, EngineUnavailable) as e:
                    self._error(t, f"{b.cluster}/broker-{b.id} samples", e)

    # ---- status

    def _status(self, t: int) -> None:
        t0, cpu0, stats0 = self._status_mark
        cpu = time.process_time()
        secs = max(t - t0, 1) / 1000.0
        d = {k: self.stats[k] - stats0.get(k, 0) for k in self.stats}
        self.out(
            f"loadgen: {d['requests'] / secs:.0f} requests/s ({d['throttled'] / secs:.1f}/s throttled), "
            f"{d['bytes'] / secs / MIB:.1f} MiB/s, topics {int(d['topics'])} created / {int(d['topics_refused'])} "
            f"refused, connections {int(d['conn_accepted'])} accepted / {int(d['conn_rejected'])} rejected, "
            f"{d['samples'] / secs:.0f} samples/s, config reloads {int(d['reloads'])}, errors {int(d['errors'])}, "
            f"cpu {100 * (cpu - cpu0) / secs:.1f}%"
        )
        self._status_mark = (t, cpu, dict(self.stats))

    # ---- running

    def run(self, duration_s: float | None = None) -> None:
        """Tick every ``tick_ms`` until ``stop()`` (or ``duration_s`` of the clock). Never catches up in a burst:
        a tick that comes late records what the elapsed time carried, and a run far behind skips ahead."""
        start = self.clock()
        end = None if duration_s is None else start + int(duration_s * 1000)
        next_t = start
        while not self._stop.is_set():
            now = self.clock()
            if end is not None and now >= end:
                break
            self.step(now)
            next_t += self.tick_ms
            now = self.clock()
            if next_t < now - 10 * self.tick_ms:
                next_t = now  # far behind (a stalled Redis, a suspended laptop): skip ahead
            delay = next_t - now
            if end is not None:
                delay = min(delay, end - now)
            if delay > 0:
                self.sleep(delay / 1000.0)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Release every connection this run holds (a broker stopping) and the Redis connections."""
        t = self.clock()
        for brokers in self.brokers.values():
            for b in brokers:
                try:
                    while b.open:
                        _at, _seq, listener, ip, _o = heapq.heappop(b.open)
                        b.conn.dec(listener, ip, t)
                except (redis.RedisError, OSError, EngineUnavailable, QuotaEngineError) as e:
                    self._error(t, f"{b.cluster}/broker-{b.id} releasing connections", e)
        for pubsub in self._pubsubs.values():
            try:
                pubsub.close()
            except (redis.RedisError, OSError):
                pass
        self._pubsubs.clear()
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class FakeClock:
    """A clock for tests and replays: ``sleep`` moves it on instead of waiting."""

    def __init__(self, start_ms: int) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(1, int(round(seconds * 1000)))


__all__ = [
    "DEMO_STORMS",
    "DEMO_TOPIC_BURSTS",
    "DEMO_TRAFFIC",
    "STORM_IP",
    "BrokerTarget",
    "ConnectionStorm",
    "Event",
    "FakeClock",
    "LoadGenerator",
    "TopicBursts",
    "Traffic",
]
