"""The quota engine checked against a live Apache Kafka broker (the oracle).

    python -m conformance.kafka_oracle --bootstrap 127.0.0.1:PORT [--sasl-bootstrap 127.0.0.1:PORT,...]
                                       [--redis-url URL] [--quick | --duration S] [--dump FILE]

Real producers run over byte-rate quotas and a CreateTopics burst runs over a ``controller_mutation_rate``
quota on a real cluster; every response's ``throttle_time_ms`` (and each topic's THROTTLING_QUOTA_EXCEEDED) is
recorded with the request's size and the client's send and receive times, and the same sequence is replayed
through the engine's reference model and its Redis implementation, as ``client_quota_manager`` cases of
``conformance.replay`` (``EngineFactory`` and the case kind build the managers and configs exactly as for the
conformance files). Progress goes to stderr; the last line of stdout is one JSON object
(``decision_agreement``, ``throttle_diff_p99_ms``, ``bound_ms``, ``within_bound``, per engine, per scenario,
the wrong replays). Exit status 0 when the engines agree and every wrong replay is caught, 1 when not, 2 when
the run itself failed. ``--quick`` (12 s of traffic, about 20 s in all) is what the test runs; the default is
30 s, so that the oldest sample is purged and the windows roll over a few times.

What the broker does (Kafka's source, ``KafkaApis.handleProduceRequest``, ``ControllerApis``,
``ControllerMutationQuotaManager``, ``RequestHandlerHelper``):

- Produce: at the response callback (after the local append; acks=1 here), ``time.milliseconds()`` is taken
  and ``request.sizeInBytes`` is recorded on the client's quota sensor (``ClientQuotaManager``: record, then
  check; throttle ``(O-T)/T*W``). ``sizeInBytes`` is ``RequestChannel``'s ``header.size + bodyAndSize.size``:
  the request frame without its 4-byte length prefix. Checked three ways: librdkafka's own count of the bytes
  it sent equals kafka-python's encoding of the same request (``size_check``), the throttles agree to the
  millisecond with it, and counting only the record batch (``request_size``) or the prefix too
  (``length_prefix``) moves them. Every request counts, also one answered with an error.
- CreateTopics v6+ (strict, KIP-599): the broker forwards it to the active controller, whose
  ``ReplicationControlManager`` calls ``StrictControllerMutationQuota.record(numPartitions)`` per topic in
  request order (check the token bucket, then record; a refused topic gets THROTTLING_QUOTA_EXCEEDED and
  records nothing). The response's ``throttle_time_ms`` is the quota's last throttle decayed to the response
  time; the broker passes it on (``sendForwardedResponse``) and mutes the channel.
- ``quota.window.num=11``, ``quota.window.size.seconds=1`` (and the controller's same defaults): the
  project's cluster keeps Kafka's defaults.

Scenarios (each its own client-id and fresh 1-partition RF=1 topic, so one broker's sensor sees all of a
scenario's traffic; they run concurrently, one thread each):

- ``kp-<rate>-<size>``: kafka-python's protocol classes on one blocking socket to the partition leader, one
  ProduceRequest at a time (acks=1); 8 and 24 kB/s x 1024 and 4096-byte messages; quota at client-id (level 7).
  (256 B at 24 kB/s works as well, 0.9995 over 30 s, at twice the requests; see ``EdgeGuard`` for why it did
  not before the guard: 0.963.)
- ``kp-precedence``: quotas at user ANONYMOUS + client-id (level 1) and at the client-id default (level 8,
  higher): level 1 must win. The default applies to every client without a more specific quota while the run
  lasts (the other scenarios have one), so it is set high and removed at the end.
- ``cf-user``: confluent-kafka over SASL_PLAINTEXT/SCRAM-SHA-256 as a user created for the run with
  AlterUserScramCredentials (no authorizer: no super user needed); quotas at the user (level 3) and at its
  client-id (level 7, higher): level 3 must win. Without ``--sasl-bootstrap``: PLAINTEXT, client-id quota.
- ``mutation``: CreateTopics v7 with topics of 1, 2 and 3 partitions per request (a topic of N partitions
  costs N tokens) from a client-id with ``controller_mutation_rate`` 2/s (burst 2 x 11 = 22 tokens).

Clients obey throttling as KIP-219 clients do (the broker mutes the channel; the client waits
``throttle_time_ms`` after the response before it sends again). Offered load is 2.5 x the quota (produce) and
2 requests/s (mutations): each trace has an unthrottled start, the onset and a throttled steady state. All
clients connect first, then each sends its first request alone (the first record opens the sensor's first
sample, from which every window of the next 11 s is measured, so its time should be known well), then all
run together. Producers send clear of the instants where the sampled Rate jumps (``EdgeGuard``: a few sends
per scenario are delayed by milliseconds); without that, a record within its uncertainty of the opening of a
sample can open it on the broker and not in the replay, and the window is then off by one inter-request gap
until a pause re-aligns them (measured: 3.7% of decisions flipped at 256 B and 24 kB/s over 30 s, all within
the bound, and 9 of 64 cf-user throttles beyond it).

confluent-kafka: ``linger.ms=0``, ``batch.num.messages=1``, ``max.in.flight=1``, no retries, every broker
connection opened up front (``enable.sparse.connections=false``), and the driver is synchronous: produce one
message, ``flush()`` until its delivery report, wait out the throttle, produce the next. librdkafka's
``throttle_cb`` fires for every broker response with ``throttle_time_ms > 0`` and once when it returns to 0
(``rd_kafka_op_throttle_time``; nothing for 0 after 0), as a high-priority op on the queue that also carries
the delivery reports, which ``flush()`` serves to the end. With one request outstanding, the events served
between ``produce()`` and the end of ``flush()`` belong to that request: the last one from the partition
leader is its throttle, none means 0 (events from other brokers or other responses carry 0 here: no request
quota is set). The request's size is librdkafka's own: its ``protocol`` debug line
``Sent ProduceRequest (vN, X bytes`` (X counts the length prefix). Send and receive times are taken around
``produce()`` and in the delivery callback.

Replay. The broker's record time is not visible to the client: it lies between the client's send and
receive, on the broker's 1 ms clock (the same wall clock: the cluster runs on this host). For Produce the
replay puts it at the midpoint ``t = (floor(send) + floor(recv)) // 2``. For CreateTopics it takes the send
side, ``t = floor(send)``: the controller records the quota when it handles the request, and the commit of
the topics' records through the 3-voter metadata quorum (most of the ~40 ms round trip) comes after; the
midpoint put every record ~20 ms late, which offsets the bucket against the time it was last full and flipped
decisions. The response's throttle is the quota's last throttle decayed to ``floor(recv)``, as Kafka decays it
to the response time. ``u`` is the largest distance from ``t`` to either end (half the span, or all of it):
how far the truth can be. A produce request is recorded whatever the decision, so that replay runs free. A
strict token bucket's
state depends on which topics were admitted: one check taken within ``u`` of an empty bucket decides whether
N tokens go, and a replay that decided otherwise would be N/T seconds off for every later throttle. So the
CreateTopics replay is conditioned: the engine decides each topic (that decision is compared), then records
what the broker recorded (``unrecord`` with the permits, or their negation, as the conformance case kind
allows). The free-running figures are reported too (``free_running_model``).

The bound. Between sample boundaries the sampled-Rate throttle is ``S/T - W(t)``: S is fixed and the window W
grows 1 ms per ms, so the change over the uncertainty, ``rate'/T * W`` with the window's own growth, is one
millisecond per millisecond; the token bucket refills T tokens/s, so its ``-K/T`` moves at the same slope.
W is measured from the start of the oldest sample (the time of an earlier record, as uncertain) and the bucket
from its last update. So a throttle may differ by this record's uncertainty, plus that of the reference
record, plus 1 ms for ``Math.round``: per scenario ``bound_ms = 2 * ceil(p99(u)) + 1``. Across the
instants where the Rate jumps it can be off by up to a window: ``EdgeGuard`` keeps records clear of them (and
counts the few that straddle one anyway), and the comparison is on percentiles.

The comparison, per engine, over all scenarios (and per scenario, reported): decisions (throttled or not; per
topic for CreateTopics) agree on at least 99%; at least 99% of the responses that either side throttled are
within their scenario's bound, and the p99 of ``|engine - broker|`` over them is within the largest bound;
each scenario's bound came from the expected precedence level. The same comparison must fail, over the
scenarios each applies to and in each alone, for deliberately wrong replays on the model: ``window_count``
(10 samples instead of 11), ``precedence`` (the most specific entity ignored, so a lower level's quota
applies) and ``request_size`` (the record batch instead of ``request.sizeInBytes``; one token per topic
instead of one per partition). ``length_prefix`` is reported, not required.

The replay's quota config is the cluster's (what DescribeClientQuotas answered at the start plus every
scenario's entities), so the ``quotaTypesEnabled`` mask and precedence are as on the broker. The run's quotas,
topics and SCRAM user are removed at the end. No Django and no ``devtools`` here (import contracts).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import secrets
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClientQuotasRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from conformance.replay import CASE_KINDS, EngineFactory
from engine.entities import DEFAULT
from engine.stats import MetricConfig, WindowedSum

#: Kafka's defaults (``quota.window.num``, ``quota.window.size.seconds``), which the cluster runs with.
SAMPLES = 11
WINDOW_S = 1
#: The goal: decisions agree, and throttles are within the bound, on at least this fraction.
MIN_AGREEMENT = 0.99
#: Seconds of traffic: ``--quick`` (the test) and the default.
QUICK_S = 12.0
DEFAULT_S = 30.0

THROTTLING_QUOTA_EXCEEDED = 89
PRODUCE_KEY = "producer_byte_rate"
MUTATION_KEY = "controller_mutation_rate"
PRINCIPAL_PLAINTEXT = "ANONYMOUS"
#: Highest versions used: Produce v13 names topics by id; CreateTopics v6+ is strict (KIP-599).
MAX_PRODUCE_VERSION = 12
MAX_CREATE_TOPICS_VERSION = 7
MIN_CREATE_TOPICS_VERSION = 6


class OracleError(RuntimeError):
    """The run could not be carried out (cluster unreachable, a request refused): no verdict."""


def log(message: str) -> None:
    """Progress goes to stderr: stdout's last line is the JSON verdict."""
    print(f"kafka_oracle: {message}", file=sys.stderr, flush=True)


