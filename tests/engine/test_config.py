"""Quota config in the engine's namespaces: Kafka's validation, whole-or-nothing batches, versions, pub/sub."""

from __future__ import annotations

import math

import pytest
import redis

from engine.config import AlterOp, EntityRef, QuotaConfigStore, QuotaEngine
from engine.errors import QuotaValidationError

ALICE = EntityRef(user="alice")


@pytest.mark.parametrize(
    ("entity", "key", "value", "message"),
    [
        (ALICE, "producer_byte_rate", -1, "greater than 0"),
        (ALICE, "producer_byte_rate", 0, "greater than 0"),
        (ALICE, "producer_byte_rate", math.nan, "finite"),
        (ALICE, "consumer_byte_rate", math.inf, "finite"),
        (ALICE, "producer_byte_rate", "1000", "must be a number"),
        (ALICE, "producer_byte_rate", True, "must be a number"),
        (ALICE, "producer_byte_rate", 10.5, "fractional"),
        (ALICE, "producer_byte_rate", 2.0**64, "too large"),
        (ALICE, "bytes_per_second", 10, "Invalid configuration key"),
        (ALICE, "connection_creation_rate", 10, "applies to ip entities"),
        (EntityRef(ip="10.0.0.1"), "producer_byte_rate", 10, "applies to client entities"),
        (EntityRef(ip="10.0.0.1"), "connection_creation_rate", 2.5, "fractional"),
    ],
)
def test_invalid_values_are_refused_and_nothing_changes(
    entity: EntityRef, key: str, value: object, message: str, redis_client: redis.Redis, namespace: str
) -> None:
    store = QuotaConfigStore(redis_client, namespace)
    store.alter([AlterOp(ALICE, "request_percentage", 50)])
    before = store.load()
    with pytest.raises(QuotaValidationError) as e:
        # the valid op of the batch is not applied either
        store.alter([AlterOp(EntityRef(user="bob"), "producer_byte_rate", 100), AlterOp(entity, key, value)])
    assert message in e.value.message
    assert e.value.code == "INVALID_REQUEST"
    assert store.load() == before


@pytest.mark.parametrize(
    "components",
    [{"ip": "1.2.3.4", "user": "alice"}, {"group": "g"}, {}, {"user": ""}, {"client-id": 7}],
)
def test_malformed_entities_are_refused(components: dict) -> None:
    with pytest.raises(QuotaValidationError):
        EntityRef.parse(components)


def test_default_entities_and_removal(redis_client: redis.Redis, namespace: str) -> None:
    store = QuotaConfigStore(redis_client, namespace)
    default_user = EntityRef.parse({"user": None})
    assert default_user.user == "<default>"
    v1 = store.alter([AlterOp(default_user, "producer_byte_rate", 2048), AlterOp(ALICE, "consumer_byte_rate", 10)])
    v2 = store.alter([AlterOp(ALICE, "consumer_byte_rate", None)])
    assert v2 == v1 + 1
    version, config = store.load()
    assert version == v2
    assert config == {default_user: {"producer_byte_rate": 2048.0}}


def test_validate_only_checks_without_applying(redis_client: redis.Redis, namespace: str) -> None:
    store = QuotaConfigStore(redis_client, namespace)
    v = store.alter([AlterOp(ALICE, "producer_byte_rate", 100)], validate_only=True)
    assert v == 0 and store.load() == (0, {})


def test_the_same_key_twice_in_one_batch_is_refused(redis_client: redis.Redis, namespace: str) -> None:
    store = QuotaConfigStore(redis_client, namespace)
    with pytest.raises(QuotaValidationError):
        store.alter([AlterOp(ALICE, "producer_byte_rate", 100), AlterOp(ALICE, "producer_byte_rate", None)])


