"""A producer whose demand can be moved between brokers: the workload of cluster-wide budgets.

A topic with one partition per broker, each led by a different broker, and one
confluent-kafka producer that writes as fast as Kafka lets it to the partitions
it is told to use. Moving the producer from one partition to another moves its
demand from one broker to another without touching the cluster. What Kafka
acknowledged is counted per second (client side), so a run can say what the
cluster delivered against the budget. No Django here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

#: Bytes per message: large enough that the producer's demand is far above any budget a test sets.
MESSAGE_BYTES = 16 * 1024


def create_spread_topic(
    config: dict[str, Any], topic: str, brokers: Sequence[int], timeout_s: float = 30.0
) -> dict[int, int]:
    """A topic with one partition per broker, each led by a different one (Kafka spreads a new topic's leaders round
    robin; one replica each, so they never move); returns broker id -> the partition it leads."""
    admin = AdminClient({**config, "log_level": 0})
    new = NewTopic(topic, num_partitions=len(brokers), replication_factor=1)
    for future in admin.create_topics([new]).values():
        future.result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        leaders = {p.leader: i for i, p in parts.items() if p.leader >= 0}
        if len(parts) == len(brokers) and set(leaders) == set(brokers):
            return leaders
        if len(parts) == len(brokers) and len(leaders) == len(brokers):
            raise RuntimeError(f"the partitions of {topic} are led by {sorted(leaders)}, not one each by {brokers}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the partitions of {topic} have no leaders after {timeout_s} s")
        time.sleep(0.2)


class MovingProducer:
    """One producer (one client-id) writing to the partitions it is pointed at, counting acknowledged bytes."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        client_id: str,
        partitions: Sequence[int],
        batch_bytes: int = 64 * 1024,
        queue_kbytes: int = 1024,
    ) -> None:
        """``batch_bytes`` and ``queue_kbytes`` bound what one request and the client's backlog carry: the smaller,
        the less a client released from a throttle sends at once (Kafka admits up to a window's allowance)."""
        self.topic = topic
        self.partitions = list(partitions)
        self.acked: dict[int, int] = {}  # whole second (monotonic) -> bytes acknowledged in it
        self.throttled_ms = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer(
            {
                **config,
                "client.id": client_id,
                "linger.ms": 20,
                "batch.size": batch_bytes,
                "queue.buffering.max.kbytes": queue_kbytes,
                "log_level": 0,
                "throttle_cb": self._on_throttle,
            }
        )
        self._thread = threading.Thread(target=self._run, name=f"moving-producer-{client_id}", daemon=True)

    def start(self) -> MovingProducer:
        self._thread.start()
        return self

    def move_to(self, partitions: Sequence[int]) -> None:
        """Send from now on to these partitions only (round robin)."""
        with self._lock:
            self.partitions = list(partitions)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.purge()
        self._producer.flush(0)

    def rate(self, start_s: float, end_s: float) -> float:
        """Bytes per second acknowledged over whole seconds [start_s, end_s) of the monotonic clock."""
        with self._lock:
            total = sum(v for s, v in self.acked.items() if start_s <= s < end_s)
        return total / max(1.0, end_s - start_s)

    def _on_throttle(self, event: Any) -> None:
        self.throttled_ms += event.throttle_time * 1000

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            second = int(time.monotonic())
            with self._lock:
                self.acked[second] = self.acked.get(second, 0) + len(msg.value())

    def _run(self) -> None:
        payload = b"b" * MESSAGE_BYTES
        i = 0
        while not self._stop.is_set():
            with self._lock:
                partition = self.partitions[i % len(self.partitions)]
            i += 1
            try:
                self._producer.produce(self.topic, payload, partition=partition, on_delivery=self._delivered)
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: Kafka is holding us back
                continue
            self._producer.poll(0)
