"""The replay kernel equals the engine's reference model exactly (every column, bit for bit), without Spark."""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.decisions import SENSOR_EXPIRY_MS
from engine.entities import QuotaType
from engine.managers import UsageRecord, manager_for
from engine.model import ModelBackend
from pipeline import kernel
from pipeline.kernel import KERNEL_TYPES, Replayed, replay_rate
from pipeline.replay import replay, replay_frame

TRACES = json.loads((Path(__file__).parents[2] / "conformance" / "rate_traces.json").read_text())["traces"]
T0 = 1_700_000_000_000


def _oracle(quota_type: str, t_ms: list[int], values: list[float], quota: float | None, *, samples: int,
            window_ms: int, closed: bool, user: str = "u", client_id: str = "app",
            entity: tuple[str | None, str | None] | None = None,
            fetch_max: float | None = None) -> tuple[Replayed, list]:
    """The engine's manager on the model, one record per call, as a client would drive it; the quota is set on
    ``entity`` (default: the records' own names)."""
    mgr = manager_for(QuotaType(quota_type), ModelBackend(), samples=samples, window_ms=window_ms)
    if quota is not None:
        mgr.update_quota(*(entity or (user, client_id)), float(quota))
    out = Replayed([], [], [], [])
    results, ready, carry = [], None, 0.0
    for t, value in zip(t_ms, values, strict=True):
        s = t if not closed or ready is None else max(t, ready)
        want = float(value) + carry if carry else float(value)
        v = fetch_max if fetch_max is not None and want > fetch_max else want  # one response: a window's worth
        r = mgr.record_many([UsageRecord(user, client_id, v, s)], validate=False)[0]
        carry = want - v if v != want else 0.0
        if quota_type == "fetch" and r.throttle_ms > 0:  # as KafkaApis: a throttled fetch is answered empty, and
            mgr.unrecord(user, client_id, v, s, validate=False)  # the consumer asks for the same bytes next time
            carry = want
        results.append(r)
        out.sent_ms.append(s)
        out.throttle_ms.append(r.throttle_ms)
        out.throttle_ms_long.append(r.throttle_ms_long)
        out.measured.append(math.nan if r.measured is None else r.measured)
        ready = s + r.throttle_ms_long
    return out, results


def _bits(x: float) -> bytes | str:
    return "nan" if math.isnan(x) else struct.pack("<d", x)


def assert_same(got: Replayed, expected: Replayed, label: str = "") -> None:
    assert got.sent_ms == expected.sent_ms, label
    assert got.throttle_ms == expected.throttle_ms, label
    assert got.throttle_ms_long == expected.throttle_ms_long, label
    assert [_bits(m) for m in got.measured] == [_bits(m) for m in expected.measured], label
    assert all(type(x) is int for x in got.sent_ms + got.throttle_ms + got.throttle_ms_long), label


def test_kernel_types_are_the_sampled_rate_managers() -> None:
    """Produce, fetch and request record into a sampled Rate; only request caps its throttle at one window."""
    assert KERNEL_TYPES == {"produce": False, "fetch": False, "request": True}
    with pytest.raises(ValueError):
        replay_rate("controller_mutation", [T0], [1.0], 1.0)


def _trace_records(t: dict) -> tuple[dict, list[int], list[float]]:
    steps = [s for s in t["steps"] if s["op"] == "record"]
    return t["config"], [s["t_ms"] for s in steps], [float(s["value"]) for s in steps]


@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize("quota_type", sorted(KERNEL_TYPES))
def test_kernel_equals_model_on_conformance_traces(quota_type: str, closed: bool) -> None:
    """Every trace's record ops (as test_whatif replays them), each sampled quota type, open and closed loop."""
    throttled = 0
    for t in TRACES:
        cfg, ts, vs = _trace_records(t)
        if not ts:
            continue
        kw = {"samples": cfg["samples"], "window_ms": cfg["window_ms"], "closed": closed}
        expected, _ = _oracle(quota_type, ts, vs, cfg["quota"], **kw)
        assert_same(replay_rate(quota_type, ts, vs, cfg["quota"], **kw), expected, t["id"])
        throttled += sum(1 for x in expected.throttle_ms_long if x > 0)
    assert throttled > 50  # the comparison covers real throttles


