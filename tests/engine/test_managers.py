"""Kafka's client-quota managers over both engines: precedence, fast path, the three quota types."""

from __future__ import annotations

import time

import pytest
import redis
from redis.crc import key_slot

from engine.decisions import Kind
from engine.entities import DEFAULT, QuotaType
from engine.errors import ThrottlingQuotaExceeded
from engine.javamath import DOUBLE_MAX, LONG_MAX_AS_DOUBLE
from engine.managers import (
    ClientQuotaManager,
    ClientRequestQuotaManager,
    ControllerMutationQuotaManager,
    UsageRecord,
    nanos_to_percentage,
)
from engine.redis_backend import RedisBackend

from .conftest import T0


def produce(backend, namespace: str) -> ClientQuotaManager:
    return ClientQuotaManager(QuotaType.PRODUCE, backend, samples=11, window_s=1, namespace=namespace)


def test_each_of_the_eight_levels_wins_over_the_ones_below(backend, namespace) -> None:
    m = produce(backend, namespace)
    levels = [("alice", "app"), ("alice", DEFAULT), ("alice", None), (DEFAULT, "app"), (DEFAULT, DEFAULT),
              (DEFAULT, None), (None, "app"), (None, DEFAULT)]
    for i, (user, client) in enumerate(levels):
        m.update_quota(user, client, 1000.0 * (i + 1))
    # remove from the most specific down: each removal exposes the next level
    for i, (user, client) in enumerate(levels):
        r = m.resolve("alice", "app")
        assert (r.bound, r.level) == (1000.0 * (i + 1), i + 1)
        m.update_quota(user, client, None)
    assert m.resolve("alice", "app").bound is None


def test_sensors_are_keyed_by_the_level_that_matched(backend, namespace) -> None:
    m = produce(backend, namespace)
    m.update_quota("alice", None, 4000.0)  # /config/users/alice
    m.update_quota("bob", DEFAULT, 8000.0)  # /config/users/bob/clients/<default>
    m.update_quota(None, "x", 1.0)  # a client-id level too, so the full probe runs
    assert m.quota("alice", "c1") == (4000.0, "alice:")
    assert m.quota("bob", "c1") == (8000.0, "bob:c1")
    # all of alice's clients share one sensor: c2 is throttled by what c1 sent
    first = m.record("alice", "c1", 45_000.0, T0)
    second = m.record("alice", "c2", 0.0, T0)
    assert first.throttle_ms == second.throttle_ms == 1250
    # bob's clients each have their own
    assert m.record("bob", "c1", 90_000.0, T0).throttle_ms > 0
    assert m.record("bob", "c2", 0.0, T0).throttle_ms == 0


def test_user_names_are_sanitized_as_kafka_tags_them(backend, namespace) -> None:
    m = produce(backend, namespace)
    m.update_quota("CN=a b*", None, 10.0)
    bound, tags = m.quota("CN=a b*", "c")
    assert (bound, tags) == (10.0, "CN%3Da%20b%2A:")


def test_no_quota_configured_takes_the_fast_path_and_records_nothing(redis_client, namespace) -> None:
    m = produce(RedisBackend(redis_client), namespace)
    r = m.record("alice", "c", 10**9, T0)
    assert (r.throttle_ms, r.quotas_enabled) == (0, False)
    assert m.max_value_in_quota_window("alice", "c") == DOUBLE_MAX
    assert list(redis_client.scan_iter(match=f"qe:{{{namespace}*")) == []


def test_an_unresolved_entity_is_bounded_by_long_max(backend, namespace) -> None:
    m = produce(backend, namespace)
    m.update_quota("alice", None, 100.0)
    assert m.quota("bob", "c") == (LONG_MAX_AS_DOUBLE, "bob:")
    assert m.record("bob", "c", 10**12, T0).throttle_ms == 0


def test_max_value_in_a_quota_window_is_q_times_n_minus_one_windows(backend, namespace) -> None:
    m = produce(backend, namespace)
    m.update_quota(None, DEFAULT, 2000.0)
    assert m.max_value_in_quota_window("u", "c") == 2000.0 * 10 * 1


def test_fetch_unrecord_takes_a_throttled_response_back_out(backend, namespace) -> None:
    m = ClientQuotaManager(QuotaType.FETCH, backend, namespace=namespace)
    m.update_quota(None, DEFAULT, 1000.0)
    throttled = m.record("u", "c", 20_000.0, T0)
    assert throttled.throttle_ms > 0
    m.unrecord("u", "c", 20_000.0, T0)
    assert m.measure("u", "c", T0).sum == 0.0
    assert m.record("u", "c", 100.0, T0 + 1).throttle_ms == 0


