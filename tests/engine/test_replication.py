"""Replication throttles, as Kafka has them: configs and their validation, throttled-replica lookups,
the SimpleRate quota managers on both engines, and the throttle store in Redis."""

from __future__ import annotations

import socket

import pytest
import redis

from engine.errors import EngineUnavailable, QuotaValidationError
from engine.javamath import LONG_MAX
from engine.managers import FAIL_CLOSED
from engine.redis_backend import RedisBackend, connect
from engine.replication import (
    ALL_REPLICAS,
    ALTER_LOG_DIRS_RATE,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuotaManager,
    ReplicationThrottles,
    ReplicationThrottleStore,
    ReplicationType,
    ThrottleOp,
    quota_window,
    throttled_partitions,
    validate_throttle_rate,
    validate_throttled_replicas,
    validate_topic_name,
)

from .conftest import T0

KAFKA_LIST_TEXT = (
    "must be the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)

# ---- the throttled-replica list: Kafka's format, parsed per broker ----


@pytest.mark.parametrize(
    ("value", "broker", "expected"),
    [
        ("0:1,1:2", 1, {0}),
        ("0:1,1:2", 2, {1}),
        ("0:1,1:2", 3, set()),  # a broker the list does not name throttles nothing
        ("0:101,0:102,1:101,1:102", 102, {0, 1}),  # Kafka's own test case
        ("*", 7, ALL_REPLICAS),
        (" * ", 7, ALL_REPLICAS),
        ("", 1, set()),
        ("   ", 1, set()),
        ("0:1, 1:2 ,2:1", 1, {0, 2}),  # spaces around entries are trimmed, as Kafka's validator does
        ("0:1,", 1, {0}),  # a trailing comma is allowed
        ("007:1", 1, {7}),
        (["0:1", " 3:1"], 1, {0, 3}),  # a list, as ConfigDef hands it over
        ("2147483647:2147483647", 2147483647, {2147483647}),
    ],
)
def test_a_list_throttles_the_partitions_it_names_with_this_broker(value, broker: int, expected) -> None:
    result = throttled_partitions(value, broker)
    assert result == (expected if expected is ALL_REPLICAS else frozenset(expected))


def test_a_list_is_stored_in_canonical_form() -> None:
    assert str(validate_throttled_replicas(LEADER_REPLICAS, " 0:1 , 007:2,")) == "0:1,7:2"
    assert str(validate_throttled_replicas(FOLLOWER_REPLICAS, " * ")) == "*"
    assert validate_throttled_replicas(LEADER_REPLICAS, "").is_empty


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0:", "entry 1 ('0:') has no broker id"),
        (":1", "entry 1 (':1') has no partition id"),
        ("a:1", "the partition id 'a' is not a non-negative integer"),
        ("0:b", "the broker id 'b' is not a non-negative integer"),
        ("-1:2", "the partition id '-1' is not a non-negative integer"),
        ("0:-2", "the broker id '-2' is not a non-negative integer"),
        ("0:1,1:-2", "entry 2 ('1:-2')"),
        ("*,0:1", "entry 1 is '*', which throttles every replica and must be the whole list"),
        ("0:1,*", "entry 2 is '*'"),
        ("*,*", "must be the whole list"),
        ("0:1,,1:2", "entry 2 is empty"),
        (",0:1", "entry 1 is empty"),
        ("0 :1", "the partition id '0 ' is not a non-negative integer"),
        ("0:1 1:2", "is not of the form [partitionId]:[brokerId]"),
        ("0-1", "is not of the form [partitionId]:[brokerId]"),
        ("1:2:3", "is not of the form [partitionId]:[brokerId]"),
        ("1.0:2", "the partition id '1.0' is not a non-negative integer"),
        ("2147483648:1", "the partition id 2147483648 is larger than 2147483647"),
        ("0:99999999999", "the broker id 99999999999 is larger than 2147483647"),
        ("\u0661:1", "is not a non-negative integer"),  # an Arabic-Indic digit is not a Java [0-9]
    ],
)
def test_a_malformed_list_is_refused_naming_the_entry_and_why(value: str, why: str) -> None:
    with pytest.raises(QuotaValidationError) as e:
        validate_throttled_replicas(LEADER_REPLICAS, value)
    assert e.value.code == "INVALID_REQUEST"
    assert e.value.message.startswith(f"Invalid value {value} for configuration {LEADER_REPLICAS}: ")
    assert f"{LEADER_REPLICAS} {KAFKA_LIST_TEXT}" in e.value.message
    assert why in e.value.message


