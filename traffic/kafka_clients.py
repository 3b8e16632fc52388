"""Demo traffic on a real Kafka cluster: confluent-kafka clients that authenticate as the demo tenants' principals.

Each client signs in with SASL/SCRAM as its principal (``user``) and names its ``client.id``, so Kafka's own quota
of that pair applies, and some ask for more than their quota, so Kafka throttles them (the broker answers with
``throttle_time_ms`` and mutes the connection; librdkafka obeys):

- producers pace messages onto a one-partition topic (one broker leads it, so one broker's sensor sees all);
- a consumer re-reads its topic from the start whenever it catches up, so it fetches as fast as Kafka lets it;
- an admin client creates a burst of topics every so often against ``controller_mutation_rate`` (new request
  versions get a strict quota: topics past the burst fail with THROTTLING_QUOTA_EXCEEDED) and deletes them.

What the clients see is turned into the live monitor's samples (``engine.monitor``), once a second per
broker, from librdkafka's statistics: the bytes sent or received per broker (``txbytes``/``rxbytes``, request
framing included) and the throttle times Kafka answered (``throttle`` window: avg, max, sum). They are marked
``"src": "client"``: what a client observed, not the broker's own sensor. ``sensor`` says which quota (and sensor
tags) applies to a client, so a sample carries its bound; the portal passes the effective-quota resolver.

No Django here (the ``kafka_traffic`` management command reads the cluster and the quotas and runs it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

log = logging.getLogger(__name__)

KIB = 1024
MIB = 1024 * KIB
PRODUCE, FETCH, MUTATION = "produce", "fetch", "controller_mutation"
#: The demo principals' SCRAM mechanism (the portal creates their credentials, ``demo_password``).
MECHANISM = "SCRAM-SHA-512"


def demo_password(principal: str) -> str:
    """The demo principals' password: a demo has no secrets to keep (a real tenant's are made by the portal)."""
    return f"{principal}-demo-secret"


@dataclass(frozen=True)
class KafkaClientSpec:
    """One demo client: what it does, as whom, on which topic, how fast it asks (bytes/s, or topics per burst)."""

    kind: str  # PRODUCE, FETCH or MUTATION
    user: str
    client_id: str
    topic: str
    rate: float = 0.0  # bytes/s asked for (PRODUCE); unused for FETCH (as fast as allowed)
    message_bytes: int = 8 * KIB
    burst: int = 0  # MUTATION: topics created at once
    every_s: float = 20.0  # MUTATION: seconds between bursts
    partitions: int = 1  # PRODUCE: the topic's partitions (Kafka spreads their leaders over the brokers)
    move_every_s: float = 0.0  # PRODUCE over several partitions: write to one, the next one every so often


#: The demo's clients on the real ``prod`` cluster (quotas in demo_data: svc-payments-api 512 KiB/s per broker,
#: svc-analytics-etl/analytics-spark 2 MiB/s, svc-search-indexer 3 mutations/s strict, <default> user 2 MiB/s).
DEMO_KAFKA_TRAFFIC: tuple[KafkaClientSpec, ...] = (
    KafkaClientSpec(PRODUCE, "svc-payments-api", "payments-api", "demo.payments.orders", rate=1 * MIB),
    KafkaClientSpec(PRODUCE, "svc-analytics-loader", "analytics-loader", "demo.analytics.events", rate=256 * KIB),
    KafkaClientSpec(FETCH, "svc-analytics-etl", "analytics-spark", "demo.analytics.events"),
    KafkaClientSpec(PRODUCE, "svc-search-indexer", "search-indexer", "demo.search.documents", rate=128 * KIB),
    # 40 topics at once against 3 mutations/s (a bucket of 3 x 11 s = 33): the last ones are refused, every 30 s
    KafkaClientSpec(MUTATION, "svc-search-indexer", "search-admin", "demo.search.scratch", burst=40, every_s=30.0),
    # a cluster-wide budget of 1 MiB/s: its demand moves to the next partition's leader every 20 s
    KafkaClientSpec(PRODUCE, "svc-payments-ledger", "payments-ledger", "demo.payments.ledger", rate=1.5 * MIB,
                    partitions=3, move_every_s=20.0),
)

#: (user, client-id, quota type) -> (sensor tags, bound or None): which quota applies to a client.
SensorOf = Callable[[str, str, str], tuple[str, float | None]]
Publish = Callable[[list[dict[str, Any]]], None]
#: (quota type, broker id, [(user, client-id, bytes, t_ms)]): what the clients asked for, for the history
Usage = Callable[[str, int, list[tuple[str, str, float, int]]], None]
USAGE_FLUSH_S = 0.5


@dataclass
class _Window:
    """The last statistics of one client: per broker node id, cumulative bytes and the throttle window."""

    at_ms: int = 0
    bytes: dict[int, int] = field(default_factory=dict)


class KafkaTraffic:
    """Runs the demo clients against ``bootstrap`` (the SASL_PLAINTEXT listener) until ``stop``."""

    def __init__(
        self,
        cluster: str,
        bootstrap: str,
        specs: Sequence[KafkaClientSpec] = DEMO_KAFKA_TRAFFIC,
        *,
        sensor: SensorOf | None = None,
        publish: Publish | None = None,
        usage: Usage | None = None,
        password: Callable[[str], str] = demo_password,
        mechanism: str = MECHANISM,
        stats_interval_ms: int = 1000,
    ) -> None:
        self.cluster = cluster
        self.bootstrap = bootstrap
        self.specs = list(specs)
        self.sensor = sensor or (lambda user, client_id, qt: (f"{user}:{client_id}", None))
        self.publish = publish
        self.usage = usage
        self.password = password
        self.mechanism = mechanism
        self.stats_interval_ms = stats_interval_ms
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str, str], _Window] = {}
        #: what the clients saw (for the tests and the log): kind -> counts and the largest throttle
        self.seen: dict[str, dict[str, float]] = {}
        self.errors: list[str] = []

    # -- configuration ---------------------------------------------------------------------------------------

    def client_config(self, spec: KafkaClientSpec) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": self.mechanism,
            "sasl.username": spec.user,
            "sasl.password": self.password(spec.user),
            "client.id": spec.client_id,
            "statistics.interval.ms": self.stats_interval_ms,
            "stats_cb": lambda text, spec=spec: self._stats(spec, text),
            "error_cb": lambda err, spec=spec: self._error(spec, err),
        }

    def ensure_topics(self, admin_user: str, admin_password: str) -> None:
        """The demo topics, one partition each (one leader: one broker's quota sensor sees all of a client), or as
        many as a spec asks for (their leaders spread over the brokers)."""
        admin = AdminClient({
            "bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": self.mechanism, "sasl.username": admin_user, "sasl.password": admin_password,
        })
        wanted = sorted({s.topic for s in self.specs if s.kind != MUTATION})
        existing = set(admin.list_topics(timeout=15).topics)
        partitions = {s.topic: max(s.partitions, 1) for s in self.specs if s.kind != MUTATION}
        new = [NewTopic(t, num_partitions=partitions[t], replication_factor=1) for t in wanted if t not in existing]
        for future in (admin.create_topics(new) if new else {}).values():
            try:
                future.result(30)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise

    # -- running ---------------------------------------------------------------------------------------------

    def start(self) -> KafkaTraffic:
        for spec in self.specs:
            target = {PRODUCE: self._produce, FETCH: self._fetch, MUTATION: self._mutate}[spec.kind]
            thread = threading.Thread(target=self._guard, args=(target, spec), name=f"kafka-{spec.client_id}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def run(self, duration_s: float | None = None) -> None:
        self.start()
        try:
            self._stop.wait(duration_s)
        finally:
            self.stop()

    def _guard(self, target: Callable[[KafkaClientSpec], None], spec: KafkaClientSpec) -> None:
        """A client that fails is restarted after a pause (a broker restarting must not end the demo)."""
        while not self._stop.is_set():
            try:
                target(spec)
                return
            except Exception as e:  # noqa: BLE001 - logged, counted and retried: the demo keeps going
                self._note_error(spec, f"{type(e).__name__}: {e}")
                self._stop.wait(5.0)

    def _produce(self, spec: KafkaClientSpec) -> None:
        producer = Producer({**self.client_config(spec), "linger.ms": 5, "acks": "all",
                             "queue.buffering.max.kbytes": 4096})
        payload = b"x" * spec.message_bytes
        interval = spec.message_bytes / spec.rate
        due = time.monotonic()
        partition = [0]
        log = _UsageLog(self, PRODUCE, spec, lambda: _leader(producer, spec.topic, partition[0]))
        try:
            while not self._stop.is_set():
                if spec.move_every_s > 0 and spec.partitions > 1:
                    now_p = int(time.time() // spec.move_every_s) % spec.partitions
                    if now_p != partition[0]:  # the demand moves to another leader: its records go there
                        log.flush()
                        partition[0], log.broker = now_p, None
                log.maybe_flush()
                now = time.monotonic()
                if now < due:
                    self._stop.wait(min(due - now, 0.2))
                    producer.poll(0)
                    continue
                try:
                    producer.produce(spec.topic, payload, partition=partition[0])
                    log.add(len(payload))
                    due += interval
                except BufferError:  # throttled: Kafka's clients keep the data in their buffer and wait
                    producer.poll(0.05)
                    due = max(due, time.monotonic())
                producer.poll(0)
                if time.monotonic() - due > 2.0:  # behind by more than two seconds: do not burst to catch up
                    due = time.monotonic()
        finally:
            log.flush()
            producer.flush(5)

    def _fetch(self, spec: KafkaClientSpec) -> None:
        consumer = Consumer({**self.client_config(spec), "group.id": f"{spec.client_id}-group",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": True,
                             "fetch.max.bytes": 4 * MIB})
        log = _UsageLog(self, FETCH, spec, lambda: _leader(consumer, spec.topic))
        try:
            consumer.assign([TopicPartition(spec.topic, 0, 0)])
            while not self._stop.is_set():
                log.maybe_flush()
                batch = consumer.consume(500, 0.5)
                fetched = sum(len(m.value() or b"") for m in batch if m.error() is None)
                if fetched:
                    log.add(fetched)  # one consume() of a batch: what the fetches answered
                if not batch or any(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF
                                    for m in batch):
                    consumer.seek(TopicPartition(spec.topic, 0, 0))  # caught up: read it all again
        finally:
            log.flush()
            consumer.close()

    def _mutate(self, spec: KafkaClientSpec) -> None:
        admin = AdminClient(self.client_config(spec))
        n = 0
        while not self._stop.is_set():
            names = [f"{spec.topic}.{n}.{i}" for i in range(spec.burst)]
            n += 1
            refused = 0
            for future in admin.create_topics([NewTopic(t, 1, 1) for t in names]).values():
                try:
                    future.result(30)
                except KafkaException as e:
                    refused += "THROTTLING_QUOTA_EXCEEDED" in str(e)
            self._count(MUTATION, "bursts", 1)
            self._count(MUTATION, "refused", refused)
            self._stop.wait(spec.every_s / 2)
            created = [t for t in names if t in admin.list_topics(timeout=10).topics]
            if created:
                for future in admin.delete_topics(created).values():
                    try:
                        future.result(30)
                    except KafkaException:
                        pass
            self._stop.wait(spec.every_s / 2)
        admin.poll(0)

    # -- what the clients see ------------------------------------------------------------------------------

    def _note_error(self, spec: KafkaClientSpec, message: str) -> None:
        with self._lock:
            self.errors.append(f"{spec.client_id}: {message}")
            del self.errors[:-50]
        log.warning("kafka traffic %s: %s", spec.client_id, message)

    def _error(self, spec: KafkaClientSpec, err: Any) -> None:
        self._note_error(spec, str(err))

    def _count(self, kind: str, name: str, value: float, *, keep_max: bool = False) -> None:
        with self._lock:
            counts = self.seen.setdefault(kind, {})
            counts[name] = max(counts.get(name, 0.0), value) if keep_max else counts.get(name, 0.0) + value

    def _stats(self, spec: KafkaClientSpec, text: str) -> None:
        """librdkafka's statistics (every ``stats_interval_ms``): per broker, bytes moved and throttle times."""
        stats = json.loads(text)
        now_ms = int(time.time() * 1000)
        kind = {PRODUCE: PRODUCE, FETCH: FETCH, MUTATION: MUTATION}[spec.kind]
        counter = "rxbytes" if spec.kind == FETCH else "txbytes"
        key = (spec.kind, spec.user, spec.client_id)
        with self._lock:
            window = self._windows.setdefault(key, _Window())
            elapsed_ms = max(1, now_ms - window.at_ms) if window.at_ms else self.stats_interval_ms
            previous = dict(window.bytes)
            window.at_ms = now_ms
        tags, bound = self.sensor(spec.user, spec.client_id, kind)
        samples = []
        for broker in stats.get("brokers", {}).values():
            node = broker.get("nodeid", -1)
            if node is None or node < 0:  # the bootstrap connections, before the metadata named them
                continue
            total = int(broker.get(counter, 0))
            with self._lock:
                window.bytes[node] = total
            throttle = broker.get("throttle") or {}
            thr_max, thr_sum = float(throttle.get("max", 0)), float(throttle.get("sum", 0))
            moved = max(0, total - previous.get(node, total))
            if moved < 1024 and not thr_max:  # metadata and heartbeats only: not this client's traffic
                continue
            rate = moved * 1000.0 / elapsed_ms
            sample: dict[str, Any] = {
                "t": now_ms, "c": self.cluster, "b": node, "q": kind, "e": tags, "src": "client",
                "bound": bound, "rate": None if kind == MUTATION else rate,
                "util": (rate / bound) if bound and kind != MUTATION else None,
                "thr_avg": float(throttle.get("avg", 0)), "thr_max": thr_max,
                "thr_frac": min(1.0, thr_sum / elapsed_ms), "tokens": None,
            }
            samples.append(sample)
            self._count(kind, "throttle_max_ms", thr_max, keep_max=True)
            self._count(kind, "bytes", moved)
        if samples and self.publish is not None:
            try:
                self.publish(samples)
            except Exception as e:  # noqa: BLE001 - the monitor's Redis being away must not stop the clients
                self._note_error(spec, f"publishing samples: {e}")


def _leader(client: Any, topic: str, partition: int = 0) -> int:
    """The broker leading the partition the client writes to (where its requests, and its quota, are)."""
    partitions = client.list_topics(topic, timeout=10).topics[topic].partitions
    return int(partitions[partition].leader) if partition in partitions else -1


class _UsageLog:
    """A client's usage records (one per message sent, one per batch fetched), flushed every half second to the
    traffic's ``usage`` callback: what the history lands and the what-if replays for a real cluster."""

    def __init__(self, traffic: KafkaTraffic, quota_type: str, spec: KafkaClientSpec, leader: Callable[[], int]):
        self.traffic, self.quota_type, self.spec, self.leader = traffic, quota_type, spec, leader
        self.records: list[tuple[str, str, float, int]] = []
        self.flushed = time.monotonic()
        self.broker: int | None = None

    def add(self, value: float) -> None:
        if self.traffic.usage is not None:
            self.records.append((self.spec.user, self.spec.client_id, float(value), int(time.time() * 1000)))

    def maybe_flush(self) -> None:
        if time.monotonic() - self.flushed >= USAGE_FLUSH_S:
            self.flush()

    def flush(self) -> None:
        self.flushed = time.monotonic()
        if not self.records or self.traffic.usage is None:
            return
        records, self.records = self.records, []
        try:
            if self.broker is None or self.broker < 0:
                self.broker = self.leader()
            self.traffic.usage(self.quota_type, self.broker, records)
        except Exception as e:  # noqa: BLE001 - the history is best effort: the clients keep going
            self.broker = None
            self.traffic._note_error(self.spec, f"logging usage: {e}")