def test_kernel_equals_kafka_on_leading_runs_of_traces() -> None:
    """Where a trace starts with plain records on a fresh sensor, the kernel gives Kafka's own rate and throttle."""
    checked = 0
    for t in TRACES:
        steps = []
        for s in t["steps"]:
            if s["op"] != "record":
                break
            steps.append(s)
        cfg = t["config"]
        if not steps or cfg["quota"] <= 0:
            continue
        for quota_type, key in (("produce", "throttle_ms"), ("request", "bounded_throttle_ms")):
            k = replay_rate(quota_type, [s["t_ms"] for s in steps], [float(s["value"]) for s in steps],
                            cfg["quota"], samples=cfg["samples"], window_ms=cfg["window_ms"], closed=False)
            assert k.throttle_ms_long == [s["out"][key] for s in steps], t["id"]
            assert k.measured == [s["out"]["rate"] for s in steps], t["id"]
            checked += len(steps)
    assert checked >= 90  # 49 records, as produce and as request


def _random_trace(rng: random.Random, n: int, samples: int, window_ms: int) -> tuple[list[int], list[float]]:
    """Bursts at one millisecond, short gaps, gaps past a window, past samples x window and past the sensor expiry,
    with the exact boundaries of each (a sample completes at +window, a slot is purged at +samples x window, the
    sensor expires only beyond the expiry)."""
    span = samples * window_ms
    t = T0 + rng.randrange(window_ms)
    ts: list[int] = []
    vs: list[float] = []
    while len(ts) < n:
        r = rng.random()
        if r < 0.5:
            gap = rng.randrange(window_ms // 4)
        elif r < 0.65:
            gap = 0  # a burst follows
        elif r < 0.8:
            gap = rng.randrange(window_ms, 3 * window_ms)
        elif r < 0.88:
            gap = rng.choice([window_ms - 1, window_ms, span - 1, span, span + 1])
        elif r < 0.95:
            gap = rng.randrange(span, 3 * span)
        else:
            gap = rng.choice([SENSOR_EXPIRY_MS, SENSOR_EXPIRY_MS + 1, SENSOR_EXPIRY_MS + rng.randrange(2 * span)])
        t += gap
        for _ in range(rng.randint(2, 6) if r < 0.1 or gap == 0 else 1):
            ts.append(t)
            u = rng.random()
            vs.append(0.0 if u < 0.05 else rng.uniform(0, 10_000) if u < 0.95 else rng.uniform(1e5, 1e7))
    return ts[:n], vs[:n]


@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize("window_ms", [1000, 500])
@pytest.mark.parametrize("samples", [2, 11])
@pytest.mark.parametrize("quota_type", sorted(KERNEL_TYPES))
def test_kernel_equals_model_on_random_traces(quota_type: str, samples: int, window_ms: int, closed: bool) -> None:
    rng = random.Random(f"{quota_type}-{samples}-{window_ms}-{closed}")
    seen = {"throttled": 0, "unthrottled": 0}
    for quota in (None, 0.5, 3.0, 20_000.0, 5e6, 1e12):  # no quota, tiny (heavy throttling) ... never binding
        ts, vs = _random_trace(rng, 700, samples, window_ms)
        kw = {"samples": samples, "window_ms": window_ms, "closed": closed}
        expected, _ = _oracle(quota_type, ts, vs, quota, **kw)
        assert_same(replay_rate(quota_type, ts, vs, quota, **kw), expected, f"quota={quota}")
        seen["throttled"] += sum(1 for x in expected.throttle_ms_long if x > 0)
        seen["unthrottled"] += sum(1 for x in expected.throttle_ms_long if x == 0)
    assert seen["throttled"] > 500 and seen["unthrottled"] > 500


@pytest.mark.parametrize("closed", [False, True])
def test_kernel_equals_model_on_odd_input(closed: bool) -> None:
    """What the Spark jobs filter out still replays as the model does: times out of order, negative, NaN and
    infinite values, a zero quota (an infinite throttle that Java's (int) cast turns to -1), negative, NaN and
    infinite quotas."""
    rng = random.Random(7)
    ts = [T0 + rng.randrange(-30_000, 30_000) for _ in range(400)]
    vs = [rng.choice([rng.uniform(-500, 5000), 0.0, -0.0, 1e300]) for _ in ts]
    vs[100], vs[300] = math.nan, math.inf
    for quota_type in sorted(KERNEL_TYPES):
        for quota in (0.0, 100.0, 1e12, -5.0, math.nan, math.inf):
            for lo, hi in ((0, 100), (0, 200), (0, 400), (200, 400), (301, 400)):  # before/after NaN and inf
                kw = {"samples": 5, "window_ms": 1000, "closed": closed}
                expected, _ = _oracle(quota_type, ts[lo:hi], vs[lo:hi], quota, **kw)
                got = replay_rate(quota_type, ts[lo:hi], vs[lo:hi], quota, **kw)
                assert_same(got, expected, f"{quota_type} quota={quota} [{lo}:{hi}]")


@pytest.mark.parametrize("quota_type", ["produce", "request", "controller_mutation"])
@pytest.mark.parametrize("closed", [False, True])
def test_replay_returns_the_managers_results(quota_type: str, closed: bool) -> None:
    """``replay`` (kernel or model underneath) answers the manager's own RecordResults, tags and flags included."""
    rng = random.Random(quota_type)
    ts, vs = _random_trace(rng, 400, 11, 1000)
    vs = [v / 1000 for v in vs] if quota_type == "controller_mutation" else vs
    cases = (  # quota, the records' user and client-id, the entity the quota is set on (None: those names)
        (None, "u", "app", None), (2000.0, "u", "app", None), (2000.0, "", "app", None), (5.0, "a b", "", None),
        (2000.0, "u", "", ("u", None)), (2000.0, "", "app", (None, "app")), (2000.0, "u", "app", ("<default>", None)),
    )
    for quota, user, client_id, entity in cases:
        sent, results = replay(user, client_id, quota_type, quota, ts, vs, closed=closed, entity=entity)
        expected, expected_results = _oracle(quota_type, ts, vs, quota, samples=11, window_ms=1000, closed=closed,
                                             user=user, client_id=client_id, entity=entity)
        assert sent == expected.sent_ms
        assert [r._replace(measured=None, observed=None) for r in results] == \
               [r._replace(measured=None, observed=None) for r in expected_results]
        for r, e in zip(results, expected_results, strict=True):
            for a, b in ((r.measured, e.measured), (r.observed, e.observed)):
                assert (a is None and b is None) or _bits(a) == _bits(b)


def test_replay_frame_equals_model_in_time_then_seq_order() -> None:
    """A group given in any row order replays in (t_ms, seq) order, every output column as the model's."""
    rng = random.Random(3)
    ts, vs = _random_trace(rng, 600, 11, 1000)
    pdf = pd.DataFrame({"cluster": "c", "broker": 1, "user": "u", "client_id": "app", "seq": range(len(ts)),
                        "t_ms": ts, "value": vs}).sample(frac=1.0, random_state=1)
    for quota in (None, 4000.0):
        out = replay_frame(pdf, "fetch", quota)
        most = None if quota is None else kernel.fetch_limit(quota * 10)  # KafkaApis: a quota window's worth at most
        expected, _ = _oracle("fetch", ts, vs, quota, samples=11, window_ms=1000, closed=True, fetch_max=most)
        assert out["seq"].tolist() == list(range(len(ts)))
        got = Replayed(out["sent_ms"].tolist(), out["throttle_ms"].tolist(), out["throttle_ms_long"].tolist(),
                       out["measured"].tolist())
        assert_same(got, expected)
        assert out["sent_ms"].dtype == "int64" and out["measured"].dtype == "float64"


def test_a_throttled_fetch_is_answered_empty_and_its_bytes_count_when_fetched_again() -> None:
    """KafkaApis un-records a fetch it throttles (the response carries nothing), and the consumer asks for the same
    bytes again: they count when they are finally answered, not when first asked for. 50 kB asked for at once
    against 1 kB/s, then 100 B twenty seconds later, when the first sample has long left the window."""
    ts, vs = [T0, T0 + 20_000], [50_000.0, 100.0]
    produce = replay_rate("produce", ts, vs, 1000.0, closed=False)
    fetch = replay_rate("fetch", ts, vs, 1000.0, closed=False)
    assert produce.measured[0] == fetch.measured[0] == 50_000.0 / 10  # 11 samples of 1 s: at least 10 s
    assert produce.throttle_ms[0] == fetch.throttle_ms[0] > 0
    assert produce.measured[1] == 100.0 / 10 and produce.throttle_ms[1] == 0  # the 50 kB are out of the window
    assert fetch.measured[1] == 50_100.0 / 10 and fetch.throttle_ms[1] > 0  # asked again, with the next 100 B


@pytest.mark.parametrize("quota_type", sorted(KERNEL_TYPES))
def test_the_compiled_loop_equals_the_python_loop_bit_for_bit(quota_type: str) -> None:
    """``replay_rate`` runs the loop compiled (numba) and falls back to ``_run`` on what only Python's integers do
    exactly; on ordinary and odd traces alike both give the same sends, throttles and rates, bit for bit."""
    rng = random.Random(7)
    compiled = 0
    for case in range(300):
        samples, window_ms = rng.randint(1, 11), rng.choice([4, 7, 100, 1000])
        ts, vs = _random_trace(rng, rng.randint(1, 300), samples, window_ms)
        if case % 5 == 0:
            rng.shuffle(ts)  # out of order: the compiled loop gives up where a record predates the oldest sample
        quota = rng.uniform(0.5, 3.0) * max(vs) * 1000 / window_ms
        most = rng.choice([None, kernel.fetch_limit(quota * (samples - 1)), float(rng.randint(1, 20_000))])
        for closed in (True, False):
            got = replay_rate(quota_type, ts, vs, quota, samples=samples, window_ms=window_ms, closed=closed,
                              fetch_max=most)
            cap = window_ms if KERNEL_TYPES[quota_type] else None
            unrecord = quota_type in kernel.UNRECORDS_THROTTLED
            limit = most if unrecord and most is not None else math.inf
            want = kernel._run(list(ts), list(vs), quota, samples, window_ms, closed, cap, SENSOR_EXPIRY_MS, unrecord,
                               limit)
            assert_same(got, want, f"case {case}")
            sent, thr, _meas, ok = kernel._compiled(np.array(ts, dtype=np.int64), np.array(vs, dtype=np.float64),
                                                    quota, samples, window_ms, closed, cap or kernel._LONG_SAFE,
                                                    SENSOR_EXPIRY_MS, unrecord, limit)
            compiled += ok
            if ok:
                assert sent.tolist() == want.sent_ms and thr.tolist() == want.throttle_ms_long
    assert compiled >= 300  # most traces take the compiled path


@pytest.mark.parametrize("closed", [False, True])
def test_a_fetch_response_carries_at_most_a_quota_window_and_the_rest_waits(closed: bool) -> None:
    """KafkaApis caps a fetch at ``getMaxValueInQuotaWindow`` (bound x (samples - 1) x window): a consumer far behind
    gets its backlog a window's worth at a time instead of one fetch too large ever to pass. The replay through the
    manager equals the model driven the same way, and a quota above the traffic's rate lets it catch up."""
    mgr = manager_for(QuotaType.FETCH, ModelBackend())
    mgr.update_quota("u", "app", 1000.0)
    most = kernel.fetch_limit(mgr.max_value_in_quota_window("u", "app"))
    assert most == 10_000.0  # 1000 B/s x 10 s
    ts = [T0 + 500 * i for i in range(240)]  # two minutes of fetches
    vs = [20_000.0] + [200.0] * 239  # a 20 kB backlog first, then 400 B/s
    sent, results = replay("u", "app", "fetch", 1000.0, ts, vs, closed=closed)
    expected, _ = _oracle("fetch", ts, vs, 1000.0, samples=11, window_ms=1000, closed=closed, fetch_max=most)
    assert [r.throttle_ms_long for r in results] == expected.throttle_ms_long and sent == expected.sent_ms
    assert [r.measured for r in results][0] == 10_000.0 / 10  # the first response: one window's worth
    assert sum(1 for r in results[-60:] if r.throttle_ms) == 0  # caught up within the two minutes
