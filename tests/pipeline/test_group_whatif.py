"""The what-if of a group quota: the members' recorded traffic, found with the group's spec, replayed together
through the group's one sensor (per broker, or as one cluster-wide budget), on the driver and on the executors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from engine.groups import PRINCIPALS, GroupSpec, order_of
from pipeline import whatif
from pipeline.budget_replay import replay_budget
from pipeline.replay import replay_frame, summarize
from tests.landing_files import write_landing

T0 = 1_700_000_040_000
PBR = "producer_byte_rate"
GROUP = GroupSpec("payments", order_of(PRINCIPALS, None), patterns=("svc-pay-*",), quotas={PBR: 1000.0})


def _records() -> list[dict]:
    """600 B/s from each of two members on each of two brokers (1200 B/s per broker together), and a non-member
    sending 5000 B/s, 30 s."""
    rows = []
    for user, client_id, offset, size in (("svc-pay-1", "app-1", 0, 60.0), ("svc-pay-2", "app-2", 50, 60.0),
                                          ("svc-other", "app-1", 25, 500.0)):
        for broker in (1, 2):
            rows += [{"cluster": "prod", "broker": broker, "quota_type": "produce", "user": user,
                      "client_id": client_id, "t_ms": T0 + offset + ms, "value": size}
                     for ms in range(0, 30_000, 100)]
    return sorted(rows, key=lambda r: (r["t_ms"], r["broker"]))


def _members_as_one_sensor(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame([r for r in records if r["user"].startswith("svc-pay-")])
    return frame.assign(user="group@payments", client_id="", seq=range(len(frame)))


def _run(spark, capsys, root: Path, *extra: str) -> tuple[int, dict]:
    code = whatif.main(["--root", str(root), "--cluster", "prod", "--group", GROUP.to_json(), "--key", PBR, *extra],
                       spark=spark)
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else json.loads(err.strip().splitlines()[-1])["error"]


def test_a_group_value_replays_its_members_together_through_one_sensor(spark, tmp_path: Path, capsys) -> None:
    records = _records()
    root = tmp_path / "landing"
    write_landing(spark, root, "usage", records, "t_ms")
    members = _members_as_one_sensor(records)
    want = summarize(pd.concat([replay_frame(g, "produce", 1000.0, entity=("group@payments", None))
                                for _, g in members.groupby("broker")]))
    for way in ((), ("--distributed",)):
        code, r = _run(spark, capsys, root, "--value", "1000", *way)
        assert code == 0, r
        assert r["group"] == "payments" and r["user"] is None and r["clients"] == 2, "the members, not svc-other"
        assert r["requests"] == want["requests"] == 2 * 2 * 300
        assert r["throttle_events"] == want["throttle_events"] > 0, "1200 B/s together over 1000 per broker"
        assert r["total_delay_ms"] == want["total_delay_ms"]
        assert r["replayed_on"] == ("executors" if way else "driver")
    # each member alone stays under the same value: only the shared sensor throttles
    alone = whatif.main(["--root", str(root), "--cluster", "prod", "--user", "svc-pay-1", "--key", PBR,
                         "--value", "1000"], spark=spark)
    assert alone == 0 and json.loads(capsys.readouterr().out)["throttle_events"] == 0


def test_a_cluster_wide_group_value_is_one_budget_over_the_brokers(spark, tmp_path: Path, capsys) -> None:
    records = _records()
    root = tmp_path / "landing"
    write_landing(spark, root, "usage", records, "t_ms")
    code, per_broker = _run(spark, capsys, root, "--value", "1500")
    assert code == 0 and per_broker["throttle_events"] == 0, "1200 B/s per broker under 1500 per broker"
    code, wide = _run(spark, capsys, root, "--value", "1500", "--scope", "cluster_wide")
    assert code == 0 and wide["scope"] == "cluster_wide" and wide["brokers"] == 2
    want = summarize(replay_budget(_members_as_one_sensor(records), "produce", 1500.0,
                                   entity=("group@payments", None)))
    assert wide["throttle_events"] == want["throttle_events"] > 0, "2400 B/s in all over a 1500 budget"
    assert wide["achieved_rate"] < per_broker["achieved_rate"]


def test_group_proposals_that_cannot_be_replayed_are_refused(spark, tmp_path: Path, capsys) -> None:
    root = tmp_path / "landing"
    write_landing(spark, root, "usage", _records(), "t_ms")
    code, err = _run(spark, capsys, root, "--value", "5", "--user", "svc-pay-1")
    assert code == 2 and "not both" in err["message"]
    code = whatif.main(["--root", str(root), "--cluster", "prod", "--group", GROUP.to_json(), "--key",
                        "controller_mutation_rate", "--value", "5"], spark=spark)
    err = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["error"]
    assert code == 2 and "holds producer_byte_rate" in err["message"]
    nobody = GroupSpec("nobody", 0, users=("svc-absent",), quotas={PBR: 1.0})
    code = whatif.main(["--root", str(root), "--cluster", "prod", "--group", nobody.to_json(), "--key", PBR,
                        "--value", "5"], spark=spark)
    err = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["error"]
    assert code == 2 and err["code"] == "NO_HISTORY" and "members of group 'nobody'" in err["message"]
