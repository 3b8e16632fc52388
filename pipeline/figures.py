"""A replay's figures (``pipeline.replay.summarize``'s) from its plain lists: accumulated sensor by sensor, merged
across sensors, brokers and partitions, with the p99 over every request. Plain numpy and pandas: the same code runs in
Spark's Python workers (``pipeline.summaries``) and on the driver (``pipeline.on_driver``)."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from .budget_replay import delivered_over_budget
from .replay import never_throttled, replay_sorted, summarize

#: The figures of ``pipeline.replay.summarize``, in its order.
FIGURES = ("requests", "throttle_events", "total_delay_ms", "p99_delay_ms", "max_delay_ms", "bytes", "recorded_rate",
           "achieved_rate", "throttled_fraction")


class Figures:
    """``summarize``'s figures accumulated sensor by sensor, from the replay's plain lists."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.delays: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.brokers: dict[int, list] = {}  # broker -> [requests, bytes, throttle events]
        self.start = self.recorded_end = self.achieved_end = None
        self.throttled = self.observed = 0

    def add(self, broker: int, t_ms: np.ndarray, values: np.ndarray, sent: Sequence[int], delays: Sequence[int],
            closed: bool) -> None:
        """One sensor's records on one broker, in replay order (t_ms ascending)."""
        # closed loop: each request waits out the previous one's throttle, so the last one ends last
        end = int(sent[-1] + delays[-1]) if closed else int(max(map(operator.add, sent, delays)))
        d = np.asarray(delays, dtype=np.int64)
        first, last = int(t_ms[0]), int(t_ms[-1])
        self.start = first if self.start is None else min(self.start, first)
        self.recorded_end = last if self.recorded_end is None else max(self.recorded_end, last)
        self.achieved_end = end if self.achieved_end is None else max(self.achieved_end, end)
        self.throttled += int(d.sum())  # time throttled and time observed per sensor: each its own timeline
        self.observed += max(end, last, first + self.window_ms) - first
        mine = self.brokers.setdefault(broker, [0, 0.0, 0])
        mine[0] += len(d)
        mine[1] += float(values.sum())
        mine[2] += int(np.count_nonzero(d))
        self.delays.append(d)
        self.values.append(values)

    def part(self) -> dict:
        """What ``figures`` needs, mergeable with other parts (several entities or partitions): PART_SCHEMA."""
        d = self.delays[0] if len(self.delays) == 1 else np.concatenate(self.delays)
        v = self.values[0] if len(self.values) == 1 else np.concatenate(self.values)
        ids = sorted(self.brokers)
        return {"requests": len(d), "total_delay_ms": int(d.sum()), "max_delay_ms": int(d.max()),
                "bytes": float(v.sum()), "history_from_ms": self.start, "history_to_ms": self.recorded_end,
                "achieved_end_ms": self.achieved_end, "throttled_ms": self.throttled, "observed_ms": self.observed,
                "brokers": ids, "broker_requests": [self.brokers[b][0] for b in ids],
                "broker_bytes": [self.brokers[b][1] for b in ids],
                "broker_throttled": [self.brokers[b][2] for b in ids],
                "delays": d[d != 0]}

    def row(self) -> dict:
        return figures([self.part()], self.window_ms)


#: One part of a proposal's figures (``Figures.part``): a partition's sensors, merged on the driver by ``figures``.
PART_SCHEMA = (
    "requests long, total_delay_ms long, max_delay_ms long, bytes double, history_from_ms long, history_to_ms long, "
    "achieved_end_ms long, throttled_ms long, observed_ms long, brokers array<long>, broker_requests array<long>, "
    "broker_bytes array<double>, broker_throttled array<long>, delays array<long>"
)


