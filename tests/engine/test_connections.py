"""Connection quotas as Kafka's acceptor applies them (KIP-612 and the count limits), model and Redis."""

from __future__ import annotations

import random
import threading
import time

import pytest
import redis

from engine.connections import (
    ACCEPTED,
    BLOCKED,
    IP_THROTTLED,
    TOO_MANY,
    ConnectionConfig,
    ModelConnectionQuotas,
    RedisConnectionQuotas,
)
from engine.errors import JavaIllegalArgument, QuotaValidationError

from .conftest import T0

LISTENERS = "EXTERNAL,REPLICATION,ADMIN"


def make(engine: str, redis_client: redis.Redis, namespace: str, **props: object):
    config = ConnectionConfig.from_props({"listeners": LISTENERS, "inter.broker.listener.name": "REPLICATION",
                                          "quota.window.num": 2, **props})
    if engine == "model":
        return ModelConnectionQuotas(config)
    return RedisConnectionQuotas(redis_client, namespace, config)


@pytest.fixture(params=["model", "redis"])
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


def test_per_ip_count_is_incremented_before_the_check(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace, **{"max.connections.per.ip": 2})
    results = [q.inc("EXTERNAL", "10.0.0.1", T0).result for _ in range(3)]
    assert results == [ACCEPTED, ACCEPTED, TOO_MANY]
    assert q.get("10.0.0.1") == 3  # the rejected one is counted until its socket is released
    q.dec("EXTERNAL", "10.0.0.1", T0)
    assert q.get("10.0.0.1") == 2


def test_overrides_apply_per_ip_and_ipv6_is_welcome(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace,
             **{"max.connections.per.ip": 1, "max.connections.per.ip.overrides": "[2001:db8::1]:3, 10.0.0.2:2"})
    assert [q.inc("EXTERNAL", "2001:DB8:0::1", T0).result for _ in range(4)] == [ACCEPTED] * 3 + [TOO_MANY]
    assert [q.inc("EXTERNAL", "10.0.0.2", T0).result for _ in range(3)] == [ACCEPTED, ACCEPTED, TOO_MANY]
    assert q.get("2001:db8::1") == 4


def test_ip_rate_violation_drops_and_unrecords_everywhere(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace)
    q.ip_rates.update("10.0.0.1", 2)  # 2 connections/s: with 2 one-second samples, 2 in the first instant
    answers = [q.inc("EXTERNAL", "10.0.0.1", T0) for _ in range(3)]
    assert [a.result for a in answers] == [ACCEPTED, ACCEPTED, IP_THROTTLED]
    assert answers[2].throttle_ms == 500 and answers[2].count == 2
    # the dropped connection is neither counted nor left in the listener and broker rates
    assert q.measure("listener", "EXTERNAL", T0) == q.measure("broker", None, T0) == 2.0
    assert q.measure("ip", "10.0.0.1", T0) == 2.0


def test_broker_rate_blocks_the_acceptor_for_at_most_one_window(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace, **{"max.connection.creation.rate": 1})
    assert q.inc("EXTERNAL", "10.0.0.1", T0).result == ACCEPTED
    blocked = q.inc("EXTERNAL", "10.0.0.2", T0)
    assert blocked.result == BLOCKED and blocked.decision == "delay"
    assert blocked.throttle_ms == 1000  # (2 - 1) / 1 * 2000 ms, capped at one quota window
    after = q.inc_after_wait("EXTERNAL", "10.0.0.2", T0 + blocked.throttle_ms)
    assert after.result == ACCEPTED and after.total == 2


def test_the_inter_broker_listener_is_protected(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace, **{"max.connections": 1, "max.connection.creation.rate": 1})
    assert q.inc("EXTERNAL", "10.0.0.1", T0).result == ACCEPTED
    assert q.inc("EXTERNAL", "10.0.0.2", T0).result == BLOCKED
    assert [q.inc("REPLICATION", "10.0.0.9", T0).result for _ in range(3)] == [ACCEPTED] * 3
    assert q.max_connections_exceeded("EXTERNAL") and not q.max_connections_exceeded("REPLICATION")


