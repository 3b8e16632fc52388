"""The demo load generator, run in-process on a fake clock over the demo data pushed to the test Redis.

The engine takes explicit times, so a simulated minute takes about a second and nothing sleeps. Runs start on a
whole five minutes (the period of the clients' slow wave, a multiple of their minute), so every run is the same
whatever the time of day: the payments producers' burst (seconds 0-20), the connection storm (50-10), the
permissive topic burst (15) and the strict one (30).
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.contrib.auth import get_user_model
from django.core.management import call_command

from demo.management.commands.demo_data import PENDING
from engine.config import namespace_for_broker
from engine.connections import ConnectionConfig, RedisConnectionQuotas
from engine.errors import ThrottlingQuotaExceeded
from engine.monitor import latest, recent
from quotas.models import Cluster, QuotaRequest
from quotas.targets import targets_from_db
from quotas.workflow import quota_requests
from tests.brokers import push_everywhere
from traffic.loadgen import FakeClock, LoadGenerator
from traffic.workload import STORM_IP, WAVE_PERIOD_S, Event

pytestmark = pytest.mark.django_db
MIB = 1024 * 1024


def clear_monitor(client: redis.Redis) -> None:
    for pattern in ("mon:{prod}*", "mon:{staging}*"):
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture
def demo(engine_redis: redis.Redis, settings: Any) -> Iterator[redis.Redis]:
    """The demo data, pushed to every broker (what the worker does), and empty monitor streams."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    clear_monitor(engine_redis)
    call_command("demo_data", stdout=io.StringIO())
    for cluster in Cluster.objects.all():
        push_everywhere(cluster)
    yield engine_redis
    clear_monitor(engine_redis)


@pytest.fixture
def gen(demo: redis.Redis) -> Iterator[LoadGenerator]:
    now = int(time.time() * 1000)
    period = int(WAVE_PERIOD_S * 1000)
    clock = FakeClock(now - now % period)  # not in the future: the monitor streams' ids are Redis's time
    g = LoadGenerator(targets_from_db(["prod"]), clock=clock, sleep=clock.sleep, trace=True, seed=3,
                      out=lambda line: None)
    g.start_ms = clock.now  # type: ignore[attr-defined]
    yield g
    g.close()


def events(g: LoadGenerator, kind: str, client_id: str | None = None) -> list[Event]:
    assert g.trace is not None
    return [e for e in g.trace if e.kind == kind and (client_id is None or e.client_id == client_id)]


def assert_obeys_throttles(evs: list[Event]) -> int:
    """After a throttled answer, the client sends nothing to that broker until the throttle time has passed."""
    by_link: dict[tuple[int, str, str], list[Event]] = defaultdict(list)
    for e in evs:
        by_link[(e.broker, e.client_id, e.kind)].append(e)
    checked = 0
    for link in by_link.values():
        for before, after in zip(link, link[1:], strict=False):
            if before.throttle_ms > 0:
                assert after.t >= before.t + before.throttle_ms, (before, after)
                checked += 1
    return checked


def test_a_client_over_its_quota_is_throttled_and_sends_nothing_until_the_throttle_ends(gen: LoadGenerator) -> None:
    gen.run(40)
    produce = events(gen, "produce", "payments-api-1") + events(gen, "produce", "payments-api-2")
    throttled = [e for e in produce if e.throttle_ms > 0]
    assert throttled, "the payments burst (2.2 x) goes over its 512 KiB/s per broker"
    assert max(e.throttle_ms for e in throttled) > 100
    assert assert_obeys_throttles(events(gen, "produce") + events(gen, "fetch")) >= len(throttled)
    # the engine holds the rate near the bound: the shared user sensor, measured by the broker's own manager
    b = gen.brokers["prod"][0]
    rate = b.produce.measure("svc-payments-api", "payments-api-1", gen.clock()).value
    assert rate < 1.3 * 512 * 1024
    # the clients that stay within their quotas are never throttled
    for client_id in ("payments-ledger", "search-indexer", "search-suggest", "legacy-reporting"):
        assert all(e.throttle_ms == 0 for kind in ("produce", "fetch") for e in events(gen, kind, client_id))


