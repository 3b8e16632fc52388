"""The what-if replay of a sampled-Rate quota, without the reference model's objects: same numbers, ~70x less work.

``pipeline.replay`` replays usage through ``engine``'s ``ModelBackend`` (a ``Decision``, a sensor lookup,
several purges and measurements per record, ~13 us). The Spark jobs replay millions of records, so for the quota
types whose manager records into a ``Rate(WindowedSum)`` with ``Op.RECORD`` (produce, fetch and request) this
module runs the same state machine on three plain lists for one (broker, user, client-id) group:

* the sensor expires when a record comes more than ``SENSOR_EXPIRY_MS`` after the previous one (a fresh sensor);
* a record lands in the current sample, or first advances the ring of ``samples + 1`` slots when the current
  sample is ``window_ms`` old (the slot is appended while the ring is not full, else reset);
* then every slot idle for ``samples * window_ms`` is purged (reset to start at the record's time);
* the rate is the slots' sum, added in ring order from 0.0, over the elapsed time since the oldest slot's start,
  padded to ``samples - 1`` whole windows and at least 1 ms; a rate above the bound (or NaN) is a violation whose
  throttle is ``Math.round((rate - bound) / bound * window)``, capped at one window for the request quota, and
  answered to the client as a Java ``(int)``;
* fetch only: a throttled fetch is answered empty and its bytes are taken back out (``KafkaApis`` calls
  ``unrecordQuotaSensor`` when the throttle it answers is > 0): ``-value`` recorded at the same time, unchecked;
  the consumer fetches those bytes again, so they are added to its next fetch's value. Kafka also empties a fetch
  that only the request-time quota throttles; one quota type is replayed at a time, so that is not seen here;
* fetch only: a response carries at most ``fetch_max`` bytes (``KafkaApis`` caps it at the quota window's worth,
  ``getMaxValueInQuotaWindow``, as an int): the rest waits for the next fetch. Without it, bytes asked for again
  would pile up into one fetch too large ever to pass.

Every double is computed with the model's operations in the model's order, so results are equal bit for bit
(``tests/pipeline/test_kernel.py`` checks it against the model). The loop runs compiled by numba (``_ordinary``,
int64 and float64, ~4x faster again) and falls back to the Python loop (``_run``, Python's integers) for what only
that one does exactly; both are tested equal bit for bit. The one shortcut is bookkeeping: the purge loop
runs only when the least recent last-event time (kept as a lower bound) is old enough to need it, and the oldest
start is recomputed only when a start changes. The controller-mutation token bucket stays on the model path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from engine.decisions import SENSOR_EXPIRY_MS, Kind, check_sampling
from engine.entities import QuotaType
from engine.javamath import java_div, java_round, long_div, to_int
from engine.managers import ClientQuotaManager, manager_for
from engine.model import ModelBackend

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_EXACT_ROUND = 2.0**52  # below this magnitude floor(x) and x - floor(x) are exact in doubles


def _plain_float_sum() -> bool:
    """True when ``sum(floats, 0.0)`` adds left to right like the model's loop (CPython < 3.12 does; 3.12+
    compensates rounding errors, which would change the last bits)."""
    return sum([1.0, 1e100, 1.0, -1e100], 0.0) == 0.0


if _plain_float_sum():
    _fold = sum
else:  # pragma: no cover - depends on the interpreter

    def _fold(xs: list[float], start: float) -> float:
        total = start
        for x in xs:
            total += x
        return total


def kernel_manager(manager: ClientQuotaManager) -> bool:
    """Whether a manager's record is the sampled-Rate ``Op.RECORD`` path this kernel implements."""
    return manager.kind == Kind.RATE and type(manager).record_many is ClientQuotaManager.record_many


def _kernel_types() -> dict[str, bool]:
    """Quota type -> throttle capped at one window, for the types whose manager the kernel reproduces."""
    out = {}
    for qt in QuotaType:
        mgr = manager_for(qt, ModelBackend())
        if kernel_manager(mgr):
            out[str(qt)] = bool(mgr.bounded)
    return out