def figures(parts: Sequence[dict], window_ms: int) -> dict:
    """``summarize``'s figures (and the span and brokers) of the parts together: sums, extremes, and the p99 over
    every request (nearest rank; only the non-zero delays travel, the zeros are counted)."""
    n = sum(int(p["requests"]) for p in parts)
    nonzero = np.concatenate([np.asarray(p["delays"], dtype=np.int64) for p in parts])
    zeros, rank = n - len(nonzero), max(0, math.ceil(0.99 * n) - 1)
    p99 = 0 if rank < zeros else int(np.partition(nonzero, rank - zeros)[rank - zeros])
    start = min(int(p["history_from_ms"]) for p in parts)
    recorded_end = max(int(p["history_to_ms"]) for p in parts)
    achieved_end = max(int(p["achieved_end_ms"]) for p in parts)
    total = math.fsum(float(p["bytes"]) for p in parts)
    recorded_s = max(recorded_end - start, window_ms) / 1000.0
    achieved_s = max(achieved_end - start, recorded_end - start, window_ms) / 1000.0
    observed = sum(int(p["observed_ms"]) for p in parts)
    each: dict[int, list] = {}
    for p in parts:
        for b, n_b, bytes_b, thr_b in zip(p["brokers"], p["broker_requests"], p["broker_bytes"], p["broker_throttled"],
                                          strict=True):
            mine = each.setdefault(int(b), [0, 0.0, 0])
            mine[0], mine[1], mine[2] = mine[0] + int(n_b), mine[1] + float(bytes_b), mine[2] + int(thr_b)
    return {
        "requests": n, "throttle_events": len(nonzero), "total_delay_ms": sum(int(p["total_delay_ms"]) for p in parts),
        "p99_delay_ms": p99, "max_delay_ms": max(int(p["max_delay_ms"]) for p in parts), "bytes": total,
        "recorded_rate": total / recorded_s, "achieved_rate": total / achieved_s,
        "throttled_fraction": sum(int(p["throttled_ms"]) for p in parts) / observed if observed else 0.0,
        "history_from_ms": start, "history_to_ms": recorded_end,
        "brokers": len(each), "per_broker": per_broker_rows(each, recorded_s),
    }


def per_broker_rows(each: dict[int, list], recorded_s: float) -> list[dict]:
    """Per broker (ascending id): its requests, bytes, throttle events of the replay, and its recorded rate over the
    whole recorded span (so the brokers' rates add up to ``recorded_rate``): what its own sensor saw."""
    return [{"broker": b, "requests": int(n), "bytes": float(v), "recorded_rate": float(v) / recorded_s,
             "throttle_events": int(t)} for b, (n, v, t) in sorted(each.items())]


def budget_figures(rows: pd.DataFrame, budget: float, window_ms: int) -> dict | None:
    """The figures of a cluster-wide budget's replay rows (``pipeline.summaries.BUDGET_SCHEMA``, every sensor); None
    without rows."""
    if rows.empty:
        return None
    recorded_s = max(int(rows["t_ms"].max()) - int(rows["t_ms"].min()), window_ms) / 1000.0
    each = {int(b): [len(g), float(g["value"].sum()), int((g["throttle_ms_long"] > 0).sum())]
            for b, g in rows.groupby("broker")}
    return {**summarize(rows, window_ms), "brokers": len(each), "per_broker": per_broker_rows(each, recorded_s),
            "history_from_ms": int(rows["t_ms"].min()), "history_to_ms": int(rows["t_ms"].max()),
            # each sensor is its own budget (a <default> part gives every client one): the busiest of them
            "delivered_over_budget": max(delivered_over_budget(g, budget)
                                         for _, g in rows.groupby(["cluster", "user", "client_id"]))}


def runs(a: np.ndarray) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of equal values in ``a``."""
    return itertools.pairwise([0, *(np.flatnonzero(a[1:] != a[:-1]) + 1).tolist(), len(a)]) if len(a) else iter(())


def replay_entity(part: Figures, user: str, client_id: str, broker: np.ndarray, t_ms: np.ndarray,
                   values: np.ndarray, *, quota_type: str, quota: float | None, samples: int, window_ms: int,
                   closed: bool, entity: tuple[str | None, str | None] | None, replay_all: bool) -> None:
    """One entity's records (ordered by broker, time, landed order) replayed broker by broker into ``part``; a
    broker's records that provably never reach the bound are added without a replay (unless ``replay_all``)."""
    for lo, hi in runs(broker):
        t, v = t_ms[lo:hi], values[lo:hi]
        args = (user, client_id, quota_type, quota, t, v)
        if not replay_all and never_throttled(*args, samples=samples, window_ms=window_ms, entity=entity):
            part.add(int(broker[lo]), t, v, t, np.zeros(len(t), dtype=np.int64), closed)
            continue
        r = replay_sorted(*args, samples=samples, window_ms=window_ms, closed=closed, entity=entity)
        part.add(int(broker[lo]), t, v, r.sent_ms, r.throttle_ms_long, closed)