def test_a_throttled_fetch_returns_nothing_and_is_unrecorded(gen: LoadGenerator, monkeypatch: Any) -> None:
    unrecorded: list[tuple[str, str, float, int]] = []
    for b in gen.brokers["prod"]:
        original = b.fetch.unrecord

        def spy(user: str, client_id: str, value: float, t: int, *, _original: Any = original) -> None:
            unrecorded.append((user, client_id, value, t))
            _original(user, client_id, value, t)

        monkeypatch.setattr(b.fetch, "unrecord", spy)
    gen.run(20)
    fetches = events(gen, "fetch", "search-query")  # 35 ms of handler time a request against 20 %
    throttled = [e for e in fetches if e.throttle_ms > 0]
    assert throttled and all(e.value == 0 and e.note == "unrecorded" for e in throttled)
    assert len(unrecorded) == len([e for e in events(gen, "fetch") if e.throttle_ms > 0])
    assert {(u, c) for u, c, _v, _t in unrecorded} >= {("svc-search-query", "search-query")}
    assert any(e.value > 0 for e in fetches)  # between throttles it is served
    assert_obeys_throttles(fetches)


def test_a_topic_burst_drives_the_bucket_negative_and_strict_requests_get_throttling_quota_exceeded(
    gen: LoadGenerator, demo: redis.Redis
) -> None:
    since = gen.clock() - 1  # samples carry the (fake) clock of the load generator
    gen.run(30.5)  # the strict burst came at second 30: its first request took the bucket, the second went below 0
    assert any(e.note != "refused=0" for e in events(gen, "mutation", "search-indexer-admin"))
    controller = gen.brokers["prod"][0]  # CreateTopics goes to the controller
    quota = controller.mutation.new_quota_for("svc-search-indexer", "search-indexer-admin", True)
    with pytest.raises(ThrottlingQuotaExceeded) as e:  # while it is negative, a strict request is refused
        quota.record(3, gen.clock())
    assert e.value.code == "THROTTLING_QUOTA_EXCEEDED" and quota.throttle_time(gen.clock()) > 0
    gen.run(15)
    strict = events(gen, "mutation", "search-indexer-admin")
    refused = [e for e in strict if e.note != "refused=0"]
    assert refused, "24 topics x 3 partitions against 3/s (a bucket of 33)"
    assert sum(e.value for e in strict) + int(strict[-1].note.split("=")[1]) == 24  # created + still waiting
    assert_obeys_throttles(strict)
    # the permissive (old) admin client gets everything recorded, then a throttle it obeys
    permissive = events(gen, "mutation", "analytics-etl-admin")
    assert all(e.note == "refused=0" for e in permissive) and sum(e.value for e in permissive) == 20
    assert max(e.throttle_ms for e in permissive) > 1000
    assert_obeys_throttles(permissive)
    # the token buckets went negative (the live samples say so)
    tokens = [s["tokens"] for s in recent(demo, "prod", "controller_mutation", "svc-search-indexer:", since)]
    assert tokens and min(tokens) < 0
    tokens = [s["tokens"] for s in recent(demo, "prod", "controller_mutation", "svc-analytics-etl:", since)]
    assert min(tokens) < -10


def test_a_connection_storm_from_one_ip_is_throttled(gen: LoadGenerator, demo: redis.Redis) -> None:
    since = gen.clock() - 1  # samples carry the (fake) clock of the load generator
    gen.run(9)  # the storm runs from second 50 to second 10 of each minute
    storm = events(gen, "connection", STORM_IP)
    results: dict[tuple[int, str], int] = defaultdict(int)
    for e in storm:
        results[(e.broker, e.note)] += 1
    for broker in (1, 2, 3):  # 15 attempts/s against 10/s, measured over Kafka's (at least) 10-s window
        assert 0 < results[(broker, "accepted")] <= 10 * 11 and results[(broker, "ip_throttled")] > 0
    assert all(e.throttle_ms > 0 for e in storm if e.note == "ip_throttled")
    # everyone else connects normally
    others = [e for e in events(gen, "connection") if e.client_id != STORM_IP]
    assert others and all(e.note == "accepted" for e in others)
    # the live connection samples of the storming IP
    samples = recent(demo, "prod", "connection", f"ip:{STORM_IP}", since)
    assert {s["b"] for s in samples} == {1, 2, 3}
    assert all(s["bound"] == 10.0 for s in samples)
    assert max(s["thr_max"] for s in samples) > 0 and max(s["thr_frac"] for s in samples) > 0
    assert all(s["accept_rate"] <= s["attempt_rate"] for s in samples)
    # the storm's connections come and go; a client IP's count is its own connection
    gen.run(30)
    b1 = gen.brokers["prod"][0]
    assert b1.conn.get("10.10.1.11") == 1
    # past max.connections.per.ip (50), the storm's sockets are refused after counting
    assert any(e.note == "too_many_connections" for e in events(gen, "connection", STORM_IP))


