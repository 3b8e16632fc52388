"""The live samples of a broker's sensors: what the charts and the overview read."""

from __future__ import annotations

import json

import redis

from engine.config import AlterOp, EntityRef, QuotaEngine
from engine.entities import QuotaType
from engine.monitor import (
    Sampler,
    firehose_key,
    index_field,
    index_key,
    index_member,
    latest,
    latest_key,
    minutes,
    recent,
)

T0 = 1_700_000_000_000


def engine_with_quotas(client: redis.Redis, namespace: str) -> QuotaEngine:
    engine = QuotaEngine(client, namespace)
    engine.store.alter(
        [
            AlterOp(EntityRef(user="alice"), "producer_byte_rate", 1000),
            AlterOp(EntityRef(user="alice"), "controller_mutation_rate", 2),
        ]
    )
    engine.refresh()
    return engine


def test_a_tick_publishes_rate_bound_throttle_and_tokens_of_active_clients(
    redis_client: redis.Redis, namespace: str
) -> None:
    engine = engine_with_quotas(redis_client, namespace)
    produce, mutations = engine.manager("produce"), engine.manager("controller_mutation")
    cluster = namespace  # one namespace per test keeps the streams apart
    sampler = Sampler(redis_client, cluster, 1, engine.managers)
    for i in range(20):  # 40,000 bytes in 2 s; Kafka measures over 10 s at first: 4,000 bytes/s against 1,000
        t = T0 + i * 100
        produce.record("alice", "app", 2000, t)
        sampler.touch("alice", "app", t)
    mutations.record("alice", "app", 30, T0 + 1900)  # a burst of 30 topic creations against 2/s (22 tokens)
    published = sampler.tick(T0 + 2000)
    by_type = {s["q"]: s for s in latest(redis_client, cluster)}
    assert published == 2 and set(by_type) == {"produce", "controller_mutation"}
    p = by_type["produce"]
    assert (p["e"], p["b"], p["bound"], p["t"]) == ("alice:", 1, 1000.0, T0 + 2000)
    assert p["rate"] == produce.measure("alice", "app", T0 + 2000).value  # the same measurement the engine makes
    assert p["util"] == p["rate"] / 1000.0 and p["util"] > 1
    assert p["thr_max"] > 0 and p["thr_avg"] > 0
    m = by_type["controller_mutation"]
    assert m["tokens"] < 0 and m["rate"] is None and m["bound"] == 2.0
    burst = 2.0 * mutations.samples * mutations.window_ms / 1000  # Kafka's bucket: the quota over its whole window
    assert m["util"] == (burst - m["tokens"]) / burst and m["util"] > 1  # below zero: above the bound, throttled
    assert m["thr_frac"] > 0 and m["thr_max"] >= -m["tokens"] / 2.0 * 1000
    assert recent(redis_client, cluster, "produce", "alice:", T0) == [p]
    assert redis_client.xlen(firehose_key(cluster)) == 1
    sampler.tick(T0 + 5000)  # no new throttle, but its clients still wait for the one they were given
    waiting = next(s for s in latest(redis_client, cluster) if s["q"] == "produce")
    assert (waiting["thr_max"], waiting["thr_frac"]) == (p["thr_max"], 1.0)
    assert p["thr_max"] <= 29_500  # given at T0 + 1,900: waited by T0 + 31,000, while the client is still sampled
    sampler.tick(T0 + 31_000)
    sampler.tick(T0 + 31_800)  # the throttle is over: its time is back to zero
    later = next(s for s in latest(redis_client, cluster) if s["q"] == "produce")
    assert (later["thr_avg"], later["thr_max"], later["thr_frac"]) == (0.0, 0.0, 0.0)


def test_quiet_clients_stop_being_sampled_and_minutes_roll_up(redis_client: redis.Redis, namespace: str) -> None:
    engine = engine_with_quotas(redis_client, namespace)
    produce = engine.manager("produce")
    sampler = Sampler(redis_client, namespace, 1, {QuotaType.PRODUCE: produce})
    minute = T0 - T0 % 60_000
    for s in range(3):
        t = minute + s * 1000
        produce.record("alice", "app", 500, t)
        sampler.touch("alice", "app", t)
        sampler.tick(t + 500)
    sampler.tick(minute + 60_500)  # the next minute closes the first one
    (row,) = minutes(redis_client, namespace, "produce", "alice:", minute)
    assert row["t"] == minute and row["n"] == 3 and row["bound"] == 1000.0 and row["rate_max"] >= row["rate_avg"] > 0
    assert sampler.tick(minute + 200_000) == 0  # quiet for longer than ACTIVE_FOR_MS: nothing to publish