#: The quota types replayed by the kernel, and whether their throttle is capped at one window (request).
KERNEL_TYPES: dict[str, bool] = _kernel_types()
#: The quota types whose throttled requests the broker un-records (an empty fetch response delivers nothing).
UNRECORDS_THROTTLED = frozenset({str(QuotaType.FETCH)})


class Replayed(NamedTuple):
    """Per record, in input order: when it was sent, the throttle answered, and the rate measured after it."""

    sent_ms: list[int]
    throttle_ms: list[int]  # Java int, as the broker answers it
    throttle_ms_long: list[int]  # the long before the (int) cast: what a client waits
    measured: list[float]  # NaN when no quota is enabled (the manager records nothing then)


def _ints(xs: Sequence[int] | np.ndarray) -> list[int]:
    if isinstance(xs, np.ndarray) and xs.dtype.kind in "iu":
        return xs.tolist()
    return [int(x) for x in xs]


def _floats(xs: Sequence[float] | np.ndarray) -> list[float]:
    if isinstance(xs, np.ndarray) and xs.dtype == np.float64:
        return xs.tolist()
    return [float(x) for x in xs]


def replay_rate(
    quota_type: str,
    t_ms: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    quota: float | None,
    *,
    samples: int = 11,
    window_ms: int = 1000,
    closed: bool = True,
    expiry_ms: int | None = SENSOR_EXPIRY_MS,
    fetch_max: float | None = None,
) -> Replayed:
    """Replay one group's records (in the order given) with ``quota`` as the entity's resolved bound.

    ``fetch_max`` (fetch only, ``fetch_limit``): the most bytes one response carries; None, no limit.

    ``quota=None`` means no quota is enabled: nothing is recorded, nothing throttled. Closed loop sends record i
    at ``max(t_i, sent_{i-1} + throttle_ms_long_{i-1})``, open loop at ``t_i`` (see ``pipeline.replay``).
    """
    if quota_type not in KERNEL_TYPES:
        raise ValueError(f"the kernel replays {sorted(KERNEL_TYPES)} quotas, not {quota_type!r}")
    check_sampling(samples, window_ms)
    n = len(t_ms)
    if n != len(values):
        raise ValueError(f"{n} times but {len(values)} values")
    if quota is None:
        ts = _ints(t_ms)
        sent = list(accumulate(ts, max)) if closed else ts
        return Replayed(sent, [0] * n, [0] * n, [math.nan] * n)
    cap = window_ms if KERNEL_TYPES[quota_type] else None
    bound, unrecord = float(quota), quota_type in UNRECORDS_THROTTLED
    most = math.inf if fetch_max is None or not unrecord else float(fetch_max)
    if n and bound > 0.0 and _compiled is not None:
        t_arr = _int64s(t_ms)
        if t_arr is not None and -_LONG_SAFE < t_arr.min() and t_arr.max() < _LONG_SAFE:
            sent, thr, meas, ok = _compiled(t_arr, np.array(values, dtype=np.float64), bound, samples, window_ms,
                                            closed, _LONG_SAFE if cap is None else cap,
                                            _LONG_SAFE if expiry_ms is None else expiry_ms, unrecord, most)
            if ok:
                throttles = thr.tolist()
                return Replayed(sent.tolist(), throttles, throttles, meas.tolist())
    return _run(_ints(t_ms), _floats(values), bound, samples, window_ms, closed, cap, expiry_ms, unrecord, most)


def _int64s(xs: Sequence[int] | np.ndarray) -> np.ndarray | None:
    """The times as int64 for the compiled loop (as given when they already are); None when one does not fit."""
    if isinstance(xs, np.ndarray) and xs.dtype == np.int64:
        return xs
    try:
        return np.array(_ints(xs), dtype=np.int64)
    except OverflowError:
        return None


def fetch_limit(max_value_in_quota_window: float) -> float | None:
    """The most bytes one fetch response carries under a quota: ``KafkaApis`` takes the manager's
    ``getMaxValueInQuotaWindow`` as an int (saturating, toward zero). None (no limit) when that is 0 (one sample):
    Kafka still returns a first batch so the consumer progresses, and its size is not known here."""
    x = max_value_in_quota_window
    if not x >= 1.0:  # NaN (Java's (int) gives 0) or below one byte
        return None
    return float(_INT_MAX) if x >= _INT_MAX else float(math.floor(x))


