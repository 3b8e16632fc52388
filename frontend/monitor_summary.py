"""An admin's overview from the samplers' summaries (``engine.monitor_summary``): O(brokers + shown), not O(entities).

Each sampler leaves a summary of its latest fields and keeps the where hashes, whose lengths count the cluster's
distinct entities. When every summary is fresh (each sample it counts is within ``FRESH_MS``), complete, and the
latest hash and its index hold exactly the fields the summaries count, the figures are those of reading the hash
whole: the counts from the where hashes and the throttled entities the summaries list, the tables from the
candidates (each read by field, every broker and quota type, through the index): the throttled entities down to
the ``TOP_THROTTLED``-th by time throttled and throttle (merged over the brokers; those tied with it too, the
utilization deciding among them), and each broker's most utilized. Otherwise ``None``: the caller reads the hash
whole.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from typing import Any

import redis

from engine.monitor import CONNECTION, index_field, index_key, latest_key
from engine.monitor_summary import WHERE, summary_key, where_key
from frontend.monitoring import FRESH_MS, TOP_THROTTLED, ClusterNow, no_gc, summed


def summed_cluster_now(client: redis.Redis, cluster: str, brokers: Iterable[int], now: int) -> ClusterNow | None:
    """A cluster's "now" for someone who sees everything, from the summaries; None when they do not hold it."""
    with no_gc():  # the summaries list every throttled entity: thousands of small lists, none in a cycle
        return _summed_cluster_now(client, cluster, brokers, now)


def _summed_cluster_now(client: redis.Redis, cluster: str, brokers: Iterable[int], now: int) -> ClusterNow | None:
    with client.pipeline(transaction=False) as p:
        p.hvals(summary_key(cluster))
        p.hlen(latest_key(cluster))
        p.zcard(index_key(cluster))
        for kind in WHERE:
            p.hlen(where_key(cluster, kind))
        raw, fields, indexed, *counts = p.execute()
    summaries = [json.loads(v) for v in raw]
    oldest_fresh = now - FRESH_MS
    if not summaries or fields != indexed or fields != sum(s["fields"] for s in summaries):
        return None
    if not all(s["complete"] and (not s["samples"] or s["t_min"] >= oldest_fresh) for s in summaries):
        return None
    throttled: dict[str, tuple[float, float]] = {}  # tags -> (highest time throttled, highest throttle)
    for s in summaries:
        for e, f, m in s["thr"]:
            was = throttled.get(e)
            if was is None:
                throttled[e] = (f, m)
            elif f > was[0] or m > was[1]:
                throttled[e] = (max(was[0], f), max(was[1], m))
    # the TOP_THROTTLED-th highest (not every throttled entity sorted)
    cut = heapq.nlargest(TOP_THROTTLED, throttled.values())[-1] if len(throttled) > TOP_THROTTLED else (0.0, 0.0)
    candidates = sorted({*(e for e, fm in throttled.items() if fm >= cut), *(e for s in summaries for e in s["util"])})
    with client.pipeline(transaction=False) as p:
        for e in candidates:  # each candidate's fields: every broker and quota type it is sampled on
            start = e.encode() + b"|"
            p.zrangebylex(index_key(cluster), b"[" + start, b"(" + start + b"\xff")
        ranges = p.execute()
    names: list[str] = []
    wanted: list[str] = []
    for e, found in zip(candidates, ranges, strict=True):
        for member in found:
            tags, q, name = index_field(member.decode("utf-8", "replace"))
            if tags == e and q != CONNECTION:
                names.append(e)
                wanted.append(name)
    values: list[Any] = client.hmget(latest_key(cluster), wanted) if wanted else []
    kept = [(e, v) for e, v in zip(names, values, strict=True) if v is not None]
    seen = {*brokers, *(b for s in summaries for b in s["brokers"])}
    now_of = summed(cluster, seen, [e for e, _v in kept], [v for _e, v in kept], now)
    newest = max((s["t_max"] for s in summaries if s["samples"]), default=0)
    return ClusterNow(cluster, sorted(seen), now_of.entities, sum(s["samples"] for s in summaries), 0, int(newest),
                      counts=(counts[0], len(throttled), counts[1]))
