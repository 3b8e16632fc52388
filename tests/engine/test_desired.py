"""A namespace's desired state, pushed by version: whole or as a delta, at most once, announced to engine users."""

from __future__ import annotations

import pytest
import redis

from engine.config import EntityRef, QuotaConfigStore, QuotaEngine
from engine.desired import (
    BROKER,
    CLIENT_METRICS,
    QUOTA,
    TOPIC,
    BrokerConfigStore,
    NamespaceState,
    NeedsFullState,
)
from engine.errors import QuotaValidationError
from engine.replication import ReplicationThrottles, ReplicationThrottleStore

ALICE = EntityRef(user="alice").field()
BOB = EntityRef(user="bob", client_id="app").field()
LEADER_RATE = "leader.replication.throttled.rate"


def q(resource: str, key: str) -> tuple[str, str, str]:
    return (QUOTA, resource, key)


def test_a_whole_state_replaces_everything_once_per_version(redis_client: redis.Redis, namespace: str) -> None:
    state = NamespaceState(redis_client, namespace, broker_id=1)
    assert state.applied_version() == -1
    first = {q(ALICE, "producer_byte_rate"): "1000.0", q(BOB, "consumer_byte_rate"): "500"}
    assert state.apply(2, first, mode="full") == (True, 2)
    assert state.read() == (2, {q(ALICE, "producer_byte_rate"): "1000.0", q(BOB, "consumer_byte_rate"): "500.0"})
    # a late, older push and the same version again change nothing
    assert state.apply(1, {q(ALICE, "producer_byte_rate"): "1"}, mode="full") == (False, 2)
    assert state.apply(2, {}, mode="full") == (False, 2)
    # the next whole state removes what it does not hold
    assert state.apply(3, {q(BOB, "consumer_byte_rate"): "700"}, mode="full") == (True, 3)
    assert state.read() == (3, {q(BOB, "consumer_byte_rate"): "700.0"})


def test_a_delta_changes_only_its_items_and_needs_the_base_it_was_computed_from(
    redis_client: redis.Redis, namespace: str
) -> None:
    state = NamespaceState(redis_client, namespace, broker_id=1)
    state.apply(4, {q(ALICE, "producer_byte_rate"): "1000", q(BOB, "consumer_byte_rate"): "500"}, mode="full")
    changed = state.apply(6, {q(ALICE, "producer_byte_rate"): None, q(BOB, "request_percentage"): "50"}, base=4)
    assert changed == (True, 6)
    assert state.read()[1] == {q(BOB, "consumer_byte_rate"): "500.0", q(BOB, "request_percentage"): "50.0"}
    # a delta computed from an older base still lands (its items carry their values as of its version)
    assert state.apply(7, {q(BOB, "consumer_byte_rate"): "800"}, base=5) == (True, 7)
    # a namespace that lost its data cannot take a delta: the pusher must send the whole state
    redis_client.delete(state.desired_key)
    with pytest.raises(NeedsFullState):
        state.apply(8, {q(BOB, "consumer_byte_rate"): "900"}, base=7)
    assert state.applied_version() == -1


def test_every_item_is_validated_before_anything_is_written(redis_client: redis.Redis, namespace: str) -> None:
    state = NamespaceState(redis_client, namespace, broker_id=1)
    state.apply(1, {q(ALICE, "producer_byte_rate"): "1000"}, mode="full")
    bad_batches = [
        {q(ALICE, "producer_byte_rate"): "2000", q(BOB, "producer_byte_rate"): "-5"},
        {q(ALICE, "producer_byte_rate"): "2000", q(ALICE, "connection_creation_rate"): "5"},
        {q(ALICE, "producer_byte_rate"): "lots"},
        {(BROKER, "", LEADER_RATE): "fast"},
        {(TOPIC, "orders", "retention.ms"): "1000"},
        {("acl", "x", "y"): "1"},
        {(BROKER, "leader", "max.connections"): "10"},
    ]
    for batch in bad_batches:
        with pytest.raises(QuotaValidationError):
            state.apply(2, batch, base=1)
    assert state.read() == (1, {q(ALICE, "producer_byte_rate"): "1000.0"})


def test_broker_configs_keep_both_levels_and_the_broker_gets_its_own_rate_else_the_default(
    redis_client: redis.Redis, namespace: str
) -> None:
    state = NamespaceState(redis_client, namespace, broker_id=2)
    throttles = ReplicationThrottles(redis_client, namespace, broker_id=2)
    whole = {
        (BROKER, "", LEADER_RATE): "1000",
        (BROKER, "", "max.connections"): "100",
        (BROKER, "2", "max.connections"): "50",
        (TOPIC, "orders", "leader.replication.throttled.replicas"): "0:1,1:2",
    }
    state.apply(1, whole, mode="full")
    assert BrokerConfigStore(redis_client, namespace).effective(2) == {LEADER_RATE: "1000", "max.connections": "50"}
    throttles.refresh()
    assert throttles.config.rate(LEADER_RATE) == 1000
    leader = throttles.manager("leader")
    assert leader.is_throttled("orders", 1) and not leader.is_throttled("orders", 0)  # "0:1,1:2": p1 on broker 2
    state.apply(2, {(BROKER, "2", LEADER_RATE): "300"}, base=1)  # the broker's own value wins
    throttles.refresh()
    assert throttles.config.rate(LEADER_RATE) == 300
    state.apply(3, {(BROKER, "2", LEADER_RATE): None, (BROKER, "", LEADER_RATE): None}, base=2)
    throttles.refresh()
    assert LEADER_RATE not in throttles.config.rates  # unthrottled again
    assert state.read()[1] == {
        (BROKER, "", "max.connections"): "100",
        (BROKER, "2", "max.connections"): "50",
        (TOPIC, "orders", "leader.replication.throttled.replicas"): "0:1,1:2",
    }


def test_engine_users_hear_of_the_stores_that_changed(redis_client: redis.Redis, namespace: str) -> None:
    engine = QuotaEngine(redis_client, namespace)
    produce = engine.manager("produce")
    listener = engine.listen()
    state = NamespaceState(redis_client, namespace)
    state.apply(7, {q(ALICE, "producer_byte_rate"): "2048"}, mode="full")
    assert any(listener.get_message(timeout=0.1) for _ in range(30))
    assert engine.refresh() and produce.quota("alice", "x") == (2048.0, "alice:")
    before = QuotaConfigStore(redis_client, namespace).version()
    state.apply(8, {(CLIENT_METRICS, "basic", "interval.ms"): "60000"}, base=7)
    assert QuotaConfigStore(redis_client, namespace).version() == before  # quota users need not reload
    assert ReplicationThrottleStore(redis_client, namespace).version() == 0
    listener.close()


def test_the_push_log_shows_each_version_applied_once(redis_client: redis.Redis, namespace: str) -> None:
    state = NamespaceState(redis_client, namespace)
    state.apply(1, {q(ALICE, "producer_byte_rate"): "1"}, mode="full")
    state.apply(3, {q(ALICE, "producer_byte_rate"): "3"}, base=1)
    state.apply(2, {q(ALICE, "producer_byte_rate"): "2"}, base=1)  # late: ignored, not logged
    state.apply(3, {q(ALICE, "producer_byte_rate"): "9"}, mode="force")  # healing rewrites whatever is held
    log = state.history()
    assert [(r.held, r.version, r.mode) for r in log] == [(-1, 1, "full"), (1, 3, "delta"), (3, 3, "force")]
    assert all(r.at_ms > 0 for r in log)
    assert state.read()[1] == {q(ALICE, "producer_byte_rate"): "9.0"}
