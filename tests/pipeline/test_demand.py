"""The demand estimate beside the lower bound, on traces whose demand is known: clients asking a set rate above their
quota, throttled by the project's own model of Kafka's quota (the engine's reference model, and the what-if kernel
that equals it bit for bit), recorded as Kafka would let them through.

Tolerance: 2 % of the known demand from the throttle time (whole requests and whole milliseconds over two minutes),
5 % from the queue time (KIP-714 reports an average per push, here every 5 s, read as the value at the push's end)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.entities import QuotaType
from engine.managers import UsageRecord, manager_for
from engine.model import ModelBackend
from pipeline import whatif
from pipeline.demand import (
    BACK_TO_BACK,
    QUEUE_TIME,
    estimate,
    from_queue_time,
    from_throttle,
    queue_demand,
    queue_growth,
)
from pipeline.kernel import replay_rate
from tests.landing_files import write_landing

L = 512 * 1024.0  # the quota, bytes/s per broker
SIZE = 8192.0  # one request's bytes
TOLERANCE, QUEUE_TOLERANCE = 0.02, 0.05
PUSH_MS = 5_000  # a KIP-714 push interval


def paced_client(demand: float, seconds: int = 120) -> tuple[np.ndarray, np.ndarray]:
    """A client asking ``demand`` B/s that waits out each throttle and then goes on at its own pace (its next request
    a request's worth of its time after the previous one's throttle ended): sent times and the throttle Kafka
    answered each, from the engine's reference model."""
    mgr = manager_for(QuotaType.PRODUCE, ModelBackend())
    mgr.update_quota("svc", "app", L)
    gap_ms, t, sent, throttles = SIZE / demand * 1000, 0.0, [], []
    while t < seconds * 1000:
        result = mgr.record_many([UsageRecord("svc", "app", SIZE, int(t))], validate=False)[0]
        sent.append(int(t))
        throttles.append(result.throttle_ms_long)
        t += result.throttle_ms_long + gap_ms
    return np.array(sent), np.array(throttles)