def now_ms() -> float:
    """Wall-clock milliseconds: the broker's ``time.milliseconds()`` is the same clock on this host."""
    return time.time_ns() / 1e6


# ---------------------------------------------------------------- the wire


class Wire:
    """One blocking connection to one broker with kafka-python's protocol classes: what a client with one
    request in flight does, with the times around each exchange and the exact request size."""

    def __init__(self, address: str, client_id: str, timeout_s: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.client_id = client_id
        self.timeout_s = timeout_s
        try:
            self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as e:
            raise OracleError(f"cannot connect to {address}: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.protocol = KafkaProtocol(client_id=client_id, ident=address)
        api = ApiVersionsRequest(client_software_name="quota-oracle", client_software_version="1")
        response = self.call(api, 3)[0]
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys or ()}

    def version(self, request_class: Any, cap: int | None = None, floor: int = 0) -> int:
        """The highest version both sides speak (at most ``cap``)."""
        theirs = self.versions.get(request_class.API_KEY)
        ours = request_class.valid_versions
        high = min(ours[1], theirs[1] if theirs else -1, cap if cap is not None else ours[1])
        if theirs is None or high < max(ours[0], theirs[0], floor):
            raise OracleError(f"{self.address} speaks no usable version of {request_class.__name__}: {theirs}")
        return high

    def call(self, request: Any, version: int) -> tuple[Any, float, float, int]:
        """Send and wait: (response, send ms, receive ms, request size without the length prefix).

        The send time is taken before the first byte goes out and the receive time after the last byte came
        in, so whatever the broker did for this request happened between the two.
        """
        request.API_VERSION = version
        self.protocol.send_request(request)
        data = self.protocol.send_bytes()
        deadline = time.monotonic() + self.timeout_s
        try:
            sent = now_ms()
            self.sock.sendall(data)
            while True:
                self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise OracleError(f"{self.address} closed the connection")
                answers = self.protocol.receive_bytes(chunk)
                if answers:
                    return answers[0][1], sent, now_ms(), len(data) - 4
        except OSError as e:
            raise OracleError(f"{type(request).__name__} to {self.address} failed: {e}") from e

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------- cluster admin


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
        self.wires: dict[str, Wire] = {}
        self.bootstrap = bootstrap.split(",")[0].strip()
        self.brokers = self.metadata([])[0]

    def wire(self, address: str | None = None) -> Wire:
        address = address or self.bootstrap
        if address not in self.wires:
            self.wires[address] = Wire(address, self.client_id)
        return self.wires[address]

    def metadata(self, topics: Sequence[str]) -> tuple[dict[int, str], dict[str, int]]:
        """Brokers (id -> address on this listener) and the leader of partition 0 of each known topic."""
        wire = self.wire()
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False
        )
        response = wire.call(request, wire.version(MetadataRequest, cap=12))[0]
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        leaders = {}
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index == 0 and p.error_code == 0 and p.leader_id >= 0:
                    leaders[t.name] = p.leader_id
        return brokers, leaders

    def create_topics(self, names: Sequence[str]) -> dict[str, int]:
        """1-partition RF=1 topics; returns the leader of each, once every broker knows the topic."""
        wire = self.wire()
        T = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(
            topics=[T(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[]) for n in names],
            timeout_ms=15000,
            validate_only=False,
        )
        response = wire.call(request, wire.version(CreateTopicsRequest))[0]
        for t in response.topics:
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
        if not names:
            return
        wire = self.wire()
        version = wire.version(DeleteTopicsRequest)
        S = DeleteTopicsRequest.DeleteTopicState
        for start in range(0, len(names), 100):
            chunk = list(names[start:start + 100])
            request = DeleteTopicsRequest(topics=[S(name=n) for n in chunk], topic_names=chunk, timeout_ms=15000)
            wire.call(request, version)

    def alter_quotas(self, entries: Iterable[QuotaEntry], remove: bool = False) -> None:
        """Set (or remove) quotas in one AlterClientQuotas; any entry's error fails the run."""
        wire = self.wire()
        r = AlterClientQuotasRequest
        request = r(
            entries=[
                r.EntryData(
                    entity=[r.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in e.entity()],
                    ops=[r.EntryData.OpData(key=e.key, value=0.0 if remove else float(e.value), remove=remove)],
                )
                for e in entries
            ],
            validate_only=False,
        )
        response = wire.call(request, wire.version(AlterClientQuotasRequest))[0]
        for entry in response.entries:
            if entry.error_code:
                raise OracleError(f"AlterClientQuotas failed: error {entry.error_code} {entry.error_message}")

    def describe_quotas(self, address: str | None = None) -> list[QuotaEntry]:
        """Every user/client-id quota that the broker at ``address`` holds (its own metadata image)."""
        wire = self.wire(address)
        request = DescribeClientQuotasRequest(components=[], strict=False)
        response = wire.call(request, wire.version(DescribeClientQuotasRequest))[0]
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
        wire = self.wire(leader)
        deadline = time.monotonic() + 20
        while True:
            response = wire.call(produce_request(topic, b"warm-up", now_ms()), wire.version(ProduceRequest, cap=12))[0]
            if response.responses[0].partition_responses[0].error_code == 0:
                return
            if time.monotonic() > deadline:
                raise OracleError(f"{leader} does not accept produce to {topic}")
            time.sleep(0.1)

    def close(self) -> None:
        for wire in self.wires.values():
            wire.close()


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


