"""The what-if replay on Spark gives exactly the engine's throttle times (conformance traces, the model)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from engine.entities import QuotaType
from engine.managers import ClientQuotaManager
from engine.model import ModelBackend
from pipeline.replay import replay, summarize, throttled_fraction
from pipeline.summaries import replay_usage

TRACES = json.loads((Path(__file__).parents[2] / "conformance" / "rate_traces.json").read_text())["traces"]


def _usage(steps_of: dict[str, tuple[dict, list[dict]]]) -> pd.DataFrame:
    rows = []
    for i, (tid, (cfg, steps)) in enumerate(steps_of.items()):
        for j, s in enumerate(steps):
            rows.append({"cluster": "c", "broker": i, "user": tid, "client_id": "app", "seq": j, "t_ms": s["t_ms"],
                         "value": float(s["value"]), "quota": cfg["quota"], "samples": cfg["samples"],
                         "window_ms": cfg["window_ms"]})
    return pd.DataFrame(rows)


def _replayed(spark, usage: pd.DataFrame, closed: bool) -> pd.DataFrame:
    out = replay_usage(spark.createDataFrame(usage), "produce", None, closed=closed, per_group=True).toPandas()
    return out.sort_values(["user", "seq"]).reset_index(drop=True)


def test_replay_equals_conformance_traces(spark) -> None:
    """Each trace's leading run of records (a fresh sensor, quota set) replays to the trace's throttle_ms."""
    prefixes = {}
    for t in TRACES:
        steps = []
        for s in t["steps"]:
            if s["op"] != "record":
                break
            steps.append(s)
        if steps and t["config"]["quota"] > 0:
            prefixes[t["id"]] = (t["config"], steps)
    usage = _usage(prefixes)
    got = _replayed(spark, usage, closed=False)
    expected = [(tid, j, s["out"]["throttle_ms"]) for tid, (_, steps) in prefixes.items() for j, s in enumerate(steps)]
    expected.sort()
    assert [(r.user, r.seq, r.throttle_ms_long) for r in got.itertuples()] == expected
    assert sum(1 for e in expected if e[2] > 0) >= 10  # the comparison covers real throttles


def _direct(cfg: dict, steps: list[dict], closed: bool) -> list[int]:
    """The engine's manager driven directly, one record at a time (closed loop: wait out each throttle)."""
    mgr = ClientQuotaManager(QuotaType.PRODUCE, ModelBackend(), samples=cfg["samples"], window_ms=cfg["window_ms"])
    mgr.update_quota("u", "app", cfg["quota"])
    out, ready = [], None
    for s in steps:
        t = s["t_ms"] if not closed or ready is None else max(s["t_ms"], ready)
        r = mgr.record("u", "app", float(s["value"]), t)
        out.append(r.throttle_ms)
        ready = t + r.throttle_ms_long
    return out


@pytest.mark.parametrize("closed", [False, True])
def test_replay_equals_model_on_whole_traces(spark, closed: bool) -> None:
    """All record ops of every trace, open and closed loop: Spark's replay == the manager run directly."""
    recs = {t["id"]: (t["config"], [s for s in t["steps"] if s["op"] == "record" and s["value"] >= 0])
            for t in TRACES if t["config"]["quota"] > 0}
    got = _replayed(spark, _usage(recs), closed)
    for tid, (cfg, steps) in recs.items():
        mine = got[got["user"] == tid]
        assert mine["throttle_ms"].tolist() == _direct(cfg, steps, closed), tid
    assert (got["throttle_ms"] > 0).sum() > 50


def test_closed_loop_waits_out_throttles() -> None:
    """A client over its quota is slowed: it gets about the quota, not what it asked for."""
    t = [1_700_000_000_000 + 100 * i for i in range(600)]  # 10 requests/s of 1000 B = 10 kB/s for 60 s
    sent, results = replay("u", "app", "produce", 5000.0, t, [1000.0] * 600)
    rows = pd.DataFrame({"broker": 1, "user": "u", "client_id": "app", "t_ms": t, "sent_ms": sent, "value": 1000.0,
                         "throttle_ms_long": [r.throttle_ms_long for r in results]})
    s = summarize(rows)
    assert s["throttle_events"] > 0 and s["total_delay_ms"] > 0
    assert 4000 < s["achieved_rate"] < 6000 < s["recorded_rate"]
    assert all(b >= a for a, b in zip(sent, sent[1:], strict=False))


def test_time_throttled_is_per_sensor_so_many_clients_on_one_broker_stay_under_100_percent() -> None:
    """A ``<default>`` quota gives every client its own sensor: three clients throttled most of the time on the same
    broker are throttled most of the time, not three times that."""
    t = [1_700_000_000_000 + 100 * i for i in range(600)]  # each client 10 kB/s against a 2 kB/s quota
    frames = []
    for client in ("a", "b", "c"):
        sent, results = replay("u", client, "produce", 2000.0, t, [1000.0] * 600)
        frames.append(pd.DataFrame({"broker": 1, "user": "u", "client_id": client, "t_ms": t, "sent_ms": sent,
                                    "value": 1000.0, "throttle_ms_long": [r.throttle_ms_long for r in results]}))
    one = throttled_fraction(frames[0])
    assert 0.5 < one <= 1.0
    assert throttled_fraction(pd.concat(frames)) == pytest.approx(one)
