"""The clients that drive a scenario (kafka-python's protocol classes, confluent-kafka, CreateTopics)."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.producer import ProduceRequest

from conformance.oracle.admin import produce_request
from conformance.oracle.base import (
    MAX_CREATE_TOPICS_VERSION,
    MAX_PRODUCE_VERSION,
    MIN_CREATE_TOPICS_VERSION,
    SAMPLES,
    WINDOW_S,
    OracleError,
    now_ms,
)
from conformance.oracle.scenarios import Exchange, Scenario
from engine.stats import MetricConfig, WindowedSum
from kafka_wire import Connection


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


def oracle_connection(address: str, client_id: str) -> Connection:
    """One blocking connection to one broker (``kafka_wire``): one request in flight, as the scenarios' clients
    have, each exchange timed and sized (``Connection.exchange``)."""
    return Connection(
        address, client_id=client_id, connect_timeout=30.0, request_timeout=30.0, software=("quota-oracle", "1")
    )


class KafkaPythonProducer(Driver):
    """kafka-python's protocol classes on one socket to the partition leader, one ProduceRequest at a time."""

    def __init__(self, s: Scenario, leader_address: str) -> None:
        super().__init__(s)
        self.address = leader_address

    def open(self) -> None:
        self.wire = oracle_connection(self.address, self.s.client_id)
        self.version = self.wire.version(ProduceRequest, cap=MAX_PRODUCE_VERSION)
        self.value = bytes(self.s.message_bytes)
        self.s.notes["produce_version"] = self.version

    def send(self) -> int:
        request = produce_request(self.s.topic, self.value, now_ms())
        ex = self.wire.exchange(request, self.version)
        throttle = ex.response.throttle_time_ms
        error = ex.response.responses[0].partition_responses[0].error_code
        self.s.exchanges.append(Exchange(ex.sent_ms, ex.received_ms, ex.request_bytes, throttle, error))
        return int(throttle)

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
        self.wire = oracle_connection(self.address, self.s.client_id)
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
        ex = self.wire.exchange(request, self.version)
        response = ex.response
        errors = {t.name: t.error_code for t in response.topics}
        topics = [(name, p, errors.get(name, -1)) for name, p in zip(names, self.s.partitions, strict=True)]
        self.s.created.extend(name for name, _, e in topics if e == 0)
        self.s.exchanges.append(
            Exchange(ex.sent_ms, ex.received_ms, ex.request_bytes, response.throttle_time_ms, topics=topics)
        )
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
