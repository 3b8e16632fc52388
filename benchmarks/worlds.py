"""Synthetic clusters of a given size for the benchmarks: entities, brokers, tenants, live samples, pushed state.

A world is ``overview_bench``'s (its ``build_database``, ``sensor_tags``, ``make_samples`` and ``LatestHash``) at
any number of entities and brokers, in one migrated SQLite file copied afresh for each size (migrating once), with
the portal's Redis emptied between sizes. ``push_all`` brings every broker of the engine to desired state (what a
reconcile pass then finds in sync), ``engine_sensors`` records usage for one broker's active clients so its
sampler has real sensors to read, ``firehose_seconds`` appends what the samplers publish in some seconds.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from benchmarks.overview_bench import CLUSTER, LatestHash, build_database, make_samples, sensor_tags

#: On how many brokers an active sensor is sampled: its clients reach the leaders of their partitions, a few of
#: the cluster's brokers, not all of them (so a cluster of more brokers spreads the same sensors thinner).
SPREAD = 3


@dataclass
class World:
    """One size: what was built and how long it took."""

    entities: int
    brokers: int
    plan: list[tuple[str | None, str | None]]
    values: int
    samples: dict[int, list[dict[str, Any]]]
    latest: LatestHash
    build_s: float
    publish_s: float

    @property
    def label(self) -> str:
        return f"{self.entities}x{self.brokers}"

    def throttled(self) -> int:
        return len({s["e"] for ss in self.samples.values() for s in ss
                    if s["q"] != "connection" and (s["thr_frac"] > 0 or (s.get("tokens") or 0) < 0)})  # fmt: skip


class Worlds:
    """Builds worlds one after the other in one database file and one Redis (Django is set up on that file)."""

    def __init__(self, db_path: Path, client: redis.Redis, redis_url: str) -> None:
        self.db_path = db_path
        self.template = db_path.with_name("migrated.sqlite3")
        self.client = client
        self.redis_url = redis_url

    def _fresh_database(self) -> bool:
        """An empty migrated database at ``db_path``; False when it is the first (to migrate, then keep a copy)."""
        from django.db import connections

        connections.close_all()
        if not self.template.exists():
            return False
        for p in self.db_path.parent.glob(self.db_path.name + "*"):  # the file and its -wal/-shm
            p.unlink()
        shutil.copyfile(self.template, self.db_path)
        return True

    def build(self, entities: int, brokers: int) -> World:
        from django.db import connections

        self.client.flushdb()
        migrated = self._fresh_database()
        t0 = time.perf_counter()
        if not migrated:
            from django.core.management import call_command

            call_command("migrate", interactive=False, verbosity=0)
            connections.close_all()
            shutil.copyfile(self.db_path, self.template)
        plan, values = build_database(entities, self.redis_url, brokers=brokers, migrate=False)
        build_s = time.perf_counter() - t0
        tags = sensor_tags(plan, entities)
        samples = make_samples(tags, int(time.time() * 1000), brokers=brokers, spread=SPREAD)
        latest = LatestHash(self.client, samples)
        publish_s = latest.publish()
        return World(entities, brokers, plan, values, samples, latest, build_s, publish_s)


def push_all(attempts: int = 3) -> tuple[float, int]:
    """Every broker of the cluster brought to desired state (version 1, every entity) by the portal's push;
    returns the seconds it took and how many pushes were retried (a retriable failure, e.g. the engine's Redis
    not answering within its timeout under a whole state of 100k entities, is retried as the worker would).
    The world's rows were bulk-inserted, which bumps no version: it is set here."""
    from quotas.connectors.base import PushError
    from quotas.models import Cluster, DesiredStateVersion
    from quotas.push.target_push import push_target

    cluster = Cluster.objects.get(name=CLUSTER)
    DesiredStateVersion.objects.update_or_create(cluster=cluster, defaults={"version": 1})
    t0, retried = time.perf_counter(), 0
    for broker in cluster.brokers.order_by("broker_id"):
        for attempt in range(attempts):
            try:
                outcome = push_target(cluster.pk, broker.pk, force=True)
                break
            except PushError as e:
                if not e.retriable or attempt == attempts - 1:
                    raise
                retried += 1
                print(f"push          broker {broker.broker_id}: {e} (retried)", flush=True)
        if outcome.version != 1:
            raise RuntimeError(f"broker {broker.broker_id}: pushed {outcome!r}")
    return time.perf_counter() - t0, retried


def engine_sensors(client: redis.Redis, world: World, broker_id: int) -> tuple[Any, list[tuple[str, str]]]:
    """The engine of one broker (its pushed quotas loaded) with usage recorded for the clients whose sensors the
    world samples on that broker: returns its managers and those clients (user, client-id) for the sampler."""
    from engine.config import QuotaEngine, namespace_for_broker
    from engine.entities import QuotaType
    from engine.managers import UsageRecord

    engine = QuotaEngine(client, namespace_for_broker(CLUSTER, broker_id))
    engine.refresh(force=True)
    now = int(time.time() * 1000)
    by_type: dict[str, list[UsageRecord]] = {}
    active: dict[tuple[str, str], None] = {}
    for s in world.samples[broker_id]:
        if s["q"] == "connection":
            continue
        user, _, client_id = s["e"].partition(":")
        active[(user, client_id)] = None
        by_type.setdefault(s["q"], []).append(UsageRecord(user, client_id, 1.0 if s["q"] != "request" else 0.5, now))
    for q, usages in by_type.items():
        engine.managers[QuotaType(q)].record_many(usages, validate=False)
    return engine.managers, list(active)


def firehose_seconds(client: redis.Redis, world: World, seconds: int) -> int:
    """Append ``seconds`` ticks of every broker's samples to the cluster's firehose, as the samplers publish them
    (one entry per broker tick, its samples as one JSON array), a second apart; returns the samples appended."""
    from engine.monitor import firehose_key

    key, start, n = firehose_key(CLUSTER), int(time.time() * 1000) - seconds * 1000, 0
    for i in range(seconds):
        with client.pipeline(transaction=False) as p:
            for samples in world.samples.values():
                tick = [{**s, "t": start + i * 1000} for s in samples]
                p.xadd(key, {"d": json.dumps(tick)})
                n += len(tick)
            p.execute()
    return n
