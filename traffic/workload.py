"""The demo's simulated clients (``DEMO_TRAFFIC``, topic bursts, a connection storm) and where their traffic goes
(``BrokerTarget``): data, no Redis."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

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
