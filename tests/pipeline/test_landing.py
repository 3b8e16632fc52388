"""The landing area (pipeline/landing.py): usage, samples and telemetry as Parquet, once each, never half-written."""

from __future__ import annotations

import io
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from django.core.management import call_command

from engine import usage_log
from engine.managers import UsageRecord
from engine.monitor import firehose_key
from pipeline import landing
from quotas import tasks
from quotas.models import Cluster
from quotas.targets import targets_from_db
from telemetry_ui.ingest import telemetry_store
from tests.brokers import push_everywhere
from tests.redis_keys import delete_matching
from traffic.loadgen import FakeClock, LoadGenerator
from traffic.workload import WAVE_PERIOD_S, BrokerTarget

A, B = "land-a", "land-b"
KEYS = ("usage:{land-*}*", "mon:{land-*}*", "land:{land-*}*")
H = 3_600_000
T0 = 1_767_225_600_000 - 5_000  # 2025-12-31 23:59:55 UTC: batches on both sides of a day boundary


@pytest.fixture
def r(engine_redis: redis.Redis) -> Iterator[redis.Redis]:
    delete_matching(engine_redis, *KEYS)
    yield engine_redis
    delete_matching(engine_redis, *KEYS)


@pytest.fixture
def root(tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Path:
    """The landing root for the task, whose clusters are A (brokers 1, 2) and B (broker 1) on the test Redis."""
    settings.QUOTAS_LANDING_ROOT = tmp_path / "landing"
    settings.QUOTAS_LANDING_BATCH = 3  # several ranges per run
    brokers = ((A, (1, 2)), (B, (1,)))
    targets = {c: [BrokerTarget(c, i, redis_url, f"{c}.broker-{i}") for i in ids] for c, ids in brokers}
    monkeypatch.setattr("quotas.targets.targets_from_db", lambda names=None: targets)
    monkeypatch.setattr("quotas.targets.kafka_cluster_names", lambda: [])  # no Kafka cluster in these worlds
    return settings.QUOTAS_LANDING_ROOT


def read(root: Path, source: str) -> pa.Table:
    files = sorted((root / source).rglob("*.parquet"))
    assert all(not f.name.startswith(("_", ".")) for f in files)
    return pa.concat_tables([pq.read_table(f, partitioning=None) for f in files]) if files else pa.table({})


def files(root: Path, source: str) -> list[str]:
    return sorted(str(p.relative_to(root / source)) for p in (root / source).rglob("*") if p.is_file())


def add_usage(client: redis.Redis, cluster: str, broker: int, qt: str, t: int, n: int, user: str = "u") -> None:
    usage_log.append(client, cluster, broker, qt, [UsageRecord(user, f"c{i}", float(i) + 0.5, t) for i in range(n)])


def sample(t: int, b: int, q: str = "produce", e: str = "alice:app", **kw: Any) -> dict[str, Any]:
    s = {"t": t, "c": A, "b": b, "q": q, "e": e, "rate": 10.0, "bound": 100.0, "util": 0.1, "thr_avg": 0.0,
         "thr_max": 0.0, "thr_frac": 0.0, "tokens": None}
    return {**s, **kw}


def rows(table: pa.Table, *cols: str) -> list[tuple[Any, ...]]:
    d = table.to_pydict()
    return sorted(zip(*(d[c] for c in cols), strict=True))


# ------------------------------------------------------------------ usage and samples


def test_usage_lands_in_the_hour_of_each_record_with_the_contract_columns(r: redis.Redis, root: Path) -> None:
    add_usage(r, A, 1, "produce", T0, 3)
    add_usage(r, A, 2, "request", T0 + 6_000, 2, user="bob")  # the next day, hour 00
    usage_log.append(r, A, 1, "fetch", [("u", "x", 1.0, T0), ("u", "y", 2.0, T0 + H)])  # one batch, two hours
    add_usage(r, B, 1, "produce", T0, 1)

    result = tasks.land()

    assert result["rows"]["usage"] == 3 + 2 + 2 + 1
    table = read(root, "usage")
    assert table.schema.equals(landing.USAGE_SCHEMA)
    assert {f.split("/part-")[0] for f in files(root, "usage")} == {
        "date=2025-12-31/hour=23", "date=2026-01-01/hour=00",
    }
    got = rows(table, "cluster", "broker", "quota_type", "user", "client_id", "t_ms", "value")
    assert got == sorted([
        *[(A, 1, "produce", "u", f"c{i}", T0, i + 0.5) for i in range(3)],
        *[(A, 2, "request", "bob", f"c{i}", T0 + 6_000, i + 0.5) for i in range(2)],
        (A, 1, "fetch", "u", "x", T0, 1.0), (A, 1, "fetch", "u", "y", T0 + H, 2.0),
        (B, 1, "produce", "u", "c0", T0, 0.5),
    ])
    for f in (root / "usage").rglob("*.parquet"):  # each row sits in the partition of its own time
        part = f.parent.parent.name + "/" + f.parent.name
        assert {landing.partition(t) for t in pq.read_table(f, partitioning=None)["t_ms"].to_pylist()} == {part}


def test_samples_land_with_nullable_floats_in_the_hour_of_their_own_time(r: redis.Redis, root: Path) -> None:
    r.xadd(firehose_key(A), {"d": json.dumps([sample(T0, 1), sample(T0, 1, q="controller_mutation", e="adm:",
                                                                      rate=None, util=None, tokens=-3.5)])})
    r.xadd(firehose_key(A), {"d": json.dumps([sample(T0 + 6_000, 2, bound=None, util=None),
                                               sample(T0 + 6_000, 2, q="connection", e="ip:10.0.0.1",
                                                      accept_rate=4.0, count=7)])})

    tasks.land()

    table = read(root, "samples")
    assert table.schema.equals(landing.SAMPLES_SCHEMA)
    assert rows(table, "t", "b", "q", "e", "rate", "bound", "tokens") == sorted([
        (T0, 1, "produce", "alice:app", 10.0, 100.0, None),
        (T0, 1, "controller_mutation", "adm:", None, 100.0, -3.5),
        (T0 + 6_000, 2, "produce", "alice:app", 10.0, None, None),
        (T0 + 6_000, 2, "connection", "ip:10.0.0.1", 10.0, 100.0, None),
    ])
    assert {f.split("/part-")[0] for f in files(root, "samples")} == {"date=2025-12-31/hour=23",
                                                                      "date=2026-01-01/hour=00"}


def test_running_twice_lands_nothing_twice_and_the_next_run_lands_only_what_is_new(r: redis.Redis, root: Path) -> None:
    for i in range(7):
        add_usage(r, A, 1, "produce", T0 + i, 2)
        r.xadd(firehose_key(A), {"d": json.dumps([sample(T0 + i, 1)])})
    first = tasks.land()
    before = files(root, "usage") + files(root, "samples")
    assert first["ranges"] == 3 + 3  # batches of 3 entries: 3 ranges per stream
    # landed usage leaves Redis (the Parquet is its record); the firehose stays for the relay, capped on its own
    assert r.xlen(usage_log.log_key(A)) == 0 and r.xlen(firehose_key(A)) == 7
    assert tasks.land()["files"] == 0
    assert files(root, "usage") + files(root, "samples") == before

    add_usage(r, A, 2, "fetch", T0 + 100, 4)
    landed = tasks.land()
    assert landed["rows"] == {"usage": 4} and not landed.get("lost")  # trimmed after landing is not lost
    assert r.xlen(usage_log.log_key(A)) == 0
    assert len(read(root, "usage")) == 7 * 2 + 4
    assert len(read(root, "samples")) == 7
    assert len(set(rows(read(root, "usage"), "broker", "t_ms", "client_id"))) == 7 * 2 + 4


def test_a_crash_between_the_rename_and_the_checkpoint_is_finished_by_the_next_run(r: redis.Redis, root: Path) -> None:
    for i in range(4):
        add_usage(r, A, 1, "produce", T0 + i, 2)
    partial = landing.land_stream(r, A, "usage", root, batch=3, crash_before_commit=True)
    assert len(partial.files) == 1 and r.get(landing.checkpoint_key(A, "usage")) is None
    assert r.get(landing.pending_key(A, "usage")) is not None
    add_usage(r, A, 1, "produce", T0 + 10, 2)  # arrives meanwhile: a new range, not a bigger old one

    tasks.land()

    assert len(read(root, "usage")) == 5 * 2
    assert len(set(rows(read(root, "usage"), "t_ms", "client_id"))) == 5 * 2
    assert r.get(landing.pending_key(A, "usage")) is None
    # the crashed range's file was kept (it was complete), not written again under another name
    assert partial.files[0] in {str(root / "usage" / f) for f in files(root, "usage")}


def test_a_crash_before_the_rename_rewrites_the_same_file_and_an_overlapping_run_finishes_the_same_range(
    r: redis.Redis, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        add_usage(r, A, 1, "produce", T0 + i, 1)
    real = os.replace

    def crash(src: Any, dst: Any) -> None:
        raise OSError("killed while writing")

    monkeypatch.setattr(landing.os, "replace", crash)
    with pytest.raises(OSError):
        landing.land_stream(r, A, "usage", root, batch=3)
    monkeypatch.setattr(landing.os, "replace", real)
    assert files(root, "usage") == []  # nothing readable, no leftover in-progress file
    pending = r.get(landing.pending_key(A, "usage"))
    assert pending is not None and r.get(landing.checkpoint_key(A, "usage")) is None
    add_usage(r, A, 1, "produce", T0 + 50, 1)
    # an overlapping run adopts the pending range (same first and last id, so the same file name), not a bigger one
    assert landing._plan(r, A, "usage", 100) == json.loads(pending)
    tasks.land()
    assert len(files(root, "usage")) == 2  # the range of 3, then the new entry
    assert len(read(root, "usage")) == 4
    # the overlapping run's commit of the range it shared comes too late: the checkpoint does not move back
    ckpt = r.get(landing.checkpoint_key(A, "usage"))
    commit = r.register_script(landing._COMMIT)
    assert commit(keys=[landing.checkpoint_key(A, "usage"), landing.pending_key(A, "usage")],
                  args=[pending, json.loads(pending)["last"]]) == 0
    assert r.get(landing.checkpoint_key(A, "usage")) == ckpt


def test_a_file_is_written_under_an_underscore_name_and_renamed_when_complete(
    r: redis.Redis, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_usage(r, A, 1, "produce", T0, 2)
    seen: list[tuple[str, list[str]]] = []
    real = pq.write_table

    def spy(table: pa.Table, where: Any, **kw: Any) -> None:
        real(table, where, **kw)
        directory = Path(where.name).parent
        seen.append((Path(where.name).name, sorted(p.name for p in directory.iterdir())))

    monkeypatch.setattr(landing.pq, "write_table", spy)
    stale = root / "usage" / "date=2025-12-31" / "hour=23" / "_part-crashed.parquet.1-abc"
    fresh = stale.with_name("_part-writing.parquet.2-def")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))

    tasks.land()

    (name, listing), = seen
    assert name.startswith("_part-") and name in listing
    assert not [n for n in listing if n.startswith("part-")]  # while writing, nothing readable is there yet
    final = files(root, "usage")
    assert [f for f in final if "/part-" in f] == [f"date=2025-12-31/hour=23/{name[1:].rsplit('.', 1)[0]}"]
    # the stale leftover of a crashed writer is removed; a recent one (a writer still at work) is left alone
    assert not stale.exists() and fresh.exists()


# ------------------------------------------------------------------ telemetry


def push(t: int, instance: str, points: int) -> dict[str, Any]:
    return {"t": t, "c": A, "instance": instance, "client_id": "app", "points": [
        {"name": f"org.apache.kafka.m{i}", "attrs": {"topic": "x", "n": i}, "t": t - 1, "value": i}
        for i in range(points)
    ]}


def test_telemetry_lines_land_once_and_are_archived(root: Path, r: redis.Redis) -> None:
    telemetry_store.write_landing([push(T0, "i1", 2), push(T0 + 1, "i1", 1)], root)
    telemetry_store.write_landing([push(T0 + 6_000, "i2", 3)], root)
    incoming = root / "_incoming" / "telemetry" / "date=2025-12-31" / "hour=23"
    (incoming / ".part-x.jsonl.tmp").write_text("{half")  # being written

    assert tasks.land()["rows"] == {"telemetry": 6}
    table = read(root, "telemetry")
    assert table.schema.equals(landing.TELEMETRY_SCHEMA)
    assert rows(table, "t", "instance", "name", "attrs", "point_t", "value")[:2] == [
        (T0, "i1", "org.apache.kafka.m0", '{"n":0,"topic":"x"}', T0 - 1, 0.0),
        (T0, "i1", "org.apache.kafka.m1", '{"n":1,"topic":"x"}', T0 - 1, 1.0),
    ]
    assert not list((root / "_incoming").rglob("*.jsonl"))  # landed lines are archived
    assert len(list((root / "_landed" / "telemetry").rglob("*.jsonl"))) == 2
    assert (incoming / ".part-x.jsonl.tmp").exists()

    assert tasks.land()["rows"] == {}
    telemetry_store.write_landing([push(T0 + 2, "i3", 1)], root)
    landing.land_telemetry(root, crash_before_archive=True)  # the Parquet file is renamed, then the run dies
    assert tasks.land()["rows"] == {}  # the next run finds it complete under the batch's name and archives the lines
    assert len(read(root, "telemetry")) == 7
    assert not list((root / "_staging").rglob("*.jsonl"))


# ------------------------------------------------------------------ the load generator


@pytest.mark.django_db
def test_the_load_generator_logs_what_it_records_and_it_lands(engine_redis: redis.Redis, settings: Any,
                                                               tmp_path: Path) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.QUOTAS_LANDING_ROOT = tmp_path / "landing"
    patterns = ("usage:{prod}*", "usage:{staging}*", "land:{prod}*", "land:{staging}*", "mon:{prod}*", "mon:{staging}*")
    delete_matching(engine_redis, *patterns)
    try:
        call_command("demo_data", stdout=io.StringIO())
        for cluster in Cluster.objects.all():
            push_everywhere(cluster)
        now = int(time.time() * 1000)
        # 3 s before the demo's first burst of topic creations (30 s past the minute)
        clock = FakeClock(now - now % int(WAVE_PERIOD_S * 1000) + 27_000)
        gen = LoadGenerator(targets_from_db(["prod"]), clock=clock, sleep=clock.sleep, seed=3, out=lambda line: None,
                            trace=True)
        try:
            gen.run(15)
        finally:
            gen.close()
        batches = usage_log.read(engine_redis, "prod")
        assert gen.stats["requests"] > 0
        # what the clients asked for, batched per tick: every request one request-time record; every produce, and
        # every fetch answered with data (an empty one is asked for again), one bytes record; every topic one
        # controller-mutation record of its partitions at its first attempt (a retry is this quota's doing)
        kinds = Counter(e.kind for e in gen.trace)
        empty_fetches = sum(1 for e in gen.trace if e.kind == "fetch" and e.throttle_ms > 0)
        asked = gen.stats["topics_asked"]
        assert empty_fetches > 0 and asked > 0 and gen.stats["topics_refused"] > 0
        logged = Counter()
        for b in batches:
            logged[b.quota_type] += len(b)
        assert logged == {"produce": kinds["produce"], "fetch": kinds["fetch"] - empty_fetches,
                          "request": gen.stats["requests"], "controller_mutation": asked}
        assert all(len(set(b.times)) == 1 for b in batches)

        result = tasks.land()
        assert result["rows"]["usage"] == sum(logged.values())
        assert result["rows"]["samples"] > 0
        assert tasks.land()["files"] == 0
    finally:
        delete_matching(engine_redis, *patterns)