# ---------------------------------------------------------------- scenarios


@dataclass
class Exchange:
    """One request and its response as the client saw them."""

    send_ms: float
    recv_ms: float
    size: int  # request.sizeInBytes
    throttle_ms: int
    error: int = 0
    topics: list[tuple[str, int, int]] = field(default_factory=list)  # CreateTopics: (name, partitions, error)

    def broker_time(self, kind: str) -> tuple[int, int]:
        """(estimated record time on the broker's ms clock, uncertainty u): the midpoint for Produce (recorded in
        the response callback, after the append), the send side for CreateTopics (recorded when the controller
        handles it, before the commit of its records that makes most of the round trip)."""
        lo, hi = math.floor(self.send_ms), math.floor(self.recv_ms)
        t = (lo + hi) // 2 if kind == "produce" else lo
        return t, max(t - lo, hi - t)


@dataclass
class Scenario:
    """One client, its quotas and what it saw."""

    name: str
    kind: str  # "produce" | "mutation"
    driver: str  # "kafka-python" | "confluent-kafka"
    client_id: str
    user: str
    quotas: list[QuotaEntry]  # its own entities, the one that must win first
    level: int  # the precedence level that must supply the bound (1..8)
    message_bytes: int = 0
    offered: float = 0.0  # bytes/s (produce) or requests/s (mutation)
    partitions: tuple[int, ...] = ()  # per topic of each CreateTopics request
    sasl: dict[str, str] | None = None
    topic: str = ""
    leader: int = -1
    exchanges: list[Exchange] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def bound(self) -> float:
        return self.quotas[0].value

    @property
    def key(self) -> str:
        return self.quotas[0].key

    @property
    def interval_s(self) -> float:
        """Seconds between sends at the offered load (120 bytes of request overhead per message)."""
        return (self.message_bytes + 120) / self.offered if self.kind == "produce" else 1 / self.offered


