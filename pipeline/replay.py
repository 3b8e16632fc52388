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

Fetch: as the broker does, a fetch that the proposal throttles is answered empty and its bytes are un-recorded
(``KafkaApis``); the consumer asks for them again, so they are added to its next fetch (the landed history holds
the fetches that were answered, see ``traffic.loadgen``). Controller mutations: each topic's first creation attempt
(its partitions) goes through the strict KIP-599 path, one at a time; a refused one counts as throttled.

Produce, fetch and request quotas (a sampled Rate) run through ``pipeline.kernel``, the same math on plain arrays
and about 70 times faster; the controller-mutation token bucket goes through the model itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from engine.entities import QuotaType
from engine.managers import ClientQuotaManager, RecordResult, UsageRecord, manager_for
from engine.model import ModelBackend

from .kernel import UNRECORDS_THROTTLED, Replayed, fetch_limit, kernel_manager, replay_rate

REPLAY_COLUMNS = ["seq", "t_ms", "sent_ms", "value", "throttle_ms", "throttle_ms_long", "measured"]
_KEPT = ["cluster", "broker", "user", "client_id", "seq", "t_ms", "value"]  # input columns of replay_frame's output


def _manager(user: str | None, client_id: str | None, quota_type: str, quota: float | None, samples: int,
             window_ms: int) -> ClientQuotaManager:
    mgr = manager_for(QuotaType(quota_type), ModelBackend(), samples=samples, window_ms=window_ms)
    if quota is not None:
        mgr.update_quota(user, client_id, float(quota))
    return mgr


def _kernel(mgr: ClientQuotaManager, user: str, client_id: str, t_ms: Sequence[int] | np.ndarray,
            values: Sequence[float] | np.ndarray, closed: bool) -> Replayed:
    """The kernel with the bound the manager resolves for the entity (None when no quota is enabled)."""
    bound = mgr.quota(user, client_id)[0] if mgr.quotas_enabled else None
    most = fetch_limit(mgr.max_value_in_quota_window(user, client_id)) if str(mgr.quota_type) in UNRECORDS_THROTTLED \
        else None
    return replay_rate(str(mgr.quota_type), t_ms, values, bound, samples=mgr.samples, window_ms=mgr.window_ms,
                       closed=closed, fetch_max=most)


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
    entity: tuple[str | None, str | None] | None = None,
) -> tuple[list[int], list]:
    """Replay one broker's records (already in order); returns (sent times, RecordResults).

    The records are ``user``'s and ``client_id``'s; the quota is set on ``entity`` (default: those names).
    """
    on_user, on_client = entity if entity is not None else (user, client_id)
    mgr = _manager(on_user, on_client, quota_type, quota, samples, window_ms)
    if kernel_manager(mgr):
        out = _kernel(mgr, user, client_id, t_ms, values, closed)
        sent = out.sent_ms if closed else list(t_ms)
        if not mgr.quotas_enabled:
            return sent, [RecordResult(0, quotas_enabled=False) for _ in out.sent_ms]
        bound, tags = mgr.quota(user, client_id)
        return sent, [
            RecordResult(thr, tags, m, True, long_ms, m, True, False) if not m <= bound
            else RecordResult(0, tags, m, False, 0, None, True, False)
            for thr, long_ms, m in zip(out.throttle_ms, out.throttle_ms_long, out.measured, strict=True)
        ]
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


def replay_sorted(user: str, client_id: str, quota_type: str, quota: float | None, t_ms: np.ndarray,
                  values: np.ndarray, *, samples: int = 11, window_ms: int = 1000, closed: bool = True,
                  entity: tuple[str | None, str | None] | None = None) -> Replayed:
    """One sensor's records on one broker, already in replay order (t_ms, then landed order), as plain lists.

    The kernel when the manager the proposal sets up records into a sampled Rate, else the model itself; shared by
    ``replay_frame`` (per-record rows) and the Spark jobs' summaries, so both replay exactly the same way.
    ``entity`` as in ``replay_frame``.
    """
    on_user, on_client = entity if entity is not None else (user, client_id)
    mgr = _manager(on_user, on_client, quota_type, quota, samples, window_ms)
    if kernel_manager(mgr):
        return _kernel(mgr, user, client_id, t_ms, values, closed)
    sent, results = replay(user, client_id, quota_type, quota, t_ms.tolist(), values.tolist(), samples=samples,
                           window_ms=window_ms, closed=closed, entity=(on_user, on_client))
    return Replayed(sent, [r.throttle_ms for r in results], [r.throttle_ms_long for r in results],
                    [math.nan if r.measured is None else float(r.measured) for r in results])


