"""The admin's overview from the samplers' summaries (``engine.monitor_summary``, ``frontend.monitor_summary``):
the same figures and rows as reading the latest hash whole, and the hash read whole whenever the summaries do not
hold it. Samples go through the engine's ``Sampler.publish`` into the test Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from engine.monitor import Sampler
from engine.monitor_summary import TOP, summary_key, where_key
from frontend.monitor_summary import summed_cluster_now
from frontend.monitoring import TOP_THROTTLED, ClusterNow, Visibility, cluster_now, heatmap, top_throttled
from tests.redis_keys import keys_cleared

CLUSTER = "ovsummary"
BROKERS = [0, 1, 2]


@pytest.fixture
def mon(redis_url: str) -> Iterator[redis.Redis]:
    with keys_cleared(redis_url, f"mon:{{{CLUSTER}}}*") as client:
        yield client


def sample(e: str, b: int, t: int, *, util: float | None = 0.5, frac: float = 0.0, thr: float = 0.0,
           q: str = "produce") -> dict[str, Any]:
    return {"t": t, "c": CLUSTER, "b": b, "q": q, "e": e, "rate": 1.0, "bound": 1.0, "util": util, "thr_avg": thr,
            "thr_max": thr * 2, "thr_frac": frac, "tokens": None}


def shown(c: ClusterNow) -> dict[str, Any]:
    """What the overview shows of a cluster: its counts, the throttled table and the heatmap."""
    top, throttled = top_throttled([c])
    rows = [(e.tags, e.thr_frac, e.thr_max, e.thr_avg, e.util_throttled, sorted(e.throttled_types),
             sorted(e.throttled_brokers), sorted(e.brokers), e.newest) for e in top]
    return {"counts": (c.entity_count, c.samples, c.stale, c.brokers, throttled), "throttled": rows,
            "heatmap": heatmap(c)}


def by_hash(client: redis.Redis, now: int) -> ClusterNow:
    return cluster_now(client, CLUSTER, BROKERS, Visibility(True, []), now)


def world(now: int) -> dict[int, list[dict[str, Any]]]:
    """Entities sampled on one to three brokers, throttled on some, ties in time throttled and in utilization past
    what a broker's candidates hold, a quota type without a bound, a connection sample."""
    out: dict[int, list[dict[str, Any]]] = {b: [] for b in BROKERS}
    for i in range(300):
        for b in BROKERS[: 1 + i % 3]:
            frac = 1.0 if i % 5 == 0 else (0.01 * (i % 7) if b == i % 3 else 0.0)  # 60 tied at 100 %
            util = None if i % 11 == 0 else round(0.5 + (i % 13) / 10 + b / 100, 4)  # ties across entities
            util = round(0.05 + i / 10_000, 4) if frac == 1.0 else util  # not among the most utilized
            # the longest throttle on another broker than the most time throttled, now and then
            out[b].append(sample(f"svc-{i}:", b, now - 100 * b, util=util, frac=frac, thr=float(i % 17 + 3 * b)))
            if i % 4 == 0:
                out[b].append(sample(f"svc-{i}:", b, now - 50, util=0.2, q="fetch", frac=0.02 * b))
    out[0].append({"t": now, "c": CLUSTER, "b": 0, "q": "connection", "e": "ip:10.0.0.1", "count": 3})
    return out


def test_the_summaries_give_the_figures_and_rows_of_the_whole_hash(mon: redis.Redis) -> None:
    now = int(time.time() * 1000)
    samplers = {b: Sampler(mon, CLUSTER, b, {}) for b in BROKERS}
    for b, rows in world(now).items():
        samplers[b].publish(rows, now)
    summed = summed_cluster_now(mon, CLUSTER, BROKERS, now)
    assert summed is not None
    whole = by_hash(mon, now)
    assert shown(summed) == shown(whole)
    assert len(summed.entities) < len(whole.entities) == 300  # candidates only, whatever the cluster holds
    assert sum(len(json.loads(v)["util"]) > TOP for v in mon.hvals(summary_key(CLUSTER))) > 0  # ties kept
    # the where hashes count what the samples say: distinct entities, throttled, with a utilization
    samples = [s for rows in world(now).values() for s in rows if s["q"] != "connection"]
    assert mon.hlen(where_key(CLUSTER, "all")) == len({s["e"] for s in samples}) == 300
    assert summed.throttled_count == len({s["e"] for s in samples if s["thr_frac"] > 0})
    assert len({s["e"] for s in samples if s["thr_frac"] == 1.0}) > TOP_THROTTLED  # tied at the cut
    assert mon.hlen(where_key(CLUSTER, "bound")) == len({s["e"] for s in samples if s["util"] is not None})

    # the next ticks: throttles end, entities stop being sampled on brokers 0 and 2, broker 1's sampler restarts
    # (its first tick restates every entity it samples, so what the previous one said of them is corrected)
    later = now + 1000
    for b in BROKERS:
        rows = [{**s, "t": later, "thr_frac": 0.0 if s["e"] < "svc-2" else s["thr_frac"]}
                for s in world(now)[b] if b == 1 or s["e"] < f"svc-{b + 5}"]
        (Sampler(mon, CLUSTER, b, {}) if b == 1 else samplers[b]).publish(rows, later)
    summed = summed_cluster_now(mon, CLUSTER, BROKERS, later)
    assert summed is not None
    assert shown(summed) == shown(by_hash(mon, later))


def test_the_hash_is_read_whole_when_the_summaries_do_not_hold_it(mon: redis.Redis) -> None:
    now = int(time.time() * 1000)
    for b in BROKERS:
        Sampler(mon, CLUSTER, b, {}).publish([sample("svc-a:", b, now, frac=0.5), sample("svc-b:", b, now)], now)
    assert summed_cluster_now(mon, CLUSTER, BROKERS, now) is not None
    # broker 2's sampler went quiet: its samples are no longer "now", which only the hash tells per sample
    assert summed_cluster_now(mon, CLUSTER, BROKERS, now + 10_001) is None
    # another sampler of broker 0 left fields the current one does not count
    Sampler(mon, CLUSTER, 0, {}).publish([sample("svc-c:", 0, now)], now)
    assert summed_cluster_now(mon, CLUSTER, BROKERS, now) is None
    assert by_hash(mon, now).entity_count == 3
    mon.delete(summary_key(CLUSTER))  # samples written before the samplers summed up
    assert summed_cluster_now(mon, CLUSTER, BROKERS, now) is None