def test_a_pushed_quota_change_is_picked_up_and_changes_the_throttling(gen: LoadGenerator) -> None:
    gen.run(14)  # into the payments burst: throttled
    assert any(e.throttle_ms > 0 for e in events(gen, "produce", "payments-api-1"))
    # an admin approves the pending request; the push lands; the generator hears it on pub/sub
    request = QuotaRequest.objects.get(state="submitted")
    quota_requests.approve(get_user_model().objects.get(username="demo-admin"), request.pk)
    push_everywhere(Cluster.objects.get(name="prod"))
    deadline = time.monotonic() + 5
    while not gen.poll_config(gen.clock()):  # only the namespaces announced on pub/sub (no periodic check yet)
        assert time.monotonic() < deadline, "no config change announced"
        time.sleep(0.01)
    changed_at = gen.clock()
    for b in gen.brokers["prod"]:
        assert b.produce.quota("svc-payments-api", "payments-api-1") == (PENDING["value"], "svc-payments-api:")
    gen.run(40)  # the rest of the burst and beyond: no more throttling of payments
    later = [e for e in events(gen, "produce", "payments-api-1") + events(gen, "produce", "payments-api-2")
             if e.t > changed_at + 1_000]
    assert later and all(e.throttle_ms == 0 for e in later)


def test_the_samples_appear_in_the_monitor_streams(gen: LoadGenerator, demo: redis.Redis) -> None:
    since = gen.clock() - 1  # samples carry the (fake) clock of the load generator
    gen.run(20)
    now = latest(demo, "prod")
    assert {s["q"] for s in now} == {"produce", "fetch", "request", "controller_mutation", "connection"}
    assert {s["b"] for s in now} == {1, 2, 3}
    assert all(s["c"] == "prod" for s in now)
    entities = {(s["q"], s["e"]) for s in now}
    assert {
        ("produce", "svc-payments-api:"),
        ("fetch", "svc-analytics-etl:analytics-spark"),
        ("fetch", "svc-payments-ledger:"),
        ("request", ":search-query"),
        ("connection", f"ip:{STORM_IP}"),
        ("connection", "listener:PLAINTEXT"),
    } <= entities
    payments = recent(demo, "prod", "produce", "svc-payments-api:", since)
    assert len(payments) >= 3 * 18  # a sample per broker and second
    assert all(s["bound"] == 512 * 1024 for s in payments)
    assert max(s["thr_max"] for s in payments) > 0 and max(s["util"] for s in payments) > 0.9
    spark = recent(demo, "prod", "fetch", "svc-analytics-etl:analytics-spark", since)
    assert spark and all(s["bound"] == 6 * MIB for s in spark)  # the boost
    query = recent(demo, "prod", "request", ":search-query", since)
    assert query and max(s["thr_frac"] for s in query) > 0


def test_a_seed_gives_the_same_run(demo: redis.Redis) -> None:
    """The randomness is seeded: the same seed on the same clock makes the same requests (here: before any quota
    state differs, the first ticks)."""
    now = int(time.time() * 1000)
    start = now - now % 60_000 - 600_000  # ten minutes back: sensors of another run are long gone by then
    runs = []
    for _ in range(2):
        clock = FakeClock(start)
        g = LoadGenerator(targets_from_db(["staging"]), clock=clock, sleep=clock.sleep, trace=True, seed=11,
                          out=lambda line: None)
        g.step(start)
        runs.append([(e.broker, e.kind, e.client_id, e.value) for e in g.trace or [] if e.kind in ("produce", "fetch")])
        g.close()
    assert runs[0] and runs[0] == runs[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_command_stops_cleanly_on_a_signal(demo: redis.Redis, sig: signal.Signals) -> None:
    started = threading.Event()

    class Out(io.StringIO):
        def write(self, s: str) -> int:
            if "driving" in s:
                started.set()
            return super().write(s)

    def send() -> None:
        if started.wait(10):
            time.sleep(0.3)
            os.kill(os.getpid(), sig)

    before = signal.getsignal(sig)
    out = Out()
    sender = threading.Thread(target=send)
    sender.start()
    call_command("loadgen", "--cluster", "prod", "--tick-ms", "50", stdout=out)
    sender.join()
    text = out.getvalue()
    assert f"{sig.name}, stopping" in text and "connections released" in text
    assert signal.getsignal(sig) is before
    for b in targets_from_db(["prod"])["prod"]:  # every connection it opened is closed again
        conn = RedisConnectionQuotas(demo, namespace_for_broker("prod", b.broker_id), ConnectionConfig())
        assert conn.get("10.10.1.11") == 0 and conn.get(STORM_IP) == 0
