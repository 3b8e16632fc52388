"""The what-if of a cluster-wide budget: one sensor's records on every broker, with shares that follow demand.

A per-broker quota replays each broker's records on their own (``pipeline.replay``). A cluster-wide budget B ties
the brokers together: every ``round_ms`` each broker reports what it sent in the round and whether it was held
back, and the engine's allocation (``engine.budgets.BudgetLedger``, the arithmetic the broker plugin and the
Redis script run) gives it its share for the next round, set as that broker's bound without resetting its usage
(as the plugin changes a sensor's limit). The replay is closed loop like ``pipeline.replay``: a throttled client
waits out its throttle time before its next request on that broker. At the start every broker holds B / brokers,
what the plugin falls back to before its first round. Pure Python/pandas, run per sensor by the Spark job.
"""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd

from engine.budgets import BudgetLedger, BudgetParams
from engine.managers import UsageRecord

from .replay import _KEPT, _manager

DEFAULT_PARAMS = BudgetParams()


class _Broker:
    """One broker's sensor and its queue of records, in replay order."""

    def __init__(self, broker: int, rows: dict[str, np.ndarray], manager: object, entity: tuple) -> None:
        self.broker = broker
        self.rows = rows
        self.manager = manager
        self.entity = entity
        self.next = 0
        self.ready = 0
        self.sent_in_round = 0.0
        self.held_back = False
        self.out_sent: list[int] = []
        self.out_throttle: list[int] = []
        self.out_long: list[int] = []

    def due(self) -> int | None:
        """When its next record is sent (closed loop: not before its last throttle has been waited out)."""
        if self.next >= len(self.rows["t_ms"]):
            return None
        return max(int(self.rows["t_ms"][self.next]), self.ready)

    def send(self, at: int) -> None:
        user, client_id = str(self.rows["user"][self.next]), str(self.rows["client_id"][self.next])
        value = float(self.rows["value"][self.next])
        result = self.manager.record_many([UsageRecord(user, client_id, value, at)], validate=False)[0]
        self.out_sent.append(at)
        self.out_throttle.append(int(result.throttle_ms))
        self.out_long.append(int(result.throttle_ms_long))
        self.ready = at + int(result.throttle_ms_long)
        self.sent_in_round += value
        self.held_back = self.held_back or result.throttle_ms_long > 0
        self.next += 1


def replay_budget(pdf: pd.DataFrame, quota_type: str, budget: float, *, samples: int = 11, window_ms: int = 1000,
                  round_ms: int = 1000, params: BudgetParams = DEFAULT_PARAMS,
                  entity: tuple[str | None, str | None] | None = None) -> pd.DataFrame:
    """One sensor's usage rows on all brokers → per-record replay rows (``pipeline.replay.REPLAY_COLUMNS``) and
    ``share``, the bound its broker held when the record was sent."""
    order = np.lexsort((pdf["seq"].to_numpy(), pdf["t_ms"].to_numpy(), pdf["broker"].to_numpy()))
    cols = {c: pdf[c].to_numpy()[order] for c in _KEPT}
    first = cols["user"][0], cols["client_id"][0]
    on_user, on_client = entity if entity is not None else (str(first[0]), str(first[1]))
    ids = sorted({int(b) for b in cols["broker"]})
    start = share = budget / len(ids)
    brokers: dict[int, _Broker] = {}
    for b in ids:
        mask = cols["broker"] == b
        mgr = _manager(on_user, on_client, quota_type, start, samples, window_ms)
        brokers[b] = _Broker(b, {c: v[mask] for c, v in cols.items()}, mgr, (on_user, on_client))
    shares: dict[int, list[float]] = {b: [] for b in ids}
    held = {b: start for b in ids}
    ledger = BudgetLedger()
    round_end = int(cols["t_ms"].min()) + round_ms
    idle = 0  # rounds in a row in which no broker sent anything
    while True:
        queue = [(due, b) for b, br in brokers.items() if (due := br.due()) is not None]
        if not queue:
            break
        heapq.heapify(queue)
        due, b = heapq.heappop(queue)
        while due >= round_end:  # the brokers report at each round's end, in id order, before anything later
            if idle >= 2:  # the shares are settled while nothing is sent: skip the quiet rounds, leases kept
                round_end += (due - round_end) // round_ms * round_ms
                ledger.quiet(round_end - round_ms)
            idle = idle + 1 if all(br.sent_in_round == 0 for br in brokers.values()) else 0
            for rid in ids:
                br = brokers[rid]
                late = br.due()
                saturated = br.held_back or (late is not None and late > int(br.rows["t_ms"][br.next]))
                share = ledger.report(rid, round_end, budget, br.sent_in_round * 1000.0 / round_ms, saturated, params)
                if share != held[rid]:
                    br.manager.update_quota(on_user, on_client, share)
                    held[rid] = share
                br.sent_in_round, br.held_back = 0.0, False
            round_end += round_ms
        brokers[b].send(due)
        shares[b].append(held[b])
    parts = []
    for b in ids:
        br = brokers[b]
        part = dict(br.rows)
        part["sent_ms"] = np.array(br.out_sent, dtype=np.int64)
        part["throttle_ms"] = np.array(br.out_throttle, dtype=np.int64)
        part["throttle_ms_long"] = np.array(br.out_long, dtype=np.int64)
        part["measured"] = np.full(len(br.out_sent), np.nan)
        part["share"] = np.array(shares[b], dtype=np.float64)
        parts.append(pd.DataFrame(part))
    return pd.concat(parts, ignore_index=True)


def delivered_over_budget(rows: pd.DataFrame, budget: float, window_ms: int = 30_000) -> float:
    """The largest cluster-wide rate sent in any window (30 s by default) over the budget: 1.0 means held at B."""
    if rows.empty:
        return 0.0
    t = rows["sent_ms"].to_numpy()
    v = rows["value"].to_numpy()[np.argsort(t, kind="stable")]
    t = np.sort(t, kind="stable")
    sums = np.concatenate(([0.0], np.cumsum(v)))
    span = max(int(t[-1] - t[0]), 1)
    w = min(window_ms, span)
    first = np.searchsorted(t, t - w, side="right")
    most = float((sums[1:] - sums[first]).max())
    return most * 1000.0 / w / budget
