"""The what-if replay itself: recorded usage through the engine's reference model, per broker.

Pure Python/pandas (no Spark) so that the Spark jobs run it per group with ``applyInPandas``
and tests can run it directly. The math is the engine's: a ``manager_for(quota_type,
ModelBackend())`` (``ClientQuotaManager`` for produce/fetch) with the proposed quota set on the
(user, client-id) entity, fed the records in time order with ``record_many``.

Closed loop (``closed=True``, the default of the jobs). Assumption: a throttled client waits out its
throttle time before sending its next request, as Kafka clients mute the channel for
``throttle_time_ms``; its requests are otherwise sent as recorded. So request i is sent at
``sent_i = max(t_i, sent_{i-1} + throttle_{i-1})`` and recorded by the model at ``sent_i``; the backlog a
throttle creates delays every later request until the client catches up with its recorded timeline.
Open loop (``closed=False``) records at the recorded times, exactly what the engine would have
answered to that traffic (used to prove equality with the engine's conformance traces).
"""

from __future__ import annotations

import math

import pandas as pd

from quotas.engine.entities import QuotaType
from quotas.engine.managers import UsageRecord, manager_for
from quotas.engine.model import ModelBackend

REPLAY_COLUMNS = ["seq", "t_ms", "sent_ms", "value", "throttle_ms", "throttle_ms_long", "measured"]


def replay(
    user: str,
    client_id: str,
    quota_type: str,
    quota: float | None,
    t_ms: list[int],
    values: list[float],
    *,
    samples: int = 11,
    window_ms: int = 1000,
    closed: bool = True,
) -> tuple[list[int], list]:
    """Replay one broker's records (already in order); returns (sent times, RecordResults)."""
    mgr = manager_for(QuotaType(quota_type), ModelBackend(), samples=samples, window_ms=window_ms)
    if quota is not None:
        mgr.update_quota(user, client_id, float(quota))
    if not closed:
        usages = [UsageRecord(user, client_id, float(v), int(t)) for t, v in zip(t_ms, values, strict=True)]
        return list(t_ms), mgr.record_many(usages, validate=False)
    sent, results, ready = [], [], None
    for t, v in zip(t_ms, values, strict=True):
        s = int(t) if ready is None else max(int(t), ready)
        r = mgr.record_many([UsageRecord(user, client_id, float(v), s)], validate=False)[0]
        sent.append(s)
        results.append(r)
        ready = s + r.throttle_ms_long
    return sent, results


def replay_frame(pdf: pd.DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                 window_ms: int = 1000, closed: bool = True) -> pd.DataFrame:
    """One (cluster, broker, user, client_id) group of usage rows → per-record replay rows."""
    pdf = pdf.sort_values(["t_ms", "seq"], kind="stable")
    user, client_id = str(pdf["user"].iloc[0]), str(pdf["client_id"].iloc[0])
    sent, results = replay(user, client_id, quota_type, quota, pdf["t_ms"].tolist(), pdf["value"].tolist(),
                           samples=samples, window_ms=window_ms, closed=closed)
    out = pdf[["cluster", "broker", "user", "client_id", "seq", "t_ms", "value"]].copy()
    out["sent_ms"] = pd.array(sent, dtype="int64")
    out["throttle_ms"] = pd.array([r.throttle_ms for r in results], dtype="int64")
    out["throttle_ms_long"] = pd.array([r.throttle_ms_long for r in results], dtype="int64")
    out["measured"] = [float("nan") if r.measured is None else float(r.measured) for r in results]
    return out


def summarize(rows: pd.DataFrame, window_ms: int = 1000) -> dict:
    """Throttle events, total and p99 delay, recorded and achieved rate of a replay (all brokers)."""
    if rows.empty:
        return {"requests": 0}
    delays = rows["throttle_ms_long"].astype("int64")
    start = int(rows["t_ms"].min())
    recorded_end = int(rows["t_ms"].max())
    # the client is done when its last request was sent and its last throttle waited out
    achieved_end = int((rows["sent_ms"] + rows["throttle_ms_long"]).max())
    total = float(rows["value"].sum())
    recorded_s = max(recorded_end - start, window_ms) / 1000.0
    achieved_s = max(achieved_end - start, recorded_end - start, window_ms) / 1000.0
    sorted_d = sorted(delays.tolist())
    p99 = sorted_d[max(0, math.ceil(0.99 * len(sorted_d)) - 1)]  # nearest rank, over all requests
    return {
        "requests": int(len(rows)),
        "throttle_events": int((delays > 0).sum()),
        "total_delay_ms": int(delays.sum()),
        "p99_delay_ms": int(p99),
        "max_delay_ms": int(delays.max()),
        "bytes": total,
        "recorded_rate": total / recorded_s,
        "achieved_rate": total / achieved_s,
        "throttled_fraction": throttled_fraction(rows, window_ms),
    }


def throttled_fraction(rows: pd.DataFrame, window_ms: int = 1000) -> float:
    """Time spent throttled over the time observed, summed over brokers (each broker its own timeline)."""
    throttled = observed = 0
    for _, g in rows.groupby("broker"):
        start = int(g["t_ms"].min())
        end = max(int((g["sent_ms"] + g["throttle_ms_long"]).max()), int(g["t_ms"].max()), start + window_ms)
        throttled += int(g["throttle_ms_long"].sum())
        observed += end - start
    return throttled / observed if observed else 0.0
