"""History and previews at Prometheus resolution: samples that stand for a scrape interval (``res_ms``) are rolled up
by the time they cover, and a real cluster's sensors (no usage records) are replayed by the what-if and the advice,
which say their resolution and what they cannot know at it. Landed files from before ``src``/``res_ms`` existed are
read alongside.

The last test takes its data from the real thing: a producer throttled by the session's Kafka, Kafka's sensors read
from the session's Prometheus by the Prometheus source, published into the monitor's streams and landed as Parquet by
the landing code, then rolled up and replayed.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from observe.kafka_quotas import PrometheusSource, SamplePublisher
from observe.prometheus import PrometheusClient
from pipeline import landing, rollups, whatif
from pipeline.recorded import MATERIAL_FRACTION
from pipeline.usage import sampled_usage
from tests.landing_files import write_landing

T0 = 1_700_000_040_000  # a minute boundary (and a multiple of 5 s)


def _prometheus_samples(user: str = "alice", rate: Any = lambda i: 100.0 * i) -> list[dict]:
    rows = []
    for i in range(24):  # two minutes of 5 s scrapes, two brokers
        t = T0 + 5000 * i
        rows.append({"t": t, "c": "prod", "b": 1, "q": "produce", "e": f"{user}:app", "rate": float(rate(i)),
                     "bound": 1000.0, "util": None, "thr_avg": 10.0 if i < 2 else 0.0,
                     "thr_max": 12.0 if i < 2 else 0.0,
                     "thr_frac": 0.4 if i < 2 else 0.0, "tokens": None, "src": "prometheus", "res_ms": 5000})
        rows.append({"t": t, "c": "prod", "b": 2, "q": "produce", "e": f"{user}:app", "rate": 50.0, "bound": 1000.0,
                     "util": None, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0, "tokens": None,
                     "src": "prometheus", "res_ms": 5000})
    return rows


def land_samples(root: Path, samples: list[dict], name: str, old_layout: bool = False) -> None:
    """Samples as the landing task writes them (``pipeline.landing``: one firehose entry), or in the layout from
    before ``src``/``res_ms``."""
    for part, table in landing.sample_tables([("1-0", {"d": json.dumps(samples)})], "prod").items():
        if old_layout:
            table = table.drop_columns(["src", "res_ms"])
        landing.write_parquet(table, root / "samples" / part / f"part-{name}.parquet")


def test_rollups_weigh_each_sample_by_the_time_it_stands_for(spark, tmp_path: Path, capsys) -> None:
    root = tmp_path / "landing"
    land_samples(root, _prometheus_samples(), "prom")
    # an engine entity in a file of the older layout (no src, no res_ms): one sample a second
    old = [{"t": T0 + 1000 * s, "c": "prod", "b": 1, "q": "produce", "e": "bob:", "rate": 7.0, "bound": None,
            "util": None, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0, "tokens": None} for s in range(60)]
    land_samples(root, old, "engine", old_layout=True)
    out = tmp_path / "rollups"
    assert rollups.main(["--root", str(root), "--out", str(out)], spark=spark) == 0
    capsys.readouterr()
    got = pd.read_parquet(out / "granularity=minute").sort_values(["tags", "window_start_ms"]).reset_index(drop=True)

    alice = got[got.tags == "alice:app"].reset_index(drop=True)
    slots = 100.0 * np.arange(12) + 50.0  # each 5 s slot: broker 1's rate + broker 2's
    m0 = alice.iloc[0]
    assert (m0.window_start_ms, m0.seconds, m0.resolution_ms, m0.source) == (T0, 60, 5000, "prometheus")
    assert m0.bytes == pytest.approx((slots * 5).sum(), rel=1e-12)  # not the sum of the rates: 5 s each
    assert m0.rate_p50 == pytest.approx(np.percentile(slots, 50)) and m0.rate_max == slots.max()
    assert m0.throttle_ms == pytest.approx(2 * 0.4 * 5000)  # two slots of broker 1 at 40 %
    assert m0.throttled_fraction == pytest.approx(2 * 5 * 0.2 / 60)  # the brokers' mean over the minute
    assert alice.iloc[1].bytes == pytest.approx(((100.0 * np.arange(12, 24) + 50.0) * 5).sum(), rel=1e-12)

    (bob,) = got[got.tags == "bob:"].itertuples()
    assert (bob.seconds, bob.bytes, bob.resolution_ms, bob.source) == (60, 420.0, 1000, "engine")


def test_a_cluster_known_only_by_prometheus_is_replayed_at_its_resolution(spark, tmp_path: Path, capsys) -> None:
    root = tmp_path / "landing"
    # Kafka's sensor of user svc@corp (sanitized as svc%40corp), 2000 B/s on broker 1, 50 B/s on broker 2
    land_samples(root, _prometheus_samples("svc%40corp", lambda i: 2000.0), "prom")
    records, res_ms = sampled_usage(spark, str(root), "prod", "produce")
    assert res_ms == 5000
    pdf = records.toPandas()
    assert set(pdf.user) == {"svc@corp"} and set(pdf.client_id) == {"app"}
    one = pdf[(pdf.broker == 1) & (pdf.t_ms > T0) & (pdf.t_ms <= T0 + 5000)]
    assert len(one) == 50 and one.value.sum() == pytest.approx(2000.0 * 5)  # the sample's 5 s as even records

    base = ["--root", str(root), "--cluster", "prod", "--user", "svc@corp", "--client-id", "app",
            "--key", "producer_byte_rate"]
    assert whatif.main([*base, "--value", "1000", "--advice-target", "0.01"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["resolution"]["text"] == "per 5 s, from Prometheus" and r["resolution"]["resolution_ms"] == 5000
    assert any("bursts shorter than 5 s" in why for why in r["resolution"]["cannot_know"])
    assert r["throttle_events"] > 0 and r["brokers"] == 2
    assert r["recorded_rate"] == pytest.approx(2050.0, rel=0.05)  # both brokers' bytes over the span
    (advised,) = r["advice"]["entities"]
    assert r["advice"]["resolution"] == "per 5 s, from Prometheus" and 1900 <= advised["quota"] <= 2100
    assert whatif.main([*base, "--value", "1000000"], spark=spark) == 0
    assert json.loads(capsys.readouterr().out)["throttle_events"] == 0


def test_usage_records_win_over_samples_and_say_so(spark, tmp_path: Path, capsys) -> None:
    root = tmp_path / "landing"
    land_samples(root, _prometheus_samples(), "prom")
    usage = [{"cluster": "prod", "broker": 1, "quota_type": "produce", "user": "alice", "client_id": "app",
              "t_ms": T0 + 100 * i, "value": 100.0} for i in range(100)]
    write_landing(spark, root, "usage", usage, "t_ms")
    assert whatif.main(["--root", str(root), "--cluster", "prod", "--user", "alice", "--client-id", "app",
                        "--key", "producer_byte_rate", "--value", "5000"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["requests"] == 100 and r["resolution"]["source"] == "usage" and not r["resolution"]["cannot_know"]


@pytest.mark.timeout(300)
def test_kafkas_sensors_from_the_real_prometheus_land_and_replay_at_the_scrape_interval(
    spark, kafka_cluster: Any, prometheus: Any, redis_url: str, tmp_path: Path, capsys
) -> None:
    from tests.kafka.test_exporter import throttle_producer
    from tests.redis_keys import keys_cleared

    client_id = f"promhist-{uuid.uuid4().hex[:8]}"
    name = f"promhist-{uuid.uuid4().hex[:6]}"
    tags = f"ANONYMOUS:{client_id}"
    interval_s = float(prometheus.scrape_interval.rstrip("s"))
    throttle_producer(kafka_cluster, client_id, user="ANONYMOUS")
    root = tmp_path / "landing"
    with keys_cleared(redis_url, f"mon:{{{name}}}*", f"land:{{{name}}}*") as client, \
            PrometheusClient(prometheus.url) as api:
        source = PrometheusSource(api, name, selector={"cluster": kafka_cluster.name}, window_s=2.5 * interval_s,
                                  connections=False)
        publisher = SamplePublisher(client, name)
        mine: list[dict[str, Any]] = []
        deadline = time.monotonic() + 12 * interval_s
        while time.monotonic() < deadline and len([s for s in mine if s["res_ms"]]) < 3:
            poll = source.poll()
            published = publisher.publish_poll(poll)
            mine += [s for s in poll.samples if s["e"] == tags and s["q"] == "produce" and s["b"] in published]
            time.sleep(0.5)
        landed = landing.land_stream(client, name, landing.SAMPLES, root)
    assert [s for s in mine if s["res_ms"]], f"no sample of {tags} with its scrape interval: {mine}"
    assert any(s["rate"] for s in mine), f"Kafka's sensor of {tags} measured nothing: {mine}"
    assert landed.rows["samples"] > 0
    res_ms = int(interval_s * 1000)
    assert {s["res_ms"] for s in mine if s["res_ms"]} == {res_ms}

    out = tmp_path / "rollups"
    assert rollups.main(["--root", str(root), "--out", str(out)], spark=spark) == 0
    capsys.readouterr()
    hours = pd.read_parquet(out / "granularity=hour")
    row = hours[(hours.tags == tags) & (hours.quota_type == "produce")].iloc[0]
    assert row.source == "prometheus" and row.resolution_ms == res_ms and row.bytes > 0

    assert whatif.main(["--root", str(root), "--cluster", name, "--user", "ANONYMOUS", "--client-id", client_id,
                        "--key", "producer_byte_rate", "--value", "64"], spark=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["resolution"]["text"] == f"per {interval_s:g} s, from Prometheus"
    assert r["throttle_events"] > 0 and r["bytes"] > 0
    # Kafka throttled that producer (300 KiB at once against 1 KiB/s) while its sensor was scraped: the samples the
    # replay rests on say so (Kafka's throttle-time average, far above a second here: the whole interval). The share
    # is over every broker's sensor of the client: the leader's throttled, another broker's may be sampled idle (a
    # full run once gave exactly 0.5), so only its materiality is Kafka's to guarantee
    assert r["recorded_throttling"]["source"] == "prometheus"
    # Since the monitor's samples count a throttle only while its clients wait it out (not Kafka's minute-long
    # throttle-time average), samples scraped after the producer's burst was waited out show none: when they do
    # show it, it is material and said so
    if r["recorded_throttling"]["material"]:
        assert r["recorded_throttled_fraction"] >= MATERIAL_FRACTION and r["recorded_throttling"]["throttled_ms"] > 0
        assert r["recorded_throttling"]["text"].startswith("Kafka throttled this traffic")
