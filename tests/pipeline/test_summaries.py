"""The what-if summaries (numeric groups, figures computed in the workers) are exactly ``summarize`` of the rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from engine.entities import DEFAULT
from pipeline import summaries, whatif
from pipeline.errors import PipelineError
from pipeline.figures import FIGURES
from pipeline.replay import never_throttled, replay_frame, replay_sorted, summarize
from pipeline.summaries import arrow_batches_by_rows, summarize_usage
from tests.landing_files import write_landing

T0 = 1_700_000_040_000
ENTITIES = [("prod", "alice", "app"), ("prod", "alice", "etl"), ("prod", "bob", "app"), ("prod", "bob", ""),
            ("stage", "alice", "app"), ("prod", "carol", "app")]
SIZES = [600.0, 300.0, 3.0, 900.0, 20.0, 150.0]  # bytes a request: some entities stay far under the quota


def _records(seed: int, fractional: bool, landed_in_row_order: bool = False) -> pd.DataFrame:
    """Seeded traffic of several entities over three brokers: bursts above the quota, several records at the same ms
    (the landed order, ``seq``, decides), rows not in time order and, unless ``landed_in_row_order``, not in landed
    order either."""
    rng = np.random.default_rng(seed)
    rows = []
    for (cluster, user, client_id), size in zip(ENTITIES, SIZES, strict=True):
        for _ in range(int(rng.integers(150, 400))):
            value = size * rng.uniform(0.2, 4.0)
            rows.append({"cluster": cluster, "broker": int(rng.integers(1, 4)), "quota_type": "produce", "user": user,
                         "client_id": client_id, "t_ms": T0 + int(rng.integers(0, 40)) * 250,  # many equal ms
                         "value": value if fractional else float(round(value))})
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)  # landed out of order
    seq = np.arange(len(df))
    return df.assign(seq=seq if landed_in_row_order else rng.permutation(seq))


def _direct(records: pd.DataFrame, quota: float, closed: bool, entity=None, window_ms: int = 1000,
            quota_type: str = "produce") -> dict:
    """``summarize`` of ``replay_frame`` on each (broker, user, client-id) group, with the job's extra figures."""
    groups = [g for _, g in records.groupby(["user", "client_id", "broker"], sort=True)]
    rows = pd.concat([replay_frame(g, quota_type, quota, closed=closed, entity=entity, window_ms=window_ms)
                      for g in groups])
    return {**summarize(rows, window_ms), "history_from_ms": int(rows["t_ms"].min()),
            "history_to_ms": int(rows["t_ms"].max()), "brokers": int(rows["broker"].nunique())}


def _same(got: dict, want: dict) -> bool:
    """Every figure of ``want`` in ``got``: counts and times exactly, bytes and rates to the last few bits (the sums
    run in another order)."""
    return {k: got[k] for k in want} == {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v
                                         for k, v in want.items()}


@pytest.mark.parametrize("closed", [True, False])
def test_one_row_per_entity_equals_summarize_of_the_replayed_rows(spark, closed: bool) -> None:
    records = _records(7, fractional=True)
    usage = spark.createDataFrame(records)
    with arrow_batches_by_rows(spark):
        got = summarize_usage(usage, "produce", 2000.0, closed=closed).toPandas()
        replayed = summarize_usage(usage, "produce", 2000.0, closed=closed, replay_all=True).toPandas()
    assert len(got) == len(ENTITIES)
    pd.testing.assert_frame_equal(got.sort_values("user").reset_index(drop=True),
                                  replayed.sort_values("user").reset_index(drop=True))
    for cluster, user, client_id in ENTITIES:
        mine = records[(records.cluster == cluster) & (records.user == user) & (records.client_id == client_id)]
        row = got[(got.cluster == cluster) & (got.user == user) & (got.client_id == client_id)].iloc[0]
        want = _direct(mine, 2000.0, closed)
        assert _same(row, want), (cluster, user, client_id)
    assert (got["throttle_events"] > 0).sum() >= 3 and (got["brokers"] == 3).all()
    # some brokers' records were summarized without a replay, others replayed
    proven = [never_throttled(u, c, "produce", 2000.0, g["t_ms"].to_numpy(), g["value"].to_numpy())
              for (u, c, _), g in records.sort_values(["t_ms", "seq"]).groupby(["user", "client_id", "broker"])]
    assert 3 <= sum(proven) < len(proven)