@pytest.mark.parametrize("value", [5, None, ["0:1", 2], {"0": 1}])
def test_a_list_must_be_text_or_a_list_of_text(value: object) -> None:
    with pytest.raises(QuotaValidationError, match="must be a List but was"):
        validate_throttled_replicas(FOLLOWER_REPLICAS, value)


def test_parsing_for_a_broker_needs_a_real_broker_id() -> None:
    for broker in (-1, True, "1", 2**31):
        with pytest.raises(QuotaValidationError, match="broker id"):
            throttled_partitions("0:1", broker)  # type: ignore[arg-type]


# ---- the broker rates: LONG, at least 0, default Long.MAX_VALUE ----


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (1_048_576, 1_048_576), ("1048576", 1_048_576), (" 10 ", 10), ("+10", 10), (2048.0, 2048),
     (LONG_MAX, LONG_MAX), (str(LONG_MAX), LONG_MAX)],
)
def test_a_rate_is_a_long_of_at_least_zero(value: object, expected: int) -> None:
    for key in (LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE):
        assert validate_throttle_rate(key, value) == expected


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (-1, "Value must be at least 0"),
        ("-5", "Value must be at least 0"),
        (1.5, "Not a number of type LONG"),
        ("1.5", "Not a number of type LONG"),
        ("1e6", "Not a number of type LONG"),
        ("1_000", "Not a number of type LONG"),
        ("abc", "Not a number of type LONG"),
        ("", "Not a number of type LONG"),
        (float("nan"), "Not a number of type LONG"),
        (float("inf"), "Not a number of type LONG"),
        (2**63, "Not a number of type LONG"),
        ("9223372036854775808", "Not a number of type LONG"),
        (True, "Expected value to be a 64-bit integer (long), but it was a bool"),
        ([1], "Expected value to be a 64-bit integer (long), but it was a list"),
    ],
)
def test_a_bad_rate_is_refused_with_kafkas_text(value: object, why: str) -> None:
    with pytest.raises(QuotaValidationError) as e:
        validate_throttle_rate(LEADER_RATE, value)
    assert e.value.message.startswith(f"Invalid value {value} for configuration {LEADER_RATE}: {why}")


def test_unknown_keys_and_bad_topic_names_are_refused() -> None:
    with pytest.raises(QuotaValidationError, match="Unknown broker throttle config"):
        validate_throttle_rate("leader.replication.throttled.replicas", 10)
    with pytest.raises(QuotaValidationError, match="Unknown topic throttle config"):
        validate_throttled_replicas(LEADER_RATE, "*")
    assert validate_topic_name("orders.v2_eu-1") == "orders.v2_eu-1"
    for topic, why in [("", "can't be empty"), ("..", 'cannot be "." or ".."'), ("a" * 250, "longer than 249"),
                       ("a|b", "other than ASCII alphanumerics"), ("caf\u00e9", "other than ASCII")]:
        with pytest.raises(QuotaValidationError, match=why):
            validate_topic_name(topic)