def queueing_client(demand: float, seconds: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A client asking ``demand`` B/s that queues what Kafka holds back (as a producer's buffer does): when each
    request was asked for, when it was sent (the what-if's closed loop) and the throttle Kafka answered it."""
    n = int(seconds * demand / SIZE)
    asked = (np.arange(n) * SIZE / demand * 1000).astype(np.int64)
    replayed = replay_rate("produce", asked, np.full(n, SIZE), L, closed=True)
    return asked, np.array(replayed.sent_ms), np.array(replayed.throttle_ms_long)


def recorded(sent: np.ndarray, throttles: np.ndarray, skip_ms: int = 10_000) -> tuple[float, float, int, int]:
    """What the pipeline would read of it past its first ``skip_ms`` (the sensor's first windows): the rate Kafka let
    through over the recorded span, the share of that span the client was muted, and the span."""
    keep = sent >= sent[0] + skip_ms
    s, thr = sent[keep], throttles[keep]
    span = int(s[-1] - s[0])
    inside = thr[:-1].sum()  # each throttle lies between its request and the next one
    return len(s[:-1]) * SIZE / (span / 1000), inside / span, int(s[0]), int(s[-1])


@pytest.mark.parametrize("x", [1.3, 2.0, 4.0])
def test_the_throttle_time_recovers_what_a_client_at_its_own_pace_asked_for(x: float) -> None:
    sent, throttles = paced_client(x * L)
    rate, fraction, _, _ = recorded(sent, throttles)
    assert rate == pytest.approx(L, rel=0.05)  # Kafka held it at its quota: what got through says nothing more
    assert fraction == pytest.approx(1 - 1 / x, abs=0.02)  # muted the share its demand is above the quota
    assert from_throttle(rate, fraction) == pytest.approx(x * L, rel=TOLERANCE)


@pytest.mark.parametrize("x", [1.3, 2.0, 4.0])
def test_the_queue_time_recovers_what_a_queueing_client_asked_for_where_the_throttle_time_cannot(x: float) -> None:
    asked, sent, throttles = queueing_client(x * L)
    rate, fraction, lo, hi = recorded(sent, throttles)
    # muted back to back whatever it asked: the throttle time bounds nothing useful
    assert fraction >= BACK_TO_BACK and from_throttle(rate, fraction) is None
    # its queue time as a KIP-714 push reports it: the mean over the records sent in each push interval
    queue = sent - asked
    points = [(int(t0 + PUSH_MS), float(queue[(sent >= t0) & (sent < t0 + PUSH_MS)].mean()))
              for t0 in range(lo, hi - PUSH_MS, PUSH_MS)]
    a, b, growth = queue_growth(points, lo, hi)
    assert (a, b) == (points[0][0], points[-1][0]) and growth > 0
    between = len(sent[(sent >= a) & (sent < b)]) * SIZE
    assert from_queue_time(between * 1000 / (b - a), b - a, growth) == pytest.approx(x * L, rel=QUEUE_TOLERANCE)
    # as the what-if adds its clients: this one with its points, another without (its rate as recorded)
    demand, seen = queue_demand({"app": rate, "other": 1000.0}, {"app": [(a, b, growth)]},
                                lambda client_id, lo_ms, hi_ms: len(sent[(sent >= lo_ms) & (sent < hi_ms)]) * SIZE)
    assert seen == 1 and demand == pytest.approx(x * L + 1000.0, rel=QUEUE_TOLERANCE)


def test_each_evidence_bounds_the_other_kind_of_client() -> None:
    """Queue time under-reads a client that slows down (nothing waits), throttle time over-reads one that queues: the
    demand lies between them."""
    sent, throttles = paced_client(2 * L)
    rate, fraction, lo, hi = recorded(sent, throttles)
    assert from_queue_time(rate, hi - lo, 0.0) == pytest.approx(rate)  # its queue stays empty: r, the lower bound
    assert rate < 2 * L * 0.6
    asked, sent, throttles = queueing_client(1.3 * L)
    rate, fraction, _, _ = recorded(sent, throttles)
    assert fraction >= BACK_TO_BACK  # r / (1 - f): 10 times what got through and more, whatever it asked


def test_queue_growth_needs_two_points_inside_the_span() -> None:
    assert queue_growth([(0, 1.0), (1000, 3.0), (5000, 99.0)], 0, 1000) == (0, 1000, 2.0)
    assert queue_growth([(0, 1.0)], 0, 1000) is None and queue_growth([(0, float("nan")), (9, 1.0)], 0, 1000) is None
    assert queue_demand({"app": 100.0}, {}, lambda *_: 0.0) is None


def test_the_estimate_names_its_evidence_and_says_what_it_cannot_know() -> None:
    def throttled(fraction: float, source: str) -> dict:
        return {"recorded_throttled_fraction": fraction, "recorded_throttling": {"source": source, "material": True}}

    paced = estimate("producer_byte_rate", L, throttled(0.5, "client"))
    assert (paced["lower"], paced["estimate"], paced["evidence"]) == (L, 2 * L, "throttle time")
    assert paced["text"].startswith("They asked for about 1 MiB/s if they go on at their own pace")
    assert "Kafka let 512 KiB/s through: the lower bound" in paced["text"]

    queued = estimate("producer_byte_rate", L, throttled(0.97, "client"))
    assert queued["estimate"] is None and queued["back_to_back"] and "back to back (97% of the time" in queued["text"]

    prometheus = estimate("producer_byte_rate", L, throttled(0.3, "prometheus"))
    assert prometheus["estimate"] is None and prometheus["upper"] is None
    assert "an average per throttled request, not a share" in prometheus["text"]
    engine = estimate("producer_byte_rate", L, throttled(0.3, "engine"))
    assert engine["estimate"] is None and "at most a second of each throttle" in engine["text"]

    kip714 = estimate("producer_byte_rate", L, throttled(0.97, "client"), (2 * L, 1))
    assert (kip714["estimate"], kip714["evidence"]) == (2 * L, "queue time") and "KIP-714" in kip714["text"]
    assert "scaled by how long sending took" in kip714["text"]

    assert estimate("producer_byte_rate", L, {"recorded_throttled_fraction": 0.004,
                                              "recorded_throttling": {"source": "client", "material": False}}) is None
    assert estimate("producer_byte_rate", L, {"recorded_throttled_fraction": None}) is None


def test_a_queue_time_that_did_not_grow_estimates_nothing() -> None:
    """A producer whose buffer filled (the demo's 4 MiB fill within seconds under its quota) keeps a flat queue time:
    its queue estimate is what got through, a little under or over it, never "about" the demand; the page says more than
    the lower bound, and why the queue time cannot say how much. The throttle time of a client at its own pace still
    estimates."""
    def throttled(fraction: float, source: str) -> dict:
        return {"recorded_throttled_fraction": fraction, "recorded_throttling": {"source": source, "material": True}}

    full = estimate("producer_byte_rate", L, throttled(0.18, "prometheus"), (0.96 * L, 1))
    assert (full["lower"], full["estimate"], full["evidence"]) == (L, None, None)
    assert full["text"].startswith("They asked for more than the 512 KiB/s Kafka let through")
    assert "it did not grow while Kafka muted them" in full["text"] and "would say" not in full["text"]
    assert estimate("producer_byte_rate", L, throttled(0.97, "client"), (L, 1))["estimate"] is None
    # a hair above it is the queue time's noise (an average per push), not a demand
    assert estimate("producer_byte_rate", L, throttled(0.07, "prometheus"), (1.001 * L, 1))["estimate"] is None
    assert estimate("producer_byte_rate", L, throttled(0.97, "client"), (1.3 * L, 1))["estimate"] == 1.3 * L

    paced = estimate("producer_byte_rate", L, throttled(0.5, "client"), (L, 1))
    assert (paced["estimate"], paced["evidence"]) == (2 * L, "throttle time")


T0 = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC


def land_trace(root: Path, sent: np.ndarray, throttles: np.ndarray, asked: np.ndarray | None = None) -> None:
    """The trace as the portal lands a real cluster's: usage records at the times Kafka let the requests through,
    the client's statistics each second (the throttle time it was answered, as a share of the second) and, for a
    queueing client, its KIP-714 queue time every PUSH_MS."""
    t = T0 + sent
    write_landing(None, root, "usage", [{"cluster": "prod", "broker": 1, "quota_type": "produce", "user": "svc",
                                         "client_id": "app", "t_ms": int(x), "value": SIZE} for x in t], "t_ms")
    seconds = (t - T0) // 1000
    per_second = np.bincount(seconds, weights=throttles)
    write_landing(None, root, "samples", [
        {"t": T0 + 1000 * (i + 1), "c": "prod", "b": 1, "q": "produce", "e": "svc:app", "rate": None, "bound": L,
         "util": None, "thr_avg": None, "thr_max": None, "thr_frac": min(1.0, per_second[i] / 1000), "tokens": None,
         "src": "client", "res_ms": None} for i in range(len(per_second))], "t")
    if asked is not None:
        queue = sent - asked
        write_landing(None, root, "telemetry", [
            {"t": T0 + t0 + PUSH_MS, "c": "prod", "instance": "i-1", "client_id": "app", "name": QUEUE_TIME,
             "attrs": "{}", "point_t": T0 + t0 + PUSH_MS, "value": float(queue[(sent >= t0) & (sent < t0 + PUSH_MS)]
                                                                         .mean())}
            for t0 in range(int(sent[0]), int(sent[-1]) - PUSH_MS, PUSH_MS)], "t")


def preview(spark: Any, capsys: Any, root: Path) -> dict:
    assert whatif.main(["--root", str(root), "--cluster", "prod", "--user", "svc", "--client-id", "app", "--key",
                        "producer_byte_rate", "--value", repr(4 * L)], spark=spark) == 0
    return json.loads(capsys.readouterr().out)


def test_the_what_if_estimates_a_known_demand_from_what_was_landed(spark: Any, tmp_path: Path, capsys: Any) -> None:
    """Twice the quota, asked by a client at its own pace (its throttle times say) and by one that queues (its queue
    time says): the preview's estimate recovers it beside the lower bound, each naming its evidence."""
    sent, throttles = paced_client(2 * L, seconds=90)
    keep = sent >= 10_000  # past the sensor's first windows, as a history that starts mid-run
    land_trace(tmp_path / "paced", sent[keep] - 10_000, throttles[keep])
    r = preview(spark, capsys, tmp_path / "paced")
    demand = r["demand"]
    assert demand["lower"] == r["recorded_rate"] == pytest.approx(L, rel=0.05)
    assert demand["evidence"] == "throttle time" and demand["source"] == "client"
    assert demand["estimate"] == pytest.approx(2 * L, rel=TOLERANCE)

    asked, sent, throttles = queueing_client(2 * L)
    keep = sent >= sent[0] + 10_000
    land_trace(tmp_path / "queued", sent[keep], throttles[keep], asked[keep])
    r = preview(spark, capsys, tmp_path / "queued")
    demand = r["demand"]
    assert demand["lower"] == r["recorded_rate"] and demand["back_to_back"] and demand["upper"] is None
    assert (demand["evidence"], demand["clients_with_queue_time"]) == ("queue time", 1)
    assert demand["estimate"] == pytest.approx(2 * L, rel=QUEUE_TOLERANCE)
