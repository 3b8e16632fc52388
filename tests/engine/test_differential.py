"""The Redis script and the reference model agree bit for bit on random traces.

The published conformance traces are a sample; these random traces cover what
they may not: long gaps, clocks starting at 0, un-records, zero and tiny quotas,
huge values, mid-trace quota changes and offsets that force the stored base
time to move. Same seed, same traces, every run.
"""

from __future__ import annotations

import json
import random

import pytest
import redis

from engine.decisions import Decision, Kind, Op
from engine.model import ModelBackend
from engine.redis_backend import RedisBackend

OPS = [Op.RECORD, Op.RECORD, Op.RECORD, Op.RECORD_NOCHECK, Op.STRICT, Op.CHECK, Op.MEASURE]


def random_trace(rng: random.Random, kind: Kind) -> list[Decision]:
    samples = rng.choice([1, 2, 3, 5, 11])
    window = rng.choice([1, 10, 100, 1000, 30_000])
    bound = rng.choice([None, 0.0, 0.5, 10.0, 1000.0, 1e6, 1e-3])
    t = rng.choice([0, 5, 1_700_000_000_000])
    steps = []
    for _ in range(rng.randint(20, 80)):
        t += rng.choice([0, 0, 1, 7, window // 2 + 1, window, 3 * window, rng.randint(0, 20 * window), 2**31])
        op = rng.choice(OPS)
        value = rng.choice([0.0, 1.0, 12.5, rng.uniform(0, 5000), -rng.uniform(0, 500), 1e300, 1e-9])
        if rng.random() < 0.08:
            bound = rng.choice([None, 0.25, 5.0, 2e5])
        steps.append(Decision("k", kind, op, value, t, bound, samples, window))
    return steps


def as_text(outcomes: list) -> list[str]:
    return [json.dumps([o.violated, o.recorded, o.value, o.window_ms, o.sum, o.throttle_raw]) for o in outcomes]


@pytest.mark.parametrize("kind", [Kind.RATE, Kind.RATE_COUNT, Kind.SIMPLE_RATE, Kind.TOKEN_BUCKET])
@pytest.mark.parametrize("seed", range(40))
def test_redis_equals_model_on_random_traces(kind: Kind, seed: int, redis_client: redis.Redis, namespace: str) -> None:
    rng = random.Random(seed * 7919 + kind)
    trace = random_trace(rng, kind)
    model = ModelBackend().execute(trace)
    key = f"qe:{{{namespace}|diff}}"
    for d in trace:
        d.key = key
    backend = RedisBackend(redis_client)
    # decisions go one by one and also in batches: batching must not change any answer
    one_by_one = [backend.execute([d])[0] for d in trace[: len(trace) // 2]]
    batched = backend.execute(trace[len(trace) // 2 :])
    assert as_text(one_by_one + batched) == as_text(model)


@pytest.mark.parametrize("seed", range(30))
def test_many_sensors_batched_with_a_clock_that_steps_back(seed: int, redis_client: redis.Redis, namespace) -> None:
    """Brokers sharing a cluster namespace do not share a clock: records may come a few windows late."""
    rng = random.Random(seed)
    kind = rng.choice([Kind.RATE, Kind.SIMPLE_RATE, Kind.TOKEN_BUCKET])
    samples, window, bound = rng.choice([1, 2, 11]), rng.choice([100, 1000]), rng.choice([5.0, 500.0])
    keys = [f"qe:{{{namespace}|k{i}}}" for i in range(4)]
    t = 1_700_000_000_000
    trace = []
    for _ in range(200):
        t += rng.choice([0, 5, 40, window, 2 * window])
        jitter = -rng.choice([0, 0, 0, window // 2, window, 2 * window, 3 * window])
        op = rng.choice([Op.RECORD, Op.RECORD, Op.STRICT, Op.CHECK, Op.MEASURE, Op.RECORD_NOCHECK])
        trace.append(Decision(rng.choice(keys), kind, op, rng.uniform(0, 300), t + jitter, bound, samples, window))
    model = ModelBackend().execute(trace)
    backend = RedisBackend(redis_client)
    got, i = [], 0
    while i < len(trace):
        n = rng.choice([1, 3, 17, 60])
        got += backend.execute(trace[i : i + n])
        i += n
    assert as_text(got) == as_text(model)


def test_the_hot_path_columns_equal_the_model(redis_client: redis.Redis, namespace: str) -> None:
    rng = random.Random(5)
    keys = [f"qe:{{{namespace}|c{i}}}" for i in range(50)]
    picks = [rng.choice(keys) for _ in range(3000)]  # more than one script call's worth
    ts = [1_700_000_000_000 + i * 3 for i in range(3000)]
    values = [rng.uniform(0, 2000) for _ in range(3000)]
    bounds = [1000.0] * 3000
    model = ModelBackend().record_columns(Op.RECORD, Kind.RATE, 0, 11, 1000, None, picks, ts, values, bounds)
    real = RedisBackend(redis_client).record_columns(Op.RECORD, Kind.RATE, 0, 11, 1000, None, picks, ts, values, bounds)
    assert bytes(real[0]) == bytes(model[0])
    assert list(real[1]) == list(model[1]) and list(real[2]) == list(model[2])


def test_a_late_record_keeps_the_purge_it_makes_due(redis_client: redis.Redis, namespace: str) -> None:
    """A record a few windows behind the latest one becomes the oldest last event: its purge must still come."""
    key = f"qe:{{{namespace}|late}}"
    # 2 samples of 100 ms: the late record at 900 lands in the slot opened at 1150, whose last event
    # then is the oldest of all; at 1120 that slot is 220 ms stale and Kafka purges it
    trace = [Decision(key, Kind.RATE, Op.RECORD, 50.0, t, 10.0, 2, 100) for t in (1000, 1150, 900)]
    trace.append(Decision(key, Kind.RATE, Op.CHECK, 0.0, 1120, 10.0, 2, 100))
    model = ModelBackend().execute(trace)
    backend = RedisBackend(redis_client)
    got = [backend.execute([d])[0] for d in trace]
    assert as_text(got) == as_text(model)