def plan(run: str, sasl: bool) -> list[Scenario]:
    """The scenarios of one run; names of clients, users and topics carry the run id."""
    scenarios = []
    for rate in (8000, 24000):
        for size in (1024, 4096):
            cid = f"oracle-{run}-kp-{rate}-{size}"
            scenarios.append(Scenario(
                name=f"kp-{rate // 1000}k-{size}B", kind="produce", driver="kafka-python", client_id=cid,
                user=PRINCIPAL_PLAINTEXT, quotas=[QuotaEntry(None, cid, PRODUCE_KEY, rate)], level=7,
                message_bytes=size, offered=2.5 * rate,
            ))
    cid = f"oracle-{run}-kp-precedence"
    scenarios.append(Scenario(
        name="kp-precedence", kind="produce", driver="kafka-python", client_id=cid, user=PRINCIPAL_PLAINTEXT,
        quotas=[
            QuotaEntry(PRINCIPAL_PLAINTEXT, cid, PRODUCE_KEY, 12000),
            QuotaEntry(None, DEFAULT, PRODUCE_KEY, 48000),
        ],
        level=1, message_bytes=1024, offered=2.5 * 12000,
    ))
    cid = f"oracle-{run}-cf"
    if sasl:
        user = f"oracle-{run}-user"
        scenarios.append(Scenario(
            name="cf-user", kind="produce", driver="confluent-kafka", client_id=cid, user=user,
            quotas=[QuotaEntry(user, None, PRODUCE_KEY, 12000), QuotaEntry(None, cid, PRODUCE_KEY, 36000)],
            level=3, message_bytes=1024, offered=2.5 * 12000,
            sasl={"username": user, "password": secrets.token_hex(16)},
        ))
    else:
        scenarios.append(Scenario(
            name="cf-client", kind="produce", driver="confluent-kafka", client_id=cid, user=PRINCIPAL_PLAINTEXT,
            quotas=[QuotaEntry(None, cid, PRODUCE_KEY, 12000)], level=7, message_bytes=1024, offered=2.5 * 12000,
        ))
    cid = f"oracle-{run}-mutation"
    scenarios.append(Scenario(
        name="mutation", kind="mutation", driver="kafka-python", client_id=cid, user=PRINCIPAL_PLAINTEXT,
        quotas=[QuotaEntry(None, cid, MUTATION_KEY, 2.0)], level=7, offered=2.0, partitions=(1, 2, 3),
    ))
    return scenarios


# ---------------------------------------------------------------- drivers


