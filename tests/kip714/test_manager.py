"""ClientMetricsManager and ClientMetricsInstance behave as Kafka's, on an explicit clock."""

from __future__ import annotations

import itertools

import pytest

from kip714 import ClientMetricsInstance, ClientMetricsManager, KafkaUuid, RequestContext
from kip714.crc32c import crc32c
from kip714.javautil import ZERO_UUID, java_hash_set_order, java_string_hash

T0 = 1_700_000_000_000
ID = "iVeANM4FSUyRHAg_tg19Ug"
CTX = RequestContext("producer-1", "apache-kafka-java", "3.5.2", "127.0.0.1", 56078, "1")


def ids(*texts: str):
    it = iter(texts)
    return lambda: KafkaUuid.from_string(next(it))


def numbered_ids():
    counter = itertools.count(1)
    return lambda: KafkaUuid(1, next(counter))


# ---------------------------------------------------------------- Java pieces


def test_crc32c_and_java_hashes() -> None:
    assert crc32c(b"Some String") == 608512271
    assert crc32c(b"123456789") == 0xE3069283
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648


def test_uuid_text_is_base64url_and_zero_is_reserved() -> None:
    u = KafkaUuid.from_string(ID)
    assert str(u) == ID
    assert KafkaUuid.from_string("AAAAAAAAAAAAAAAAAAAAAA") == ZERO_UUID
    assert ZERO_UUID.is_reserved() and KafkaUuid(0, 1).is_reserved() and not u.is_reserved()
    with pytest.raises(ValueError):
        KafkaUuid.from_string("short")


def test_hash_set_order_is_javas() -> None:
    a, b = "org.apache.kafka.client.producer.partition.queue.", "org.apache.kafka.client.producer.partition.latency"
    assert java_hash_set_order([a, b]) == [b, a]


# ---------------------------------------------------------------- gating


def test_instance_gating_timeline() -> None:
    inst = ClientMetricsInstance(push_interval_ms=1000)
    assert inst.maybe_update_get_request_timestamp(T0)  # timestamps start at 0
    assert not inst.maybe_update_get_request_timestamp(T0 + 999)
    assert inst.maybe_update_push_request_timestamp(T0 + 1)  # the one push a get allows at once
    assert not inst.maybe_update_push_request_timestamp(T0 + 2)  # refused: timestamps do not move
    assert inst.push_retry_after_ms(T0 + 2) == 999
    assert not inst.maybe_update_push_request_timestamp(T0 + 1000)
    assert inst.maybe_update_push_request_timestamp(T0 + 1001)
    assert not inst.maybe_update_get_request_timestamp(T0 + 2000)  # measured from the later push
    assert inst.maybe_update_get_request_timestamp(T0 + 2001)


def test_get_then_immediate_get_is_throttled_and_counted() -> None:
    m = ClientMetricsManager(telemetry_max_bytes=100, cache_expiry_ms=100, id_generator=ids(ID))
    r = m.get_telemetry_subscriptions(None, CTX, T0)
    assert (r.error, r.client_instance_id, r.subscription_id, r.push_interval_ms) == ("NONE", ID, -1266358325, 300000)
    assert r.accepted_compression_types == [4, 3, 1, 2] and r.delta_temporality and r.telemetry_max_bytes == 100
    again = m.get_telemetry_subscriptions(ID, CTX, T0 + 10)
    assert again.error == "THROTTLING_QUOTA_EXCEEDED"
    assert again.retry_after_ms == 300000 - 10
    assert m.counters() == {"throttle": 1, "unknown_subscription": 0, "plugin_export": 0, "plugin_error": 0,
                            "instances": 1}


def test_push_flow_and_its_errors() -> None:
    m = ClientMetricsManager(telemetry_max_bytes=10, id_generator=ids(ID))
    m.update_subscription("s", {"metrics": "org.", "interval.ms": "1000"})
    g = m.get_telemetry_subscriptions(ZERO_UUID, CTX, T0)
    sid = g.subscription_id
    assert m.push_telemetry(ID, sid, 4, b"x", False, CTX, T0).error == "NONE"
    early = m.push_telemetry(ID, sid, 4, b"x", False, CTX, T0 + 500)
    assert (early.error, early.retry_after_ms) == ("THROTTLING_QUOTA_EXCEEDED", 500)
    assert m.push_telemetry(ID, sid + 1, 4, b"x", False, CTX, T0 + 1000).error == "UNKNOWN_SUBSCRIPTION_ID"
    # after UNKNOWN_SUBSCRIPTION_ID a get is let through at once
    assert m.get_telemetry_subscriptions(ID, CTX, T0 + 1001).error == "NONE"
    # ... but, as in Kafka, that recovery get does not move the get timestamp: no free push follows it
    assert m.push_telemetry(ID, sid, 4, b"x", False, CTX, T0 + 1002).error == "THROTTLING_QUOTA_EXCEEDED"
    assert m.push_telemetry(ID, sid, 9, b"x", False, CTX, T0 + 2000).error == "UNSUPPORTED_COMPRESSION_TYPE"
    assert m.push_telemetry(ID, sid, 0, b"x" * 11, False, CTX, T0 + 3000).error == "TELEMETRY_TOO_LARGE"
    assert m.counters()["unknown_subscription"] == 1
    assert m.counters()["plugin_export"] == 1