def test_a_groups_minute_keeps_each_members_average_part(redis_client: redis.Redis, namespace: str) -> None:
    """The hour view of a group: each member's requests/s and part averaged over the minute's samples (0 in a
    sample it is missing from), the members summed as others kept as one row with the most of them, busiest first."""
    sampler = Sampler(redis_client, namespace, 2, {})
    minute = T0 - T0 % 60_000
    ticks = [
        [{"u": "a", "c": "x", "rps": 30.0, "share": 0.75, "part": 900.0}, {"others": 2, "rps": 10.0, "part": 300.0}],
        [{"u": "a", "c": "x", "rps": 10.0, "share": 0.5, "part": 300.0}, {"u": "b", "c": "", "rps": 10.0,
                                                                          "part": 300.0}],
        [{"u": "b", "c": "", "rps": 20.0, "share": 1.0, "part": 600.0}, {"others": 3, "rps": 0.0, "part": 0.0}],
    ]
    for i, members in enumerate(ticks):
        t = minute + i * 1000
        sampler.publish([{"t": t, "b": 2, "q": "produce", "e": "group@g:", "rate": 1200.0, "members": members}], t)
    sampler.publish([], minute + 60_000)
    (row,) = minutes(redis_client, namespace, "produce", "group@g:", minute)
    assert row["members"] == [
        {"u": "a", "c": "x", "rps": 40 / 3, "share": 0.5, "part": 400.0},
        {"u": "b", "c": "", "rps": 10.0, "share": 0.375, "part": 300.0},
        {"others": 3, "rps": 10 / 3, "share": 0.125, "part": 100.0},
    ]
    sampler.publish([{"t": minute + 61_000, "b": 2, "q": "produce", "e": "alice:", "rate": 1.0}], minute + 61_000)
    sampler.publish([], minute + 120_000)
    (plain,) = minutes(redis_client, namespace, "produce", "alice:", minute + 60_000)
    assert "members" not in plain  # only a group's sensor has members