def test_sampling_comes_from_the_replication_window_configs() -> None:
    assert quota_window({}, "leader") == (11, 1)
    configs = {"replication.quota.window.num": "5", "replication.quota.window.size.seconds": 2,
               "alter.log.dirs.replication.quota.window.num": 3}
    assert quota_window(configs, ReplicationType.FOLLOWER) == (5, 2)
    assert quota_window(configs, ReplicationType.ALTER_LOG_DIRS) == (3, 1)
    with pytest.raises(QuotaValidationError, match="replication.quota.window.num: Value must be at least 1"):
        quota_window({"replication.quota.window.num": 0}, "leader")
    with pytest.raises(QuotaValidationError, match="Not a number of type INT"):
        quota_window({"alter.log.dirs.replication.quota.window.size.seconds": 1.5}, "alter-log-dirs")


# ---- the manager: record without a check, then check; SimpleRate's window ----


def leader(backend, namespace: str, **kwargs) -> ReplicationQuotaManager:
    return ReplicationQuotaManager(ReplicationType.LEADER, backend, namespace=namespace, **kwargs)


def test_two_windows_of_records_against_a_bound(backend, namespace) -> None:
    m = leader(backend, namespace)
    m.update_quota(100)
    m.record(150, T0)
    m.record(150, T0 + 1000)  # record never checks, however far over the bound
    # SimpleRate: 300 bytes over max(elapsed 1000, one window 1000) ms = 300 B/s
    assert m.is_quota_exceeded(T0 + 1000)
    assert m.throttle_time_ms(T0 + 1000) == 2000  # (300 - 100) / 100 * 1000
    # 500 ms later the same 300 bytes are spread over 1.5 s: 200 B/s
    assert m.throttle_time_ms(T0 + 1500) == 1500  # (200 - 100) / 100 * 1500
    # at 3 s the rate is exactly the bound, which is acceptable
    assert not m.is_quota_exceeded(T0 + 3000)
    assert m.throttle_time_ms(T0 + 3000) == 0


def test_the_window_is_never_shorter_than_one_sample_nor_padded(backend, namespace) -> None:
    m = leader(backend, namespace)
    m.update_quota(100)
    m.record(50, T0)
    # at once: 50 bytes over one whole window (not over 0 ms), 50 B/s
    assert (m.measure(T0).value, m.measure(T0).window_ms) == (50.0, 1000)
    assert not m.is_quota_exceeded(T0)
    m.record(60, T0 + 500)
    # 110 bytes, still over one window: exceeded within the first second, where the client
    # quotas' Rate would spread it over 10 windows (11 B/s) and let it through
    assert m.is_quota_exceeded(T0 + 500)
    assert m.throttle_time_ms(T0 + 500) == 100  # (110 - 100) / 100 * 1000
    assert m.measure(T0 + 2500).window_ms == 2500


def test_usage_ages_out_after_the_sample_span(backend, namespace) -> None:
    m = leader(backend, namespace)
    m.update_quota(25)
    m.record(300, T0)
    assert m.throttle_time_ms(T0 + 10_000) == 2000  # 30 B/s: (30 - 25) / 25 * 10 000
    assert not m.is_quota_exceeded(T0 + 11_000)  # 11 windows without an event: the sample is purged
    assert m.measure(T0 + 11_000).value == 0.0


def test_samples_and_window_follow_the_config(backend, namespace) -> None:
    m = leader(backend, namespace, samples=2, window_s=2)
    m.update_quota(100)
    m.record(300, T0)
    assert m.throttle_time_ms(T0) == 1000  # 300 bytes over one 2 s window = 150 B/s: 50/100 * 2000
    assert not m.is_quota_exceeded(T0 + 4000)  # 2 samples x 2 s later, purged


def test_changing_the_quota_never_resets_usage(backend, namespace) -> None:
    m = leader(backend, namespace)
    m.update_quota(100)
    m.record(150, T0)
    m.record(150, T0 + 1000)
    m.update_quota(1000)
    assert not m.is_quota_exceeded(T0 + 1000)
    m.update_quota(100)
    assert m.throttle_time_ms(T0 + 1000) == 2000  # the same 300 bytes, the same throttle
    m.update_quota(None)
    assert not m.is_quota_exceeded(T0 + 1000)
    assert m.measure(T0 + 1000).value == 300.0