def test_listener_limits_apply_to_their_listener(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace, **{"listener.name.ADMIN.max.connections": 1})
    assert q.inc("ADMIN", "10.0.0.1", T0).result == ACCEPTED
    assert q.inc("ADMIN", "10.0.0.1", T0).result == BLOCKED  # no slot: wait for a close
    assert q.inc("EXTERNAL", "10.0.0.1", T0).result == ACCEPTED
    q.dec("ADMIN", "10.0.0.1", T0)
    assert q.inc_after_wait("ADMIN", "10.0.0.1", T0).result == ACCEPTED


def test_ip_sensors_expire_after_an_hour_idle(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace)
    q.ip_rates.update(None, 1)  # the <default> IP quota
    assert q.inc("EXTERNAL", "10.0.0.1", T0).result == ACCEPTED
    assert q.inc("EXTERNAL", "10.0.0.1", T0 + 1).result == IP_THROTTLED
    assert q.measure("ip", "10.0.0.1", T0 + 3_600_001) == 0.0  # a fresh sensor


def test_release_of_an_unknown_address_is_refused(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace)
    with pytest.raises(JavaIllegalArgument):
        q.dec("EXTERNAL", "10.9.9.9", T0)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"max.connections": -1}, "at least 0"),
        ({"max.connections.per.ip": "many"}, "integer"),
        ({"max.connections.per.ip": 0}, "only if"),
        ({"max.connections.per.ip.overrides": "10.0.0.1"}, "ip:count"),
        ({"max.connections.per.ip.overrides": "host.example:3"}, "not a valid IPv4 or IPv6"),
        ({"listener.name.NOPE.max.connections": 5}, "Unknown listener"),
        ({"listener.name.ADMIN.max.connections": 0}, "must be positive"),
        ({"inter.broker.listener.name": "INTERNAL"}, "Unknown listener"),
    ],
)
def test_bad_configs_are_refused(props: dict, message: str) -> None:
    with pytest.raises(QuotaValidationError) as e:
        ConnectionConfig.from_props({"listeners": LISTENERS, **props})
    assert message in e.value.message


def test_bad_admissions_change_nothing(engine, redis_client, namespace) -> None:
    q = make(engine, redis_client, namespace)
    q.inc("EXTERNAL", "10.0.0.1", T0)
    for listener, ip in [("NOPE", "10.0.0.1"), ("EXTERNAL", "10.0.0.256"), ("EXTERNAL", "fe80::zz")]:
        with pytest.raises(QuotaValidationError):
            q.inc(listener, ip, T0)
    with pytest.raises(QuotaValidationError):
        q.ip_rates.update("10.0.0.1", -5)
    assert q.get("10.0.0.1") == 1
    assert q.measure("broker", None, T0) == 1.0  # only the good connection, over one padded window


def test_a_close_wakes_an_acceptor_waiting_for_a_slot(redis_client, namespace) -> None:
    q = make("redis", redis_client, namespace, **{"max.connections": 1})
    q.inc("EXTERNAL", "10.0.0.1", T0)
    blocked = q.inc("EXTERNAL", "10.0.0.2", T0)
    assert blocked.result == BLOCKED
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(q.wait_for_slot(5.0, blocked.epoch)))
    waiter.start()
    other = RedisConnectionQuotas(redis_client, namespace, q.config)  # another acceptor process
    for _ in range(50):
        threading.Event().wait(0.02)
        if redis_client.pubsub_numsub(q.counts_key)[0][1]:
            break
    other.dec("EXTERNAL", "10.0.0.1", T0)
    waiter.join(6)
    assert woke == [True]
    assert q.inc_after_wait("EXTERNAL", "10.0.0.2", T0).result == ACCEPTED


