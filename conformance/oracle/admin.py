"""The run's administrative requests (topics, quotas, metadata, a first produce) through ``kafka_wire``'s client.

The requests the run measures (``produce_request``, the drivers' CreateTopics) are kafka-python's schema classes
encoded by kafka-python, as every request of ``kafka_wire`` is: what the oracle checks is the engine, not a
client, and the request sizes it records are checked against librdkafka's own count (``size_check``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from conformance.oracle.base import MAX_PRODUCE_VERSION, OracleError, now_ms
from engine.entities import DEFAULT
from kafka_wire import AdminClient, NewTopic


@dataclass(frozen=True)
class QuotaEntry:
    """One configured quota: ``user``/``client_id`` None = absent, ``DEFAULT`` = the default entity."""

    user: str | None
    client_id: str | None
    key: str
    value: float

    def entity(self) -> list[tuple[str, str | None]]:
        """(entity type, name) pairs as AlterClientQuotas takes them; None names the default entity."""
        parts = [("user", self.user), ("client-id", self.client_id)]
        return [(t, None if n == DEFAULT else n) for t, n in parts if n is not None]

    def same_entity(self, other: QuotaEntry) -> bool:
        """The same entity and key, whatever the value."""
        return (self.user, self.client_id, self.key) == (other.user, other.client_id, other.key)


class Admin:
    """The run's administrative connections (a client-id no quota names), one per broker on demand."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.client_id = client_id
        self.clients: dict[str, AdminClient] = {}
        self.bootstrap = bootstrap.split(",")[0].strip()
        self.brokers = self.metadata([])[0]

    def client(self, address: str | None = None) -> AdminClient:
        address = address or self.bootstrap
        if address not in self.clients:
            self.clients[address] = AdminClient(
                address, client_id=self.client_id, connect_timeout=30.0, request_timeout=30.0
            )
        return self.clients[address]

    def metadata(self, topics: Sequence[str]) -> tuple[dict[int, str], dict[str, int]]:
        """Brokers (id -> address on this listener) and the leader of partition 0 of each known topic."""
        response = self.client().metadata(topics)
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        leaders = {}
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index == 0 and p.error_code == 0 and p.leader_id >= 0:
                    leaders[t.name] = p.leader_id
        return brokers, leaders

    def create_topics(self, names: Sequence[str]) -> dict[str, int]:
        """1-partition RF=1 topics; returns the leader of each, once every broker knows the topic."""
        results = self.client().create_topics([NewTopic(n, 1, 1) for n in names], timeout_ms=15000)
        for t in results.topics.values():
            if t.error_code:
                raise OracleError(f"creating topic {t.name} failed: error {t.error_code} {t.error_message}")
        deadline = time.monotonic() + 20
        while True:
            leaders = self.metadata(names)[1]
            if len(leaders) == len(names):
                return leaders
            if time.monotonic() > deadline:
                raise OracleError(f"topics {names} have no leader after 20 s")
            time.sleep(0.1)

    def delete_topics(self, names: Sequence[str]) -> None:
        """The run's topics go (from this quota-free client-id, so no mutation quota gets in the way)."""
        for start in range(0, len(names), 100):
            self.client().delete_topics(names[start:start + 100], timeout_ms=15000)

    def alter_quotas(self, entries: Iterable[QuotaEntry], remove: bool = False) -> None:
        """Set (or remove) quotas in one AlterClientQuotas; any entry's error fails the run."""
        response = self.client().alter_client_quotas(
            (dict(e.entity()), {e.key: None if remove else float(e.value)}) for e in entries
        )
        for entry in response.entries:
            if entry.error_code:
                raise OracleError(f"AlterClientQuotas failed: error {entry.error_code} {entry.error_message}")

    def describe_quotas(self, address: str | None = None) -> list[QuotaEntry]:
        """Every user/client-id quota that the broker at ``address`` holds (its own metadata image)."""
        response = self.client(address).describe_client_quotas()
        if response.error_code:
            raise OracleError(f"DescribeClientQuotas failed: error {response.error_code} {response.error_message}")
        out = []
        for entry in response.entries or ():
            names = {e.entity_type: (DEFAULT if e.entity_name is None else e.entity_name) for e in entry.entity}
            if set(names) - {"user", "client-id"}:
                continue  # ip quotas are connection quotas, not client quotas
            for v in entry.values:
                out.append(QuotaEntry(names.get("user"), names.get("client-id"), v.key, v.value))
        return out

    def wait_quotas(self, wanted: Sequence[QuotaEntry], timeout_s: float = 20.0) -> None:
        """Until every broker holds ``wanted``: quotas reach brokers through the metadata log, a moment later."""
        deadline = time.monotonic() + timeout_s
        for address in self.brokers.values():
            while True:
                held = self.describe_quotas(address)
                present = [w for w in wanted if any(h.same_entity(w) and h.value == w.value for h in held)]
                if len(present) == len(wanted):
                    break
                if time.monotonic() > deadline:
                    raise OracleError(f"broker {address} does not hold the run's quotas after {timeout_s:.0f}s")
                time.sleep(0.05)

    def produce_one(self, leader: str, topic: str) -> None:
        """One message from this (quota-free) client: the leader's first append to a new log is slow."""
        client = self.client(leader)
        deadline = time.monotonic() + 20
        while True:
            response = client.send(produce_request(topic, b"warm-up", now_ms()), cap=MAX_PRODUCE_VERSION)
            if response.responses[0].partition_responses[0].error_code == 0:
                return
            if time.monotonic() > deadline:
                raise OracleError(f"{leader} does not accept produce to {topic}")
            time.sleep(0.1)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def produce_request(topic: str, value: bytes, timestamp_ms: float) -> ProduceRequest:
    """A ProduceRequest (acks=1) of one record batch holding one record, as a producer with linger 0 sends it."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=len(value) + 1024)
    builder.append(timestamp=int(timestamp_ms), key=None, value=value)
    builder.close()
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=30000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=bytes(builder.buffer()))])],
    )


def record_batch_bytes(message_bytes: int) -> int:
    """The record batch of one value-only record: what a naive count of 'bytes produced' would record."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=message_bytes + 1024)
    builder.append(timestamp=0, key=None, value=bytes(message_bytes))
    builder.close()
    return len(builder.buffer())