def test_terminating_push_bypasses_the_gate_and_ends_the_client() -> None:
    m = ClientMetricsManager(id_generator=ids(ID))
    sid = m.get_telemetry_subscriptions(None, CTX, T0).subscription_id
    assert m.push_telemetry(ID, sid, 0, b"x", False, CTX, T0).error == "NONE"
    assert m.push_telemetry(ID, sid, 0, b"x", True, CTX, T0 + 1).error == "NONE"  # too early, yet accepted
    r = m.push_telemetry(ID, sid, 0, b"x", True, CTX, T0 + 2)
    assert r.error == "INVALID_REQUEST"
    inst = m.client_instance(ID)
    assert inst is not None and inst.terminating and inst.last_known_error == "INVALID_REQUEST"


@pytest.mark.parametrize("bad", [None, "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ", "not-an-id"])
def test_push_with_a_missing_or_reserved_id_is_invalid(bad: str | None) -> None:
    m = ClientMetricsManager()
    assert m.push_telemetry(bad, 0, 0, None, False, CTX, T0).error == "INVALID_REQUEST"
    assert m.instance_count == 0


# ---------------------------------------------------------------- resolution


def test_union_of_matching_subscriptions_and_minimum_interval() -> None:
    m = ClientMetricsManager(id_generator=ids(ID, "AAAAAAAAAAAAAAAAAAAAAg"))
    m.update_subscription("a", {"metrics": "org.a.,org.b.", "interval.ms": "60000"})
    m.update_subscription("b", {"metrics": "org.b.,org.c.", "interval.ms": "20000",
                                "match": "client_software_name=apache-kafka-java"})
    m.update_subscription("other", {"metrics": "org.z.", "interval.ms": "100", "match": "client_id=consumer-.*"})
    r = m.get_telemetry_subscriptions(None, CTX, T0)
    assert sorted(r.requested_metrics) == ["org.a.", "org.b.", "org.c."]
    assert r.requested_metrics == java_hash_set_order(["org.a.", "org.b.", "org.c."])
    assert r.push_interval_ms == 20000


def test_star_collapses_the_metric_set() -> None:
    m = ClientMetricsManager(telemetry_max_bytes=100, cache_expiry_ms=100, id_generator=ids(ID))
    m.update_subscription("a", {"metrics": "org.a."})
    m.update_subscription("sub-1", {"metrics": "*", "interval.ms": "100"})
    r = m.get_telemetry_subscriptions(None, CTX, T0)
    assert r.requested_metrics == ["*"] and r.push_interval_ms == 100
    assert r.subscription_id == 1440563380  # Kafka's value for [*], 100 ms and this id (the vectors)


def test_a_subscription_change_re_evaluates_the_client_on_its_next_request() -> None:
    m = ClientMetricsManager(id_generator=ids(ID))
    first = m.get_telemetry_subscriptions(None, CTX, T0)
    assert m.get_telemetry_subscriptions(ID, CTX, T0 + 1).error == "THROTTLING_QUOTA_EXCEEDED"
    m.update_subscription("s", {"metrics": "org.", "interval.ms": "1000"})
    assert m.push_telemetry(ID, first.subscription_id, 0, b"x", False, CTX, T0 + 2).error == "UNKNOWN_SUBSCRIPTION_ID"
    fresh = m.get_telemetry_subscriptions(ID, CTX, T0 + 3)
    assert fresh.error == "NONE" and fresh.requested_metrics == ["org."] and fresh.push_interval_ms == 1000
    assert fresh.subscription_id != first.subscription_id
    m.update_subscription("s", {})  # removal re-evaluates too
    assert m.get_telemetry_subscriptions(ID, CTX, T0 + 4).subscription_id == first.subscription_id


# ---------------------------------------------------------------- cache


def test_instances_expire_after_max_of_cache_expiry_and_three_intervals() -> None:
    m = ClientMetricsManager(cache_expiry_ms=100, id_generator=ids(ID))
    m.update_subscription("s", {"metrics": "*", "interval.ms": "100"})
    m.get_telemetry_subscriptions(None, CTX, T0)
    m.advance(T0 + 299)
    assert m.instance_count == 1
    m.advance(T0 + 300)
    assert m.instance_count == 0


def test_each_request_pushes_the_expiry_back() -> None:
    m = ClientMetricsManager(cache_expiry_ms=60_000, id_generator=ids(ID))
    sid = m.get_telemetry_subscriptions(None, CTX, T0).subscription_id
    assert m.expiration_ms(m.client_instance(ID)) == 900_000
    m.push_telemetry(ID, sid, 0, None, False, CTX, T0 + 800_000)
    m.advance(T0 + 900_000)
    assert m.instance_count == 1
    m.advance(T0 + 1_700_000)
    assert m.instance_count == 0


def test_lru_evicts_the_least_recently_used_instance() -> None:
    m = ClientMetricsManager(id_generator=numbered_ids(), cache_max_size=3)
    a, b, c = (m.get_telemetry_subscriptions(None, CTX, T0).client_instance_id for _ in range(3))
    m.get_telemetry_subscriptions(a, CTX, T0 + 1)  # touch a
    d = m.get_telemetry_subscriptions(None, CTX, T0 + 2).client_instance_id
    assert m.instance_count == 3
    assert m.client_instance(b) is None
    assert all(m.client_instance(x) is not None for x in (a, c, d))


def test_default_cache_is_16384() -> None:
    assert ClientMetricsManager().cache_max_size == 16384


def test_disconnect_forgets_the_instance() -> None:
    m = ClientMetricsManager(id_generator=ids(ID))
    m.get_telemetry_subscriptions(None, CTX, T0)
    m.disconnect("1", T0 + 1)
    assert m.instance_count == 0 and m.counters()["instances"] == 0