def test_batches_answer_in_order_and_equal_single_calls(backend, namespace) -> None:
    m = produce(backend, namespace)
    m.update_quota(None, DEFAULT, 500.0)
    usages = [UsageRecord("u", f"c{i % 3}", 1000.0 * i, T0 + i * 10) for i in range(30)]
    batched = [r.throttle_ms for r in m.record_many(usages)]
    other = produce(backend, namespace + "-single")
    other.update_quota(None, DEFAULT, 500.0)
    single = [other.record(u.user, u.client_id, u.value, u.t).throttle_ms for u in usages]
    assert batched == single
    assert any(batched)


def test_request_quota_counts_thread_time_in_percent_and_caps_the_throttle(backend, namespace) -> None:
    m = ClientRequestQuotaManager(backend, namespace=namespace)
    m.update_quota("u", None, 1.0)  # 1 % = 10 ms of thread time per 1 s window
    assert nanos_to_percentage(10_000_000) == 1.0
    r = m.record_request_time("u", "c", 5_000_000_000, T0)  # 5 s of thread time
    assert r.throttle_ms_long == 1000  # (50 - 1) / 1 * 10 s, capped at one window
    assert r.measured == 50.0


def test_request_network_time_counts_without_throttling(backend, namespace) -> None:
    m = ClientRequestQuotaManager(backend, namespace=namespace)
    m.update_quota("u", None, 1.0)
    m.record_no_throttle("u", "c", 500_000_000, T0)
    assert m.measure("u", "c", T0).sum == 50.0
    assert m.record_request_time("u", "c", 0, T0).throttle_ms == 1000


def test_exempt_sensor_never_expires_while_client_sensors_do(redis_client, namespace) -> None:
    backend = RedisBackend(redis_client)
    m = ClientRequestQuotaManager(backend, namespace=namespace)
    m.update_quota("u", None, 50.0)
    m.record_exempt(1_000_000, T0)
    m.record_request_time("u", "c", 1_000_000, T0)
    assert backend.sweep(f"qe:{{{namespace}|*", T0 + 3_600_000) == 0  # an hour idle is not yet expired
    assert backend.sweep(f"qe:{{{namespace}|*", T0 + 3_600_001) == 1
    assert redis_client.exists(m.exempt_key())
    assert not redis_client.exists(m.sensor_key("u:"))


@pytest.mark.parametrize("engine", ["model", "redis"])
def test_a_sensor_idle_for_a_whole_expiry_starts_fresh(engine: str, redis_client, namespace) -> None:
    from engine.model import ModelBackend

    backend = ModelBackend(expiry_ms=300) if engine == "model" else RedisBackend(redis_client, expiry_ms=300)
    m = produce(backend, namespace)
    m.update_quota(None, DEFAULT, 100.0)
    assert m.record("u", "c", 5000.0, T0).throttle_ms > 0
    assert m.record("u", "c", 0.0, T0 + 300).measured == 5000.0 / 10.3  # 300 ms idle: still the same sensor
    assert m.record("u", "c", 0.0, T0 + 601).measured == 0.0  # 301 ms without a record: a fresh one


def test_all_keys_of_a_sensor_share_one_hash_slot(redis_client, namespace) -> None:
    m = produce(RedisBackend(redis_client), namespace)
    m.update_quota(None, DEFAULT, 1.0)
    m.record("u", "weird}{client", 10**6, T0)  # violates: the throttle-stat key is written too
    keys = [k.decode() for k in redis_client.scan_iter(match=f"qe:{{{namespace}*")]
    assert len(keys) == 2
    assert len({key_slot(k.encode()) for k in keys}) == 1


def test_namespaces_keep_brokers_apart_and_a_cluster_namespace_is_shared(redis_client) -> None:
    b = RedisBackend(redis_client)
    ns = f"ns-{time.monotonic_ns()}"
    broker1, broker2 = produce(b, f"{ns}.broker-1"), produce(b, f"{ns}.broker-2")
    shared1, shared2 = produce(b, f"{ns}.cluster"), produce(b, f"{ns}.cluster")
    for m in (broker1, broker2, shared1, shared2):
        m.update_quota(None, DEFAULT, 1000.0)
    broker1.record("u", "c", 9000.0, T0)
    assert broker2.record("u", "c", 9000.0, T0).throttle_ms == 0  # per broker: 9000 each is within 10 s * 1000
    shared1.record("u", "c", 9000.0, T0)
    assert shared2.record("u", "c", 9000.0, T0).throttle_ms > 0  # one budget for both brokers