def test_without_a_quota_nothing_is_exceeded_and_zero_stops_everything(backend, namespace) -> None:
    m = leader(backend, namespace)
    assert m.upper_bound == LONG_MAX
    m.record(10**12, T0)
    assert not m.is_quota_exceeded(T0) and m.throttle_time_ms(T0) == 0
    m.update_quota(LONG_MAX)  # Kafka's default, as the broker config handler sets it
    assert m.upper_bound == LONG_MAX and not m.is_quota_exceeded(T0)
    z = ReplicationQuotaManager("follower", backend, namespace=namespace)
    z.update_quota(0)
    assert z.upper_bound == 0
    assert not z.is_quota_exceeded(T0)  # nothing replicated yet: 0 <= 0
    z.record(1, T0)
    assert z.is_quota_exceeded(T0)
    assert z.throttle_time_ms(T0) == LONG_MAX  # (1 - 0) / 0 is infinite; Math.round saturates


def test_each_replication_type_has_its_own_sensor(backend, namespace) -> None:
    managers = [ReplicationQuotaManager(rt, backend, namespace=namespace) for rt in ReplicationType]
    for m in managers:
        m.update_quota(100)
    managers[0].record(500, T0)
    assert [m.is_quota_exceeded(T0) for m in managers] == [True, False, False]
    assert [m.sensor_key for m in managers] == [
        f"qe:{{{namespace}|LeaderReplication}}",
        f"qe:{{{namespace}|FollowerReplication}}",
        f"qe:{{{namespace}|AlterLogDirsReplication}}",
    ]


def test_bad_input_to_a_manager_changes_nothing(backend, namespace) -> None:
    m = leader(backend, namespace)
    m.update_quota(100)
    m.mark_throttled("orders", [0, 1])
    for bad in (-1, 1.5, "fast", True):
        with pytest.raises(QuotaValidationError, match=LEADER_RATE):
            m.update_quota(bad)  # type: ignore[arg-type]
    assert m.upper_bound == 100
    for partitions in ([0, -1], [0, "1"], "0,1", [True]):
        with pytest.raises(QuotaValidationError):
            m.mark_throttled("orders", partitions)  # type: ignore[arg-type]
    with pytest.raises(QuotaValidationError):
        m.mark_throttled("bad topic", [0])
    assert m.throttled == {"orders": frozenset({0, 1})}
    for value in (-5, float("nan"), float("inf"), "10"):
        with pytest.raises(QuotaValidationError):
            m.record(value, T0)  # type: ignore[arg-type]
    assert m.measure(T0).value == 0.0
    with pytest.raises(QuotaValidationError, match="at least 1"):
        leader(backend, namespace, samples=0)
    with pytest.raises(QuotaValidationError, match="fail_mode"):
        leader(backend, namespace, fail_mode="maybe")


def test_marking_partitions_throttled() -> None:
    m = ReplicationQuotaManager("leader", backend=None)  # type: ignore[arg-type]  # no decision is made
    m.mark_throttled("orders", [0, 2])
    assert [m.is_throttled("orders", p) for p in range(3)] == [True, False, True]
    assert not m.is_throttled("payments", 0)
    m.mark_throttled("orders", [1])  # replaces, never merges
    assert [m.is_throttled("orders", p) for p in range(3)] == [False, True, False]
    m.mark_throttled("orders")  # all replicas
    assert m.is_throttled("orders", 99)
    m.mark_throttled("payments", [])
    assert not m.is_throttled("payments", 0)
    m.remove_throttle("orders")
    m.remove_throttle("never-marked")
    assert not m.is_throttled("orders", 0)