def test_raising_the_limit_wakes_waiters(redis_client, namespace) -> None:
    q = make("redis", redis_client, namespace, **{"max.connections": 1})
    q.inc("EXTERNAL", "10.0.0.1", T0)
    blocked = q.inc("EXTERNAL", "10.0.0.2", T0)
    assert blocked.result == BLOCKED
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(q.wait_for_slot(5.0, blocked.epoch)))
    waiter.start()
    for _ in range(50):
        threading.Event().wait(0.02)
        if redis_client.pubsub_numsub(q.counts_key)[0][1]:
            break
    q.update_config(ConnectionConfig.from_props({"listeners": LISTENERS, "inter.broker.listener.name": "REPLICATION",
                                                 "quota.window.num": 2, "max.connections": 2}))
    waiter.join(6)
    assert woke == [True]
    assert q.inc_after_wait("EXTERNAL", "10.0.0.2", T0).result == ACCEPTED


@pytest.mark.parametrize("seed", range(8))
def test_redis_equals_model_on_random_acceptor_traffic(seed: int, redis_client, namespace) -> None:
    rng = random.Random(seed)
    props = {
        "max.connections": rng.choice([3, 10, 2147483647]),
        "max.connections.per.ip": rng.choice([2, 5, 2147483647]),
        "max.connection.creation.rate": rng.choice([2, 20, 2147483647]),
        "listener.name.ADMIN.max.connection.creation.rate": rng.choice([1, 5]),
    }
    model, real = make("model", redis_client, namespace, **props), make("redis", redis_client, namespace, **props)
    ips = ["10.0.0.1", "10.0.0.2", "2001:db8::7"]
    t = T0
    for _ in range(120):
        t += rng.choice([0, 0, 10, 250, 1000, 3000])
        listener, ip = rng.choice(["EXTERNAL", "ADMIN", "REPLICATION"]), rng.choice(ips)
        roll = rng.random()
        if roll < 0.08:
            rate = rng.choice([None, 1, 3, 10])
            target = rng.choice([None, ip])
            model.ip_rates.update(target, rate)
            real.ip_rates.update(target, rate)
            continue
        if roll < 0.3 and model.get(ip) > 0:
            assert real.dec(listener, ip, t) == model.dec(listener, ip, t)
            continue
        op = "inc_after_wait" if roll < 0.4 else "inc"
        assert getattr(real, op)(listener, ip, t) == getattr(model, op)(listener, ip, t)
    for which, name in [("broker", None), ("listener", "ADMIN"), ("ip", ips[0])]:
        assert real.measure(which, name, t) == model.measure(which, name, t)


def test_ip_rates_come_from_the_namespace_quota_config(redis_client, namespace) -> None:
    from engine.config import AlterOp, EntityRef, QuotaConfigStore
    from engine.connections import IpRates

    store = QuotaConfigStore(redis_client, namespace)
    store.alter([AlterOp(EntityRef(ip="10.0.0.1"), "connection_creation_rate", 5),
                 AlterOp(EntityRef.parse({"ip": None}), "connection_creation_rate", 2)])
    q = make("redis", redis_client, namespace)
    q.ip_rates = IpRates.from_store(store)
    assert (q.ip_rates.rate_for("10.0.0.1"), q.ip_rates.rate_for("10.0.0.2")) == (5, 2)
    assert [q.inc("EXTERNAL", "10.0.0.2", T0).result for _ in range(3)] == [ACCEPTED, ACCEPTED, IP_THROTTLED]


def test_a_release_before_the_wait_is_not_lost(redis_client, namespace) -> None:
    q = make("redis", redis_client, namespace, **{"max.connections": 1})
    q.inc("EXTERNAL", "10.0.0.1", T0)
    blocked = q.inc("EXTERNAL", "10.0.0.2", T0)
    q.dec("EXTERNAL", "10.0.0.1", T0)  # the close lands before the acceptor starts waiting
    started = time.monotonic()
    assert q.wait_for_slot(5.0, blocked.epoch) is True
    assert time.monotonic() - started < 4.0  # answered by the release, not by the 5 s timeout


def test_large_batches_are_split_and_answered_whole(redis_client, namespace) -> None:
    q = make("redis", redis_client, namespace)
    answers = q.admit_many([("EXTERNAL", f"10.1.{i // 250}.{i % 250}", T0) for i in range(2500)])
    assert len(answers) == 2500 and answers[-1].total == 2500
    assert all(a.result == ACCEPTED for a in answers)
