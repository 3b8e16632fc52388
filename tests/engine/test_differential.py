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

from quotas.engine.decisions import Decision, Kind, Op
from quotas.engine.model import ModelBackend
from quotas.engine.redis_backend import RedisBackend

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