@pytest.fixture
def dead_backend() -> RedisBackend:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket is closed
    return RedisBackend(connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.2))


def test_redis_unreachable_applies_the_fail_mode(dead_backend: RedisBackend) -> None:
    open_ = ReplicationQuotaManager("leader", dead_backend, namespace="x")
    open_.update_quota(1)
    open_.record(100, T0)  # dropped, never raised into the replica fetcher
    assert open_.degraded
    assert not open_.is_quota_exceeded(T0) and open_.throttle_time_ms(T0) == 0
    closed = ReplicationQuotaManager("leader", dead_backend, namespace="x", fail_mode=FAIL_CLOSED)
    assert closed.is_quota_exceeded(T0)  # throttled replicas wait for Redis to come back
    assert closed.throttle_time_ms(T0) == 11_000


# ---- the throttle store: whole-or-nothing, versioned, one answer for every engine user ----


def orders_throttled(store: ReplicationThrottleStore) -> int:
    return store.alter([
        ThrottleOp(LEADER_RATE, 10_485_760),
        ThrottleOp(FOLLOWER_RATE, "10485760"),
        ThrottleOp(LEADER_REPLICAS, "0:101, 1:102", topic="orders"),
        ThrottleOp(FOLLOWER_REPLICAS, "0:103,1:104", topic="orders"),
        ThrottleOp(FOLLOWER_REPLICAS, "*", topic="payments"),
    ])


def test_is_throttled_for_leader_and_follower_per_broker(redis_client: redis.Redis, namespace: str) -> None:
    store = ReplicationThrottleStore(redis_client, namespace)
    orders_throttled(store)
    config = store.load()
    lead = [(p, b) for p in (0, 1) for b in (101, 102, 103, 104)
            if config.is_throttled("orders", p, b, side="leader")]
    follow = [(p, b) for p in (0, 1) for b in (101, 102, 103, 104)
              if config.is_throttled("orders", p, b, side=ReplicationType.FOLLOWER)]
    assert lead == [(0, 101), (1, 102)]
    assert follow == [(0, 103), (1, 104)]
    assert all(config.is_throttled("payments", p, b, side="follower") for p in range(3) for b in (1, 101))
    assert not config.is_throttled("payments", 0, 1, side="leader")
    assert not config.is_throttled("unknown", 0, 101, side="leader")
    assert config.throttled_partitions("payments", 5, side="follower") is ALL_REPLICAS
    assert (config.rate(LEADER_RATE), config.rate(ALTER_LOG_DIRS_RATE)) == (10_485_760, LONG_MAX)
    assert str(config.replicas("orders", "leader")) == "0:101,1:102"  # stored canonical
    with pytest.raises(QuotaValidationError, match="no throttled-replica list"):
        config.is_throttled("orders", 0, 101, side="alter-log-dirs")


@pytest.mark.parametrize(
    ("op", "why"),
    [
        (ThrottleOp(LEADER_REPLICAS, "0:", topic="orders"), "entry 1 ('0:') has no broker id"),
        (ThrottleOp(FOLLOWER_REPLICAS, "*,0:1", topic="orders"), "must be the whole list"),
        (ThrottleOp(LEADER_RATE, -1), "Value must be at least 0"),
        (ThrottleOp(ALTER_LOG_DIRS_RATE, 2.5), "Not a number of type LONG"),
        (ThrottleOp(LEADER_RATE, 100, topic="orders"), "is a broker config"),
        (ThrottleOp(LEADER_REPLICAS, "*"), "is a topic config; name the topic"),
        (ThrottleOp(LEADER_REPLICAS, "*", topic="no/slash"), "other than ASCII alphanumerics"),
        (ThrottleOp("follower.replication.throttled.rates", 1), "Unknown replication throttle config"),
        (ThrottleOp(LEADER_RATE, 5), "altered twice"),  # LEADER_RATE is also set by the valid op
    ],
)
def test_a_bad_change_changes_nothing(op: ThrottleOp, why: str, redis_client: redis.Redis, namespace: str) -> None:
    store = ReplicationThrottleStore(redis_client, namespace)
    orders_throttled(store)
    before = store.load()
    with pytest.raises(QuotaValidationError) as e:
        # the valid ops of the batch are not applied either
        store.alter([ThrottleOp(LEADER_RATE, 1), ThrottleOp(LEADER_REPLICAS, "*", topic="orders"), op])
    assert why in e.value.message and e.value.code == "INVALID_REQUEST"
    assert store.load() == before


