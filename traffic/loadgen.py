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
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import redis

from engine import usage_log
from engine.budget_store import BudgetStore
from engine.connections import (
    ACCEPTED,
    BLOCKED,
    IP_THROTTLED,
    TOO_MANY,
    Admission,
)
from engine.errors import EngineUnavailable, QuotaEngineError
from engine.javamath import INT_MAX
from engine.managers import UsageRecord, nanos_to_percentage
from engine.monitor import ACTIVE_FOR_MS, CONNECTION
from engine.redis_backend import connect
from traffic.simulated import (
    _AdminClient,
    _Broker,
    _ByteClient,
    _ClientConnections,
    _Namespace,
    _Owner,
    _Storm,
)
from traffic.workload import (
    CLUSTER_SCALE,
    CONFIG_CHECK_MS,
    DEMO_STORMS,
    DEMO_TOPIC_BURSTS,
    DEMO_TRAFFIC,
    ERROR_LOG_EVERY_MS,
    MIB,
    STORM_IP,
    BrokerTarget,
    ConnectionStorm,
    Event,
    TopicBursts,
    Traffic,
)

from .engine_budgets import BrokerBudgets

log = logging.getLogger(__name__)

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
