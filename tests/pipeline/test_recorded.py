"""The what-if says whether the traffic it replays was itself throttled while it was recorded, and the advice says
it is then a lower bound.

The main test makes the defect for real: the demo's load generator drives a producer asking for twice its quota
through the engine on a fake clock, the engine throttles it (the producer waits out each throttle and its buffer
overflows, as librdkafka's does), its usage records and the engine's samples are logged to Redis and landed as Parquet
by ``pipeline.landing``, and the what-if replays them on Spark. The records show only what the engine let through, so
the advice comes out near the old quota, well under the demand; the samples show the throttling, so the advice says
it is a lower bound. The same client on a cluster whose quota never binds is reported not throttled, with no caveat.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from engine.config import AlterOp, EntityRef, QuotaConfigStore, namespace_for_broker
from pipeline import advice, landing, whatif
from pipeline.errors import MissingInput
from pipeline.recorded import (
    MATERIAL_FRACTION,
    advice_caveat,
    per_source,
    per_source_on_driver,
    recorded_per_entity,
    recorded_throttling,
    report,
    sensor_tags,
)
from pipeline.session import read_dataset
from tests.landing_files import hour_dir, write_landing
from tests.redis_keys import keys_cleared
from traffic.loadgen import FakeClock, LoadGenerator
from traffic.workload import BrokerTarget, Traffic

from .test_prometheus_history import T0, _prometheus_samples, land_samples

KIB = 1024
PBR = "producer_byte_rate"
DEMAND = 30 * KIB  # what the producer asks for, bytes/s: three times the tight quota
RUN_S = 60


def _run_engine_traffic(redis_url: str, quotas: dict[str, float], root: Path) -> None:
    """One producer of user ``svc-pay`` asking for DEMAND on every cluster of ``quotas`` (one broker each, the user's
    own quota set to the value), RUN_S simulated seconds; its usage and the engine's samples landed under ``root``."""
    client_spec = Traffic("svc-pay", "pay-api", "10.9.0.1", produce=DEMAND, thread_ms=1, wave=0.0)
    targets = {c: [BrokerTarget(c, 1, redis_url, namespace_for_broker(c, 1))] for c in quotas}
    with keys_cleared(redis_url, *(f"*{c}*" for c in quotas)) as client:
        for cluster, quota in quotas.items():
            QuotaConfigStore(client, namespace_for_broker(cluster, 1)).alter(
                [AlterOp(EntityRef.parse({"user": "svc-pay"}), PBR, quota)])
        now = int(time.time() * 1000)
        clock = FakeClock(now - now % 1000 - 10 * 60_000)  # in the past: the monitor streams' ids are Redis's time
        gen = LoadGenerator(targets, clock=clock, sleep=clock.sleep, seed=5, traffic=[client_spec], topic_bursts=(),
                            storms=(), out=lambda line: None)
        try:
            gen.run(RUN_S)
        finally:
            gen.close()
        landed = landing.land_all([(client, c) for c in quotas], root)
    assert landed.rows["usage"] > 0 and landed.rows["samples"] > 0, landed.as_dict()


def _whatif(spark: Any, capsys: Any, root: Path, cluster: str, value: float) -> dict:
    assert whatif.main(["--root", str(root), "--cluster", cluster, "--user", "svc-pay", "--key", PBR,
                        "--value", repr(value), "--advice-target", "0.01"], spark=spark) == 0
    return json.loads(capsys.readouterr().out)