@pytest.mark.parametrize("seed", range(4))
def test_records_proven_never_throttled_are_not_throttled(seed: int) -> None:
    """Steady and bursty runs around the quota, per quota type and loop: whenever ``never_throttled`` holds, the
    replay throttles nothing; and it holds for the runs that stay clearly under the quota."""
    rng = np.random.default_rng(seed)
    proven = 0
    for _ in range(60):
        n = int(rng.integers(1, 400))
        t = np.sort(T0 + rng.integers(0, int(rng.choice([2_000, 30_000, 600_000])), n))
        v = rng.uniform(0.0, 1.0, n) * float(rng.choice([10.0, 100.0, 1000.0]))
        quota_type, samples, window_ms = str(rng.choice(["produce", "fetch", "request"])), int(rng.integers(1, 12)), \
            int(rng.choice([100, 1000]))
        quota = float(rng.uniform(0.5, 2.0) * v.sum() / max((t[-1] - t[0]) / 1000.0, 1.0))  # around the mean rate
        if never_throttled("u", "app", quota_type, quota, t, v, samples=samples, window_ms=window_ms):
            proven += 1
            for closed in (True, False):
                r = replay_sorted("u", "app", quota_type, quota, t, v, samples=samples, window_ms=window_ms,
                                  closed=closed)
                assert not any(r.throttle_ms_long) and r.sent_ms == t.tolist()
        span_max = max(v[(t > x - (samples + 1) * window_ms) & (t <= x)].sum() for x in t)
        if span_max < 0.99 * quota * max((samples - 1) * window_ms, 1) / 1000.0:
            assert never_throttled("u", "app", quota_type, quota, t, v, samples=samples, window_ms=window_ms)
    assert proven >= 5


def test_a_hash_collision_is_never_grouped_together(spark, monkeypatch) -> None:
    records = _records(11, fractional=False)
    usage = spark.createDataFrame(records)
    with arrow_batches_by_rows(spark):
        want = summarize_usage(usage, "produce", 2000.0).toPandas().sort_values(["cluster", "user", "client_id"])
        real = summaries._entity_key
        # the first hash maps every entity to one key: the check sees it and takes the next salt
        monkeypatch.setattr(summaries, "_entity_key", lambda salt: F.lit(7).cast("long") if salt == 0 else real(salt))
        got = summarize_usage(usage, "produce", 2000.0).toPandas().sort_values(["cluster", "user", "client_id"])
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    monkeypatch.setattr(summaries, "_entity_key", lambda salt: F.lit(salt).cast("long"))
    with pytest.raises(PipelineError, match="collided"):
        summarize_usage(usage, "produce", 2000.0)


@pytest.mark.parametrize("way", ["driver", "executors"])
@pytest.mark.parametrize(("user", "client_id"), [("alice", "app"), ("alice", None), ("alice", DEFAULT),
                                                 (None, "app")])
