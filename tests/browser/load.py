"""Brokers for the browser tests: the engine's quota managers of each broker namespace, and each broker's Sampler.

What a broker does with a client's produce requests (record them against the quota that applies) and what its
sampler publishes once a second (``engine.monitor``), driven from the test: quotas pushed by the portal
(a Celery worker writing each broker's namespace) take effect at the next ``tick`` (``QuotaEngine.refresh``).
"""

from __future__ import annotations

import threading
import time

import redis

from engine.config import QuotaEngine, namespace_for_broker
from engine.monitor import Sampler


def now_ms() -> int:
    return int(time.time() * 1000)


class Brokers:
    """One QuotaEngine and one Sampler per broker of a cluster (engine namespaces ``<cluster>.broker-<id>``)."""

    def __init__(self, client: redis.Redis, cluster: str, broker_ids: list[int]) -> None:
        self.engines = {b: QuotaEngine(client, namespace_for_broker(cluster, b)) for b in broker_ids}
        for engine in self.engines.values():
            engine.refresh(force=True)
        self.samplers = {b: Sampler(client, cluster, b, e.managers) for b, e in self.engines.items()}

    def produce(self, user: str, client_id: str, nbytes: float, t: int | None = None) -> list[int]:
        """Produce requests of about ``nbytes`` on every broker (broker i leads more partitions: 1 + i/4 times
        as much); the throttle time (ms) each broker answers."""
        t = now_ms() if t is None else t
        throttles = []
        for b, engine in self.engines.items():
            result = engine.manager("produce").record(user, client_id, nbytes * (1 + b / 4), t)
            throttles.append(result.throttle_ms)
            self.samplers[b].touch(user, client_id, t)
        return throttles

    def mutate(self, user: str, client_id: str, count: float, t: int | None = None) -> None:
        """``count`` topic creations (controller mutations) on every broker, against its token bucket."""
        t = now_ms() if t is None else t
        for b, engine in self.engines.items():
            engine.manager("controller_mutation").record(user, client_id, count, t)
            self.samplers[b].touch(user, client_id, t)

    def tick(self, t: int | None = None) -> int:
        """Reload pushed quotas, then every broker's sampler publishes; returns how many samples were published."""
        t = now_ms() if t is None else t
        published = 0
        for b, engine in self.engines.items():
            engine.refresh()
            published += self.samplers[b].tick(t)
        return published


class Traffic(threading.Thread):
    """A client producing about ``bytes_per_s`` to each broker in 10 requests a second; the samplers tick every
    second."""

    def __init__(self, brokers: Brokers, user: str, client_id: str, bytes_per_s: float) -> None:
        super().__init__(daemon=True, name="browser-test-traffic")
        self.brokers, self.user, self.client_id, self.rate = brokers, user, client_id, bytes_per_s
        self.stopped = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            next_tick = time.monotonic() + 1.0
            while not self.stopped.is_set():
                self.brokers.produce(self.user, self.client_id, self.rate / 10)
                if time.monotonic() >= next_tick:
                    self.brokers.tick()
                    next_tick += 1.0
                self.stopped.wait(0.1)
        except Exception as e:  # reported by the test that started the traffic, when it stops it
            self.error = e

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)
        if self.error is not None:
            raise self.error
