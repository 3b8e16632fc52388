"""The relay: tails every cluster's firehose and fans it out to Channels groups (``python manage.py relay``).

One asyncio loop, one Redis connection for the streams (``QUOTAS_REDIS_URL``) and the channel layer
(``CHANNEL_LAYERS``):

1. ``XREAD BLOCK`` on ``mon:{<cluster>}:all`` of every cluster in the database (the list is re-read every
   ``clusters_every_s``), starting at the newest entry when a cluster is first seen (``$``), then from the last
   id read, so nothing between two reads is skipped; when other brokers' ticks of the same second are due within
   ``coalesce_ms`` (150; judged by when ticks came a second ago), it waits for them and reads those too;
2. reads ``mon:watched`` (who watches which entity; expired members are dropped) and the members of the
   groups it would send to (one script);
3. sends, per broker tick, ``{"type": "mon.batch", "cluster", "samples"}`` to ``mon.cluster.<cluster>`` and,
   per watched entity with points in the ticks read, ``{"type": "mon.points", "cluster", "entity", "points"}``
   to ``mon.entity.<digest>`` (one script per Redis host; ``telemetry_ui/live/fanout.py``).

Nothing is decoded or sent for a cluster nobody listens to; the read position moves on only once a read was
sent. When Redis goes away the relay logs it, retries with backoff and resumes where it was (at most
``max_lag_ms`` behind the newest entry; from the start of a stream Redis lost and began again).
SIGTERM / SIGINT stop it after the current read (at most ``block_ms``). Every ``stats_every_s`` it logs what
it relayed (ticks, samples, messages, messages dropped at the layer's capacity).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from engine.monitor import firehose_key

from .fanout import Delivery, Fanout
from .monitoring import (
    WATCHED_KEY,
    cluster_group,
    entity_group,
    now_ms,
    parse_watched,
    tel_all_key,
    tel_cluster_group,
    tel_instance_group,
    watched_instance,
)

log = logging.getLogger("telemetry_ui.relay")

ClusterSource = Callable[[], Awaitable[list[str]]]


async def clusters_from_db() -> list[str]:
    """The names of every cluster in the database (in a thread: the ORM is synchronous)."""
    from asgiref.sync import sync_to_async
    from django.db import close_old_connections

    def read() -> list[str]:
        close_old_connections()
        from quotas.models import Cluster

        try:
            return list(Cluster.objects.order_by("name").values_list("name", flat=True))
        finally:
            close_old_connections()

    return await sync_to_async(read, thread_sensitive=True)()


def _id_tuple(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class Relay:
    """Firehose -> Channels groups. ``run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        redis_url: str,
        layer: Any,
        *,
        clusters: ClusterSource = clusters_from_db,
        clusters_every_s: float = 30.0,
        block_ms: int = 1000,
        coalesce_ms: int = 150,
        count: int = 64,
        max_lag_ms: int = 10_000,
        expire_every_s: float = 5.0,
        stats_every_s: float = 60.0,
    ) -> None:
        self.redis_url = redis_url
        self.fanout = Fanout(layer)
        self.clusters_source = clusters
        self.clusters_every_s = clusters_every_s
        self.block_ms = block_ms
        self.coalesce_ms = coalesce_ms
        self.count = count
        self.max_lag_ms = max_lag_ms
        self.expire_every_s = expire_every_s
        self.stats_every_s = stats_every_s
        # A blocked XREAD waits block_ms; a socket that says nothing for much longer than that is dead.
        self.redis = aioredis.Redis.from_url(
            redis_url, socket_timeout=block_ms / 1000 + 10, socket_connect_timeout=5, health_check_interval=30
        )
        self.positions: dict[str, str] = {}  # firehose key -> last id read
        self._arrivals: dict[str, deque[float]] = {}  # cluster -> when its ticks were read (the last 2 s)
        self.cluster_of: dict[str, str] = {}  # firehose key (or telemetry stream key) -> cluster
        self.tel_keys: set[str] = set()  # the keys of cluster_of that are telemetry streams (tel:{<c>}:all)
        self.watched_instances: dict[str, set[str]] = {}  # cluster -> telemetry instances watched (by watched())
        self._clusters_at = float("-inf")
        self._expired_at = float("-inf")
        self._stats_at = time.monotonic()
        self.stats: dict[str, int] = defaultdict(int)
        self._resync = False  # after a Redis error: check the positions before reading on

    # ---- the loop

    async def run(self, stop: asyncio.Event) -> None:
        log.info("relay started: firehoses of %s", self.redis_url)
        backoff = 0.1
        try:
            while not stop.is_set():
                try:
                    await self.step(stop)
                    backoff = 0.1
                except (RedisConnectionError, RedisTimeoutError, OSError) as e:
                    log.warning("Redis unreachable (%s); retrying in %.1f s", e, backoff)
                    self._resync = True
                    await _sleep(stop, backoff)
                    backoff = min(backoff * 2, 5.0)
                except Exception as e:  # a Redis error reply, a bug: logged, and the relay goes on
                    log.error("relay iteration failed: %s; retrying in %.1f s", e, backoff, exc_info=True)
                    await _sleep(stop, backoff)
                    backoff = min(backoff * 2, 5.0)
        finally:
            self._log_stats(force=True)
            await self.redis.aclose()
            log.info("relay stopped")

    async def step(self, stop: asyncio.Event) -> None:
        """One iteration: refresh clusters when due, read new ticks, send them."""
        if time.monotonic() - self._clusters_at >= self.clusters_every_s:
            await self.refresh_clusters()
        if self._resync:
            await self.resync()
        if not self.positions:
            await _sleep(stop, min(self.clusters_every_s, 1.0))
            return
        found = await self.redis.xread(self.positions, count=self.count, block=self.block_ms)
        if found and self.coalesce_ms > 0:
            found = await self.coalesce(found)
        if found:
            await self.relay(found)
        self._log_stats()

    async def coalesce(self, found: list[Any]) -> list[Any]:
        """Wait for the other brokers' ticks of this second when they are due within ``coalesce_ms`` and add them to
        what was read: one points message per watched entity for all of them instead of one per broker (fewer
        messages for the servers' processes to pop, and to fit in the layer's per-process capacity).

        Brokers tick once a second, so a tick read a second ago, shortly after the moment the current one was
        read, announces one due now; brokers whose ticks are spread over the second cost no wait at all."""
        now = time.monotonic()
        window = self.coalesce_ms / 1000
        until = now
        for key, entries in found:
            key = key.decode() if isinstance(key, bytes) else key
            cluster = None if key in self.tel_keys else self.cluster_of.get(key)
            if cluster is None or not entries:
                continue
            seen = self._arrivals.setdefault(cluster, deque())
            while seen and seen[0] < now - 2.0:
                seen.popleft()
            for t in seen:
                due = t + 1.0
                if now + 0.02 < due <= now + window:  # not this tick's own broker a second ago
                    until = max(until, due + 0.01)
            seen.append(now)
        if until <= now:
            return found
        await asyncio.sleep(min(until - now, window))
        after = dict(self.positions)
        merged: dict[str, list[Any]] = {}
        for key, entries in found:
            key = key.decode() if isinstance(key, bytes) else key
            merged[key] = list(entries)
            if entries:
                after[key] = entries[-1][0].decode()
        more = await self.redis.xread(after, count=self.count)
        read_at = time.monotonic()
        for key, entries in more or ():
            key = key.decode() if isinstance(key, bytes) else key
            merged.setdefault(key, []).extend(entries)
            cluster = None if key in self.tel_keys else self.cluster_of.get(key)
            if cluster is not None and entries:
                self._arrivals.setdefault(cluster, deque()).append(read_at)
        return [[k, v] for k, v in merged.items()]

    async def refresh_clusters(self) -> None:
        try:
            names = await self.clusters_source()
        except Exception:  # the database is down: keep relaying the clusters known so far
            log.exception("could not read the clusters; keeping %d known", len(self.cluster_of))
            self._clusters_at = time.monotonic() - self.clusters_every_s + 5.0
            return
        self._clusters_at = time.monotonic()
        wanted = {firehose_key(n): n for n in names}
        tel = {tel_all_key(n): n for n in names}
        wanted.update(tel)
        self.tel_keys = set(tel)
        gone = [k for k in self.positions if k not in wanted]
        new = [k for k in wanted if k not in self.positions]
        for k in gone:
            del self.positions[k]
            del self.cluster_of[k]
        if new:
            # "$", resolved now: XREAD with "$" on every call would skip what arrives between two calls.
            async with self.redis.pipeline(transaction=False) as p:
                for k in new:
                    p.xrevrange(k, count=1)
                lasts = await p.execute()
            for k, last in zip(new, lasts, strict=True):
                self.positions[k] = last[0][0].decode() if last else "0-0"
                self.cluster_of[k] = wanted[k]
        if new or gone:
            shown = sorted(set(self.cluster_of.values()))
            log.info("tailing %d cluster(s): %s", len(shown), ", ".join(shown))

    async def resync(self) -> None:
        """After a Redis error: resume where we were, but never more than max_lag_ms behind the newest entry, and
        from the start of a stream that is behind what was read (Redis restarted without it: all of it is new)."""
        keys = list(self.positions)
        async with self.redis.pipeline(transaction=False) as p:
            for k in keys:
                p.xrevrange(k, count=1)
            lasts = await p.execute()
        for k, last in zip(keys, lasts, strict=True):
            newest = _id_tuple(last[0][0].decode()) if last else (0, 0)
            mine = _id_tuple(self.positions[k])
            if mine > newest:
                log.warning("%s holds less than was read (Redis restarted?): reading it from its start", k)
                mine = (0, 0)
            floor = (max(0, newest[0] - self.max_lag_ms), 0)
            if mine < floor:
                if mine != (0, 0):
                    log.warning("%s: skipping %.1f s of ticks missed while Redis was away", k,
                                (floor[0] - mine[0]) / 1000)
                mine = floor
            self.positions[k] = f"{mine[0]}-{mine[1]}"
        self._resync = False
        log.info("Redis is back; relaying")

    async def watched(self) -> dict[str, set[str]]:
        """Cluster -> tags someone watches now; expired members are dropped every expire_every_s."""
        now = now_ms()
        if time.monotonic() - self._expired_at >= self.expire_every_s:
            async with self.redis.pipeline(transaction=False) as p:
                p.zremrangebyscore(WATCHED_KEY, "-inf", now)
                p.zrangebyscore(WATCHED_KEY, now, "+inf")
                _removed, members = await p.execute()
            self._expired_at = time.monotonic()
        else:
            members = await self.redis.zrangebyscore(WATCHED_KEY, now, "+inf")
        out: dict[str, set[str]] = defaultdict(set)
        instances: dict[str, set[str]] = defaultdict(set)
        for m in members:
            cluster, tags = parse_watched(m)
            instance = watched_instance(tags)
            if instance is None:
                out[cluster].add(tags)
            else:
                instances[cluster].add(instance)
        self.watched_instances = instances
        return out

    async def relay(self, found: list[Any]) -> None:
        """Send what one XREAD returned. The positions move on only once it is sent: a send that failed (a stale
        connection of the layer after a Redis restart) is read and sent again by the next iteration."""
        advance: dict[str, str] = {}
        ticks: dict[str, list[bytes]] = {}  # cluster -> raw JSON lists, oldest first
        pushes: dict[str, list[bytes]] = {}  # cluster -> raw telemetry entries, oldest first
        for key, entries in found:
            key = key.decode() if isinstance(key, bytes) else key
            if not entries:
                continue
            advance[key] = entries[-1][0].decode()
            cluster = self.cluster_of.get(key)
            if cluster is not None:
                into = pushes if key in self.tel_keys else ticks
                into.setdefault(cluster, []).extend(fields[b"d"] for _id, fields in entries if b"d" in fields)
        if ticks:
            await self.send(ticks)
        if pushes:
            await self.send_telemetry(pushes)
        for key, last in advance.items():
            if key in self.positions:
                self.positions[key] = last

    async def send(self, ticks: dict[str, list[bytes]]) -> None:
        """Fan out the ticks (raw firehose entries) of each cluster to whoever listens."""
        watched = await self.watched()

        # Who listens: the cluster groups, and the entity groups of watched entities.
        groups = [cluster_group(c) for c in ticks]
        for c in ticks:
            groups.extend(entity_group(c, tags) for tags in watched.get(c, ()))
        members = await self.fanout.members(groups)

        deliveries: list[Delivery] = []
        stats: dict[str, int] = defaultdict(int)
        stats["ticks"] = sum(len(v) for v in ticks.values())
        for cluster, raws in ticks.items():
            listeners = members.get(cluster_group(cluster))
            wanted = {
                tags: group for tags in watched.get(cluster, ()) if (group := entity_group(cluster, tags)) in members
            }
            if not listeners and not wanted:
                continue
            points: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for raw in raws:
                try:
                    samples = json.loads(raw)
                except ValueError:
                    samples = None
                if not isinstance(samples, list):
                    stats["bad_entries"] += 1
                    continue
                stats["samples"] += len(samples)
                if listeners:
                    batch = {"type": "mon.batch", "cluster": cluster, "samples": samples}
                    deliveries.append((cluster_group(cluster), listeners, batch))
                if wanted:
                    for s in samples:
                        if isinstance(s, dict) and s.get("e") in wanted:
                            points[s["e"]].append(s)
            for tags, pts in points.items():
                group = wanted[tags]
                deliveries.append(
                    (group, members[group], {"type": "mon.points", "cluster": cluster, "entity": tags, "points": pts})
                )
        if deliveries:
            dropped = await self.fanout.send(deliveries)
            stats["messages"] += len(deliveries)
            if dropped:
                stats["dropped"] += dropped
                log.warning("%d message(s) dropped: a server process's channel key stayed at the layer's capacity "
                            "(CHANNEL_LAYERS capacity; a slow or dead server process?)", dropped)
        for name, n in stats.items():
            self.stats[name] += n

    async def send_telemetry(self, pushes: dict[str, list[bytes]]) -> None:
        """Fan out accepted pushes (raw ``tel:{<c>}:all`` entries): ``tel.entries`` to the cluster's group, and
        ``tel.points`` with the entries of one instance to its group while the instance is watched."""
        await self.watched()
        watched = self.watched_instances
        groups = [tel_cluster_group(c) for c in pushes]
        for c in pushes:
            groups.extend(tel_instance_group(c, i) for i in watched.get(c, ()))
        members = await self.fanout.members(groups)
        deliveries: list[Delivery] = []
        for cluster, raws in pushes.items():
            listeners = members.get(tel_cluster_group(cluster))
            wanted = {i: g for i in watched.get(cluster, ()) if (g := tel_instance_group(cluster, i)) in members}
            if not listeners and not wanted:
                continue
            entries: list[dict[str, Any]] = []
            for raw in raws:
                try:
                    entry = json.loads(raw)
                except ValueError:
                    entry = None
                if not isinstance(entry, dict):
                    self.stats["bad_entries"] += 1
                    continue
                entries.append(entry)
            self.stats["pushes"] += len(entries)
            if listeners and entries:
                msg = {"type": "tel.entries", "cluster": cluster, "entries": entries}
                deliveries.append((tel_cluster_group(cluster), listeners, msg))
            by_instance: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for entry in entries:
                instance = entry.get("instance")
                if isinstance(instance, str) and instance in wanted:
                    by_instance[instance].append(entry)
            for instance, mine in by_instance.items():
                group = wanted[instance]
                msg = {"type": "tel.points", "cluster": cluster, "instance": instance, "entries": mine}
                deliveries.append((group, members[group], msg))
        if deliveries:
            dropped = await self.fanout.send(deliveries)
            self.stats["messages"] += len(deliveries)
            if dropped:
                self.stats["dropped"] += dropped
                log.warning("%d telemetry message(s) dropped: a server process's channel key is full", dropped)

    def _log_stats(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._stats_at < self.stats_every_s:
            return
        elapsed = time.monotonic() - self._stats_at
        self._stats_at = time.monotonic()
        s = self.stats
        log.info(
            "last %.0f s: %d ticks, %d samples, %d messages sent, %d dropped (over capacity), %d bad entries",
            elapsed, s["ticks"], s["samples"], s["messages"], s["dropped"], s["bad_entries"],
        )
        self.stats = defaultdict(int)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass


async def serve(redis_url: str, layer: Any, **options: Any) -> None:
    """Run a relay until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await Relay(redis_url, layer, **options).run(stop)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        close = getattr(layer, "close_pools", None)
        if close is not None:
            await close()