def test_advice_over_traffic_the_engine_throttled_says_it_is_a_lower_bound(
    spark: Any, redis_url: str, tmp_path: Path, capsys: Any
) -> None:
    # fixed names: the load generator seeds each client's randomness with its cluster's name, so the run is the same
    # every time (its Redis keys are cleared before it runs)
    tight, roomy = "rec-tight", "rec-roomy"
    root = tmp_path / "landing"
    _run_engine_traffic(redis_url, {tight: 10 * KIB, roomy: 64 * KIB}, root)

    r = _whatif(spark, capsys, root, tight, 30 * KIB)
    # the defect: the records hold what the engine let through, near the quota, not the 30 KiB/s asked for, so the
    # advice falls well short of the demand ...
    assert r["recorded_rate"] < 0.5 * DEMAND
    (advised,) = r["advice"]["entities"]
    assert advised["quota"] < 0.8 * DEMAND
    # ... and the samples of the same sensor over the same span say the engine was throttling it (its sampler counts a
    # throttle when it is given, a second at most per sample: a share well under the 2/3 the producer was muted)
    recorded = r["recorded_throttling"]
    assert recorded["source"] == "engine" and recorded["sensors"] == 1 and recorded["samples"] >= RUN_S - 5
    assert 0.1 < r["recorded_throttled_fraction"] < 0.9
    assert recorded["material"] and r["recorded_quota"] == 10 * KIB
    span = r["history_to_ms"] - r["history_from_ms"]
    assert 0.8 * span <= recorded["sampled_ms"] <= span + 1000  # the samples cover the replayed span
    assert recorded["text"].startswith("Kafka throttled this traffic") and "10 KiB/s" in recorded["text"]
    # so the advice is a lower bound, and says so in one sentence, in the page's units
    advice_r = r["advice"]
    assert advice_r["lower_bound"] is True
    assert advice_r["at_or_below_recorded_quota"] is (advised["quota"] <= 10 * KIB)
    note = advice_r["note"]
    assert note.startswith("Kafka throttled this traffic ")
    assert "of the time while it was recorded under 10 KiB/s" in note
    assert ("is a lower bound" in note) != advice_r["at_or_below_recorded_quota"]
    assert note.count(". ") == 0 and note.endswith(".")
    # what it asked for, beside what got through: the engine's sampler cuts long throttles short, so no figure
    demand = r["demand"]
    assert demand["lower"] == r["recorded_rate"] and demand["estimate"] is None and demand["source"] == "engine"
    assert "by how much the samples cannot say" in demand["text"] and "KIP-714" in demand["text"]

    tight_whatif = r

    r = _whatif(spark, capsys, root, roomy, 30 * KIB)
    assert r["recorded_rate"] == pytest.approx(DEMAND, rel=0.1)  # never throttled: the records hold the demand
    assert r["recorded_throttled_fraction"] == 0.0 and r["recorded_quota"] == 64 * KIB
    assert r["recorded_throttling"]["source"] == "engine" and not r["recorded_throttling"]["material"]
    assert r["recorded_throttling"]["text"].startswith("Kafka did not throttle this traffic")
    advice_r = r["advice"]
    assert (advice_r["lower_bound"], advice_r["at_or_below_recorded_quota"], advice_r["note"]) == (False, False, None)
    assert r["demand"] is None
    roomy_whatif = r

    # the stand-alone advice over every entity says the same of each, from the same samples, in one query
    assert advice.main(["--root", str(root), "--target", "0.01"], spark=spark) == 0
    entities = json.loads(capsys.readouterr().out)["entities"]
    by_cluster = {e["cluster"]: e for e in entities if e["quota_type"] == "produce"}  # the producer's requests too
    assert set(by_cluster) == {tight, roomy}
    for cluster, whatif_r in ((tight, tight_whatif), (roomy, roomy_whatif)):
        e = by_cluster[cluster]
        (advised,) = whatif_r["advice"]["entities"]
        assert (e["user"], e["client_id"], e["quota"]) == ("svc-pay", "pay-api", advised["quota"])
        for name in ("recorded_throttled_fraction", "recorded_quota", "recorded_throttling"):
            assert e[name] == whatif_r[name], name
        for name in ("lower_bound", "at_or_below_recorded_quota", "note"):
            assert e[name] == whatif_r["advice"][name], name
    assert by_cluster[tight]["lower_bound"] and by_cluster[tight]["note"]