def _run(ts: list[int], vs: list[float], bound: float, samples: int, window: int, closed: bool,
         cap: int | None, expiry: int | None, unrecord: bool, most: float = math.inf) -> Replayed:
    """The loop itself: the sensor of one entity on one broker, as ``ModelBackend`` + ``ClientQuotaManager``."""
    n = len(ts)
    sent = [0] * n
    thr = [0] * n
    thr_long = [0] * n
    meas = [0.0] * n
    expire_age = samples * window  # SampledStat.purge: a slot idle this long is reset
    padw = (samples - 1) * window  # Rate.windowSize pads to samples - 1 whole windows
    ring = samples + 1
    big = 2**64  # beyond any difference of two int64 times
    if expiry is None:  # never expires
        expiry = big
    if cap is None:
        cap = big
    fold, floor, exact, int_min, int_max = _fold, math.floor, _EXACT_ROUND, _INT_MIN, _INT_MAX
    # the ring: start, last event and value of each slot, in slot order (the order the model sums them)
    st: list[int] = []
    le: list[int] = []
    va: list[float] = []
    cur = slots = 0
    old = lo = 0  # the oldest start (exact) and a lower bound of the least recent last event
    last = 0  # the sensor's last record time
    fresh = True  # no sensor yet
    ready = -big  # closed loop: when the client may send again
    for i, s in enumerate(ts):
        if closed and ready > s:
            s = ready
        moved = False  # a slot's start changed: the oldest start is recomputed below
        if fresh or s - last > expiry:  # no sensor yet, or Sensor.hasExpired: a fresh sensor
            fresh = False
            st, le, va = [s], [s], [0.0]
            cur, slots, old, lo = 0, 1, s, s
        elif s - st[cur] >= window:  # the current sample is complete: advance the ring
            cur += 1
            if cur == ring:
                cur = 0
            if cur == slots:
                st.append(s)
                le.append(s)
                va.append(0.0)
                slots += 1
            else:
                st[cur] = s
                le[cur] = s
                va[cur] = 0.0
            moved = True
        last = s
        want = vs[i]
        v = most if want > most else want  # fetch: at most a quota window's worth in one response
        va[cur] += v
        le[cur] = s
        if s < lo:
            lo = s
        if s - lo >= expire_age:  # some slot may be idle long enough: purge exactly
            lim = s - expire_age  # a slot whose last event is at or before lim is reset
            for j, x in enumerate(le):
                if x <= lim:
                    st[j] = s
                    le[j] = s
                    va[j] = 0.0
            lo = min(le)
            old = min(st)
        elif moved:
            old = min(st)
        total = fold(va, 0.0)
        elapsed = s - old
        if elapsed >= padw:
            ws = elapsed if elapsed > 1 else 1
        elif elapsed >= 0:
            ws = padw + elapsed % window
            if ws < 1:
                ws = 1
        else:  # a record earlier than the oldest sample (times out of order): the model's long division
            full = long_div(elapsed, window)
            if full < samples - 1:
                elapsed += (samples - 1 - full) * window
            ws = elapsed if elapsed > 1 else 1
        rate = total / (ws / 1000.0)
        sent[i] = s
        meas[i] = rate
        if rate <= bound:
            ready = s
            if v != want and i + 1 < n:  # the rest waits for the next fetch
                vs[i + 1] = (want - v) + vs[i + 1]
            continue
        raw = (rate - bound) / bound * ws if bound != 0.0 else java_div(rate - bound, bound) * ws
        if -exact < raw < exact:  # java_round, inlined for the common case
            f = floor(raw)
            lm = f + 1 if raw - f >= 0.5 else f
        else:
            lm = java_round(raw)
        if lm > cap:
            lm = cap
        thr_long[i] = lm
        thr[i] = answered = lm if int_min <= lm <= int_max else to_int(lm)
        if unrecord and answered > 0:  # the same sample: recorded at s just now, and nothing advanced since
            va[cur] += -v
            if i + 1 < n:  # asked for again: the next fetch carries these bytes too (vs is this call's own copy)
                vs[i + 1] = want + vs[i + 1]
        elif v != want and i + 1 < n:
            vs[i + 1] = (want - v) + vs[i + 1]
        ready = s + lm
    return Replayed(sent, thr, thr_long, meas)