def test_the_job_reports_summarize_of_the_records_the_entity_governs(spark, tmp_path: Path, capsys, user,
                                                                    client_id, way: str) -> None:
    """On the driver (a small landing area, as a preview's) and on the executors (``--distributed``, as a large
    one's), the same figures: those of the records the entity governs, replayed directly."""
    records = _records(3, fractional=False, landed_in_row_order=True)
    root = tmp_path / "landing"
    write_landing(spark, root, "usage", records.drop(columns="seq").to_dict("records"), "t_ms")
    args = ["--root", str(root), "--cluster", "prod", "--key", "producer_byte_rate", "--value", "2000"]
    args += ["--user", user] if user is not None else []
    args += ["--client-id", client_id] if client_id is not None else []
    args += ["--distributed"] if way == "executors" else []
    assert whatif.main(args, spark=spark) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["replayed_on"] == way

    mine = records[records.cluster == "prod"]  # landed in this order: one file, seq = row number
    for column, name in (("user", user), ("client_id", client_id)):
        if name is not None and name != DEFAULT:
            mine = mine[mine[column] == name]
    clients = len(mine[["user", "client_id"]].drop_duplicates())  # before sharing sensors
    for column, name in (("user", user), ("client_id", client_id)):
        if name is None:
            mine = mine.assign(**{column: ""})  # one sensor for every record of the named part
    want = {**_direct(mine, 2000.0, closed=True, entity=(user, client_id)), "clients": clients}
    assert _same(got, want)
    assert got["skipped_records"] == 0 and got["throttle_events"] > 0
    # each sensor its own timeline: a fraction of time, never above 1 however many clients share a broker
    assert 0 < got["throttled_fraction"] <= 1
    assert list(got)[:17] == ["cluster", "user", "client_id", "key", "value", "quota_type", "brokers", "clients",
                              "history_from_ms", "history_to_ms", "closed_loop", "skipped_records", "per_broker",
                              "resolution", "scope", "replayed_on", "group"]
    assert got["group"] is None, "an entity's job, not a group's (pipeline.whatif --group)"
    assert got["scope"] == "per_broker"  # Kafka's meaning unless --scope cluster_wide
    # each broker's own sensor: its requests, bytes and recorded rate, adding up to the whole
    assert [b["broker"] for b in got["per_broker"]] == sorted(mine["broker"].unique()) and len(got["per_broker"]) == \
        got["brokers"]
    assert sum(b["requests"] for b in got["per_broker"]) == got["requests"]
    assert sum(b["recorded_rate"] for b in got["per_broker"]) == pytest.approx(got["recorded_rate"])
    assert sum(b["throttle_events"] for b in got["per_broker"]) == got["throttle_events"]
    # then how the samples say the history was throttled while it was recorded (none landed here: unknown)
    assert list(got)[17:] == [*FIGURES, "recorded_throttled_fraction", "recorded_quota", "recorded_throttling",
                              "demand", "stages_s"]
    assert {"replay", "recorded_wait", "demand"} <= set(got["stages_s"])  # seconds each part of the job took
    assert got["demand"] is None  # nothing says Kafka throttled it while recorded: no estimate of more demand
    # replayed from the usage log: per request, nothing it cannot know for want of resolution
    assert got["resolution"]["source"] == "usage" and got["resolution"]["cannot_know"] == []


def test_a_controller_mutation_proposal_replays_the_topic_creations_through_the_token_bucket(spark, tmp_path: Path,
                                                                                           capsys) -> None:
    """The load generator logs each topic creation attempt (its partitions); ``controller_mutation_rate`` replays
    them through the engine's KIP-599 bucket (the model itself, not the kernel)."""
    rng = np.random.default_rng(5)
    rows = [{"cluster": "prod", "broker": 1, "quota_type": "controller_mutation", "user": "alice",
             "client_id": "admin", "t_ms": T0 + 60_000 * burst + 10 * i, "value": 3.0}
            for burst in range(4) for i in range(int(rng.integers(10, 30)))]
    records = pd.DataFrame(rows).assign(seq=np.arange(len(rows)))
    root = tmp_path / "landing"
    write_landing(spark, root, "usage", records.drop(columns="seq").to_dict("records"), "t_ms")
    assert whatif.main(["--root", str(root), "--cluster", "prod", "--user", "alice", "--key",
                        "controller_mutation_rate", "--value", "2"], spark=spark) == 0
    got = json.loads(capsys.readouterr().out)
    want = _direct(records, 2.0, closed=True, entity=("alice", None), quota_type="controller_mutation")
    assert got["quota_type"] == "controller_mutation"
    assert _same(got, want)
    assert got["clients"] == 1 and got["throttle_events"] > 0


def test_an_entity_whose_records_span_many_arrow_batches_is_one_entity(spark) -> None:
    """Batches of 7 records: every entity's records arrive in many pieces, and the figures are the same."""
    records = _records(13, fractional=False)
    usage = spark.createDataFrame(records)
    with arrow_batches_by_rows(spark):
        whole = summarize_usage(usage, "produce", 2000.0).toPandas()
        before = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
        try:
            pieces = summarize_usage(usage, "produce", 2000.0).toPandas()
        finally:
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", before)
    key = ["cluster", "user", "client_id"]
    pd.testing.assert_frame_equal(pieces.sort_values(key).reset_index(drop=True),
                                  whole.sort_values(key).reset_index(drop=True))
    assert len(whole) == len(ENTITIES) and whole["requests"].sum() == len(records)


def test_never_throttled_proves_nothing_about_records_out_of_time_order() -> None:
    t, v = np.array([1_000_102, 1_000_019]), np.array([1.0, 20.0])
    replayed = replay_sorted("u", "app", "produce", 1000.0, t, v, samples=2, window_ms=100, closed=False)
    assert replayed.throttle_ms_long[1] > 0
    assert not never_throttled("u", "app", "produce", 1000.0, t, v, samples=2, window_ms=100)