def test_an_entitys_stream_keeps_a_span_of_redis_time_whatever_the_number_of_brokers(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Trimmed by Redis's clock, not by a count sized for MAX_BROKERS brokers: with fewer brokers a count would keep
    several times the span, and memory grew for as long (the soak saw Redis grow for 13 minutes)."""
    import time

    from engine.monitor import entity_key

    engine = engine_with_quotas(redis_client, namespace)
    produce = engine.manager("produce")
    sampler = Sampler(redis_client, namespace, 1, {QuotaType.PRODUCE: produce}, retention_s=3)
    key = entity_key(namespace, "produce", "alice:")
    for i in range(250):  # 250 ticks of one broker within the span: all kept (3 of Redis's stream nodes)
        t = T0 + i * 1000
        produce.record("alice", "app", 100, t)
        sampler.touch("alice", "app", t)
        sampler.tick(t)
    assert redis_client.xlen(key) == 250
    time.sleep(3.2)  # the span, in Redis's time, passes
    for i in (250, 251):  # the first tells the sampler Redis's clock now, the second trims by it
        t = T0 + i * 1000
        produce.record("alice", "app", 100, t)
        sampler.touch("alice", "app", t)
        sampler.tick(t)
    kept = recent(redis_client, namespace, "produce", "alice:", 0)
    # trimming is approximate (whole stream nodes of 100 entries): the full nodes older than the span are gone,
    # the newest entries all stay
    assert len(kept) < 100 and [s["t"] for s in kept[-2:]] == [T0 + 250_000, T0 + 251_000]


def test_a_throttle_counts_as_time_throttled_for_as_long_as_it_lasts(redis_client: redis.Redis, namespace: str) -> None:
    """A 2.5 s throttle given at one tick keeps its clients waiting through the next ticks: the time throttled is
    spread over them (not 100 % at the tick it was given and 0 % while they wait), with its throttle time."""
    engine = engine_with_quotas(redis_client, namespace)
    produce = engine.manager("produce")
    sampler = Sampler(redis_client, namespace, 1, {QuotaType.PRODUCE: produce})
    sampler.tick(T0)
    produce.record("alice", "app", 12_500, T0 + 10)  # 12,500 bytes at once against 1,000/s: 1,250/s over 10 s
    sampler.touch("alice", "app", T0 + 10)
    given = produce.measure("alice", "app", T0 + 10)
    fracs, maxes = [], []
    for i in range(1, 8):
        sampler.tick(T0 + i * 1000)
        (s,) = latest(redis_client, namespace)
        fracs.append(s["thr_frac"])
        maxes.append(s["thr_max"])
    waited = sum(fracs) * 1000
    assert given.value > 1000 and maxes[0] > 2000, (given, maxes)
    assert abs(waited - maxes[0]) < 1.0, (fracs, maxes)  # every ms of the throttle once, as long as it lasts
    assert fracs[0] == fracs[1] == 1.0 and fracs[-1] == 0.0
    # while its clients wait, the throttle they wait for is shown; after it, nothing
    assert all(m == maxes[0] for m, f in zip(maxes, fracs, strict=True) if f > 0) and maxes[-1] == 0.0


def test_the_index_holds_one_member_per_field_of_the_latest_hash_as_sensors_come_and_go(
    redis_client: redis.Redis, namespace: str
) -> None:
    cluster = namespace

    def s(b: int, q: str, e: str) -> dict[str, object]:
        return {"t": T0, "c": cluster, "b": b, "q": q, "e": e, "rate": 1.0, "bound": None, "util": None}

    def fields() -> set[str]:
        return {f.decode() for f in redis_client.hkeys(latest_key(cluster))}

    def indexed() -> set[str]:
        return {index_field(m.decode())[2] for m in redis_client.zrange(index_key(cluster), 0, -1)}

    one, two = Sampler(redis_client, cluster, 1, {}), Sampler(redis_client, cluster, 2, {})
    one.publish([s(1, "produce", "alice:"), s(1, "fetch", "alice:"), s(1, "produce", "a|b:c|d")], T0)
    two.publish([s(2, "produce", "alice:"), s(2, "connection", "ip:10.0.0.1")], T0)
    assert indexed() == fields() and len(fields()) == 5
    one.publish([s(1, "produce", "bob:")], T0 + 1000)  # alice's and a|b's sensors on broker 1 are no longer sampled
    two.publish([], T0 + 1000)
    assert indexed() == fields() == {"1|produce|bob:"}
    assert index_field(index_member("3|fetch|a|b:c|d")) == ("a|b:c|d", "fetch", "3|fetch|a|b:c|d")
    # the index orders members by tags, so the sensors of names that start alike are one range
    redis_client.zadd(index_key(cluster), {index_member("1|produce|bobby:x"): 0, index_member("1|produce|al:"): 0})
    found = redis_client.zrangebylex(index_key(cluster), b"[bob", b"(bob\xff")
    assert sorted(index_field(m.decode())[0] for m in found) == ["bob:", "bobby:x"]


def test_every_reader_gets_each_samples_json_dumps_text_across_script_chunks(
    redis_client: redis.Redis, namespace: str
) -> None:
    """One tick of more samples than one script call writes: each entity's stream and the latest hash hold
    ``json.dumps`` of its sample, the firehose ``json.dumps`` of the list, and every stream gets its TTL."""
    from engine.monitor import ENTITY_CHUNK, entity_key

    cluster = namespace
    samples = [
        {"t": T0, "c": cluster, "b": 1, "q": "produce", "e": f"üser-{i}:cl\"i|d", "rate": i / 3, "bound": 1e20,
         "util": None, "thr_frac": 0.0, "members": [{"u": "a", "rps": 1.5}] if i % 500 == 0 else None}
        for i in range(ENTITY_CHUNK + 2)
    ]  # fmt: skip
    sampler = Sampler(redis_client, cluster, 1, {})
    assert sampler.publish(samples, T0) == len(samples)
    ((_id, entry),) = redis_client.xrange(firehose_key(cluster))
    assert entry[b"d"].decode() == json.dumps(samples)
    hashed = {k.decode(): v.decode() for k, v in redis_client.hgetall(latest_key(cluster)).items()}
    assert hashed == {f"1|produce|{s['e']}": json.dumps(s) for s in samples}
    for s in (samples[0], samples[ENTITY_CHUNK - 1], samples[ENTITY_CHUNK], samples[-1]):
        key = entity_key(cluster, "produce", s["e"])
        assert [f[b"d"].decode() for _id, f in redis_client.xrange(key)] == [json.dumps(s)]
        assert 0 < redis_client.pttl(key) <= 300_000 + 60_000
    later = [{**s, "t": T0 + 1000} for s in samples]
    redis_client.persist(entity_key(cluster, "produce", samples[-1]["e"]))
    sampler.publish(later, T0 + 1000)  # the same minute: the TTL was set with its first sample, not again
    assert redis_client.pttl(entity_key(cluster, "produce", samples[-1]["e"])) == -1
    assert redis_client.xlen(entity_key(cluster, "produce", samples[-1]["e"])) == 2