_LONG_SAFE = 2**62  # far from int64's ends: times, throttles and the sentinels below add without overflow


def _ordinary(ts: np.ndarray, vs: np.ndarray, bound: float, samples: int, window: int, closed: bool, cap: int,
              expiry: int, unrecord: bool, most: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """``_run`` compiled (numba) for the ordinary case, about 30 times faster: the same operations in the same
    order on int64 and float64, so the same numbers. It gives up (``ok`` False, and ``_run`` replays it with
    Python's integers) on what only ``_run`` handles exactly: a record before the oldest sample (times out of
    order), a throttle that is not below 2**52 before rounding or does not fit a Java int, a NaN rate.
    ``vs`` is the caller's copy: a fetch answered empty adds its bytes to the next one's."""
    n = ts.shape[0]
    sent = np.empty(n, np.int64)
    thr = np.zeros(n, np.int64)
    meas = np.empty(n, np.float64)
    ring = samples + 1
    st = np.zeros(ring, np.int64)
    le = np.zeros(ring, np.int64)
    va = np.zeros(ring, np.float64)
    expire_age = samples * window
    padw = (samples - 1) * window
    cur = slots = 0
    old = lo = last = 0
    fresh = True
    ready = -_LONG_SAFE
    for i in range(n):
        s = ts[i]
        if closed and ready > s:
            s = ready
        moved = False
        if fresh or s - last > expiry:
            fresh = False
            st[0] = s
            le[0] = s
            va[0] = 0.0
            cur, slots, old, lo = 0, 1, s, s
        elif s - st[cur] >= window:
            cur += 1
            if cur == ring:
                cur = 0
            if cur == slots:
                slots += 1
            st[cur] = s
            le[cur] = s
            va[cur] = 0.0
            moved = True
        last = s
        want = vs[i]
        v = most if want > most else want  # fetch: at most a quota window's worth in one response
        va[cur] += v
        le[cur] = s
        if s < lo:
            lo = s
        if s - lo >= expire_age:
            lim = s - expire_age
            for j in range(slots):
                if le[j] <= lim:
                    st[j] = s
                    le[j] = s
                    va[j] = 0.0
            lo, old = le[0], st[0]
            for j in range(1, slots):
                if le[j] < lo:
                    lo = le[j]
                if st[j] < old:
                    old = st[j]
        elif moved:
            old = st[0]
            for j in range(1, slots):
                if st[j] < old:
                    old = st[j]
        total = 0.0
        for j in range(slots):  # in slot order from 0.0, as the model adds them
            total += va[j]
        elapsed = s - old
        if elapsed < 0:
            return sent, thr, meas, False
        if elapsed >= padw:
            ws = elapsed if elapsed > 1 else 1
        else:
            ws = padw + elapsed % window
            if ws < 1:
                ws = 1
        rate = total / (ws / 1000.0)
        sent[i] = s
        meas[i] = rate
        if rate <= bound:
            ready = s
            if v != want and i + 1 < n:  # the rest waits for the next fetch
                vs[i + 1] = (want - v) + vs[i + 1]
            continue
        raw = (rate - bound) / bound * ws
        if not -_EXACT_ROUND < raw < _EXACT_ROUND:  # NaN too
            return sent, thr, meas, False
        f = np.floor(raw)
        lm = np.int64(f + 1.0) if raw - f >= 0.5 else np.int64(f)
        if lm > cap:
            lm = cap
        if lm > _INT_MAX:
            return sent, thr, meas, False
        thr[i] = lm
        if unrecord and lm > 0:
            va[cur] += -v
            if i + 1 < n:
                vs[i + 1] = want + vs[i + 1]
        elif v != want and i + 1 < n:
            vs[i + 1] = (want - v) + vs[i + 1]
        ready = s + lm
    return sent, thr, meas, True


try:
    from numba import njit

    _compiled = njit(cache=True, nogil=True)(_ordinary)
except ImportError:  # pragma: no cover - numba is in requirements.txt; _run alone is exact, only slower
    _compiled = None