def test_without_samples_the_result_says_it_cannot_tell(spark: Any, tmp_path: Path, capsys: Any) -> None:
    root = tmp_path / "landing"
    usage = [{"cluster": "prod", "broker": 1, "quota_type": "produce", "user": "alice", "client_id": "app",
              "t_ms": T0 + 100 * i, "value": 100.0} for i in range(100)]
    write_landing(spark, root, "usage", usage, "t_ms")
    # samples of another sensor (another user's) on the same cluster say nothing about alice's traffic
    land_samples(root, _prometheus_samples("bob"), "other")
    assert whatif.main(["--root", str(root), "--cluster", "prod", "--user", "alice", "--client-id", "app",
                        "--key", PBR, "--value", "500", "--advice-target", "0.01"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["recorded_throttled_fraction"] is None and r["recorded_quota"] is None
    assert r["recorded_throttling"]["samples"] == 0 and "unknown" in r["recorded_throttling"]["text"]
    assert r["advice"]["lower_bound"] is False and r["advice"]["note"] is None

    # a damaged samples file: the replay (of the usage records) still answers, and says why it cannot tell
    (hour_dir(root, "samples", T0) / "part-damaged.parquet").write_bytes(b"not parquet at all")
    assert whatif.main(["--root", str(root), "--cluster", "prod", "--user", "alice", "--client-id", "app",
                        "--key", PBR, "--value", "500"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["requests"] == 100 and r["recorded_throttled_fraction"] is None
    assert r["recorded_throttling"]["text"].startswith("The landed samples could not be read")


def test_prometheus_samples_weigh_by_the_part_of_their_scrape_inside_the_span(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    """A Prometheus-resolution replay reads the throttling from the samples it replays: broker 1 throttled 40 % of its
    first two 5 s scrapes, broker 2 never; the first scrape only counts from the first replayed record on."""
    root = tmp_path / "landing"
    land_samples(root, _prometheus_samples("svc%40corp", lambda i: 2000.0), "prom")
    assert whatif.main(["--root", str(root), "--cluster", "prod", "--user", "svc@corp", "--client-id", "app",
                        "--key", PBR, "--value", "1000", "--advice-target", "0.01"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    first = T0 - r["history_from_ms"]  # the first scrape's part inside the span (its first record is 100 ms in)
    assert first == 4900
    sampled = 2 * (first + 23 * 5000)  # two brokers
    throttled = 0.4 * first + 0.4 * 5000
    assert r["recorded_throttling"]["source"] == "prometheus" and r["recorded_throttling"]["samples"] == 48
    assert r["recorded_throttling"]["sampled_ms"] == sampled
    assert r["recorded_throttled_fraction"] == pytest.approx(throttled / sampled, rel=1e-9)
    assert r["recorded_throttled_fraction"] > MATERIAL_FRACTION and r["recorded_quota"] == 1000.0
    (advised,) = r["advice"]["entities"]
    assert advised["quota"] > 1000 and r["advice"]["lower_bound"] and not r["advice"]["at_or_below_recorded_quota"]
    assert "under 1,000 B/s" in r["advice"]["note"] and "is a lower bound" in r["advice"]["note"]


def test_a_sensor_matches_its_clients_by_kafkas_tags_and_sources_stay_apart(spark: Any, tmp_path: Path) -> None:
    """The sensors a client may have been counted in: its own tags, its user's, its client-id's (the user sanitized as
    Kafka does); never ``:``. Each source is summed on its own, a broker's repeated coarse sample counted once."""
    tags = sensor_tags([("svc@corp x*", "app"), ("", "legacy")])
    assert sorted(tags) == [":app", ":legacy", "svc%40corp%20x%2A:", "svc%40corp%20x%2A:app"]

    def sample(t: int, e: str, thr: float, src: str | None = None, res: int | None = None, b: int = 1) -> dict:
        return {"t": t, "c": "prod", "b": b, "q": "produce", "e": e, "rate": 1.0, "bound": 500.0 + 100 * thr,
                "util": None, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": thr, "tokens": None, "src": src,
                "res_ms": res}

    rows = [sample(T0 + 1000 * s, "svc%40corp%20x%2A:", 0.5) for s in range(1, 11)]  # the engine's, per second
    rows += [sample(T0 + 5000, ":app", 0.2, "prometheus", 5000), sample(T0 + 5000, ":app", 0.4, "prometheus", 5000),
             sample(T0 + 10_000, ":app", 0.0, "prometheus", 5000)]  # one scrape published twice, then another
    rows += [sample(T0 + 1000 * s, ":", 1.0) for s in range(1, 11)]  # clients without a quota: never theirs
    rows += [sample(T0 + 1000 * s, "someone:app", 1.0) for s in range(1, 11)]  # another user's own sensor
    land_samples(tmp_path, rows, "mixed")
    samples = read_dataset(spark, str(tmp_path), "samples", merge_schema=True)
    found = {f["source"]: f for f in per_source(samples, "prod", "produce", tags, T0, T0 + 10_000)}
    assert set(found) == {"engine", "prometheus"}
    assert (found["engine"]["samples"], found["engine"]["sampled_ms"], found["engine"]["throttled_ms"]) == (
        10, 10_000, 5000)
    prom = found["prometheus"]
    assert (prom["samples"], prom["sampled_ms"]) == (3, 10_000)
    assert prom["throttled_ms"] == pytest.approx(0.3 * 5000)  # the repeated scrape's mean
    assert (prom["quota_throttled"], prom["quota"]) == (540.0, 540.0)
    best = report(list(found.values()), "produce")
    assert best["recorded_throttling"]["source"] == "engine" and best["recorded_throttled_fraction"] == 0.5
    assert best["recorded_quota"] == 550.0

    # many entities in one query (the stand-alone advice), each from its own sensors over its own span, the scrapes
    # that cross a span's edge counted for their part inside it: the same answers as one at a time
    mine, theirs, nobody = ("prod", "produce", "svc@corp x*", "app"), ("prod", "produce", "someone", "app"), (
        "prod", "produce", "", "legacy")
    spans = {mine: (T0, T0 + 7_500), theirs: (T0 + 2_500, T0 + 10_000), nobody: (T0, T0 + 10_000)}
    each = recorded_per_entity(spark, str(tmp_path), spans)
    for key in (mine, theirs):
        alone = per_source(samples, "prod", "produce", sensor_tags([key[2:]]), *spans[key])
        assert each[key] == report(alone, "produce")
    assert each[mine]["recorded_throttled_fraction"] == 0.5  # its user's sensor, half throttled
    assert each[mine]["recorded_throttling"]["sampled_ms"] == 7_500
    assert each[theirs]["recorded_throttled_fraction"] == 1.0  # someone's own sensor, always throttled
    assert each[theirs]["recorded_throttling"]["sampled_ms"] == 7_500
    prom = {f["source"]: f for f in per_source(samples, "prod", "produce", {":app"}, *spans[theirs])}["prometheus"]
    assert prom["sampled_ms"] == 2_500 + 5_000  # the first scrape from the span's start, the second whole
    assert each[nobody]["recorded_throttled_fraction"] is None  # no sample of :legacy


def test_the_samples_read_on_the_driver_give_sparks_figures(spark: Any, tmp_path: Path) -> None:
    """A preview of a small landing area reads its sensors' samples on the driver: the same figures as Spark's
    query, files of the older layout, repeated coarse scrapes and span edges included."""
    tags = sensor_tags([("svc", "app")])

    def sample(t: int, e: str, thr: float, src: str | None = None, res: int | None = None, b: int = 1) -> dict:
        return {"t": t, "c": "prod", "b": b, "q": "produce", "e": e, "rate": 1.0, "bound": 500.0 + 100 * thr,
                "util": None, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": thr, "tokens": None, "src": src,
                "res_ms": res}

    rows = [sample(T0 + 1000 * s, "svc:", 0.5) for s in range(1, 11)]
    rows += [sample(T0 + 5000, ":app", 0.2, "prometheus", 5000), sample(T0 + 5000, ":app", 0.4, "prometheus", 5000),
             sample(T0 + 10_000, ":app", 0.0, "prometheus", 5000), sample(T0 + 3_000, "svc:app", 0.7, "client", 0)]
    rows += [sample(T0 + 1000 * s, "other:app", 1.0) for s in range(1, 11)]  # not these clients' sensors
    land_samples(tmp_path, rows, "mixed")
    land_samples(tmp_path, [sample(T0 + 1000 * s + 500, "svc:app", 0.25, b=2) for s in range(1, 5)], "older",
                 old_layout=True)
    samples = read_dataset(spark, str(tmp_path), "samples", merge_schema=True)
    for span in ((T0, T0 + 10_000), (T0 + 2_500, T0 + 7_500), (T0 + 60_000, T0 + 70_000)):
        local = {f["source"]: f for f in per_source_on_driver(str(tmp_path), "prod", "produce", tags, *span)}
        want = {f["source"]: f for f in per_source(samples, "prod", "produce", tags, *span)}
        assert local.keys() == want.keys()
        for source, f in want.items():
            assert local[source].keys() == f.keys()
            for name, value in f.items():
                same = value if isinstance(value, str) or value is None else pytest.approx(value, rel=1e-12)
                assert local[source][name] == same, (span, source, name)
    assert set(want) == set() and set(local) == set()  # the last span: no sample
    with pytest.raises(MissingInput):  # nothing landed: as Spark's read says it (the what-if reports "unknown")
        per_source_on_driver(str(tmp_path / "nowhere"), "prod", "produce", tags, T0, T0 + 1)


@pytest.mark.parametrize(("fraction", "advised", "lower", "below"), [
    (0.5, 12_000.0, True, False),
    (0.5, 10_240.0, True, True),  # at the quota that throttled it: said so, whatever the share
    (0.004, 9_000.0, False, True),
    (0.004, 12_000.0, False, False),  # immaterial, and above that quota: nothing to add
    (0.0, 9_000.0, False, False),  # not throttled: the quota then did not bind
])
def test_the_advice_caveat(fraction: float, advised: float, lower: bool, below: bool) -> None:
    recorded = {"recorded_throttled_fraction": fraction, "recorded_quota": 10_240.0,
                "recorded_throttling": {"throttled_ms": round(fraction * 60_000),
                                        "material": fraction >= MATERIAL_FRACTION}}
    got = advice_caveat(recorded, advised, 0.01, PBR)
    assert (got["lower_bound"], got["at_or_below_recorded_quota"]) == (lower, below)
    assert (got["note"] is not None) == (lower or below)
    if below:
        assert "at or below that quota" in got["note"] and "is above 10 KiB/s" in got["note"]
    elif lower:
        assert "11.72 KiB/s is a lower bound" in got["note"] and "under 1%" in got["note"]


def test_a_long_lived_process_asks_spark_once_per_state_of_the_landed_samples(spark: Any, tmp_path: Path) -> None:
    """The answer does not depend on the proposed value: the warm session's previews of one entity with other values
    ask Spark once, and again once samples of the span land."""
    def sample(t: int, thr: float) -> dict:
        return {"t": t, "c": "prod", "b": 1, "q": "produce", "e": "svc-m:", "rate": 1.0, "bound": 500.0,
                "util": None, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": thr, "tokens": None, "src": None,
                "res_ms": None}

    land_samples(tmp_path, [sample(T0 + 1000 * s, 0.5) for s in range(1, 11)], "first")
    ask = (str(tmp_path), "prod", "produce", [("svc-m", None)], T0, T0 + 20_000)
    first = recorded_throttling(spark, *ask)
    assert first["recorded_throttled_fraction"] == 0.5
    assert recorded_throttling(None, *ask) == first  # no Spark asked: the same files, the same answer

    land_samples(tmp_path, [sample(T0 + 1000 * s, 0.0) for s in range(11, 21)], "second")
    with pytest.raises(AttributeError):  # new files in the span: Spark is asked again (and here there is none)
        recorded_throttling(None, *ask)
    assert recorded_throttling(spark, *ask)["recorded_throttled_fraction"] == 0.25
