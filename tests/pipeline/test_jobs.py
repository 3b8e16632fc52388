"""Rollups values, advice, in-progress files never read, typed errors and exit codes on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import advice, rollups, whatif
from pipeline.replay import replay_frame, throttled_fraction
from tests.landing_files import hour_dir, write_landing

T0 = 1_700_000_040_000  # 2023-11-14 22:14:00 UTC: a minute boundary


def _samples() -> list[dict]:
    rows = []
    for s in range(120):  # two minutes, two brokers
        t = T0 + 1000 * s
        rows.append({"t": t, "c": "prod", "b": 1, "q": "produce", "e": "alice:app", "rate": float(s), "bound": 100.0,
                     "util": s / 100, "thr_avg": 5.0 if s < 6 else 0.0, "thr_max": 9.0 if s < 6 else 0.0,
                     "thr_frac": 0.5 if s < 6 else 0.0, "tokens": None})
        rows.append({"t": t, "c": "prod", "b": 2, "q": "produce", "e": "alice:app", "rate": 10.0, "bound": 100.0,
                     "util": 0.1, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0, "tokens": None})
    return rows


def test_rollups_values_and_in_progress_files_ignored(spark, tmp_path: Path, capsys) -> None:
    root = tmp_path / "landing"
    (d,) = write_landing(spark, root, "samples", _samples(), "t")
    (d / "_part-99999.parquet").write_bytes(b"half written")  # in progress: must not be read
    (d / ".part-99998.parquet.crc").write_bytes(b"junk")
    out = tmp_path / "rollups"
    assert rollups.main(["--root", str(root), "--out", str(out)], spark=spark) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == {"minute": 2, "hour": 1}
    got = pd.read_parquet(out / "granularity=minute").sort_values("window_start_ms").reset_index(drop=True)
    per_second = np.arange(60) + 10.0
    m0 = got.iloc[0]
    entity = (m0.cluster, m0.quota_type, m0.tags, m0.user, m0.client_id)
    assert entity == ("prod", "produce", "alice:app", "alice", "app")
    assert m0.window_start_ms == T0 and m0.seconds == 60
    assert m0.bytes == per_second.sum()
    for q, col in ((50, "rate_p50"), (95, "rate_p95"), (99, "rate_p99")):
        assert m0[col] == pytest.approx(np.percentile(per_second, q), rel=1e-12)
    assert m0.rate_max == 69.0
    assert m0.throttle_ms == pytest.approx(3000.0)
    assert m0.throttled_fraction == pytest.approx(6 * 0.25 / 60)
    assert got.iloc[1].throttle_ms == 0 and got.iloc[1].bytes == (np.arange(60, 120) + 10.0).sum()
    hour = pd.read_parquet(out / "granularity=hour").iloc[0]
    assert hour.seconds == 120 and hour.bytes == (np.arange(120) + 10.0).sum() and hour.rate_max == 129.0


def _usage(n: int = 600, user: str = "alice", value: float = 100.0) -> list[dict]:
    # 10 requests/s of `value` bytes on broker 1: 1000 B/s for n/10 seconds
    return [{"cluster": "prod", "broker": 1, "quota_type": "produce", "user": user, "client_id": "app",
             "t_ms": T0 + 100 * i, "value": value} for i in range(n)]


def test_whatif_cli_and_advice(spark, tmp_path: Path, capsys) -> None:
    root = tmp_path / "landing"
    (d,) = write_landing(spark, root, "usage", _usage(), "t_ms")
    (d / "_tmp-part.parquet").write_bytes(b"PAR1 half")  # never read
    base = ["--root", str(root), "--cluster", "prod", "--user", "alice", "--client-id", "app",
            "--key", "producer_byte_rate"]
    assert whatif.main([*base, "--value", "500"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["requests"] == 600 and r["throttle_events"] > 0 and r["skipped_records"] == 0
    assert r["recorded_rate"] == pytest.approx(100.0 * 600 / 59.9)
    assert 400 < r["achieved_rate"] < 600 and r["p99_delay_ms"] > 0
    assert whatif.main([*base, "--value", "1000000"], spark=spark) == 0
    assert json.loads(capsys.readouterr().out)["throttle_events"] == 0

    assert advice.main(["--root", str(root), "--target", "0.01"], spark=spark) == 0
    (e,) = json.loads(capsys.readouterr().out)["entities"]
    assert (e["user"], e["client_id"], e["key"]) == ("alice", "app", "producer_byte_rate")
    assert e["throttled_fraction"] <= 0.01
    # the smallest such quota: one byte/s less throttles more than the target
    pdf = pd.DataFrame(_usage()).assign(seq=range(600))
    assert throttled_fraction(replay_frame(pdf, "produce", e["quota"] - 1)) > 0.01
    assert 900 <= e["quota"] <= 1100 and e["peak_rate"] == pytest.approx(1000, rel=0.1)
    assert e["headroom"] == pytest.approx(e["quota"] - e["peak_rate"])


def _error(capsys) -> dict:
    return json.loads(capsys.readouterr().err.strip().splitlines()[-1])["error"]


def test_bad_input_gives_typed_errors(spark, tmp_path: Path, capsys) -> None:
    root = tmp_path / "landing"
    who = ["--cluster", "prod", "--user", "alice", "--client-id", "app", "--key", "producer_byte_rate",
           "--value", "1000"]
    assert whatif.main(["--root", str(tmp_path / "nowhere"), *who], spark=spark) == 2
    assert _error(capsys)["code"] == "MISSING_INPUT"
    assert rollups.main(["--root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")], spark=spark) == 2
    assert _error(capsys)["code"] == "MISSING_INPUT"

    write_landing(spark, root, "usage", _usage(user="bob"), "t_ms")
    assert whatif.main(["--root", str(root), *who], spark=spark) == 2
    err = _error(capsys)
    assert err["code"] == "NO_HISTORY" and "alice" in err["message"]

    (hour_dir(root, "usage", T0) / "part-corrupt.parquet").write_bytes(b"this is not parquet at all")
    assert advice.main(["--root", str(root)], spark=spark) == 2
    assert _error(capsys)["code"] == "CORRUPT_INPUT"

    # only in-progress files: nothing landed yet
    only = tmp_path / "only" / "usage" / "date=2023-11-14" / "hour=22"
    only.mkdir(parents=True)
    (only / "_part-0.parquet").write_bytes(b"x")
    assert whatif.main(["--root", str(tmp_path / "only"), *who], spark=spark) == 2
    assert _error(capsys)["code"] == "MISSING_INPUT"


@pytest.mark.parametrize(("key", "value"), [("bogus_rate", "1000"), ("producer_byte_rate", "0"),
                                            ("connection_creation_rate", "5")])
def test_cli_refuses_bad_proposals_before_starting_spark(tmp_path: Path, key: str, value: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.whatif", "--root", str(tmp_path), "--cluster", "prod", "--user", "alice",
         "--client-id", "app", "--key", key, "--value", value],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 2
    err = json.loads(proc.stderr.strip().splitlines()[-1])["error"]
    assert err["code"] == "INVALID_REQUEST" and err["message"]
