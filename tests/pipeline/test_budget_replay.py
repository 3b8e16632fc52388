"""The what-if of a cluster-wide budget: recorded traffic on several brokers replayed with shares that follow it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from engine.budgets import BudgetLedger, BudgetParams
from pipeline import whatif
from pipeline.budget_replay import delivered_over_budget, replay_budget
from pipeline.replay import replay_frame, summarize
from tests.landing_files import write_landing

T0 = 1_700_000_040_000
BUDGET = 100_000.0


def _moving(seconds: int = 60, shift_s: int = 20, every_ms: int = 33, size: float = 10_000.0) -> pd.DataFrame:
    """About 300 KB/s from one client-id, on broker 1, then 2, then 3 (its partition's leader moves)."""
    rows = [("prod", 1 + (ms // (shift_s * 1000)) % 3, "", "app", i, T0 + ms, size)
            for i, ms in enumerate(range(0, seconds * 1000, every_ms))]
    return pd.DataFrame(rows, columns=["cluster", "broker", "user", "client_id", "seq", "t_ms", "value"])


def _per_broker(usage: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([replay_frame(g, "produce", BUDGET, entity=(None, "app")) for _, g in usage.groupby("broker")])


def test_a_budget_holds_moving_demand_near_b_where_per_broker_lets_it_through() -> None:
    usage = _moving()
    rows = replay_budget(usage, "produce", BUDGET, entity=(None, "app"))
    assert len(rows) == len(usage) and set(rows["broker"]) == {1, 2, 3}
    held = summarize(rows)["achieved_rate"] / BUDGET
    assert 0.8 < held < 1.1, f"the budget holds the client near B: {held:.2f}"
    # the same value per broker, as Kafka means it: each broker's sensor has its own window, so more gets through ...
    assert summarize(_per_broker(usage))["achieved_rate"] / BUDGET > held
    # ... and spread over three leaders about 3 B, where the budget still holds B
    spread = usage.assign(broker=usage["seq"] % 3 + 1)
    assert summarize(_per_broker(spread))["achieved_rate"] / BUDGET > 2.5
    assert summarize(replay_budget(spread, "produce", BUDGET, entity=(None, "app")))["achieved_rate"] / BUDGET < 1.1


def test_shares_follow_the_demand_and_hold_back_nothing_under_b() -> None:
    rows = replay_budget(_moving(every_ms=125), "produce", BUDGET, entity=(None, "app"))  # 80 KB/s
    late = rows[rows["sent_ms"] >= T0 + 45_000]  # demand on broker 3 since 40 s
    assert late[late["broker"] == 3]["share"].min() > 0.8 * BUDGET
    assert summarize(rows)["achieved_rate"] == pytest.approx(80_000.0, rel=0.05), "under B nothing is held back"


def test_the_allocation_is_the_engines() -> None:
    # one round with all demand on broker 2: the shares are exactly the ledger's
    usage = pd.DataFrame([("prod", b, "", "app", i, T0 + i, v) for i, (b, v) in
                          enumerate([(1, 1.0), (2, 90_000.0), (3, 1.0), (2, 1.0)])] +
                         [("prod", 2, "", "app", 9, T0 + 1500, 1.0)],
                         columns=["cluster", "broker", "user", "client_id", "seq", "t_ms", "value"])
    rows = replay_budget(usage, "produce", BUDGET, entity=(None, "app"))
    ledger = BudgetLedger()
    params = BudgetParams()
    sent = {1: 1.0, 2: 90_001.0, 3: 1.0}
    want = {b: ledger.report(b, T0 + 1000, BUDGET, sent[b], False, params) for b in (1, 2, 3)}
    assert rows[rows["seq"] == 9]["share"].item() == want[2]


def test_delivered_over_budget_is_the_busiest_window() -> None:
    rows = pd.DataFrame({"sent_ms": [0, 1000, 2000, 40_000], "value": [50_000.0, 50_000.0, 50_000.0, 10.0]})
    assert delivered_over_budget(rows, 5_000.0) == pytest.approx(150_000.0 / 30.0 / 5_000.0)


def test_whatif_cli_replays_a_cluster_wide_budget(spark, tmp_path: Path, capsys) -> None:
    usage = _moving(seconds=40)
    records = [{"cluster": r.cluster, "broker": int(r.broker), "quota_type": "produce", "user": "svc",
                "client_id": r.client_id, "t_ms": int(r.t_ms), "value": float(r.value)} for r in usage.itertuples()]
    root = tmp_path / "landing"
    write_landing(spark, root, "usage", records, "t_ms")
    base = ["--root", str(root), "--cluster", "prod", "--client-id", "app", "--key", "producer_byte_rate",
            "--value", str(BUDGET)]
    assert whatif.main([*base, "--scope", "cluster_wide"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["scope"] == "cluster_wide" and r["brokers"] == 2 and r["requests"] == len(records)
    assert 0.8 < r["achieved_rate"] / BUDGET < 1.1 and r["delivered_over_budget"] > 0
    assert whatif.main([*base, "--scope", "cluster_wide", "--key", "controller_mutation_rate"], spark=spark) == 2
    err = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["error"]
    assert "cannot be cluster-wide" in err["message"]