def test_changes_are_versioned_announced_and_removable(redis_client: redis.Redis, namespace: str) -> None:
    store = ReplicationThrottleStore(redis_client, namespace)
    assert store.load().version == 0
    listener = redis_client.pubsub(ignore_subscribe_messages=True)
    listener.subscribe(store.channel)
    v1 = orders_throttled(store)
    msg = None
    for _ in range(50):
        msg = listener.get_message(timeout=0.1)
        if msg:
            break
    listener.close()
    assert msg is not None and int(msg["data"]) == v1 == store.version()
    assert store.alter([ThrottleOp(LEADER_RATE, 1)], validate_only=True) == v1  # checked, not applied
    assert store.load().rate(LEADER_RATE) == 10_485_760
    v2 = store.alter([
        ThrottleOp(LEADER_RATE, None),  # back to the default
        ThrottleOp(LEADER_REPLICAS, "", topic="orders"),  # an empty list is the default
        ThrottleOp(FOLLOWER_REPLICAS, None, topic="payments"),
    ])
    assert v2 == v1 + 1
    config = store.load()
    assert config.version == v2
    assert config.rates == {FOLLOWER_RATE: 10_485_760}
    assert {t: {k: str(v) for k, v in keys.items()} for t, keys in config.topics.items()} == {
        "orders": {FOLLOWER_REPLICAS: "0:103,1:104"}
    }


def test_a_broker_applies_the_store_without_resetting_usage(backend, redis_client, namespace) -> None:
    store = ReplicationThrottleStore(redis_client, namespace)
    broker = ReplicationThrottles(redis_client, namespace, 101, backend=backend)
    other = ReplicationThrottles(redis_client, namespace, 103, backend=backend)
    orders_throttled(store)
    assert broker.refresh() and other.refresh()
    assert not broker.refresh()  # the version did not move
    lead, follow = broker.manager("leader"), broker.manager(ReplicationType.FOLLOWER)
    assert lead.is_throttled("orders", 0) and not lead.is_throttled("orders", 1)
    assert not follow.is_throttled("orders", 0) and follow.is_throttled("payments", 3)
    assert other.manager("follower").is_throttled("orders", 0)
    assert lead.upper_bound == 10_485_760
    assert broker.manager("alter-log-dirs").upper_bound == LONG_MAX
    lead.record(31_457_280, T0)  # 30 MiB in the first second: 3x the bound
    assert lead.throttle_time_ms(T0) == 2000
    store.alter([ThrottleOp(LEADER_RATE, 5_242_880), ThrottleOp(LEADER_REPLICAS, None, topic="orders")])
    assert broker.refresh()
    assert not lead.is_throttled("orders", 0)
    assert lead.throttle_time_ms(T0) == 5000  # same sensor, new bound: 6x, (6 - 1) * 1000


def test_config_changes_fail_loudly_when_redis_is_unreachable(dead_backend: RedisBackend) -> None:
    store = ReplicationThrottleStore(dead_backend.client, "x")
    with pytest.raises(EngineUnavailable):
        store.alter([ThrottleOp(LEADER_RATE, 1)])
    with pytest.raises(EngineUnavailable):
        store.load()
    with pytest.raises(QuotaValidationError):  # validation comes first, Redis or not
        store.alter([ThrottleOp(LEADER_RATE, -1)])
