"""Sensor key names: a namespace's sensors in twelve hash slots, one in each twelfth of the slot range."""

from __future__ import annotations

from redis.crc import key_slot

from engine.sensor_keys import CLUSTER_SLOTS, SENSOR_BUCKETS, bucket_tags, entity_bucket, sensor_key


def test_each_bucket_slot_lies_in_its_own_share_of_the_slot_range() -> None:
    for namespace in ("prod.broker-1", "prod.cluster", "x"):
        tags = bucket_tags(namespace)
        assert len(tags) == SENSOR_BUCKETS
        for k, (tag, slot) in enumerate(tags):
            assert tag.startswith(f"{namespace}|s{k}.")
            assert key_slot(f"qe:{{{tag}}}:x".encode()) == slot
            assert k * CLUSTER_SLOTS // SENSOR_BUCKETS <= slot < (k + 1) * CLUSTER_SLOTS // SENSOR_BUCKETS


def test_a_sensor_key_names_its_type_and_tags_and_its_slot_is_redis_s() -> None:
    key, slot = sensor_key("prod.broker-1", "Produce", "alice:app-1")
    tag, bucket_slot = bucket_tags("prod.broker-1")[entity_bucket("alice:app-1")]
    assert key == f"qe:{{{tag}}}:Produce(alice:app-1)"
    assert slot == bucket_slot == key_slot(key.encode()) == key_slot((key + ":t").encode())


def test_every_quota_type_of_an_entity_shares_its_bucket() -> None:
    slots = {sensor_key("ns", t, "u:c")[1] for t in ("Produce", "Fetch", "Request", "ControllerMutation")}
    assert len(slots) == 1


def test_a_sensor_key_never_equals_another_sensor_s_throttle_key() -> None:
    # client-ids are arbitrary text: one ending in ":t" must not land on the ":t" key of a shorter one
    for tags in ("u:c", ":", "u:"):
        key, _ = sensor_key("ns", "Produce", tags)
        other, _ = sensor_key("ns", "Produce", tags + ":t")
        assert other != key + ":t"


def test_entities_spread_over_all_buckets() -> None:
    counts = [0] * SENSOR_BUCKETS
    for i in range(1200):
        counts[entity_bucket(f"user-{i}:client")] += 1
    assert min(counts) > 50