def test_a_change_is_announced_and_engines_reload_without_resetting_usage(
    redis_client: redis.Redis, namespace: str
) -> None:
    engine = QuotaEngine(redis_client, namespace)
    listener = engine.listen()
    engine.store.alter([AlterOp(ALICE, "producer_byte_rate", 1000)])
    msg = None
    for _ in range(50):
        msg = listener.get_message(timeout=0.1)
        if msg:
            break
    assert msg is not None and int(msg["data"]) == engine.store.version()
    engine.refresh()
    produce = engine.manager("produce")
    assert produce.record("alice", "c", 15_000.0, 1_700_000_000_000).throttle_ms == 5000
    engine.store.alter([AlterOp(ALICE, "producer_byte_rate", 500)])
    engine.refresh()
    # same sensor, new bound: the 15 000 bytes already recorded still count
    assert engine.manager("produce").record("alice", "c", 0.0, 1_700_000_000_000).throttle_ms == 20_000
    listener.close()


@pytest.mark.parametrize(
    "fields", [{}, {"user": ""}, {"user": "alice", "ip": "10.0.0.1"}, {"ip": "broker.example"}, {"client_id": 7}]
)
def test_entities_built_directly_follow_the_same_rules(fields: dict) -> None:
    with pytest.raises(QuotaValidationError):
        EntityRef(**fields)


def test_ip_entities_are_stored_in_canonical_form(redis_client: redis.Redis, namespace: str) -> None:
    store = QuotaConfigStore(redis_client, namespace)
    store.alter([AlterOp(EntityRef(ip="2001:DB8:0::1"), "connection_creation_rate", 10)])
    assert store.load()[1] == {EntityRef(ip="2001:db8::1"): {"connection_creation_rate": 10.0}}


def test_long_max_value_is_a_valid_byte_rate(redis_client: redis.Redis, namespace: str) -> None:
    store = QuotaConfigStore(redis_client, namespace)
    store.alter([AlterOp(ALICE, "producer_byte_rate", 2**63 - 1)])  # Kafka's own default, as a number
    assert store.load()[1][ALICE]["producer_byte_rate"] == 9.223372036854776e18


def test_a_held_manager_sees_every_reload_and_keeps_kafkas_enabled_levels(
    redis_client: redis.Redis, namespace: str
) -> None:
    engine = QuotaEngine(redis_client, namespace)
    produce = engine.manager("produce")  # held once, as a broker would
    engine.store.alter([AlterOp(ALICE, "producer_byte_rate", 1000)])
    engine.refresh()
    assert produce.quota("alice", "c") == (1000.0, "alice:")
    engine.store.alter([AlterOp(ALICE, "producer_byte_rate", None)])
    engine.refresh()
    # Kafka only ever ORs quota types in: with no quota left, records still go to a Long.MAX sensor
    assert produce.quotas_enabled
    assert produce.record("alice", "c", 10.0, 1_700_000_000_000).tags == "alice:"


def test_the_sweep_leaves_other_structures_of_the_namespace_alone(redis_client: redis.Redis, namespace: str) -> None:
    from engine.connections import ConnectionConfig, RedisConnectionQuotas

    engine = QuotaEngine(redis_client, namespace)
    conns = RedisConnectionQuotas(redis_client, namespace, ConnectionConfig())
    conns.inc("PLAINTEXT", "10.0.0.1", 1_700_000_000_000)  # a counts hash under the same tag
    engine.store.alter([AlterOp(ALICE, "producer_byte_rate", 1000)])
    engine.refresh()
    engine.manager("produce").record("alice", "c", 10.0, 1_700_000_000_000)
    assert engine.sweep(1_700_000_000_000 + 3_600_001) == 1
    assert redis_client.exists(conns.counts_key)


@pytest.mark.parametrize("ns", ["", "a|b", "x}y", "with space", "*"])
def test_namespaces_that_would_break_key_names_are_refused(ns: str, redis_client: redis.Redis) -> None:
    from engine.entities import QuotaType
    from engine.managers import ClientQuotaManager
    from engine.model import ModelBackend

    with pytest.raises(QuotaValidationError):
        ClientQuotaManager(QuotaType.PRODUCE, ModelBackend(), namespace=ns)