def never_throttled(user: str, client_id: str, quota_type: str, quota: float | None, t_ms: np.ndarray,
                    values: np.ndarray, *, samples: int = 11, window_ms: int = 1000,
                    entity: tuple[str | None, str | None] | None = None) -> bool:
    """Whether one sensor's records on one broker, in replay order, provably get no throttle from the proposal: then
    the replay, open or closed loop, throttles none and sends each at its time, and a summary can skip it.

    Why it holds: a sampled Rate only counts records of the last ``samples + 1`` windows (an older sample is purged
    or reused) and divides by at least ``samples - 1`` windows (1 ms at least), so while nothing is throttled no
    measurement exceeds the most any such span of the records holds over that time. The spans' sums come from a
    cumulative sum; the margin covers its rounding and the model's (up to ``n + samples`` additions). Only for the
    sampled-Rate quotas the kernel replays, with values that are finite and >= 0.
    """
    on_user, on_client = entity if entity is not None else (user, client_id)
    mgr = _manager(on_user, on_client, quota_type, quota, samples, window_ms)
    if not (kernel_manager(mgr) and mgr.quotas_enabled):
        return False
    bound = mgr.quota(user, client_id)[0]
    n = len(values)
    if not n or not bound > 0 or not (np.isfinite(values).all() and values.min() >= 0):
        return False
    if n > 1 and not (np.diff(t_ms) >= 0).all():  # the spans below assume replay order
        return False
    room = bound * max((samples - 1) * window_ms, 1) / 1000.0
    sums = np.concatenate(([0.0], np.cumsum(values)))
    slack = 4.0 * (n + samples + 4) * np.finfo(np.float64).eps  # relative: far above both sums' rounding
    if sums[-1] * (1.0 + 3.0 * slack) <= room:  # everything at once would not reach the bound
        return True
    first = np.searchsorted(t_ms, t_ms - (samples + 1) * window_ms, side="right")  # the span (t - that, t]
    most = float((sums[1:] - sums[first]).max())
    return (most + 2.0 * slack * sums[-1]) * (1.0 + slack) <= room


def replay_frame(pdf: pd.DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                 window_ms: int = 1000, closed: bool = True,
                 entity: tuple[str | None, str | None] | None = None) -> pd.DataFrame:
    """One (cluster, broker, user, client_id) group of usage rows → per-record replay rows.

    ``entity`` is the (user, client-id) config entity the quota is set on (None = absent, as Kafka's entities);
    by default the group's own names. The group's records resolve to it by Kafka's precedence (e.g. records
    ``(alice, "")`` to the entity ``(alice, None)``, a user's own quota).

    Built in one go from numpy columns: the jobs call this once per group, and pandas' per-operation overhead
    would otherwise cost about as much as the kernel's replay itself.
    """
    order = np.lexsort((pdf["seq"].to_numpy(), pdf["t_ms"].to_numpy()))  # by t_ms, then seq; stable
    cols = {c: pdf[c].to_numpy()[order] for c in _KEPT}
    sent, throttle, throttle_long, measured = replay_sorted(
        str(cols["user"][0]), str(cols["client_id"][0]), quota_type, quota, cols["t_ms"], cols["value"],
        samples=samples, window_ms=window_ms, closed=closed, entity=entity)
    cols["sent_ms"] = np.array(sent, dtype=np.int64)
    cols["throttle_ms"] = np.array(throttle, dtype=np.int64)
    cols["throttle_ms_long"] = np.array(throttle_long, dtype=np.int64)
    cols["measured"] = np.array(measured, dtype=np.float64)
    return pd.DataFrame(cols, index=pdf.index[order], copy=False)


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
    """Time spent throttled over the time observed, summed over sensors: each (broker, user, client-id) is its own
    timeline, so clients that each have their own sensor (a ``<default>`` part) do not add up past 100 % (in closed
    loop; open loop, a sensor's throttles may overlap one another)."""
    throttled = observed = 0
    for _, g in rows.groupby(["broker", "user", "client_id"]):
        start = int(g["t_ms"].min())
        end = max(int((g["sent_ms"] + g["throttle_ms_long"]).max()), int(g["t_ms"].max()), start + window_ms)
        throttled += int(g["throttle_ms_long"].sum())
        observed += end - start
    return throttled / observed if observed else 0.0