def test_strict_mutation_quota_rejects_then_decays(backend, namespace) -> None:
    m = ControllerMutationQuotaManager(backend, samples=10, window_s=1, namespace=namespace)
    m.update_quota("u", None, 10.0)  # burst 100
    q = m.new_quota_for("u", "c", strict=True)
    q.record(150.0, T0)  # accepted while tokens >= 0, leaves -50
    with pytest.raises(ThrottlingQuotaExceeded) as e:
        q.record(1.0, T0)
    assert e.value.throttle_time_ms == 5000 and e.value.code == "THROTTLING_QUOTA_EXCEEDED"
    assert q.is_exceeded()
    assert q.throttle_time(T0 + 2000) == 3000
    assert m.measure("u", "c", T0).value == -50.0  # the rejected request recorded nothing


def test_permissive_mutation_quota_records_and_throttles(backend, namespace) -> None:
    m = ControllerMutationQuotaManager(backend, samples=10, window_s=1, namespace=namespace)
    m.update_quota("u", None, 10.0)
    q = m.new_quota_for("u", "c", strict=False)
    q.record(150.0, T0)
    assert not q.is_exceeded()
    assert q.throttle_time(T0) == 5000
    q.record(10.0, T0)
    assert m.measure("u", "c", T0).value == -60.0


def test_mutation_quota_is_unbounded_when_none_is_configured(backend, namespace) -> None:
    m = ControllerMutationQuotaManager(backend, namespace=namespace)
    q = m.new_quota_for("u", "c", strict=True)
    q.record(10**9, T0)
    assert q.kind == "unbounded" and q.throttle_time(T0) == 0


def test_live_chart_view_is_read_only(redis_client, namespace) -> None:
    backend = RedisBackend(redis_client)
    m = produce(backend, namespace)
    m.update_quota(None, DEFAULT, 100.0)
    m.record("u", "c", 3000.0, T0)
    before = redis_client.get(m.sensor_key(":c"))
    from engine.decisions import Kind

    view = backend.peek(m.sensor_key(":c"), Kind.RATE, 11, 1000, T0 + 500)
    assert redis_client.get(m.sensor_key(":c")) == before
    assert view["rate"] == 3000.0 / 10.5
    # 3000 over the padded 10 s is 300/s: (300 - 100) / 100 * 10 s = 20 s of throttle
    assert view["throttle_max_ms"] == view["throttle_avg_ms"] == 20_000.0
    assert view["throttled_ms_total"] == 20_000.0


def test_engine_facade_reads_config_from_redis(redis_client: redis.Redis, namespace) -> None:
    from engine.config import AlterOp, EntityRef, QuotaEngine

    engine = QuotaEngine(redis_client, namespace)
    v = engine.store.alter([AlterOp(EntityRef(user="alice"), "producer_byte_rate", 1024)])
    assert engine.refresh() and engine.version == v
    eff = engine.effective("alice", "app")
    assert eff["producer_byte_rate"] == {"value": 1024.0, "level": 3, "skipped": [], "tags": "alice:"}
    assert eff["consumer_byte_rate"]["value"] is None
    assert not engine.refresh()  # same version: nothing reloaded


def test_a_cluster_namespace_can_run_on_the_engine_clock(redis_client, namespace) -> None:
    """Brokers with skewed clocks share one time line: Redis's own TIME, the same for a whole batch."""
    from engine.decisions import SERVER_TIME, Decision, Kind, Op

    backend = RedisBackend(redis_client)
    key = f"qe:{{{namespace}|clock}}"
    before = int(time.time() * 1000)
    outs = backend.execute([Decision(key, Kind.RATE, Op.RECORD, 10.0, 0, 5.0, flags=SERVER_TIME) for _ in range(3)])
    after = int(time.time() * 1000)
    assert len({o.now_ms for o in outs}) == 1
    assert before - 5 <= outs[0].now_ms <= after + 5
    assert [o.sum for o in outs] == [10.0, 20.0, 30.0]


def test_a_manager_on_the_engine_clock_ignores_the_brokers_clock(redis_client, namespace) -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE, RedisBackend(redis_client), namespace=namespace, engine_clock=True)
    m.update_quota(None, DEFAULT, 100.0)
    m.record("u", "c", 500.0, 0)  # a broker clock far in the past: Redis's TIME is used instead
    m.record("u", "c", 500.0, T0 * 2)  # and far in the future
    view = RedisBackend(redis_client).peek(m.sensor_key(":c"), Kind.RATE, 11, 1000, int(time.time() * 1000))
    # both records in one sensor on one time line: 1000 bytes over the padded window (10 s and a few ms)
    assert view["rate"] * view["window_ms"] / 1000 == pytest.approx(1000.0)
    assert 10_000 <= view["window_ms"] < 11_000