class Driver:
    """A client of one scenario: ``open`` (connect, untimed), ``send`` one request (appends an Exchange and
    returns the throttle to obey), ``close``."""

    def __init__(self, s: Scenario) -> None:
        self.s = s

    def open(self) -> None:
        raise NotImplementedError

    def send(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class KafkaPythonProducer(Driver):
    """kafka-python's protocol classes on one socket to the partition leader, one ProduceRequest at a time."""

    def __init__(self, s: Scenario, leader_address: str) -> None:
        super().__init__(s)
        self.address = leader_address

    def open(self) -> None:
        self.wire = Wire(self.address, self.s.client_id)
        self.version = self.wire.version(ProduceRequest, cap=MAX_PRODUCE_VERSION)
        self.value = bytes(self.s.message_bytes)
        self.s.notes["produce_version"] = self.version

    def send(self) -> int:
        request = produce_request(self.s.topic, self.value, now_ms())
        response, sent, received, size = self.wire.call(request, self.version)
        error = response.responses[0].partition_responses[0].error_code
        self.s.exchanges.append(Exchange(sent, received, size, response.throttle_time_ms, error))
        return int(response.throttle_time_ms)

    def close(self) -> None:
        self.wire.close()


_SENT = re.compile(r"Sent ProduceRequest \(v(\d+), (\d+) bytes")


class ConfluentProducer(Driver):
    """librdkafka with one message per request and one request in flight, driven synchronously (module doc)."""

    def __init__(self, s: Scenario, bootstrap: str) -> None:
        super().__init__(s)
        self.bootstrap = bootstrap
        self.sent: list[tuple[int, int]] = []  # (version, bytes with the length prefix), in send order
        self.throttles: list[tuple[int, int]] = []  # (broker id, ms) served since produce()
        self.reports: list[tuple[float, int]] = []  # (ms, error code) of delivery reports

    def open(self) -> None:
        from confluent_kafka import Producer

        sent = self.sent

        class _SentLines(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                m = _SENT.search(record.getMessage())
                if m:
                    sent.append((int(m.group(1)), int(m.group(2))))

        logger = logging.getLogger(f"kafka_oracle.librdkafka.{self.s.name}")
        logger.handlers[:] = [_SentLines()]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "client.id": self.s.client_id,
            "linger.ms": 0,
            "batch.num.messages": 1,
            "max.in.flight": 1,
            "acks": 1,
            "enable.idempotence": False,
            "retries": 0,
            "enable.sparse.connections": False,
            "debug": "protocol",
            "logger": logger,
            "throttle_cb": lambda e: self.throttles.append((e.broker_id, round(e.throttle_time * 1000))),
        }
        if self.s.sasl:
            conf.update({
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-256",
                "sasl.username": self.s.sasl["username"],
                "sasl.password": self.s.sasl["password"],
            })
        self.producer = Producer(conf)
        self.producer.list_topics(self.s.topic, timeout=10)  # metadata; every broker connection opens now
        time.sleep(0.5)
        self.producer.poll(0)
        self.value = bytes(self.s.message_bytes)

    def send(self) -> int:
        n_sent, n_reports = len(self.sent), len(self.reports)
        self.throttles.clear()
        sent = now_ms()
        self.producer.produce(self.s.topic, self.value, partition=0, on_delivery=self._delivered)
        self.producer.flush(30)
        if len(self.reports) != n_reports + 1 or len(self.sent) != n_sent + 1:
            raise OracleError(f"{self.s.name}: expected one ProduceRequest and one delivery report, got "
                              f"{len(self.sent) - n_sent} and {len(self.reports) - n_reports}")
        received, error = self.reports[-1]
        mine = [ms for broker, ms in self.throttles if broker == self.s.leader]
        throttle = mine[-1] if mine else 0
        self.s.exchanges.append(Exchange(sent, received, self.sent[-1][1] - 4, throttle, error))
        return throttle

    def _delivered(self, err: Any, msg: Any) -> None:
        self.reports.append((now_ms(), 0 if err is None else err.code()))

    def close(self) -> None:
        self.producer.flush(5)
        if not self.sent:
            return
        version, framed = self.sent[-1]
        self.s.notes["produce_version"] = version
        # kafka-python's encoding of the same request (librdkafka's version and client-id): the same bytes
        request = produce_request(self.s.topic, self.value, now_ms())
        request.API_VERSION = version
        request.with_header(correlation_id=1, client_id=self.s.client_id)
        self.s.notes["size_check"] = {
            "librdkafka_request_bytes": framed - 4,
            "kafka_python_request_bytes": len(request.encode(framed=True, header=True)) - 4,
        }


class TopicCreator(Driver):
    """CreateTopics v6+ (strict) with several topics per request, as an admin client sends them."""

    def __init__(self, s: Scenario, address: str) -> None:
        super().__init__(s)
        self.address = address
        self.n = 0

    def open(self) -> None:
        self.wire = Wire(self.address, self.s.client_id)
        self.version = self.wire.version(
            CreateTopicsRequest, cap=MAX_CREATE_TOPICS_VERSION, floor=MIN_CREATE_TOPICS_VERSION
        )
        self.s.notes["create_topics_version"] = self.version

    def send(self) -> int:
        T = CreateTopicsRequest.CreatableTopic
        names = [f"{self.s.topic}-{self.n}-{i}" for i in range(len(self.s.partitions))]
        self.n += 1
        request = CreateTopicsRequest(
            topics=[T(name=name, num_partitions=p, replication_factor=1, assignments=[], configs=[])
                    for name, p in zip(names, self.s.partitions, strict=True)],
            timeout_ms=15000,
            validate_only=False,
        )
        response, sent, received, size = self.wire.call(request, self.version)
        errors = {t.name: t.error_code for t in response.topics}
        topics = [(name, p, errors.get(name, -1)) for name, p in zip(names, self.s.partitions, strict=True)]
        self.s.created.extend(name for name, _, e in topics if e == 0)
        self.s.exchanges.append(Exchange(sent, received, size, response.throttle_time_ms, topics=topics))
        return int(response.throttle_time_ms)

    def close(self) -> None:
        self.wire.close()


class Start:
    """The start of the concurrent phase: every client connected, then each sends its first request alone
    (the first record opens the sensor's first sample, the reference of every window for 11 s: its time
    should be known well), then all run together."""

    def __init__(self, n: int, duration_s: float) -> None:
        self.duration_s = duration_s
        self.stop_at = 0.0
        self.connected = threading.Barrier(n, timeout=60)
        self.primed = threading.Barrier(n, action=self._go, timeout=60)
        self.first = threading.Lock()

    def _go(self) -> None:
        self.stop_at = time.monotonic() + self.duration_s

    def abort(self) -> None:
        self.connected.abort()
        self.primed.abort()


class EdgeGuard:
    """Keeps a producer's records clear of the instants where Kafka's sampled Rate jumps.

    A record's outcome changes discontinuously at three kinds of instants, all of them an earlier record's time
    plus whole windows: the next sample opens with the first record one window after the current sample opened;
    a sample is purged 11 windows after its last record; the padded window drops by one window at each whole
    window from the oldest sample's start (the throttle jumps by a window). A record whose time is uncertain
    across such an instant may land on one side on the broker and on the other in the replay, and then the
    window is off by one inter-request gap (or a whole window) until the traffic re-aligns it: a difference
    that says nothing about the engine. The instants are computed with the engine's own ``WindowedSum`` on the
    estimated record times, each with the uncertainty of the record it comes from; the driver delays a send
    that would come within them, and records that straddle one anyway (a slow round trip) are counted.
    """

    def __init__(self, samples: int = SAMPLES, window_ms: int = WINDOW_S * 1000) -> None:
        self.config = MetricConfig(samples=samples, window_ms=window_ms)
        self.stat = WindowedSum()
        self.uncertainty: dict[int, int] = {}  # estimated record ms -> its uncertainty
        self.spans: list[int] = []
        self.ambiguous = 0
        self.delays = 0

    def edges(self) -> list[tuple[int, int]]:
        """(instant ms, margin ms) of the next discontinuities."""
        samples, w, n = self.stat.samples, self.config.window_ms, self.config.samples
        if not samples:
            return []

        def margin(t: int) -> int:
            return self.uncertainty.get(t, 0) + 1

        current = samples[self.stat.current]
        out = [(current.start_ms + w, margin(current.start_ms))]
        out += [(x.last_event_ms + n * w, margin(x.last_event_ms)) for x in samples]
        for x in sorted(samples, key=lambda x: x.start_ms)[:2]:  # the oldest, and the next after a purge
            out += [(x.start_ms + k * w, margin(x.start_ms)) for k in range(1, n)]
        return out

    def clear(self, at_ms: float) -> float:
        """The first send time at or after ``at_ms`` whose record interval keeps clear of every instant."""
        rtt = max(self.spans[-20:], default=2) + 1
        edges = self.edges()
        moved = True
        while moved:
            moved = False
            for e, g in edges:
                if at_ms - g <= e <= at_ms + rtt + g:
                    at_ms, moved = float(e + g + 1), True
        return at_ms

    def observe(self, ex: Exchange) -> None:
        """Account a response: was its interval clear, then record its estimated time as the broker did."""
        lo, hi = math.floor(ex.send_ms), math.floor(ex.recv_ms)
        if any(lo - g <= e <= hi + g for e, g in self.edges()):
            self.ambiguous += 1
        t, u = ex.broker_time("produce")
        self.spans.append(hi - lo)
        self.uncertainty[t] = max(u, self.uncertainty.get(t, 0))
        self.stat.record(self.config, 1.0, t)
        self.stat.purge(self.config, t)


def drive(driver: Driver, start: Start) -> None:
    """Open, prime, then paced sends until the end, never before a throttle has passed (KIP-219) and, for
    producers, clear of the sampled Rate's discontinuities (``EdgeGuard``)."""
    s = driver.s
    guard = EdgeGuard() if s.kind == "produce" else None
    try:
        driver.open()
        start.connected.wait()
        with start.first:
            throttle = driver.send()
            time.sleep(0.02)
        start.primed.wait()
        if guard:
            guard.observe(s.exchanges[-1])
        next_at = now_ms() + throttle
        while True:
            if guard:
                cleared = guard.clear(next_at)
                guard.delays += cleared > next_at
                next_at = cleared
            delay = (next_at - now_ms()) / 1000
            if delay > 0:
                time.sleep(delay)
            if time.monotonic() >= start.stop_at:
                break
            throttle = driver.send()
            if guard:
                guard.observe(s.exchanges[-1])
            next_at = max(next_at + s.interval_s * 1000, now_ms() + throttle)
    except threading.BrokenBarrierError:
        s.error = s.error or "another scenario failed to start"
    except Exception as e:  # reported per scenario; the others are released
        s.error = f"{type(e).__name__}: {e}"
        start.abort()
    finally:
        if guard:
            s.notes["edge_guard"] = {"sends_delayed": guard.delays, "records_straddling": guard.ambiguous}
        try:
            driver.close()
        except Exception as e:
            s.error = s.error or f"close: {type(e).__name__}: {e}"


# ---------------------------------------------------------------- replay and comparison


@dataclass
class Replay:
    """An engine's answer to a scenario: per response the throttle, per decision unit throttled or not."""

    throttles: list[int]
    decisions: list[bool]
    resolved_bound: float


def replay(
    s: Scenario,
    factory: EngineFactory,
    config: Sequence[QuotaEntry],
    *,
    samples: int = SAMPLES,
    size: Callable[[Exchange], float] | None = None,
    permits: Callable[[int], float] | None = None,
    conditioned: bool = True,
) -> Replay:
    """The scenario through one engine, as a ``client_quota_manager`` case of ``conformance.replay``: the
    cluster's config, one record per request (per topic for CreateTopics) at the estimated broker time, the
    resolved bound. ``conditioned`` CreateTopics replays then record what the broker recorded (module doc)."""
    user = {"user": s.user, "client": s.client_id}
    case_config = {"type": "produce" if s.kind == "produce" else "controller_mutation",
                   "samples": samples, "window_s": WINDOW_S}
    throttles: list[int] = []
    decisions: list[bool] = []
    with factory.scope() as (backend, ns):
        step = CASE_KINDS["client_quota_manager"](backend, ns, case_config)
        for e in config:
            if e.key == s.key:
                entity = {"user": e.user, "client": e.client_id, "quota": e.value}
                step({"op": "update_quota", "t_ms": 0, "args": entity})
        for ex in s.exchanges:
            t = ex.broker_time(s.kind)[0]
            if s.kind == "produce":
                out = step({"op": "record", "t_ms": t, "args": {**user, "v": size(ex) if size else ex.size}})
                throttles.append(int(out["throttle_ms"]))
                decisions.append(throttles[-1] > 0)
                continue
            last = 0
            for _name, p, error in ex.topics:
                if error not in (0, THROTTLING_QUOTA_EXCEEDED):
                    continue  # refused before the quota check (validation): the controller recorded nothing
                v = permits(p) if permits else float(p)
                out = step({"op": "record", "t_ms": t, "args": {**user, "v": v}})
                refused = "throttle_ms_long" in out  # violated: refused even when the throttle rounds to 0 ms
                decisions.append(refused)
                last = int(out["throttle_ms"]) if refused else last
                if conditioned and refused != (error == THROTTLING_QUOTA_EXCEEDED):
                    # follow the broker: record unchecked what it admitted, give back what it refused
                    step({"op": "unrecord", "t_ms": t, "args": {**user, "v": -v if refused else v}})
            # the quota's last throttle, decayed to the response time (``AbstractControllerMutationQuota``)
            throttles.append(max(0, last - (math.floor(ex.recv_ms) - t)))
        resolved = float(step({"op": "quota", "t_ms": 0, "args": user})["bound"])
    return Replay(throttles, decisions, resolved)


def broker_view(s: Scenario) -> Replay:
    """What the broker answered, in the same shape."""
    throttles = [ex.throttle_ms for ex in s.exchanges]
    if s.kind == "produce":
        return Replay(throttles, [t > 0 for t in throttles], s.bound)
    refused = [e == THROTTLING_QUOTA_EXCEEDED for ex in s.exchanges for _, _, e in ex.topics
               if e in (0, THROTTLING_QUOTA_EXCEEDED)]
    return Replay(throttles, refused, s.bound)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


def bound_ms(s: Scenario) -> int:
    """Twice the p99 uncertainty of the broker's record time, plus Math.round's 1 ms (see the module doc)."""
    return 2 * math.ceil(percentile([ex.broker_time(s.kind)[1] for ex in s.exchanges], 99)) + 1


@dataclass
class Comparison:
    """One engine's replay of one or more scenarios against the broker."""

    decisions: int = 0
    agree: int = 0
    unexplained: int = 0  # disagreements whose response's throttles differ by more than the bound
    diffs: list[int] = field(default_factory=list)  # |engine - broker| where either throttled
    beyond: int = 0  # of those, beyond their scenario's bound
    bound_ms: int = 0  # the largest scenario bound
    resolved_ok: bool = True

    def add(self, s: Scenario, engine: Replay) -> Comparison:
        broker = broker_view(s)
        bound = bound_ms(s)
        self.decisions += len(broker.decisions)
        self.agree += sum(a == b for a, b in zip(engine.decisions, broker.decisions, strict=True))
        per_unit = [abs(a - b) for ex, a, b in zip(s.exchanges, engine.throttles, broker.throttles, strict=True)
                    for _ in ([t for t in ex.topics if t[2] in (0, THROTTLING_QUOTA_EXCEEDED)] or [None])]
        self.unexplained += sum(
            a != b and d > bound for a, b, d in zip(engine.decisions, broker.decisions, per_unit, strict=True)
        )
        diffs = [abs(a - b) for a, b in zip(engine.throttles, broker.throttles, strict=True) if a > 0 or b > 0]
        self.diffs.extend(diffs)
        self.beyond += sum(d > bound for d in diffs)
        self.bound_ms = max(self.bound_ms, bound)
        self.resolved_ok = self.resolved_ok and engine.resolved_bound == s.bound
        return self

    @property
    def agreement(self) -> float:
        return self.agree / self.decisions if self.decisions else 0.0

    @property
    def within_bound(self) -> float:
        return 1 - self.beyond / len(self.diffs) if self.diffs else 1.0

    @property
    def passed(self) -> bool:
        """Decisions agree on 99%, 99% of the throttles are within their scenario's bound (the p99 of the
        difference measured against the bound), and the expected precedence level supplied the bound."""
        return (
            self.decisions > 0
            and self.agreement >= MIN_AGREEMENT
            and self.within_bound >= MIN_AGREEMENT
            and percentile(self.diffs, 99) <= self.bound_ms
            and self.resolved_ok
        )

    def summary(self) -> dict[str, Any]:
        return {
            "decisions": self.decisions,
            "agree": self.agree,
            "decision_agreement": round(self.agreement, 5),
            "disagreements_beyond_bound": self.unexplained,
            "throttled_responses_compared": len(self.diffs),
            "throttle_diff_p50_ms": percentile(self.diffs, 50),
            "throttle_diff_p99_ms": percentile(self.diffs, 99),
            "throttle_diff_max_ms": max(self.diffs, default=0),
            "beyond_bound": self.beyond,
            "within_bound": round(self.within_bound, 5),
            "passed": self.passed,
        }


# ---------------------------------------------------------------- a run


@dataclass
class Oracle:
    """One run against one cluster: set up, drive, clean up; then replay and compare."""

    bootstrap: str
    sasl_bootstrap: str | None = None
    redis_url: str | None = None
    duration_s: float = 30.0
    scenarios: list[Scenario] = field(default_factory=list)
    config: list[QuotaEntry] = field(default_factory=list)

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        run = uuid.uuid4().hex[:8]
        self.scenarios = plan(run, sasl=bool(self.sasl_bootstrap))
        admin = Admin(self.bootstrap, f"oracle-{run}-admin")
        ours = [q for s in self.scenarios for q in s.quotas]
        scram_user: str | None = None
        try:
            existing = admin.describe_quotas()
            clash = [e for e in existing if any(e.same_entity(o) for o in ours)]
            if clash:
                raise OracleError(f"the cluster already has quotas at the run's entities: {clash}")
            self.config = existing + ours
            produce = [s for s in self.scenarios if s.kind == "produce"]
            for s in self.scenarios:
                s.topic = f"oracle-{run}-{s.name}"
            leaders = admin.create_topics([s.topic for s in produce])
            for s in produce:
                s.leader = leaders[s.topic]
                admin.produce_one(admin.brokers[s.leader], s.topic)
            for s in self.scenarios:
                if s.sasl:
                    scram_user = s.sasl["username"]
                    self._create_scram_user(s.sasl)
            admin.alter_quotas(ours)
            admin.wait_quotas(ours)
            time.sleep(0.3)  # the controllers apply the same records; give the slowest a moment
            log(f"run {run}: {len(self.scenarios)} scenarios for {self.duration_s:.0f}s "
                f"(brokers {sorted(admin.brokers)}, {len(existing)} quotas already on the cluster)")
            self._drive(admin)
        finally:
            self._clean_up(admin, ours, scram_user)
        failed = [f"{s.name}: {s.error}" for s in self.scenarios if s.error]
        if failed:
            raise OracleError("scenario(s) failed: " + "; ".join(failed))
        log(f"traffic done after {time.monotonic() - started:.1f}s; replaying")
        result = self.evaluate()
        result["run"] = run
        result["elapsed_s"] = round(time.monotonic() - started, 1)
        return result

    def _create_scram_user(self, sasl: dict[str, str]) -> None:
        """A SCRAM-SHA-256 user for the user-level scenario, able to log in on every broker before traffic."""
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        upsert = UserScramCredentialUpsertion(sasl["username"], info, sasl["password"].encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=20)
        for address in (self.sasl_bootstrap or "").split(","):
            deadline = time.monotonic() + 20
            while True:
                probe = AdminClient({
                    "bootstrap.servers": address.strip(), "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": sasl["username"],
                    "sasl.password": sasl["password"], "log_level": 0,
                })
                try:
                    probe.list_topics(timeout=3)
                    break
                except Exception as e:  # KafkaException: this broker does not know the credential yet
                    if time.monotonic() > deadline:
                        raise OracleError(f"SCRAM user {sasl['username']} cannot log in at {address}: {e}") from e
                    time.sleep(0.2)

    def _delete_scram_user(self, user: str) -> None:
        from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)
        for future in admin.alter_user_scram_credentials([deletion]).values():
            future.result(timeout=20)

    def _drive(self, admin: Admin) -> None:
        drivers: list[Driver] = []
        for s in self.scenarios:
            if s.kind == "mutation":
                drivers.append(TopicCreator(s, admin.bootstrap))
            elif s.driver == "confluent-kafka":
                drivers.append(ConfluentProducer(s, (self.sasl_bootstrap if s.sasl else None) or self.bootstrap))
            else:
                drivers.append(KafkaPythonProducer(s, admin.brokers[s.leader]))
        start = Start(len(drivers), self.duration_s)
        old_switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)  # client threads wait less for the GIL: tighter time stamps
        try:
            threads = [threading.Thread(target=drive, args=(d, start), name=f"oracle-{d.s.name}", daemon=True)
                       for d in drivers]
            for t in threads:
                t.start()
            for t in threads:
                t.join(self.duration_s + 120)
        finally:
            sys.setswitchinterval(old_switch)
        for s in self.scenarios:
            throttled = sum(ex.throttle_ms > 0 for ex in s.exchanges)
            log(f"{s.name}: {len(s.exchanges)} responses, {throttled} throttled"
                + (f", ERROR {s.error}" if s.error else ""))

    def _clean_up(self, admin: Admin, ours: Sequence[QuotaEntry], scram_user: str | None) -> None:
        """Quotas, topics and the SCRAM user of the run go; a failure here is reported, not raised."""
        topics = [x for s in self.scenarios for x in ([s.topic] if s.kind == "produce" else s.created) if x]
        steps: list[tuple[str, Callable[[], None]]] = [
            ("quotas", lambda: admin.alter_quotas(ours, remove=True)),
            ("topics", lambda: admin.delete_topics(topics)),
        ]
        if scram_user:
            steps.append(("SCRAM user", lambda: self._delete_scram_user(scram_user)))
        for what, step in steps:
            try:
                step()
            except Exception as e:
                log(f"clean-up of the run's {what} failed: {e}")
        admin.close()

    # -- verdict --------------------------------------------------------------------------------------------

    def evaluate(self) -> dict[str, Any]:
        """Replay every scenario through each engine, and the deliberately wrong replays through the model."""
        engines: dict[str, EngineFactory] = {"model": EngineFactory("model", None)}
        if self.redis_url:
            engines["redis"] = EngineFactory("redis", self.redis_url)
        else:
            log("no --redis-url / $QUOTAS_REDIS_URL: the Redis engine is not replayed")
        pooled = {name: Comparison() for name in engines}
        scenarios: dict[str, Any] = {}
        for s in self.scenarios:
            uncertainty = [ex.broker_time(s.kind)[1] for ex in s.exchanges]
            entry: dict[str, Any] = {
                "driver": s.driver,
                "kind": s.kind,
                "quota": {"key": s.key, "value": s.bound, "level": s.level,
                          "entities": [{"user": q.user, "client_id": q.client_id, "value": q.value}
                                       for q in s.quotas]},
                "responses": len(s.exchanges),
                "throttled_by_broker": sum(ex.throttle_ms > 0 for ex in s.exchanges),
                "uncertainty_p50_ms": percentile(uncertainty, 50),
                "uncertainty_p99_ms": percentile(uncertainty, 99),
                "bound_ms": bound_ms(s),
                **s.notes,
            }
            if s.kind == "produce":
                entry["message_bytes"] = s.message_bytes
                entry["request_bytes"] = sorted({ex.size for ex in s.exchanges})
            else:
                entry["topics_refused"] = sum(broker_view(s).decisions)
                entry["topics_created"] = len(s.created)
                other = [e for ex in s.exchanges for _, _, e in ex.topics if e not in (0, THROTTLING_QUOTA_EXCEEDED)]
                entry["topics_failed_otherwise"] = {"count": len(other), "error_codes": sorted(set(other))}
                free = Comparison().add(s, replay(s, engines["model"], self.config, conditioned=False))
                entry["free_running_model"] = {k: free.summary()[k] for k in
                                               ("decision_agreement", "throttle_diff_p50_ms", "throttle_diff_p99_ms")}
            entry["engines"] = {}
            for name, factory in engines.items():
                engine = replay(s, factory, self.config)
                alone = Comparison().add(s, engine).summary()
                entry["engines"][name] = {**alone, "resolved_bound": engine.resolved_bound}
                pooled[name].add(s, engine)
            scenarios[s.name] = entry
        per_engine = {name: c.summary() for name, c in pooled.items()}
        mutations = self.mutations(engines["model"])
        passed = all(c.passed for c in pooled.values())
        caught = all(m["caught"] for m in mutations.values() if m["must_fail"])
        return {
            "decision_agreement": min(c.agreement for c in pooled.values()),
            "throttle_diff_p99_ms": max(percentile(c.diffs, 99) for c in pooled.values()),
            "bound_ms": max(c.bound_ms for c in pooled.values()),
            "within_bound": min(c.within_bound for c in pooled.values()),
            "passed": passed,
            "mutations_caught": caught,
            "ok": passed and caught,
            "samples": SAMPLES,
            "window_s": WINDOW_S,
            "duration_s": self.duration_s,
            "engines": per_engine,
            "scenarios": scenarios,
            "mutations": mutations,
        }

    def mutations(self, model: EngineFactory) -> dict[str, Any]:
        """Deliberately wrong replays: each must fail the same comparison, over the scenarios it applies to
        (pooled) and in each of them alone."""
        out: dict[str, Any] = {}

        def check(name: str, what: str, must_fail: bool, applies: Callable[[Scenario], bool],
                  wrong: Callable[[Scenario], Replay]) -> None:
            pooled = Comparison()
            failed, passed = [], []
            for s in self.scenarios:
                if not applies(s):
                    continue
                engine = wrong(s)
                pooled.add(s, engine)
                (passed if Comparison().add(s, engine).passed else failed).append(s.name)
            out[name] = {
                "what": what, "must_fail": must_fail, "failed_in": failed, "passed_in": passed,
                "decision_agreement": round(pooled.agreement, 5), "within_bound": round(pooled.within_bound, 5),
                "throttle_diff_p99_ms": percentile(pooled.diffs, 99),
                "caught": bool(failed) and not passed and not pooled.passed,
            }

        def throttled(s: Scenario) -> bool:
            return any(ex.throttle_ms > 0 for ex in s.exchanges)

        check("window_count", f"{SAMPLES - 1} samples instead of {SAMPLES}", True, throttled,
              lambda s: replay(s, model, self.config, samples=SAMPLES - 1))
        check("precedence", "the most specific configured entity ignored: a lower level's quota applies", True,
              lambda s: len(s.quotas) > 1 and throttled(s),
              lambda s: replay(s, model, [e for e in self.config if e != s.quotas[0]]))
        check("request_size", "produce: the record batch instead of request.sizeInBytes; "
              "CreateTopics: one token per topic instead of one per partition", True, throttled,
              lambda s: replay(s, model, self.config, size=lambda ex: float(record_batch_bytes(s.message_bytes)),
                               permits=lambda p: 1.0))
        check("length_prefix", "produce: the 4-byte frame length counted too (a sensitivity probe, may pass)",
              False, lambda s: s.kind == "produce" and throttled(s),
              lambda s: replay(s, model, self.config, size=lambda ex: float(ex.size + 4)))
        return out

    def dump(self) -> dict[str, Any]:
        """The raw material of the run (scenarios with their exchanges, the replayed config), for analysis."""
        return {
            "config": [vars(e) for e in self.config],
            "scenarios": [
                {**{k: v for k, v in vars(s).items() if k not in ("exchanges", "quotas", "sasl")},
                 "quotas": [vars(q) for q in s.quotas], "exchanges": [vars(ex) for ex in s.exchanges]}
                for s in self.scenarios
            ],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.kafka_oracle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="a broker's PLAINTEXT address, host:port")
    parser.add_argument("--sasl-bootstrap", default=None,
                        help="SASL_PLAINTEXT (SCRAM) addresses, comma-separated: enables the user-level scenario")
    parser.add_argument("--redis-url", default=None, help="Redis for the Redis engine (default $QUOTAS_REDIS_URL)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_S:.0f} s of traffic instead of {DEFAULT_S:.0f} s")
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic (overrides --quick)")
    parser.add_argument("--dump", default=None, help="also write every scenario's exchanges to this JSON file")
    args = parser.parse_args(argv)
    oracle = Oracle(
        bootstrap=args.bootstrap,
        sasl_bootstrap=args.sasl_bootstrap,
        redis_url=args.redis_url or os.environ.get("QUOTAS_REDIS_URL"),
        duration_s=args.duration or (QUICK_S if args.quick else DEFAULT_S),
    )
    try:
        result = oracle.run()
    except OracleError as e:
        log(f"error: {e}")
        print(json.dumps({"error": str(e)}))
        return 2
    finally:
        if args.dump:
            with open(args.dump, "w") as f:
                json.dump(oracle.dump(), f)
    log(f"decision agreement {result['decision_agreement']}, throttle diff p99 {result['throttle_diff_p99_ms']} ms "
        f"(bound {result['bound_ms']} ms), mutations caught: {result['mutations_caught']}")
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
